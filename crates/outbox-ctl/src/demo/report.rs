//! What the demo prints once delivery is over: what happened to every alert, the sink's own
//! counts and its inbox's, each held alert with why, and one email of each mailbox as its
//! reader received it. What contradicts the invariants is returned, to be said at the end.

use anyhow::Context;
use outbox_store::outcome_counts::Report;
use outbox_store::PgPool;
use serde_json::Value;

use super::mail_view;
use super::mailboxes::{received_by, MAILBOXES};
use crate::table::Table;

/// Prints the three tables: the alerts by outcome, the sink's counts, its inbox's counts.
pub(super) fn print_counts(approved: i64, report: &Report, sink_stats: &Value) {
    let mut table = Table::new(["", "ALERTS"]);
    for (label, count) in [
        ("approved", approved),
        ("accepted on the first try", report.first_try),
        ("accepted after a retry", report.after_retry),
        (
            "accepted by a resend the destination de-duplicated",
            report.by_dedup_resend,
        ),
        ("accepted, confirmed by lookup", report.by_lookup),
        ("held for an operator", report.held),
        ("failed", report.failed),
        ("still in flight", report.live),
    ] {
        table.row([label.to_owned(), count.to_string()]);
    }
    println!();
    print!("{table}");
    let mut sink_table = Table::new(["THE SINK'S OWN COUNTS", ""]);
    for key in [
        "requests",
        "distinct_keys",
        "applied",
        "wire_duplicates",
        "effective_duplicates",
        "dropped",
        "failed",
        "bad_signatures",
    ] {
        sink_table.row([key.replace('_', " "), sink_stats[key].to_string()]);
    }
    println!();
    print!("{sink_table}");
    let mut inbox_table = Table::new(["THE SINK'S INBOX (SMTP)", ""]);
    for (key, label) in [
        ("messages", "messages"),
        ("distinct_message_ids", "distinct message ids"),
        ("duplicate_message_ids", "duplicate message ids"),
        ("dropped", "final reply lost"),
        ("refused", "refused (451, retried)"),
    ] {
        inbox_table.row([label.to_owned(), sink_stats["smtp"][key].to_string()]);
    }
    println!();
    print!("{inbox_table}");
}

/// Prints each held alert with its reason; for the held email, what the inbox's record
/// settles (it arrived once), or, when it is not there once, returns that as broken.
pub(super) fn print_held(
    report: &Report,
    held_email: Option<uuid::Uuid>,
    inbox: &[Value],
) -> Vec<String> {
    let mut broken = Vec::new();
    if report.held_lines.is_empty() {
        return broken;
    }
    println!();
    println!("held, and why:");
    for (id, line) in &report.held_lines {
        println!("  {id}  {}", outbox_core::untrusted::visible(line));
        if Some(*id) != held_email {
            continue;
        }
        // The relay's record settles what the dispatcher could not know.
        let copies: Vec<&Value> = inbox
            .iter()
            .filter(|m| m["alert_id"].as_str() == Some(id.to_string().as_str()))
            .collect();
        match copies.as_slice() {
            [message] => println!(
                "    the inbox has it once (queue id {}, its final reply lost): it arrived, so \
                 `outboxctl resolve {id} --accepted --reference {} --note \"in the inbox\"`",
                message["queue_id"].as_str().unwrap_or("?"),
                message["queue_id"].as_str().unwrap_or("?"),
            ),
            found => broken.push(format!(
                "the held email {id} is in the inbox {} times, not once",
                found.len()
            )),
        }
    }
    broken
}

/// Prints one email of each mailbox as the inbox received it; a mailbox that got none is
/// returned as broken.
pub(super) async fn print_one_email_each(
    pool: &PgPool,
    inbox: &[Value],
) -> anyhow::Result<Vec<String>> {
    let mut broken = Vec::new();
    for mailbox in MAILBOXES {
        println!();
        println!(
            "one email to {} ({}), as the inbox received it:",
            mailbox.address, mailbox.reader
        );
        match received_by(inbox, &mailbox).find(|m| m["dropped"] == false) {
            Some(message) => print_email(pool, message).await?,
            None => broken.push(format!(
                "no email reached {} ({})",
                mailbox.destination, mailbox.locale
            )),
        }
    }
    Ok(broken)
}

/// Prints one received email: the header fields that matter, from the message the
/// dispatcher stored (the inbox holds the same bytes: the checker compares them), with the
/// subject as the inbox decoded it, then the decoded text part.
async fn print_email(pool: &PgPool, received: &Value) -> anyhow::Result<()> {
    let alert_id: uuid::Uuid = received["alert_id"]
        .as_str()
        .and_then(|id| id.parse().ok())
        .context("the inbox's message has no X-Alert-Id")?;
    let stored = outbox_store::rendered::find(pool, alert_id)
        .await?
        .context("the alert has no stored message")?;
    let show = outbox_core::untrusted::visible;
    for (name, value) in mail_view::headers(&stored.bytes) {
        let value = match (name.as_str(), received["subject"].as_str()) {
            ("Subject", Some(decoded)) => decoded.to_owned(),
            _ => value,
        };
        println!("  {name}: {}", show(&value));
    }
    println!();
    let text = mail_view::text_part(&stored.bytes).unwrap_or_else(|| "(no text part)".into());
    for line in text.trim_end().lines() {
        if line.is_empty() {
            println!();
        } else {
            println!("  {}", show(line));
        }
    }
    Ok(())
}
