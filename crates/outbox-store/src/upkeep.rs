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
//!
//! The subject index's pending list: the console's subject search is a GIN trigram index
//! on `alerts.subject` (`alerts_subject_trgm_idx`). GIN adds new entries to a pending list
//! and merges that list into the index once it passes `gin_pending_list_limit` (4 MB by
//! default), and the merge runs inside whichever statement crossed the limit: an approval
//! of a few dozen alerts that should take 10 ms then takes 40 to 60 ms, every few
//! thousand alerts. [`clean_subject_index`] merges the list from a dispatcher instead,
//! often enough that approvals seldom cross the limit; the work is the same, but no
//! approval waits for it. It needs the index's owner too ([`may_clean_subject_index`]).

use sqlx::postgres::PgPoolOptions;
use sqlx::{ConnectOptions, PgExecutor, PgPool};

use crate::StoreError;

/// Whether this connection's role may vacuum `outbox`: it owns the table (directly or
/// through a role it belongs to) or is a superuser.
pub async fn may_vacuum_queue(db: impl PgExecutor<'_>) -> Result<bool, StoreError> {
    owns_or_is_superuser(db, "outbox").await
}

/// Whether this connection's role owns `relation` (directly or through a role it belongs
/// to) or is a superuser: what `VACUUM` and `gin_clean_pending_list` ask of it.
async fn owns_or_is_superuser(db: impl PgExecutor<'_>, relation: &str) -> Result<bool, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT pg_has_role(current_user, c.relowner, 'USAGE') \
             OR (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = current_user) \
         FROM pg_class c WHERE c.oid = $1::regclass",
    )
    .bind(relation)
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
/// It leaves the table's empty pages at its end in place (`TRUNCATE false`): giving them
/// back takes the table's `ACCESS EXCLUSIVE` lock, which stops every claim, completion
/// and approval meanwhile (6 to 14 ms waits in `bench run --only approvals`), and which a
/// hot standby replays, cancelling its readers; the next rows fill those pages anyway.
/// Autovacuum, far rarer, still gives them back.
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
    let vacuumed = sqlx::raw_sql("VACUUM (SKIP_LOCKED, TRUNCATE false) outbox")
        .execute(&own)
        .await;
    // Closed whatever the vacuum did.
    own.close().await;
    vacuumed?;
    Ok(())
}

/// Whether this connection's role may merge the subject index's pending list
/// (`gin_clean_pending_list` asks for the index's owner).
pub async fn may_clean_subject_index(db: impl PgExecutor<'_>) -> Result<bool, StoreError> {
    owns_or_is_superuser(db, "alerts_subject_trgm_idx").await
}

/// Merges the subject index's pending list into the index, unless another dispatcher is
/// doing so this moment (then it returns at once rather than wait for that one's lock on
/// the list). Returns the pending pages merged: 0 when the list was empty or another had
/// it.
pub async fn clean_subject_index(db: impl PgExecutor<'_>) -> Result<i64, StoreError> {
    // One statement, one transaction: the advisory lock ends with it. CASE evaluates its
    // condition first, so only the lock's holder calls the merge.
    Ok(sqlx::query_scalar(
        "SELECT CASE WHEN pg_try_advisory_xact_lock(hashtext('outbox.upkeep.subject_index')) \
                     THEN gin_clean_pending_list('alerts_subject_trgm_idx'::regclass) \
                     ELSE 0 END",
    )
    .fetch_one(db)
    .await?)
}
