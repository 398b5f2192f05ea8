//! The operator console's accounts and sign-in sessions. Accounts are not tenants: an
//! account acts across tenants within its grant (`tenant_ids`, or every tenant). Only a
//! password's argon2 hash and a session's SHA-256 are stored; hashing is the caller's.

use chrono::{DateTime, Utc};
use outbox_core::OperatorRole;
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
    /// What it may do.
    pub role: OperatorRole,
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
    role: OperatorRole,
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

/// The tenants an account is limited to (`None`: every tenant, or no such account).
pub async fn tenant_ids(
    db: impl PgExecutor<'_>,
    account_id: Uuid,
) -> Result<Option<Vec<Uuid>>, StoreError> {
    Ok(sqlx::query_scalar::<_, Option<Vec<Uuid>>>(
        "SELECT tenant_ids FROM operator_accounts WHERE id = $1",
    )
    .bind(account_id)
    .fetch_optional(db)
    .await?
    .flatten())
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

/// How failed sign-ins are limited: at most `per_name` for one account name and
/// `per_address` from one client address within `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignInLimits {
    /// How long a failure counts.
    pub window: std::time::Duration,
    /// Failures one account name may have within the window.
    pub per_name: i64,
    /// Failures one client address may have within the window (higher: several operators
    /// may share an address behind a NAT or a proxy).
    pub per_address: i64,
}

/// Whether a sign-in may go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignInTurn {
    /// Check the password; the attempt already counts as a failure until
    /// [`sign_in_succeeded`] says otherwise.
    Go,
    /// Too many failures: do not check the password; try again after this many seconds.
    Refused {
        /// Seconds until the oldest counted failure stops counting.
        retry_after_secs: i64,
        /// Whether the address has had its limit (not only the name).
        address_limited: bool,
    },
}

/// Starts a sign-in as `name` (as typed: the count does not depend on whether such an
/// account exists) from `address` (counted under its [`address_key`]): refused when the
/// name or the address has had its limit of failures within the window; otherwise the
/// attempt is recorded as a failure at once, before the password is checked, so that
/// many guesses sent together are all counted. Failures older than the window are removed on the way.
///
/// Locking: a transaction-level advisory lock on the name, then on the address (always
/// in that order), so two attempts for the same name or address count one after the
/// other.
pub async fn begin_sign_in(
    pool: &sqlx::PgPool,
    name: &str,
    address: Option<std::net::IpAddr>,
    limits: SignInLimits,
) -> Result<SignInTurn, StoreError> {
    let address = address.map(address_key);
    let window_secs = limits.window.as_secs_f64();
    let mut tx = pool.begin().await?;
    sqlx::query(
        "SELECT pg_advisory_xact_lock(1, hashtext($1)), \
                pg_advisory_xact_lock(2, hashtext(COALESCE($2, '')))",
    )
    .bind(name)
    .bind(&address)
    .execute(&mut *tx)
    .await?;
    let (by_name, by_address, retry_after_secs): (i64, i64, i64) = sqlx::query_as(
        "WITH pruned AS ( \
             DELETE FROM console_sign_in_failures \
             WHERE at < now() - make_interval(secs => $3) \
         ), counted AS ( \
             SELECT count(*) FILTER (WHERE account_name = $1) AS by_name, \
                    count(*) FILTER (WHERE client_addr = $2::inet) AS by_address, \
                    min(at) FILTER (WHERE account_name = $1) AS oldest_by_name, \
                    min(at) FILTER (WHERE client_addr = $2::inet) AS oldest_by_address \
             FROM console_sign_in_failures \
             WHERE at >= now() - make_interval(secs => $3) \
               AND (account_name = $1 OR client_addr = $2::inet) \
         ) \
         SELECT by_name, by_address, \
                ceil(extract(epoch FROM GREATEST( \
                    CASE WHEN by_name >= $4 THEN oldest_by_name END, \
                    CASE WHEN by_address >= $5 THEN oldest_by_address END) \
                    + make_interval(secs => $3) - now()))::int8 \
         FROM counted",
    )
    .bind(name)
    .bind(&address)
    .bind(window_secs)
    .bind(limits.per_name)
    .bind(limits.per_address)
    .fetch_one(&mut *tx)
    .await
    .map(|(n, a, r): (i64, i64, Option<i64>)| (n, a, r.unwrap_or(0)))?;
    if by_name >= limits.per_name || by_address >= limits.per_address {
        tx.commit().await?;
        return Ok(SignInTurn::Refused {
            retry_after_secs: retry_after_secs.max(1),
            address_limited: by_address >= limits.per_address,
        });
    }
    sqlx::query(
        "INSERT INTO console_sign_in_failures (account_name, client_addr) VALUES ($1, $2::inet)",
    )
    .bind(name)
    .bind(&address)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(SignInTurn::Go)
}

/// What failures from `address` are counted under: an IPv4 address itself, and an IPv6
/// address's /64 (`2001:db8:1:2::/64`), because one IPv6 client is given a whole /64 and
/// could otherwise draw a fresh limit for every guess. An IPv4 address written as IPv6
/// (`::ffff:192.0.2.1`, a dual-stack listener's view of an IPv4 client) is that IPv4
/// address. The same [`outbox_core::client_key::ClientKey`] the server's per-address connection
/// cap counts by; its text is an `inet` value.
pub fn address_key(address: std::net::IpAddr) -> String {
    outbox_core::client_key::ClientKey::of(address).to_string()
}

/// A sign-in as `name` succeeded: the name's failures (this attempt's too) no longer
/// count. The address's failures under other names still do.
pub async fn sign_in_succeeded(db: impl PgExecutor<'_>, name: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM console_sign_in_failures WHERE account_name = $1")
        .bind(name)
        .execute(db)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn key(address: &str) -> String {
        address_key(address.parse::<IpAddr>().expect("an address"))
    }

    #[test]
    fn ipv4_clients_are_counted_per_address() {
        assert_eq!(key("192.0.2.1"), "192.0.2.1");
        assert_ne!(key("192.0.2.1"), key("192.0.2.2"));
        assert_eq!(key("127.0.0.1"), "127.0.0.1");
    }

    #[test]
    fn ipv6_clients_are_counted_per_64() {
        assert_eq!(key("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::/64");
        assert_eq!(
            key("2001:db8:1:2::1"),
            key("2001:db8:1:2:ffff:ffff:ffff:ffff")
        );
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::1"), "::/64");
    }

    #[test]
    fn ipv4_mapped_clients_are_their_ipv4_address() {
        assert_eq!(key("::ffff:192.0.2.1"), "192.0.2.1");
        assert_eq!(key("::ffff:192.0.2.1"), key("192.0.2.1"));
        assert_ne!(key("::ffff:192.0.2.1"), key("::ffff:192.0.2.2"));
    }
}
