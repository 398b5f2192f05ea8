//! Destinations: where a tenant's alerts are delivered, and what each one can do to help
//! settle an uncertain send (de-duplicate by key, answer a lookup by key).

use outbox_core::OnUncertain;
use sqlx::PgExecutor;
use std::time::Duration;
use uuid::Uuid;

use crate::StoreError;

/// A destination to create. The caller has validated URLs, names and secrets.
#[derive(Debug, Clone)]
pub struct NewDestination {
    /// Owning tenant.
    pub tenant_id: Uuid,
    /// Unique within the tenant; approvals name their destination by it.
    pub name: String,
    /// Where alerts are POSTed.
    pub url: String,
    /// `whsec_...` secrets; one signature per secret on every request.
    pub signing_secrets: Vec<String>,
    /// Header that carries the notification id.
    pub idempotency_header: String,
    /// How long the destination de-duplicates by that header, if it does.
    pub idempotency_retention: Option<Duration>,
    /// Lookup URL with a `{key}` placeholder, if the destination offers one.
    pub lookup_url_template: Option<String>,
    /// Policy for uncertain sends nothing else settles.
    pub on_uncertain: OnUncertain,
    /// Connect and total request timeout.
    pub timeout: Duration,
    /// Most requests in flight to this destination at once.
    pub max_in_flight: u32,
}

/// A destination as listed for operators. Secrets are never read back out; only their count.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct DestinationSummary {
    /// Its id.
    pub id: Uuid,
    /// Owning tenant's name.
    pub tenant: String,
    /// Its name.
    pub name: String,
    /// Where alerts are POSTed.
    pub url: String,
    /// Header carrying the notification id.
    pub idempotency_header: String,
    /// De-duplication window in seconds, if any.
    pub idempotency_retention_secs: Option<i64>,
    /// Lookup URL template, if any.
    pub lookup_url_template: Option<String>,
    /// `hold` or `retry`.
    pub on_uncertain: String,
    /// Request timeout in milliseconds.
    pub timeout_ms: i32,
    /// Concurrency limit.
    pub max_in_flight: i32,
    /// Number of signing secrets configured.
    pub signing_secret_count: i32,
    /// Whether alerts are being delivered to it.
    pub enabled: bool,
}

/// Creates a destination and returns its id.
pub async fn create(db: impl PgExecutor<'_>, new: &NewDestination) -> Result<Uuid, StoreError> {
    let id = Uuid::now_v7();
    let timeout_ms = i32::try_from(new.timeout.as_millis()).unwrap_or(i32::MAX);
    let retention_secs = new.idempotency_retention.map(|d| d.as_secs_f64());
    sqlx::query(
        "INSERT INTO destinations (id, tenant_id, name, url, signing_secrets, idempotency_header, \
             idempotency_retention, lookup_url_template, on_uncertain, timeout_ms, max_in_flight) \
         VALUES ($1, $2, $3, $4, $5, $6, make_interval(secs => $7), $8, $9, $10, $11)",
    )
    .bind(id)
    .bind(new.tenant_id)
    .bind(&new.name)
    .bind(&new.url)
    .bind(&new.signing_secrets)
    .bind(&new.idempotency_header)
    .bind(retention_secs)
    .bind(&new.lookup_url_template)
    .bind(new.on_uncertain.as_str())
    .bind(timeout_ms)
    .bind(i32::try_from(new.max_in_flight).unwrap_or(i32::MAX))
    .execute(db)
    .await
    .map_err(|err| {
        if StoreError::is_unique_violation(&err) {
            StoreError::AlreadyExists {
                what: "destination",
                name: new.name.clone(),
            }
        } else {
            StoreError::Database(err)
        }
    })?;
    Ok(id)
}

/// The id of the tenant's destination called `name`. Scoped by tenant: another tenant's
/// destination of the same name is invisible here.
pub async fn id_by_name(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    name: &str,
) -> Result<Uuid, StoreError> {
    sqlx::query_scalar::<_, Uuid>("SELECT id FROM destinations WHERE tenant_id = $1 AND name = $2")
        .bind(tenant_id)
        .bind(name)
        .fetch_optional(db)
        .await?
        .ok_or_else(|| StoreError::UnknownDestination(name.to_owned()))
}

/// Lists destinations, of one tenant or of all, by tenant then name.
pub async fn list(
    db: impl PgExecutor<'_>,
    tenant_id: Option<Uuid>,
) -> Result<Vec<DestinationSummary>, StoreError> {
    let rows = sqlx::query_as::<_, DestinationSummary>(
        "SELECT d.id, t.name AS tenant, d.name, d.url, d.idempotency_header, \
                extract(epoch FROM d.idempotency_retention)::int8 AS idempotency_retention_secs, \
                d.lookup_url_template, d.on_uncertain, d.timeout_ms, d.max_in_flight, \
                cardinality(d.signing_secrets) AS signing_secret_count, d.enabled \
         FROM destinations d JOIN tenants t ON t.id = d.tenant_id \
         WHERE $1::uuid IS NULL OR d.tenant_id = $1 \
         ORDER BY t.name, d.name",
    )
    .bind(tenant_id)
    .fetch_all(db)
    .await?;
    Ok(rows)
}
