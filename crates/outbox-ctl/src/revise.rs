//! `revise`: a corrected payload as a new revision of an alert, as through the API.

use anyhow::{bail, Context};
use outbox_store::PgPool;

use crate::accountable::actor_name;
use crate::names::parse_ids;

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
