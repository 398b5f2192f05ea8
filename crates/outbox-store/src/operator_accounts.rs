//! The operator console's accounts and sign-in sessions. Accounts are not tenants: an
//! account acts across tenants within its grant (`tenant_ids`, or every tenant). Only a
//! password's argon2 hash and a session's SHA-256 are stored; hashing is the caller's.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::StoreError;

/// An account as the console acts for it.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct Account {
    /// Its id.
    pub id: Uuid,
    /// Its unique name: the operator's name in the evidence.
    pub name: String,
    /// `viewer` or `operator`.
    pub role: String,
    /// The tenants it may see and act on; `None`: every tenant.
    pub tenant_ids: Option<Vec<Uuid>>,
    /// Those tenants' names (empty for every tenant).
    pub tenant_names: Vec<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

/// A signed-in session: its account and the session's form token.
#[derive(Debug, Clone)]
pub struct Session {
    /// Who is signed in.
    pub account: Account,
    /// The token every form of this session carries.
    pub csrf_token: String,
}

const ACCOUNT_COLUMNS: &str = "o.id, o.name, o.role, o.tenant_ids, \
     ARRAY(SELECT t.name FROM tenants t WHERE t.id = ANY(o.tenant_ids) ORDER BY t.name) \
         AS tenant_names, \
     o.created_at";

/// Creates an account; its name must be unused.
pub async fn create(
    db: impl PgExecutor<'_>,
    name: &str,
    role: &str,
    tenant_ids: Option<&[Uuid]>,
    password_hash: &str,
) -> Result<Uuid, StoreError> {
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO operator_accounts (id, name, role, tenant_ids, password_hash) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(id)
    .bind(name)
    .bind(role)
    .bind(tenant_ids)
    .bind(password_hash)
    .execute(db)
    .await
    .map_err(|err| {
        if StoreError::is_unique_violation(&err) {
            StoreError::AlreadyExists {
                what: "operator",
                name: name.to_owned(),
            }
        } else {
            StoreError::Database(err)
        }
    })?;
    Ok(id)
}

/// Every account, by name.
pub async fn list(db: impl PgExecutor<'_>) -> Result<Vec<Account>, StoreError> {
    Ok(sqlx::query_as::<_, Account>(&format!(
        "SELECT {ACCOUNT_COLUMNS} FROM operator_accounts o ORDER BY o.name"
    ))
    .fetch_all(db)
    .await?)
}

/// Removes an account and, with it, its sessions. Returns `false` when there is none.
pub async fn remove(db: impl PgExecutor<'_>, name: &str) -> Result<bool, StoreError> {
    let removed = sqlx::query("DELETE FROM operator_accounts WHERE name = $1")
        .bind(name)
        .execute(db)
        .await?;
    Ok(removed.rows_affected() == 1)
}

/// An account's id and stored password hash, for signing in.
pub async fn password_hash(
    db: impl PgExecutor<'_>,
    name: &str,
) -> Result<Option<(Uuid, String)>, StoreError> {
    Ok(sqlx::query_as::<_, (Uuid, String)>(
        "SELECT id, password_hash FROM operator_accounts WHERE name = $1",
    )
    .bind(name)
    .fetch_optional(db)
    .await?)
}

/// Opens a session for `account_id`, valid for `lifetime`; expired sessions are removed
/// on the way.
pub async fn open_session(
    db: impl PgExecutor<'_>,
    id_sha256: &[u8],
    account_id: Uuid,
    csrf_token: &str,
    lifetime: std::time::Duration,
) -> Result<(), StoreError> {
    sqlx::query(
        "WITH expired AS (DELETE FROM console_sessions WHERE expires_at < now()) \
         INSERT INTO console_sessions (id_sha256, account_id, csrf_token, expires_at) \
         VALUES ($1, $2, $3, now() + make_interval(secs => $4))",
    )
    .bind(id_sha256)
    .bind(account_id)
    .bind(csrf_token)
    .bind(lifetime.as_secs_f64())
    .execute(db)
    .await?;
    Ok(())
}

#[derive(sqlx::FromRow)]
struct SessionRow {
    #[sqlx(flatten)]
    account: Account,
    csrf_token: String,
}

/// The live session whose id hashes to `id_sha256`, if any (expired ones are not).
pub async fn session(
    db: impl PgExecutor<'_>,
    id_sha256: &[u8],
) -> Result<Option<Session>, StoreError> {
    let row = sqlx::query_as::<_, SessionRow>(&format!(
        "SELECT {ACCOUNT_COLUMNS}, s.csrf_token \
         FROM console_sessions s JOIN operator_accounts o ON o.id = s.account_id \
         WHERE s.id_sha256 = $1 AND s.expires_at > now()"
    ))
    .bind(id_sha256)
    .fetch_optional(db)
    .await?;
    Ok(row.map(|row| Session {
        account: row.account,
        csrf_token: row.csrf_token,
    }))
}

/// Ends a session (signing out).
pub async fn close_session(db: impl PgExecutor<'_>, id_sha256: &[u8]) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM console_sessions WHERE id_sha256 = $1")
        .bind(id_sha256)
        .execute(db)
        .await?;
    Ok(())
}
