//! `destination ...`: which module does each command, and `destination add` sent on by
//! kind.
//!
//! - `args`: `destination add`'s flags (every kind's), and reading the secrets and the
//!   body template they name.
//! - `webhook`, `email`, `email_api`: adding each kind, with the checks its flags get.
//! - `create`: the steps every kind is added by (URLs vetted, one transaction, the report).
//! - `failing_window`: `--disable-after-failing`.
//! - `update`: `destination update` (the failing window, the ordering).
//! - `switch`: `destination enable|disable`.
//! - `listing`: `destination list|show`.
//! - `lookup`: a destination named on the command line, found within its tenant (also for
//!   `lanes list`).

mod args;
mod create;
mod email;
mod email_api;
mod failing_window;
mod listing;
mod lookup;
mod switch;
mod update;
mod webhook;

pub use args::DestinationArgs;
pub(crate) use lookup::destination_id;
pub use update::UpdateArgs;

use outbox_core::sealing::SealingKeys;
use outbox_core::DestinationKind;
use outbox_store::PgPool;

use crate::credentials;
use crate::names::checked_name;

/// `destination ...`
#[derive(Debug, clap::Subcommand)]
pub enum DestinationCommand {
    /// Add a webhook or email destination; prints its id.
    Add(DestinationArgs),
    /// Replace a destination's signing secret; the old one keeps signing beside the new
    /// one for --overlap, then stops.
    RotateSecret(credentials::RotateArgs),
    /// Change a destination's settings.
    Update(UpdateArgs),
    /// Stop delivering to a destination; its alerts wait, pending.
    Disable {
        /// Destination name.
        name: String,
        /// Tenant name or id.
        #[arg(long, env = "OUTBOX_TENANT")]
        tenant: String,
        /// Who: recorded as the reason.
        #[arg(long, env = "USER", default_value = "operator")]
        actor: String,
    },
    /// Deliver to a destination again.
    Enable {
        /// Destination name.
        name: String,
        /// Tenant name or id.
        #[arg(long, env = "OUTBOX_TENANT")]
        tenant: String,
        /// Who.
        #[arg(long, env = "USER", default_value = "operator")]
        actor: String,
    },
    /// Show one destination: its settings, and what its in-flight bound means.
    Show {
        /// Destination name.
        name: String,
        /// Tenant name or id.
        #[arg(long, env = "OUTBOX_TENANT")]
        tenant: String,
        /// One JSON object instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// List destinations.
    List {
        /// Only this tenant's (name or id).
        #[arg(long, env = "OUTBOX_TENANT")]
        tenant: Option<String>,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `destination ...` command.
pub(crate) async fn run(
    pool: &PgPool,
    keys: &SealingKeys,
    command: DestinationCommand,
) -> anyhow::Result<()> {
    match command {
        DestinationCommand::Add(args) => add(pool, keys, args).await,
        DestinationCommand::RotateSecret(args) => {
            credentials::rotate_secret(pool, keys, args).await
        }
        DestinationCommand::Update(args) => update::update_destination(pool, args).await,
        DestinationCommand::Disable {
            name,
            tenant,
            actor,
        } => switch::set_destination(pool, &name, &tenant, false, &actor).await,
        DestinationCommand::Enable {
            name,
            tenant,
            actor,
        } => switch::set_destination(pool, &name, &tenant, true, &actor).await,
        DestinationCommand::Show { name, tenant, json } => {
            listing::show_destination(pool, &tenant, &name, json).await
        }
        DestinationCommand::List { tenant, json } => {
            listing::list_destinations(pool, tenant.as_deref(), json).await
        }
    }
}

/// `destination add`: the name checked, then the destination added as its kind says.
async fn add(pool: &PgPool, keys: &SealingKeys, args: DestinationArgs) -> anyhow::Result<()> {
    let name = checked_name("destination", &args.name)?.to_owned();
    match args.kind {
        DestinationKind::Email => email::add(pool, keys, args, name).await,
        DestinationKind::Webhook => webhook::add(pool, keys, args, name).await,
    }
}
