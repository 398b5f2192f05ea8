//! Upkeep of the live queue: `outbox` churns (every delivery updates its row, then
//! deletes it), so it collects two dead tuples per delivery, and the claim's index scan
//! slows as they pile up. Autovacuum clears them, but only as often as the server's
//! `autovacuum_naptime` lets it look (a minute by default), and not at all on a server
//! where it is off. Dispatchers therefore vacuum `outbox` themselves once its dead tuples
//! pass a threshold: a small table, vacuumed in milliseconds.
//!
//! `VACUUM` needs the table's owner (or a superuser); [`may_vacuum_queue`] says whether
//! this connection's role is one, so a dispatcher running as a lesser role leaves the
//! table to autovacuum instead of failing every time.

use sqlx::postgres::PgPoolOptions;
use sqlx::{ConnectOptions, PgExecutor, PgPool};

use crate::StoreError;

/// Whether this connection's role may vacuum `outbox`: it owns the table (directly or
/// through a role it belongs to) or is a superuser.
pub async fn may_vacuum_queue(db: impl PgExecutor<'_>) -> Result<bool, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT pg_has_role(current_user, c.relowner, 'USAGE') \
             OR (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = current_user) \
         FROM pg_class c WHERE c.oid = 'outbox'::regclass",
    )
    .fetch_one(db)
    .await?)
}

/// Dead tuples in `outbox`, as the server's statistics count them (published by each
/// backend within about a second).
pub async fn queue_dead_tuples(db: impl PgExecutor<'_>) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT coalesce(n_dead_tup, 0) FROM pg_stat_user_tables \
         WHERE relid = 'outbox'::regclass",
    )
    .fetch_optional(db)
    .await?
    .unwrap_or(0))
}

/// Vacuums `outbox`, unless another vacuum of it (autovacuum's, or another dispatcher's)
/// holds the table's vacuum lock: then it skips at once (`SKIP_LOCKED`) rather than
/// queue behind it, since that one is doing the work. Sent as a simple query, outside
/// any transaction, as `VACUUM` must be.
///
/// It runs on a connection of its own, opened from the pool's settings with sqlx's
/// statement logging off. sqlx reports every statement slower than a second at WARN, and
/// a vacuum of a table that churns may take that long as routine upkeep: an operator
/// should not read that as trouble. The caller reports the vacuum and its duration.
pub async fn vacuum_queue(pool: &PgPool) -> Result<(), StoreError> {
    let options = pool
        .connect_options()
        .as_ref()
        .clone()
        .disable_statement_logging();
    // A pool of one rather than a bare connection: a pool is an executor for any lifetime,
    // so the dispatcher can run this in a spawned task.
    let own = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await?;
    let vacuumed = sqlx::raw_sql("VACUUM (SKIP_LOCKED) outbox")
        .execute(&own)
        .await;
    // Closed whatever the vacuum did.
    own.close().await;
    vacuumed?;
    Ok(())
}
