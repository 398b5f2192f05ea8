//! `lanes list`: a destination's ordered lanes that are held up by their head, longest
//! first, with the head, why it stands where it does and how many alerts wait behind it.

use anyhow::bail;
use chrono::Utc;
use outbox_core::{duration, Ordering};
use outbox_store::{lanes, tenants, PgPool};
use std::time::Duration;

use crate::table::Table;

/// `lanes ...`
#[derive(Debug, clap::Subcommand)]
pub enum LanesCommand {
    /// Lanes held up by their head (held, failed or retrying), longest first: the head,
    /// its reason, how long the lane has waited and how many alerts are behind it.
    List(ListArgs),
}

/// `lanes list` flags.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// The destination (it must order per key).
    #[arg(long)]
    destination: String,
    /// Owning tenant (name or id).
    #[arg(long, env = "OUTBOX_TENANT")]
    tenant: String,
    /// Only lanes that wait for an operator (their head is held or failed); without it,
    /// also lanes whose head is retrying, which reads the destination's whole backlog.
    #[arg(long)]
    blocked: bool,
    /// Most lanes shown.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..=10_000))]
    limit: i64,
    /// One JSON object per lane instead of a table.
    #[arg(long)]
    json: bool,
}

/// `lanes list`: prints the lanes held up by their head, and a summary line on stderr.
pub(crate) async fn list(pool: &PgPool, args: ListArgs) -> anyhow::Result<()> {
    let tenant = tenants::find(pool, &args.tenant).await?;
    let destination_id =
        crate::destinations::destination_id(pool, &tenant, &args.destination).await?;
    if lanes::ordering_of(pool, destination_id).await?.ordering != Ordering::PerKey {
        bail!(
            "destination `{}` does not order its alerts; turn it on with `outboxctl destination update {} --ordering per-key`",
            args.destination,
            args.destination
        );
    }
    let stalled = lanes::stalled(pool, destination_id, !args.blocked, args.limit).await?;
    if args.json {
        for lane in &stalled {
            println!("{}", outbox_core::untrusted::to_json_line(lane)?);
        }
        return Ok(());
    }
    let now = Utc::now();
    let mut table = Table::new(["KEY", "HEAD", "STATE", "WAITING FOR", "BEHIND", "REASON"]);
    for lane in &stalled {
        let waited = (now - lane.since).to_std().unwrap_or(Duration::ZERO);
        table.row([
            lane.key.clone(),
            lane.head.to_string(),
            if lane.blocked {
                format!("{} (blocked)", lane.head_state)
            } else {
                format!("{} (retrying)", lane.head_state)
            },
            duration::format(Duration::from_secs(waited.as_secs())),
            lane.behind.to_string(),
            lane.reason.clone().unwrap_or_default(),
        ]);
    }
    print!("{table}");
    let blocked = stalled.iter().filter(|lane| lane.blocked).count();
    eprintln!(
        "{blocked} blocked lane(s){}; replay or resolve a head to let its lane go on",
        if args.blocked {
            String::new()
        } else {
            format!(", {} retrying", stalled.len() - blocked)
        }
    );
    Ok(())
}
