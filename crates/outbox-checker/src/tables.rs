//! The verdicts the tables alone give: every committed alert settled (not lost, not left
//! uncertain) and whole, and one alert per identity and revision. An alert waiting in its
//! ordered lane behind a head that blocks it (found by `lanes`) is not lost.

use outbox_core::AlertState;
use outbox_store::checker_reads::CommittedAlert;
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

use crate::report::Report;

/// The committed alerts by id as text (the key every sink and inbox records).
pub(crate) type AlertsById<'a> = HashMap<String, &'a CommittedAlert>;

/// Indexes `alerts` by their id as text.
pub(crate) fn by_id(alerts: &[CommittedAlert]) -> AlertsById<'_> {
    alerts.iter().map(|a| (a.id.to_string(), a)).collect()
}

/// Lost and unresolved alerts, and partial commits: an alert with both a queue row and a
/// record of where it came to rest (an outcome row, or the attempt row that accepted it),
/// or neither, or without the evidence line its approval writes (unless retention pruned
/// it). An alert whose queue row is gone with no such record has no state: it is lost,
/// never read as delivered. The alerts `waiting` behind a blocked head of their lane are
/// counted as such, not as lost.
pub(crate) fn judge_alerts(
    report: &mut Report,
    alerts: &[CommittedAlert],
    waiting: &HashSet<Uuid>,
) {
    for alert in alerts {
        if waiting.contains(&alert.id) {
            report.waiting_behind_blocked_heads += 1;
        } else {
            judge_state(report, alert);
        }
        if alert.queued == alert.settled || (alert.events == 0 && !alert.pruned) {
            report.partial_commits += 1;
            report.offend(
                "partial commit",
                Some(alert.id),
                format!(
                    "queue row: {}, came to rest: {}, evidence lines: {}",
                    alert.queued, alert.settled, alert.events
                ),
            );
        }
    }
}

/// Whether `alert` came to rest (accepted, failed, held or superseded), else lost (and
/// unresolved, when still uncertain).
fn judge_state(report: &mut Report, alert: &CommittedAlert) {
    match alert.state {
        Some(
            AlertState::Accepted | AlertState::Failed | AlertState::Held | AlertState::Superseded,
        ) => {}
        Some(AlertState::Uncertain) => {
            report.unresolved_uncertain += 1;
            report.lost += 1;
            report.offend(
                "unresolved uncertain",
                Some(alert.id),
                "still uncertain after the drain".into(),
            );
        }
        other => {
            let waiting = alert
                .lane
                .as_ref()
                .and_then(|place| place.waits_behind)
                .map(|ahead| {
                    format!(
                        ", waiting in its lane behind {ahead}, though no held or failed head blocks the lane"
                    )
                })
                .unwrap_or_default();
            report.lost += 1;
            report.offend(
                "lost",
                Some(alert.id),
                format!(
                    "ended {}{waiting}",
                    other.map_or("in no state", AlertState::as_str)
                ),
            );
        }
    }
}

/// Logical duplicates: each identity and revision (subject, occurrence) with `count`
/// alerts adds `count - 1`.
pub(crate) fn judge_identities(report: &mut Report, duplicated: &[(String, String, i64)]) {
    for (subject, occurrence, count) in duplicated {
        report.logical_duplicates += usize::try_from(*count - 1).unwrap_or(0);
        report.offend(
            "logical duplicate",
            None,
            format!("{count} alerts for {subject} / {occurrence}"),
        );
    }
}
