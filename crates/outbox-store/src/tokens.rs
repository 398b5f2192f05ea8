//! API tokens: created for a tenant, stored only as a hash, looked up by hash.

use outbox_core::{ApiToken, TokenHash};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::StoreError;

/// Stores the hash of a new token for `tenant_id` and returns the token, the only time
/// its plain text exists.
pub async fn create(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    label: Option<&str>,
) -> Result<ApiToken, StoreError> {
    let token = ApiToken::generate();
    sqlx::query(
        "INSERT INTO api_tokens (id, tenant_id, token_hash, label) VALUES ($1, $2, $3, $4)",
    )
    .bind(Uuid::now_v7())
    .bind(tenant_id)
    .bind(token.hash().0.as_slice())
    .bind(label)
    .execute(db)
    .await?;
    Ok(token)
}

/// The tenant and token id a presented token's hash belongs to, unless unknown or revoked.
pub async fn authenticate(
    db: impl PgExecutor<'_>,
    hash: TokenHash,
) -> Result<Option<(Uuid, Uuid)>, StoreError> {
    let row = sqlx::query_as::<_, (Uuid, Uuid)>(
        "SELECT tenant_id, id FROM api_tokens WHERE token_hash = $1 AND revoked_at IS NULL",
    )
    .bind(hash.0.as_slice())
    .fetch_optional(db)
    .await?;
    Ok(row)
}
