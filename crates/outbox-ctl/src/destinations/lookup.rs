//! A destination named on the command line, found within its tenant.

use anyhow::bail;
use outbox_store::tenants::Tenant;
use outbox_store::{PgPool, StoreError};
use uuid::Uuid;

/// The id of `tenant`'s destination `name`, or a one-line refusal naming both.
pub(crate) async fn destination_id(
    pool: &PgPool,
    tenant: &Tenant,
    name: &str,
) -> anyhow::Result<Uuid> {
    match outbox_store::destinations::id_by_name(pool, tenant.id, name).await {
        Ok(id) => Ok(id),
        Err(StoreError::UnknownDestination(_)) => {
            bail!("tenant `{}` has no destination named `{name}`", tenant.name)
        }
        Err(err) => Err(err.into()),
    }
}
