//! `resolve`: an uncertain or held alert settled by what the operator established at the
//! destination.

use anyhow::bail;
use outbox_store::alert_actions::{self, Resolution};
use outbox_store::PgPool;

use crate::accountable::Accountable;
use crate::names::parse_ids;

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
