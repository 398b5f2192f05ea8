//! `destination enable|disable`: a destination turned on or off by an operator; its
//! alerts wait, pending, while it is off.

use anyhow::bail;
use outbox_store::{destination_switch, tenants, PgPool};

use crate::accountable::actor_name;

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
