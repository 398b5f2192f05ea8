//! An operator turning a destination off or on (`outboxctl destination enable|disable`,
//! the console): its alerts wait while it is off, and its health count starts again.

use sqlx::PgExecutor;
use uuid::Uuid;

use crate::StoreError;

/// Enables or disables a tenant's destination. A disabled destination's alerts wait,
/// pending; nothing fails. Returns `false` when there is no such destination.
///
/// Its health count starts again (`crate::health`): sends that finished before now no
/// longer count towards an automatic disable, so a destination an operator enables after
/// it was disabled for failing gets its whole window again. The destination row is
/// locked before its health row, the order the health reports take.
pub async fn set_destination_enabled(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    name: &str,
    enabled: bool,
    actor: &str,
) -> Result<bool, StoreError> {
    let updated: i64 = sqlx::query_scalar(
        "WITH switched AS ( \
             UPDATE destinations SET enabled = $3, updated_at = now(), \
                 disabled_reason = CASE WHEN $3 THEN NULL ELSE 'disabled by ' || $4 END \
             WHERE tenant_id = $1 AND name = $2 \
             RETURNING id \
         ), recount AS ( \
             INSERT INTO destination_health (destination_id, counted_from) \
             SELECT id, now() FROM switched \
             ON CONFLICT (destination_id) DO UPDATE SET counted_from = now(), \
                 failing_since = NULL, auto_disabled_at = NULL, updated_at = now() \
         ) \
         SELECT count(*) FROM switched",
    )
    .bind(tenant_id)
    .bind(name)
    .bind(enabled)
    .bind(actor)
    .fetch_one(db)
    .await?;
    Ok(updated == 1)
}
