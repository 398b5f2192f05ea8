//! Acting on alerts: replay, resolve, revise; destinations on and off; the figures.
//! Every action records the operator's name and note as evidence; refusals change nothing.

use anyhow::{anyhow, bail, Context};
use outbox_store::alert_actions::{self, Resolution};
use outbox_store::{destination_switch, retention, stats};
use outbox_store::{tenants, PgPool};
use std::time::Duration;
use uuid::Uuid;

use crate::table::Table;
use outbox_core::untrusted::visible;
use outbox_core::{AlertState, Outcome};

/// Who is acting, and why.
#[derive(Debug, clap::Args)]
pub struct Accountable {
    /// Why: stored with the action in the alert's evidence.
    #[arg(long)]
    note: Option<String>,
    /// Who: the operator's name in the evidence, recorded as `cli:NAME`.
    #[arg(long, env = "USER", default_value = "operator")]
    actor: String,
}

/// The operator as the evidence and the audit log record them: `cli:` and `--actor`,
/// `$USER`, or "operator" when both are empty. The prefix tells them from a console
/// account of the same name (`console:NAME`).
pub(crate) fn actor_name(actor: &str) -> String {
    let actor = actor.trim();
    format!("cli:{}", if actor.is_empty() { "operator" } else { actor })
}

impl Accountable {
    fn actor(&self) -> String {
        actor_name(&self.actor)
    }

    fn check(&self) -> anyhow::Result<()> {
        if self.actor.trim().len() > 100 {
            bail!("--actor is longer than 100 bytes");
        }
        Ok(())
    }

    fn note(&self) -> anyhow::Result<&str> {
        self.check()?;
        let note = self.note.as_deref().unwrap_or("").trim();
        if note.is_empty() {
            bail!("--note is required: say why, it is kept with the alert's evidence");
        }
        if note.len() > 1000 {
            bail!("--note is longer than 1000 bytes");
        }
        Ok(note)
    }
}

/// Parses alert ids, each once, in the order given.
fn parse_ids(ids: &[String]) -> anyhow::Result<Vec<Uuid>> {
    let mut parsed: Vec<Uuid> = Vec::with_capacity(ids.len());
    for id in ids {
        let id = Uuid::parse_str(id).map_err(|_| anyhow!("`{id}` is not an alert id"))?;
        if !parsed.contains(&id) {
            parsed.push(id);
        }
    }
    Ok(parsed)
}

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

/// `resolve` flags.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("finding").required(true).args(["accepted", "not_delivered", "abandon"]))]
pub struct ResolveArgs {
    /// The alert.
    id: String,
    /// The destination has it: record it as accepted with --reference.
    #[arg(long, requires = "reference")]
    accepted: bool,
    /// The destination's reference for it.
    #[arg(long, requires = "accepted")]
    reference: Option<String>,
    /// The destination does not have it: deliver it again (same key).
    #[arg(long)]
    not_delivered: bool,
    /// Give up on it, visibly (failed).
    #[arg(long)]
    abandon: bool,
    #[command(flatten)]
    who: Accountable,
}

pub(crate) async fn resolve(pool: &PgPool, args: ResolveArgs) -> anyhow::Result<()> {
    let note = args.who.note()?;
    let id = parse_ids(std::slice::from_ref(&args.id))?[0];
    let resolution = if args.accepted {
        let reference = args.reference.as_deref().unwrap_or("").trim();
        if reference.is_empty() || reference.len() > 500 {
            bail!("--reference must name the destination's reference for the alert (at most 500 bytes)");
        }
        Resolution::Accepted {
            reference: reference.to_owned(),
        }
    } else if args.not_delivered {
        Resolution::NotDelivered
    } else {
        Resolution::Abandon
    };
    alert_actions::resolve(pool, id, &resolution, &args.who.actor(), note).await?;
    let state = outbox_store::alerts::current_state(pool, id).await?;
    println!("{state}");
    eprintln!("alert {id} is now {state}");
    Ok(())
}

/// `revise` flags.
#[derive(Debug, clap::Args)]
pub struct ReviseArgs {
    /// The alert (its latest revision).
    id: String,
    /// File with the corrected payload (a JSON object).
    #[arg(long)]
    payload: String,
    /// Why: kept with the revision.
    #[arg(long)]
    reason: String,
    /// Who: the operator's name in the evidence.
    #[arg(long, env = "USER", default_value = "operator")]
    actor: String,
}

