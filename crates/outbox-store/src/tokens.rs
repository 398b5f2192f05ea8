//! API tokens: created for a tenant, stored only as a hash, looked up by hash; listed,
//! revoked, and refused once expired.

use chrono::{DateTime, Utc};
use outbox_core::{ApiToken, TokenHash};
use sqlx::PgExecutor;
use std::time::Duration;
use uuid::Uuid;

use crate::StoreError;

/// Stores the hash of a new token for `tenant_id` and returns the token, the only time
/// its plain text exists. The token never expires.
pub async fn create(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    label: Option<&str>,
) -> Result<ApiToken, StoreError> {
    create_expiring(db, tenant_id, label, None).await
}

/// Like [`create`], with the token refused once `expires_in` has passed (when given).
pub async fn create_expiring(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    label: Option<&str>,
    expires_in: Option<Duration>,
) -> Result<ApiToken, StoreError> {
    let token = ApiToken::generate();
    sqlx::query(
        "INSERT INTO api_tokens (id, tenant_id, token_hash, label, expires_at) \
         VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))",
    )
    .bind(Uuid::now_v7())
    .bind(tenant_id)
    .bind(token.hash().0.as_slice())
    .bind(label)
    .bind(expires_in.map(|d| d.as_secs_f64()))
    .execute(db)
    .await?;
    Ok(token)
}

/// Who a presented token acts for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authenticated {
    /// The tenant it acts for.
    pub tenant_id: Uuid,
    /// The token's id (what `api-token:<id>` in evidence refers to).
    pub token_id: Uuid,
    /// When it stops working, if it expires: a caller that keeps the answer for a while
    /// must not keep it past this.
    pub expires_at: Option<DateTime<Utc>>,
}

/// Who a presented token's hash acts for, unless unknown, revoked or expired. Every call
/// reads the table, so a revocation or expiry holds from the next call on (the API keeps
/// answers for a bounded time: see `outbox_api`'s token cache). Marks the token used, at
/// most once a minute.
pub async fn authenticate(
    db: impl PgExecutor<'_>,
    hash: TokenHash,
) -> Result<Option<Authenticated>, StoreError> {
    let row = sqlx::query_as::<_, (Uuid, Uuid, Option<DateTime<Utc>>)>(
        "WITH valid AS ( \
             SELECT id, tenant_id, expires_at, last_used_at FROM api_tokens \
             WHERE token_hash = $1 AND revoked_at IS NULL \
               AND (expires_at IS NULL OR expires_at > now()) \
         ), touched AS ( \
             UPDATE api_tokens t SET last_used_at = now() FROM valid v \
             WHERE t.id = v.id \
               AND (v.last_used_at IS NULL OR v.last_used_at < now() - interval '1 minute') \
         ) \
         SELECT tenant_id, id, expires_at FROM valid",
    )
    .bind(hash.0.as_slice())
    .fetch_optional(db)
    .await?;
    Ok(row.map(|(tenant_id, token_id, expires_at)| Authenticated {
        tenant_id,
        token_id,
        expires_at,
    }))
}

/// A token as operators see it: never the token or its hash.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct TokenSummary {
    /// Its id (what `api-token:<id>` in evidence refers to).
    pub id: Uuid,
    /// Owning tenant's name.
    pub tenant: String,
    /// What it is for.
    pub label: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last authenticated a request (to within a minute), if ever.
    pub last_used_at: Option<DateTime<Utc>>,
    /// When it stops working, if it expires.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Lists tokens, of one tenant or of all, by tenant then creation.
pub async fn list(
    db: impl PgExecutor<'_>,
    tenant_id: Option<Uuid>,
) -> Result<Vec<TokenSummary>, StoreError> {
    Ok(sqlx::query_as::<_, TokenSummary>(
        "SELECT k.id, t.name AS tenant, k.label, k.created_at, k.last_used_at, k.expires_at, \
                k.revoked_at \
         FROM api_tokens k JOIN tenants t ON t.id = k.tenant_id \
         WHERE $1::uuid IS NULL OR k.tenant_id = $1 \
         ORDER BY t.name, k.created_at, k.id",
    )
    .bind(tenant_id)
    .fetch_all(db)
    .await?)
}

/// What revoking a token found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    /// Revoked now.
    Now,
    /// It had been revoked already, at this time.
    Already(DateTime<Utc>),
}

/// Revokes token `id`: from the next [`authenticate`] on it is refused.
pub async fn revoke(db: impl PgExecutor<'_>, id: Uuid) -> Result<Revoked, StoreError> {
    // `old` is the row as it was before this statement: it tells whether this call
    // revoked the token or found it revoked already.
    let row = sqlx::query_as::<_, (bool, DateTime<Utc>)>(
        "UPDATE api_tokens k SET revoked_at = coalesce(old.revoked_at, now()) \
         FROM api_tokens old WHERE k.id = $1 AND old.id = k.id \
         RETURNING old.revoked_at IS NULL, k.revoked_at",
    )
    .bind(id)
    .fetch_optional(db)
    .await?
    .ok_or_else(|| StoreError::Refused(format!("no token {id}")))?;
    Ok(if row.0 {
        Revoked::Now
    } else {
        Revoked::Already(row.1)
    })
}
