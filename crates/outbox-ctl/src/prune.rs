//! `prune`: retention, in steps of one transaction each.

use anyhow::Context;
use outbox_store::{retention, PgPool};
use std::time::Duration;
use uuid::Uuid;

/// `prune` flags.
#[derive(Debug, clap::Args)]
pub struct PruneArgs {
    /// Prune alerts settled longer ago than this, e.g. 30d.
    #[arg(long, value_parser = outbox_core::duration::parse_positive)]
    older_than: Duration,
    /// Prune failed alerts too (they can no longer be replayed with their payload).
    #[arg(long)]
    include_failed: bool,
    /// Count what would be pruned; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Alerts per transaction.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    batch: i64,
    /// One JSON object instead of a sentence.
    #[arg(long)]
    json: bool,
}

/// `outboxctl prune`: retention in steps of `batch` alerts, each its own transaction, so
/// that it can be interrupted and run again, and never holds many locks for long.
pub(crate) async fn prune(pool: &PgPool, args: PruneArgs) -> anyhow::Result<()> {
    let PruneArgs {
        older_than,
        include_failed,
        dry_run,
        batch,
        json,
    } = args;
    let cutoff = chrono::Utc::now()
        - chrono::Duration::from_std(older_than).context("--older-than is too long")?;
    let outcomes = retention::prunable_outcomes(include_failed);
    let total = if dry_run {
        retention::prune_preview(pool, cutoff, &outcomes).await?
    } else {
        let mut total = retention::Pruned::default();
        let mut cursor = Uuid::nil();
        loop {
            let (step, next) =
                retention::prune_step(pool, cutoff, &outcomes, cursor, batch).await?;
            total.alerts += step.alerts;
            total.attempts += step.attempts;
            total.evidence += step.evidence;
            match next {
                Some(next) => cursor = next,
                None => break,
            }
        }
        total
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "dry_run": dry_run,
                "settled_before": cutoff.to_rfc3339(),
                "outcomes": outcomes,
                "alerts": total.alerts,
                "attempts": total.attempts,
                "evidence": total.evidence,
            })
        );
    } else {
        let verb = if dry_run { "would prune" } else { "pruned" };
        println!(
            "{verb} {} alerts ({}) settled before {}: {} attempt rows, {} evidence lines",
            total.alerts,
            outcomes
                .iter()
                .map(|o| o.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            cutoff.format("%Y-%m-%d %H:%M:%S UTC"),
            total.attempts,
            total.evidence
        );
    }
    Ok(())
}
