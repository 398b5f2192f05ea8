//! The SMTP inboxes' verdicts, by Message-ID and the stored bytes: every message belongs
//! to a committed email alert and carries its stored message, is in the inbox once, and
//! every email alert recorded as accepted has its message there.

use outbox_core::AlertState;
use outbox_store::checker_reads::StoredMessage;
use std::collections::HashMap;

use crate::effective::effective_duplicates;
use crate::recorded::Inbox;
use crate::report::Report;
use crate::tables::AlertsById;

/// The stored messages by their alert's id as text.
type StoredById<'a> = HashMap<String, &'a StoredMessage>;

/// Counts what the inboxes show against the alerts (`by_id`) and their stored messages.
pub(crate) fn judge_inboxes(
    report: &mut Report,
    by_id: &AlertsById<'_>,
    stored: &[StoredMessage],
    inboxes: &[Inbox],
) {
    let stored: StoredById<'_> = stored.iter().map(|m| (m.alert_id.to_string(), m)).collect();
    for inbox in inboxes {
        let received = judge_messages(report, by_id, &stored, inbox);
        let effective =
            effective_duplicates(report, by_id, inbox.capability, &received, |key, times| {
                format!(
                    "Message-ID {} is in inbox `{}` {times} times",
                    stored[key].message_id, inbox.destination
                )
            });
        judge_acceptances(report, by_id, inbox, &received);
        // An inbox absorbs nothing: every copy is an effective duplicate.
        report.tally(&inbox.destination, effective, 0);
        report
            .inbox_messages
            .push((inbox.destination.clone(), inbox.messages.len()));
    }
}

/// Each message of `inbox`, in order: one for no committed email alert is unexpected; one
/// whose Message-ID or bytes differ from the stored message is a mutated retry. Returns
/// how many times each alert's message was received.
fn judge_messages<'a>(
    report: &mut Report,
    by_id: &AlertsById<'_>,
    stored: &StoredById<'_>,
    inbox: &'a Inbox,
) -> HashMap<&'a str, usize> {
    let mut received: HashMap<&str, usize> = HashMap::new();
    for message in &inbox.messages {
        let key = message.alert_id.as_deref().unwrap_or("");
        let (Some(alert), Some(expected)) = (by_id.get(key), stored.get(key)) else {
            report.count_unexpected(format!(
                "inbox `{}` got message {} (alert {}), which no committed email alert sent",
                inbox.destination,
                message
                    .message_id
                    .as_deref()
                    .unwrap_or("without a Message-ID"),
                message.alert_id.as_deref().unwrap_or("?")
            ));
            continue;
        };
        if message.message_id.as_deref() != Some(expected.message_id.as_str())
            || message.sha256 != expected.wire_sha256
        {
            report.count_mutated_retry(
                alert.id,
                format!(
                    "inbox `{}` got message {} sha256:{}; stored {} sha256:{}",
                    inbox.destination,
                    message.message_id.as_deref().unwrap_or("?"),
                    message.sha256,
                    expected.message_id,
                    expected.wire_sha256
                ),
            );
        }
        *received.entry(key).or_default() += 1;
    }
    received
}

/// Phantom acceptances at `inbox`: an alert of its destination recorded as accepted whose
/// message it never `received`.
fn judge_acceptances(
    report: &mut Report,
    by_id: &AlertsById<'_>,
    inbox: &Inbox,
    received: &HashMap<&str, usize>,
) {
    for alert in by_id
        .values()
        .filter(|a| a.destination == inbox.destination)
    {
        let id = alert.id.to_string();
        if alert.state == Some(AlertState::Accepted) && !received.contains_key(id.as_str()) {
            report.count_phantom_acceptance(
                alert.id,
                format!(
                    "recorded as accepted, but its message is not in inbox `{}`",
                    inbox.destination
                ),
            );
        }
    }
}
