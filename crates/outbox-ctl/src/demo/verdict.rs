//! The demo's invariants: nothing left in flight, every alert in a final state, nothing
//! applied twice nor badly signed by the sink's counts, and key by key and message by
//! message the referee's (`outbox_checker`) verdict on the sink's records and the inbox.

use outbox_checker::{Capability, Inbox, InboxMessage, Sink, SinkRecord};
use outbox_store::outcome_counts::Report;
use outbox_store::PgPool;
use serde_json::Value;

use super::mailboxes::{received_by, MAILBOXES};

/// What contradicts the invariants, a sentence each; empty when they hold. `records` are
/// the sink's records of every request, `inbox` its messages.
pub(super) async fn broken_invariants(
    pool: &PgPool,
    approved: i64,
    report: &Report,
    sink_stats: &Value,
    records: &[Value],
    inbox: &[Value],
) -> anyhow::Result<Vec<String>> {
    let mut broken = Vec::new();
    let accepted =
        report.first_try + report.after_retry + report.by_dedup_resend + report.by_lookup;
    if report.live != 0 {
        broken.push(format!("{} alerts still in flight", report.live));
    }
    if accepted + report.held + report.failed != approved {
        broken.push("some alerts are in no final state".to_owned());
    }
    if sink_stats["effective_duplicates"] != 0 {
        broken.push("the sink applied an alert twice".to_owned());
    }
    if sink_stats["bad_signatures"] != 0 {
        broken.push("the sink saw a bad signature".to_owned());
    }
    let verdict =
        outbox_checker::check_with_inboxes(pool, 7, &sinks(records), &inboxes(inbox)).await?;
    for offence in &verdict.offences {
        broken.push(format!("{}: {}", offence.kind, offence.detail));
    }
    Ok(broken)
}

/// The webhooks as the referee reads them, from the sink's own records: every accepted
/// alert applied, nothing applied twice, wire duplicates only where the destination
/// de-duplicates or answers lookups, no stray keys, one alert per identity.
fn sinks(records: &[Value]) -> Vec<Sink> {
    [
        ("ops", Capability::Idempotent),
        ("finance", Capability::Lookup),
        ("legal", Capability::PlainHold),
    ]
    .into_iter()
    .map(|(name, capability)| Sink {
        destination: name.to_owned(),
        capability,
        records: records
            .iter()
            .filter(|r| r["path"].as_str() == Some(&format!("/{name}")))
            .map(|r| SinkRecord {
                key: r["key"].as_str().map(str::to_owned),
                payload_sha256: r["payload_sha256"].as_str().map(str::to_owned),
                outcome: r["outcome"].as_str().unwrap_or("").to_owned(),
            })
            .collect(),
    })
    .collect()
}

/// The mailboxes as the referee reads them: every accepted email there exactly once by
/// Message-ID, with the bytes stored before its first send; nothing there twice.
fn inboxes(inbox: &[Value]) -> Vec<Inbox> {
    MAILBOXES
        .iter()
        .map(|mailbox| Inbox {
            destination: mailbox.destination.to_owned(),
            capability: Capability::PlainHold,
            messages: received_by(inbox, mailbox)
                .map(|m| InboxMessage {
                    message_id: m["message_id"].as_str().map(str::to_owned),
                    alert_id: m["alert_id"].as_str().map(str::to_owned),
                    sha256: m["sha256"].as_str().unwrap_or("").to_owned(),
                })
                .collect(),
        })
        .collect()
}
