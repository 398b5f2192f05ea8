//! `replay`: held or failed alerts put back in the queue, by name (all or none) or by
//! state (one transaction each, so an interrupted run can be run again).

use anyhow::{bail, Context};
use outbox_core::untrusted::visible;
use outbox_core::{AlertState, Outcome};
use outbox_store::alert_actions;
use outbox_store::PgPool;

use crate::accountable::Accountable;
use crate::names::parse_ids;

/// `replay` flags.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Alerts to replay (held or failed).
    ids: Vec<String>,
    /// Replay every alert in this state instead: held or failed.
    #[arg(long, conflicts_with = "ids")]
    status: Option<String>,
    /// With --status: only this tenant's.
    #[arg(long, requires = "status")]
    tenant: Option<String>,
    /// With --status: only this destination's.
    #[arg(long, requires = "status")]
    destination: Option<String>,
    /// Print how many would be replayed, change nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    who: Accountable,
}

pub(crate) async fn replay(pool: &PgPool, args: ReplayArgs) -> anyhow::Result<()> {
    let note = args.who.note()?;
    let Some(status) = &args.status else {
        return replay_named(pool, &args, note).await;
    };
    let outcome = match status
        .parse::<AlertState>()
        .ok()
        .and_then(AlertState::outcome)
    {
        Some(outcome @ (Outcome::Held | Outcome::Failed)) => outcome,
        _ => bail!("--status must be held or failed (only those can be replayed)"),
    };
    let ids = alert_actions::settled_ids(
        pool,
        outcome,
        args.tenant.as_deref(),
        args.destination.as_deref(),
    )
    .await?;
    if args.dry_run {
        return would_replay(ids.len());
    }
    // One transaction per alert: an interrupted bulk replay leaves every alert either
    // replayed (with its evidence) or untouched, and a rerun picks up the rest.
    let progress = indicatif::ProgressBar::new(ids.len() as u64);
    progress.set_style(
        indicatif::ProgressStyle::with_template("replaying {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut replayed = 0u64;
    for id in &ids {
        match alert_actions::replay(pool, *id, &args.who.actor(), note).await {
            Ok(()) => replayed += 1,
            // Another operator (or a rerun) may have got there first.
            Err(outbox_store::StoreError::Refused(why)) => {
                progress.println(format!("skipped: {}", visible(&why)));
            }
            Err(err) => {
                progress.abandon();
                return Err(err).with_context(|| format!("after replaying {replayed}"));
            }
        }
        progress.inc(1);
    }
    progress.finish_and_clear();
    replayed_report(replayed);
    Ok(())
}

/// Replays the named alerts all or none: the store checks every one by the lifecycle's
/// rules in one transaction, so a refusal for any of them changes nothing (a dry run
/// runs the same transaction and rolls it back).
async fn replay_named(pool: &PgPool, args: &ReplayArgs, note: &str) -> anyhow::Result<()> {
    if args.ids.is_empty() {
        bail!("name the alerts to replay, or select them with --status held");
    }
    let ids = parse_ids(&args.ids)?;
    alert_actions::replay_all(pool, &ids, &args.who.actor(), note, args.dry_run).await?;
    if args.dry_run {
        return would_replay(ids.len());
    }
    replayed_report(ids.len() as u64);
    Ok(())
}

fn would_replay(n: usize) -> anyhow::Result<()> {
    println!("{n}");
    eprintln!("{n} alert(s) would be replayed; nothing changed (--dry-run)");
    Ok(())
}

fn replayed_report(replayed: u64) {
    println!("{replayed}");
    eprintln!("replayed {replayed} alert(s); dispatchers will send them with their original keys");
}