/// `revise`: a new revision of an alert's payload, as through the API.
pub(crate) async fn revise(pool: &PgPool, args: ReviseArgs) -> anyhow::Result<()> {
    let ReviseArgs {
        id,
        payload: payload_file,
        reason,
        actor,
    } = args;
    let (reason, actor) = (reason.as_str(), actor.as_str());
    let id = parse_ids(&[id])?[0];
    outbox_core::identity::check_reason(reason)?;
    let payload = std::fs::read_to_string(&payload_file)
        .with_context(|| format!("reading {payload_file}"))?;
    let payload = payload.trim();
    outbox_core::identity::check_payload(payload)?;
    let outcome = outbox_store::alerts::revise(
        pool,
        outbox_store::alerts::Revision {
            tenant_id: None,
            alert_id: id,
            payload_json: payload,
            reason,
            actor: &format!("operator:{}", actor_name(actor)),
            // An operator's correction starts a trace of its own, which its attempts send.
            trace: Some(&outbox_core::trace_context::TraceContext {
                parent: outbox_core::trace_context::TraceParent::new_trace(false),
                state: None,
            }),
        },
    )
    .await?;
    use outbox_store::alerts::ReviseOutcome;
    match outcome {
        ReviseOutcome::Created {
            id: new,
            revision,
            superseded_previous,
        } => {
            println!("{new}");
            eprintln!(
                "revision {revision} created{}",
                if superseded_previous {
                    "; the unsent previous revision is superseded"
                } else {
                    "; the previous revision may have been delivered and stays as it is"
                }
            );
            Ok(())
        }
        ReviseOutcome::Existing(existing) => {
            println!("{existing}");
            eprintln!("this correction was already made");
            Ok(())
        }
        ReviseOutcome::Unchanged(_) => {
            bail!("the payload equals the current revision's; a revision must correct something")
        }
        ReviseOutcome::NotLatest { latest } => {
            bail!("alert {id} has been revised since; revise the latest revision, {latest}")
        }
        ReviseOutcome::NotFound => bail!("no alert {id}"),
    }
}

pub(crate) async fn set_destination(
    pool: &PgPool,
    name: &str,
    tenant: &str,
    enabled: bool,
    actor: &str,
) -> anyhow::Result<()> {
    let tenant = tenants::find(pool, tenant).await?;
    if !destination_switch::set_destination_enabled(
        pool,
        tenant.id,
        name,
        enabled,
        &actor_name(actor),
    )
    .await?
    {
        bail!("tenant `{}` has no destination named `{name}`", tenant.name);
    }
    eprintln!(
        "destination `{name}` {}",
        if enabled {
            "enabled: its alerts go out again"
        } else {
            "disabled: its alerts wait, pending"
        }
    );
    Ok(())
}

pub(crate) async fn stats(pool: &PgPool, json: bool) -> anyhow::Result<()> {
    let stats = stats::stats(pool).await?;
    if json {
        println!("{}", outbox_core::untrusted::to_json_line(&stats)?);
        return Ok(());
    }
    let mut table = Table::new(["TENANT", "DESTINATION", "STATE", "ALERTS"]);
    for row in &stats.by_state {
        table.row([
            row.tenant.clone(),
            row.destination.clone(),
            row.state.to_string(),
            row.count.to_string(),
        ]);
    }
    print!("{table}");
    let rate = if stats.attempts_last_hour > 0 {
        format!(
            "{:.1}%",
            100.0 * stats.accepted_last_hour as f64 / stats.attempts_last_hour as f64
        )
    } else {
        "n/a".to_owned()
    };
    println!();
    println!("uncertain now          {}", stats.uncertain);
    println!("held now               {}", stats.held);
    println!(
        "oldest due             {}",
        outbox_core::duration::format(Duration::from_secs(stats.oldest_due_age_secs as u64))
    );
    println!(
        "last hour              {} attempt(s), {} accepted ({rate})",
        stats.attempts_last_hour, stats.accepted_last_hour
    );
    Ok(())
}

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
