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
//!
//! The attempts' time index: operators' statistics find recent attempt rows through a
//! BRIN index on `delivery_attempts.finished_at`, and a range of pages not yet summarized
//! is read whole by every such query. PostgreSQL's own `autosummarize` asks autovacuum to
//! summarize each range as it fills, but that request goes into a list of 256 for the
//! whole server, served once per `autovacuum_naptime`: at thousands of deliveries a
//! second the list overflows, every lost request is a line in the server's log, and the
//! ranges wait for the next vacuum. So the index has `autosummarize` off and dispatchers
//! summarize each filled range themselves ([`summarize_filled_attempt_ranges`]), which
//! needs the index's owner ([`may_summarize_attempt_ranges`]).

use sqlx::postgres::PgPoolOptions;
use sqlx::{ConnectOptions, PgExecutor, PgPool};

use crate::StoreError;

/// Whether this connection's role may vacuum `outbox`: it owns the table (directly or
/// through a role it belongs to) or is a superuser.
pub async fn may_vacuum_queue(db: impl PgExecutor<'_>) -> Result<bool, StoreError> {
    owns_or_is_superuser(db, "outbox").await
}

/// Whether this connection's role owns `relation` (directly or through a role it belongs
/// to) or is a superuser: what `VACUUM`, `gin_clean_pending_list` and
/// `brin_summarize_range` ask of it.
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

/// The BRIN index on the attempts' finish time, which [`summarize_filled_attempt_ranges`]
/// keeps summarized.
const ATTEMPT_TIME_INDEX: &str = "delivery_attempts_finished_brin";

/// The most page ranges one [`summarize_filled_attempt_ranges`] call looks at: summarizing
/// a range reads its pages (128 of them, 1 MB, by default), so one call reads at most
/// 32 MB of the table, well under the second after which sqlx reports a statement as slow.
const RANGES_PER_CALL: i64 = 32;

/// Whether this connection's role may summarize the attempts' time index
/// (`brin_summarize_range` asks for the index's owner).
pub async fn may_summarize_attempt_ranges(db: impl PgExecutor<'_>) -> Result<bool, StoreError> {
    owns_or_is_superuser(db, ATTEMPT_TIME_INDEX).await
}

/// What one [`summarize_filled_attempt_ranges`] call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangesSummarized {
    /// Ranges summarized by this call (a range summarized already is passed over).
    pub summarized: i64,
    /// The first block after the ranges this call looked at: where the next call starts.
    pub next_block: i64,
    /// Whether filled ranges remain past `next_block` (the call stopped at
    /// [`RANGES_PER_CALL`]).
    pub more: bool,
}

/// Summarizes the filled page ranges of `delivery_attempts` in the attempts' time index,
/// from the range holding `from_block` on, at most [`RANGES_PER_CALL`] of them. `None` when
/// another dispatcher is summarizing this moment (it does the work; this call waits for
/// nothing).
///
/// Only filled ranges: `brin_summarize_new_values` would summarize the table's last,
/// partial range too, and every later insert into a summarized range widens its summary,
/// a write to the index with its WAL record per delivery until the range fills. A range
/// left unsummarized costs an insert nothing, so the last range waits until it is full,
/// as `autosummarize` would have it. A range summarized already is a lookup in the
/// index's range map, so the caller may start from 0 (and does, once, at start); after
/// that it passes the returned `next_block`. Should the table shrink (a vacuum giving back
/// the pages that retention emptied), `next_block` comes back to its new end.
///
/// Locking: summarizing takes `SHARE UPDATE EXCLUSIVE` on the table, which inserts do
/// not wait for but a vacuum of it holds. Waiting behind an autovacuum for longer than
/// `deadlock_timeout` (a second by default) would make the server cancel that autovacuum
/// for us, so this call waits at most 50 ms for the lock and otherwise fails, to be tried
/// again on the caller's next turn.
pub async fn summarize_filled_attempt_ranges(
    pool: &PgPool,
    from_block: i64,
) -> Result<Option<RangesSummarized>, StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET LOCAL lock_timeout = '50ms'")
        .execute(&mut *tx)
        .await?;
    // One summarizer at a time, ended with the transaction: two would queue for the
    // table's lock, which conflicts with itself.
    let ours: bool = sqlx::query_scalar(
        "SELECT pg_try_advisory_xact_lock(hashtext('outbox.upkeep.attempt_ranges'))",
    )
    .fetch_one(&mut *tx)
    .await?;
    if !ours {
        return Ok(None);
    }
    let (summarized, next_block, filled_to): (i64, i64, i64) = sqlx::query_as(
        "WITH shape AS ( \
             SELECT coalesce((SELECT o.option_value::int8 FROM pg_options_to_table(c.reloptions) o \
                              WHERE o.option_name = 'pages_per_range'), 128) AS per_range, \
                    pg_relation_size('delivery_attempts') \
                        / current_setting('block_size')::int8 AS pages \
             FROM pg_class c WHERE c.oid = $1::regclass \
         ), span AS ( \
             SELECT per_range, \
                    $2 / per_range * per_range AS first_block, \
                    pages / per_range * per_range AS filled_to \
             FROM shape \
         ), upto AS ( \
             SELECT per_range, first_block, filled_to, \
                    least(filled_to, first_block + $3 * per_range) AS next_block \
             FROM span \
         ) \
         SELECT (SELECT coalesce(sum(brin_summarize_range($1::regclass, block)), 0)::int8 \
                 FROM generate_series(first_block, next_block - 1, per_range) block), \
                next_block, filled_to \
         FROM upto",
    )
    .bind(ATTEMPT_TIME_INDEX)
    .bind(from_block.max(0))
    .bind(RANGES_PER_CALL)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(RangesSummarized {
        summarized,
        next_block,
        more: next_block < filled_to,
    }))
}
