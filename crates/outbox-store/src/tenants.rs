//! Tenants: the unit of isolation. Every alert, destination and token belongs to one, and
//! an operator account may be limited to some of them ([`Scope`]).

use sqlx::PgExecutor;
use uuid::Uuid;

use crate::StoreError;

/// A tenant as operators see it.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct Tenant {
    /// Its id.
    pub id: Uuid,
    /// Its unique name.
    pub name: String,
}

/// Creates a tenant; its name must be unused. `time_zone` is an IANA name (checked by
/// the caller); `tiers` defaults to 60, 30, 15 days.
pub async fn create(
    db: impl PgExecutor<'_>,
    name: &str,
    time_zone: &str,
    tiers: Option<&[u32]>,
) -> Result<Uuid, StoreError> {
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO tenants (id, name, time_zone, renewal_tiers) \
         VALUES ($1, $2, $3, COALESCE($4::int[], '{60,30,15}'))",
    )
    .bind(id)
    .bind(name)
    .bind(time_zone)
    .bind(tiers.map(|t| t.iter().map(|d| *d as i32).collect::<Vec<_>>()))
    .execute(db)
    .await
    .map_err(|err| {
        if StoreError::is_unique_violation(&err) {
            StoreError::AlreadyExists {
                what: "tenant",
                name: name.to_owned(),
            }
        } else {
            StoreError::Database(err)
        }
    })?;
    Ok(id)
}

/// Finds a tenant by name, or by id when `name_or_id` is a UUID.
pub async fn find(db: impl PgExecutor<'_>, name_or_id: &str) -> Result<Tenant, StoreError> {
    let id = Uuid::parse_str(name_or_id).ok();
    sqlx::query_as::<_, Tenant>("SELECT id, name FROM tenants WHERE name = $1 OR id = $2")
        .bind(name_or_id)
        .bind(id)
        .fetch_optional(db)
        .await?
        .ok_or_else(|| StoreError::UnknownTenant(name_or_id.to_owned()))
}

/// The tenants an account may see: `None` for every tenant.
pub type Scope<'a> = Option<&'a [Uuid]>;

/// The id of the tenant called `name`, if there is one.
pub async fn tenant_id(db: impl PgExecutor<'_>, name: &str) -> Result<Option<Uuid>, StoreError> {
    Ok(
        sqlx::query_scalar::<_, Uuid>("SELECT id FROM tenants WHERE name = $1")
            .bind(name)
            .fetch_optional(db)
            .await?,
    )
}

/// Tenants by name within a scope, for the filter's choices.
pub async fn tenant_names(
    db: impl PgExecutor<'_>,
    scope: Scope<'_>,
) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar::<_, String>(
        "SELECT name FROM tenants WHERE $1::uuid[] IS NULL OR id = ANY($1) ORDER BY name",
    )
    .bind(scope)
    .fetch_all(db)
    .await?)
}
