//! The webhook sinks' verdicts: every key a sink saw belongs to a committed alert and
//! carries its payload, is applied once (resent only where the sink absorbs it), and every
//! alert recorded as accepted at a judged sink was applied there.

use outbox_core::AlertState;
use outbox_store::checker_reads::CommittedAlert;
use std::collections::{HashMap, HashSet};

use crate::effective::effective_duplicates;
use crate::recorded::Sink;
use crate::report::Report;
use crate::tables::AlertsById;

/// Judges every sink's records and tallies its duplicates. Returns the keys applied at
/// any sink (for [`judge_acceptances`]).
pub(crate) fn judge_sinks<'a>(
    report: &mut Report,
    by_id: &AlertsById<'_>,
    sinks: &'a [Sink],
) -> HashSet<&'a str> {
    let mut applied_anywhere = HashSet::new();
    for sink in sinks {
        let (applied, wire) = judge_records(report, by_id, sink);
        applied_anywhere.extend(applied.keys().copied());
        let effective =
            effective_duplicates(report, by_id, sink.capability, &applied, |_, times| {
                format!("applied {times} times by `{}`", sink.destination)
            });
        report.tally(&sink.destination, effective, wire);
    }
    applied_anywhere
}

/// Each record of `sink`, in order: a key no committed alert has is unexpected; a payload
/// other than the committed one is a mutated retry; a resend the sink absorbed is an
/// offence where it neither de-duplicates nor answers lookups. Returns how many times each
/// key was applied, and how many resends the sink absorbed.
fn judge_records<'a>(
    report: &mut Report,
    by_id: &AlertsById<'_>,
    sink: &'a Sink,
) -> (HashMap<&'a str, usize>, usize) {
    let mut applied: HashMap<&str, usize> = HashMap::new();
    let mut wire = 0;
    for record in &sink.records {
        let Some(key) = record.key.as_deref() else {
            continue;
        };
        let Some(alert) = by_id.get(key) else {
            report.count_unexpected(format!(
                "sink `{}` saw key {key}, which never committed",
                sink.destination
            ));
            continue;
        };
        if record
            .payload_sha256
            .as_deref()
            .is_some_and(|h| h != alert.payload_sha256)
        {
            report.count_mutated_retry(
                alert.id,
                format!(
                    "sink `{}` got payload {} for this key; committed {}",
                    sink.destination,
                    record.payload_sha256.as_deref().unwrap_or("?"),
                    alert.payload_sha256
                ),
            );
        }
        match record.outcome.as_str() {
            "applied" => *applied.entry(key).or_default() += 1,
            "wire_duplicate" => {
                wire += 1;
                if sink.capability.is_plain() {
                    report.offend(
                        "wire duplicate",
                        Some(alert.id),
                        format!(
                            "resent to `{}`, which neither de-duplicates nor answers lookups",
                            sink.destination
                        ),
                    );
                }
            }
            _ => {}
        }
    }
    (applied, wire)
}

/// Phantom acceptances at the webhook sinks: an alert for a judged sink recorded as
/// accepted whose key no sink applied (`applied_anywhere`).
pub(crate) fn judge_acceptances(
    report: &mut Report,
    alerts: &[CommittedAlert],
    sinks: &[Sink],
    applied_anywhere: &HashSet<&str>,
) {
    for alert in alerts {
        let judged = sinks.iter().any(|s| s.destination == alert.destination);
        if judged
            && alert.state == Some(AlertState::Accepted)
            && !applied_anywhere.contains(alert.id.to_string().as_str())
        {
            report.count_phantom_acceptance(
                alert.id,
                format!(
                    "recorded as accepted, but sink `{}` never applied it",
                    alert.destination
                ),
            );
        }
    }
}
