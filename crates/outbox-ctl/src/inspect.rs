//! Looking at alerts: one alert's whole story, and listings of the outbox. Text that
//! tenants and destinations wrote is shown through `visible` (escape sequences and
//! bidirectional controls appear as `\x1b`, `\u{202e}`); `--json` is faithful JSON.

use anyhow::{anyhow, Context};
use chrono::{DateTime, Utc};
use outbox_core::untrusted::{to_json_line, to_json_pretty, visible};
use outbox_core::AlertState;
use outbox_store::alerts::{AlertDetail, AttemptRecord};
use outbox_store::PgPool;
use std::fmt::Write as _;
use uuid::Uuid;

use crate::table::Table;

/// `alert ...`
#[derive(Debug, clap::Subcommand)]
pub enum AlertCommand {
    /// Show an alert: identity, state, revisions, attempts and evidence trail.
    Show {
        /// The alert's id.
        id: String,
        /// The whole record as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `outbox ...`
#[derive(Debug, clap::Subcommand)]
pub enum OutboxCommand {
    /// List alerts, oldest first: the live queue by default, or those in one state.
    List(ListArgs),
}

/// `alert show`: an alert's identity and state, its revisions, attempts and evidence
/// trail; with `json`, the whole record.
pub(crate) async fn show_alert(pool: &PgPool, id: &str, json: bool) -> anyhow::Result<()> {
    let alert_id = Uuid::parse_str(id).with_context(|| format!("`{id}` is not an alert id"))?;
    let alert = outbox_store::alerts::detail(pool, None, alert_id)
        .await?
        .ok_or_else(|| anyhow!("no alert {alert_id}"))?;
    if json {
        println!("{}", to_json_pretty(&alert)?);
        return Ok(());
    }
    let mut out = String::new();
    write_identity(&mut out, &alert)?;
    write_revisions(&mut out, &alert)?;
    write_attempts(&mut out, &alert.attempts)?;
    writeln!(out, "evidence")?;
    for e in &alert.evidence {
        writeln!(
            out,
            "  {}  {:<10}  {}  {}",
            stamp(e.at),
            e.to_state,
            visible(&e.actor),
            visible(&e.line)
        )?;
    }
    print!("{out}");
    Ok(())
}

/// The alert's heading and a line per fact about it: state, identity, payload, approval,
/// next attempt, reference, pruning.
fn write_identity(out: &mut String, alert: &AlertDetail) -> std::fmt::Result {
    writeln!(out, "alert {}  (revision {})", alert.id, alert.revision)?;
    writeln!(out, "  state        {}", alert.state)?;
    if alert.possible_duplicate {
        writeln!(out, "  warning      possibly delivered more than once")?;
    }
    writeln!(out, "  tenant       {}", visible(&alert.tenant))?;
    writeln!(out, "  destination  {}", visible(&alert.destination))?;
    writeln!(out, "  subject      {}", visible(&alert.subject))?;
    writeln!(out, "  occurrence   {}", visible(&alert.occurrence))?;
    if let Some(reason) = &alert.reason {
        writeln!(out, "  reason       {}", visible(reason))?;
    }
    writeln!(out, "  payload      sha256 {}", alert.payload_sha256)?;
    writeln!(
        out,
        "  approved     {} by {}",
        stamp(alert.created_at),
        visible(&alert.created_by)
    )?;
    if let Some(trace_id) = &alert.trace_id {
        writeln!(out, "  trace        {trace_id}")?;
    }
    if let Some(next) = alert.next_attempt_at {
        writeln!(out, "  next attempt {}", stamp(next))?;
    }
    if let Some(reference) = &alert.destination_reference {
        writeln!(out, "  reference    {}", visible(reference))?;
    }
    if let Some(pruned) = alert.pruned_at {
        writeln!(
            out,
            "  pruned       {} (payload, attempts and evidence removed by retention)",
            stamp(pruned)
        )?;
    }
    Ok(())
}

/// The alert's revisions, when it has been revised, this one marked.
fn write_revisions(out: &mut String, alert: &AlertDetail) -> std::fmt::Result {
    if alert.revisions.len() <= 1 {
        return Ok(());
    }
    writeln!(out, "revisions")?;
    for r in &alert.revisions {
        let marker = if r.id == alert.id { " (this one)" } else { "" };
        writeln!(
            out,
            "  {}  {}  {}{marker}{}",
            r.revision,
            r.id,
            r.state,
            r.reason
                .as_deref()
                .map(|reason| format!("  {}", visible(reason)))
                .unwrap_or_default()
        )?;
    }
    Ok(())
}

/// A line per attempt: who, when, and what came of it.
fn write_attempts(out: &mut String, attempts: &[AttemptRecord]) -> std::fmt::Result {
    writeln!(out, "attempts")?;
    if attempts.is_empty() {
        writeln!(out, "  none yet")?;
    }
    for a in attempts {
        writeln!(
            out,
            "  #{} {} by {}  {} .. {}  {}{}{}{}",
            a.attempt,
            a.kind,
            visible(&a.worker),
            stamp(a.started_at),
            stamp(a.finished_at),
            a.outcome,
            a.http_status
                .map(|s| format!("  HTTP {s}"))
                .unwrap_or_default(),
            a.destination_reference
                .as_deref()
                .map(|r| format!("  ref {}", visible(r)))
                .unwrap_or_default(),
            a.error_class
                .as_deref()
                .map(|e| format!("  ({})", visible(e)))
                .unwrap_or_default(),
        )?;
    }
    Ok(())
}

/// `outbox list` flags.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// pending, sending, uncertain, held, failed, accepted or superseded.
    #[arg(long)]
    status: Option<AlertState>,
    /// Only this tenant's (name).
    #[arg(long)]
    tenant: Option<String>,
    /// Only this destination's (name).
    #[arg(long)]
    destination: Option<String>,
    /// Only alerts approved within this long (e.g. 2h).
    #[arg(long, value_parser = outbox_core::duration::parse_positive)]
    since: Option<std::time::Duration>,
    /// At most this many rows.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    limit: i64,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

/// `outbox list`: alerts oldest first, the live queue unless `--status` names a state.
pub(crate) async fn list_outbox(pool: &PgPool, args: ListArgs) -> anyhow::Result<()> {
    let filter = outbox_store::alert_listings::Filter {
        state: args.status,
        tenant: args.tenant,
        destination: args.destination,
        since: args.since,
        limit: args.limit,
    };
    let entries = outbox_store::alert_listings::list(pool, &filter).await?;
    if args.json {
        for entry in &entries {
            println!("{}", to_json_line(entry)?);
        }
        return Ok(());
    }
    let now = Utc::now();
    let mut table = Table::new([
        "ID",
        "TENANT",
        "DESTINATION",
        "SUBJECT / OCCURRENCE",
        "REV",
        "STATE",
        "ATTEMPTS",
        "AGE",
        "LAST EVIDENCE",
    ]);
    for e in entries {
        table.row([
            e.id.to_string(),
            e.tenant,
            e.destination,
            format!("{} / {}", e.subject, e.occurrence),
            e.revision.to_string(),
            e.state.to_string(),
            e.attempts.to_string(),
            age(now, e.created_at),
            e.last_evidence.unwrap_or_default(),
        ]);
    }
    if table.is_empty() {
        eprintln!("no alerts");
        return Ok(());
    }
    print!("{table}");
    Ok(())
}

fn stamp(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S%.3fZ").to_string()
}

/// A compact age: `42s`, `7m`, `3h12m`, `2d4h`.
fn age(now: DateTime<Utc>, then: DateTime<Utc>) -> String {
    let secs = (now - then).num_seconds().max(0);
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m", secs / 60),
        3600..=86_399 => format!("{}h{}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{}h", secs / 86_400, secs % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    #[test]
    fn ages_are_compact() {
        let now = Utc::now();
        assert_eq!(age(now, now - Duration::seconds(42)), "42s");
        assert_eq!(age(now, now - Duration::seconds(7 * 60 + 5)), "7m");
        assert_eq!(age(now, now - Duration::minutes(192)), "3h12m");
        assert_eq!(age(now, now - Duration::hours(52)), "2d4h");
        assert_eq!(age(now, now + Duration::seconds(5)), "0s");
    }
}
