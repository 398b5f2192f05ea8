//! `tenant create|configure`, and the tenant a listing's `--tenant` limits it to.

use outbox_store::{sources, tenants, PgPool};
use uuid::Uuid;

use crate::names::checked_name;

/// `tenant ...`
#[derive(Debug, clap::Subcommand)]
pub enum TenantCommand {
    /// Create a tenant; prints its id.
    Create {
        /// Unique name.
        name: String,
        /// IANA time zone in which renewal days are counted.
        #[arg(long, default_value = "UTC")]
        time_zone: String,
        /// Renewal tiers in days before the action date.
        #[arg(long)]
        tiers: Option<String>,
    },
    /// Change a tenant's time zone, renewal tiers or email language.
    Configure {
        /// Tenant name or id.
        name: String,
        /// IANA time zone.
        #[arg(long)]
        time_zone: Option<String>,
        /// Renewal tiers, e.g. 90,30,7.
        #[arg(long)]
        tiers: Option<String>,
        /// Language of email to destinations without one of their own: en or es.
        #[arg(long)]
        locale: Option<outbox_render::Locale>,
    },
}

/// Runs a `tenant ...` command.
pub(crate) async fn run(pool: &PgPool, command: TenantCommand) -> anyhow::Result<()> {
    match command {
        TenantCommand::Create {
            name,
            time_zone,
            tiers,
        } => create(pool, &name, &time_zone, tiers.as_deref()).await,
        TenantCommand::Configure {
            name,
            time_zone,
            tiers,
            locale,
        } => configure(pool, &name, time_zone.as_deref(), tiers.as_deref(), locale).await,
    }
}

/// `tenant create`: prints the new tenant's id.
async fn create(
    pool: &PgPool,
    name: &str,
    time_zone: &str,
    tiers: Option<&str>,
) -> anyhow::Result<()> {
    let name = checked_name("tenant", name)?;
    outbox_core::renewal::time_zone(time_zone)?;
    let tiers = tiers.map(outbox_core::renewal::parse_tiers).transpose()?;
    let id = tenants::create(pool, name, time_zone, tiers.as_deref()).await?;
    println!("{id}");
    eprintln!("created tenant `{name}`");
    Ok(())
}

/// `tenant configure`: the time zone, renewal tiers and email language given.
async fn configure(
    pool: &PgPool,
    tenant: &str,
    time_zone: Option<&str>,
    tiers: Option<&str>,
    locale: Option<outbox_render::Locale>,
) -> anyhow::Result<()> {
    if let Some(zone) = time_zone {
        outbox_core::renewal::time_zone(zone)?;
    }
    let tiers = tiers.map(outbox_core::renewal::parse_tiers).transpose()?;
    let tenant = tenants::find(pool, tenant).await?;
    let locale = locale.map(|locale| locale.as_str());
    sources::configure_tenant(pool, tenant.id, time_zone, tiers.as_deref(), locale).await?;
    eprintln!("configured tenant `{}`", tenant.name);
    Ok(())
}

/// The id of the tenant a listing is limited to (`--tenant`, a name or id); `None` for
/// every tenant's.
pub(crate) async fn filter(pool: &PgPool, tenant: Option<&str>) -> anyhow::Result<Option<Uuid>> {
    Ok(match tenant {
        Some(tenant) => Some(tenants::find(pool, tenant).await?.id),
        None => None,
    })
}
