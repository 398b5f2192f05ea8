//! The verdicts the tables alone give: every committed alert settled (not lost, not left
//! uncertain) and whole, and one alert per identity and revision.

use outbox_core::AlertState;
use outbox_store::committed::CommittedAlert;
use std::collections::HashMap;

use crate::report::Report;

/// The committed alerts by id as text (the key every sink and inbox records).
pub(crate) type AlertsById<'a> = HashMap<String, &'a CommittedAlert>;

/// Indexes `alerts` by their id as text.
pub(crate) fn by_id(alerts: &[CommittedAlert]) -> AlertsById<'_> {
    alerts.iter().map(|a| (a.id.to_string(), a)).collect()
}

/// Lost and unresolved alerts, and partial commits: an alert with both a queue row and an
/// outcome (or neither), or without the evidence line its approval writes (unless
/// retention pruned it).
pub(crate) fn judge_alerts(report: &mut Report, alerts: &[CommittedAlert]) {
    for alert in alerts {
        match alert.state {
            Some(
                AlertState::Accepted
                | AlertState::Failed
                | AlertState::Held
                | AlertState::Superseded,
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
                report.lost += 1;
                report.offend(
                    "lost",
                    Some(alert.id),
                    format!("ended {}", other.map_or("in no state", AlertState::as_str)),
                );
            }
        }
        if alert.queued == alert.settled || (alert.events == 0 && !alert.pruned) {
            report.partial_commits += 1;
            report.offend(
                "partial commit",
                Some(alert.id),
                format!(
                    "queue row: {}, outcome: {}, evidence lines: {}",
                    alert.queued, alert.settled, alert.events
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
