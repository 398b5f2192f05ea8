//! `destination update`: changes the settings given (the failing window, the ordering and
//! what a lane does past a failed head) and says what they are now.

use anyhow::bail;
use outbox_core::{OnHeadFailed, Ordering};
use outbox_store::lanes::{self, OrderingSettings};
use outbox_store::{tenants, PgPool};

use super::failing_window::{failing_window_text, parse_failing_window, FailingWindow};

/// `destination update` flags.
#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    /// Destination name.
    name: String,
    /// Owning tenant (name or id).
    #[arg(long, env = "OUTBOX_TENANT")]
    tenant: String,
    /// Disable the destination automatically once every send to it has failed for this
    /// long; `never` to keep it on.
    #[arg(long, value_name = "DURATION|never", value_parser = parse_failing_window)]
    disable_after_failing: Option<FailingWindow>,
    /// `per-key`: deliver the alerts of one ordering key one at a time, in approval order
    /// (alerts approved from now on); `none`: no order (waiting alerts are released).
    #[arg(long, value_name = "none|per-key")]
    ordering: Option<Ordering>,
    /// When an ordered lane's head has failed for good: `block` (wait for an operator)
    /// or `skip` (the next alert goes).
    #[arg(long, value_name = "block|skip")]
    on_head_failed: Option<OnHeadFailed>,
    /// Turn ordering off even though lanes are blocked: the alerts waiting behind their
    /// held or failed heads are released and sent.
    #[arg(long)]
    force: bool,
    /// Who: recorded in the audit log, and in the evidence of alerts a change lets go
    /// (switching to `skip`).
    #[arg(long, env = "USER", default_value = "operator")]
    actor: String,
}

impl UpdateArgs {
    /// The tenant and the destination's name, as given, for the audit log.
    pub(crate) fn audited(&self) -> (&str, &str) {
        (&self.tenant, &self.name)
    }

    /// Who made the change, as both the audit log and the evidence record it (`cli:NAME`).
    pub(crate) fn actor(&self) -> String {
        crate::accountable::actor_name(&self.actor)
    }
}

/// `destination update`: changes the settings given, and says what they are now.
pub(super) async fn update_destination(pool: &PgPool, args: UpdateArgs) -> anyhow::Result<()> {
    if args.disable_after_failing.is_none()
        && args.ordering.is_none()
        && args.on_head_failed.is_none()
    {
        bail!("nothing to change: give --disable-after-failing, --ordering or --on-head-failed");
    }
    let tenant = tenants::find(pool, &args.tenant).await?;
    let destination_id = crate::destinations::destination_id(pool, &tenant, &args.name).await?;
    if args.ordering.is_some() || args.on_head_failed.is_some() {
        let current = lanes::ordering_of(pool, destination_id).await?;
        let wanted = OrderingSettings {
            ordering: args.ordering.unwrap_or(current.ordering),
            on_head_failed: args.on_head_failed.unwrap_or(current.on_head_failed),
        };
        let change =
            lanes::set_ordering(pool, destination_id, wanted, args.force, &args.actor()).await?;
        eprintln!("destination `{}`: {}", args.name, ordering_text(wanted));
        if change.released > 0 {
            eprintln!(
                "released {} alert(s) that waited in ordered lanes ({} lane(s) were blocked)",
                change.released, change.blocked_lanes
            );
        }
        if change.skipped_heads > 0 {
            eprintln!(
                "{} lane(s) blocked by a failed head move on without it",
                change.skipped_heads
            );
        }
    }
    if let Some(FailingWindow(window)) = args.disable_after_failing {
        outbox_store::health::set_disable_after_failing(pool, tenant.id, &args.name, window)
            .await?;
        eprintln!(
            "destination `{}`: {}",
            args.name,
            failing_window_text(window)
        );
    }
    Ok(())
}

/// What ordering settings mean, in words.
pub(super) fn ordering_text(settings: OrderingSettings) -> String {
    match (settings.ordering, settings.on_head_failed) {
        (Ordering::None, _) => "no ordering".to_owned(),
        (Ordering::PerKey, OnHeadFailed::Block) => {
            "ordered per key; a head that failed for good blocks its lane until an operator acts"
                .to_owned()
        }
        (Ordering::PerKey, OnHeadFailed::Skip) => {
            "ordered per key; a head that failed for good is skipped".to_owned()
        }
    }
}
