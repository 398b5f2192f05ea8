//! The benchmark's own statements, besides the product's: server counters (commits, WAL
//! position, dead tuples), queue samples, a synthetic history of settled alerts, the claim
//! timed on its own, a synthetic backlog of ordered lanes with the claim's plan over it,
//! what an ordered drain left (lane positions, attempt times), a reset of the
//! `public` schema, and the queue copy of `bench hot-claim` (`hot_claim`). They live here, not in
//! `outbox-store`, so that no product binary can link them: a feature of the store would
//! be unified into every binary built alongside the benchmark. They spell no state, kind
//! or outcome and restate no predicate of the store's: those come from the store
//! (`sql_names`, `dispatch::due_status`) as literals where an index needs a constant, else
//! as bound values (the `store_names` test holds this).

use chrono::{DateTime, Utc};
use outbox_core::{AlertState, AttemptKind, AttemptOutcome, LiveStatus};
use sqlx::{PgExecutor, PgPool};
use std::time::{Duration, Instant};
use uuid::Uuid;

use outbox_store::dispatch::due_status;
use outbox_store::sql_names::SqlName;
use outbox_store::StoreError;

pub mod hot_claim;

/// Empties the connected database's `public` schema, so that the benchmark can migrate it
/// from scratch. Only for a database given to the benchmark.
pub async fn reset_public_schema(pool: &PgPool) -> Result<(), StoreError> {
    sqlx::query("DROP SCHEMA IF EXISTS public CASCADE")
        .execute(pool)
        .await?;
    sqlx::query("CREATE SCHEMA public").execute(pool).await?;
    Ok(())
}

/// Server-wide counters read before and after a timed phase.
#[derive(Debug, Clone)]
pub struct ServerCounters {
    /// Committed transactions of the current database (`pg_stat_database.xact_commit`).
    pub commits: i64,
    /// WAL position, in bytes.
    pub wal_lsn: i64,
}

/// Reads [`ServerCounters`] (each call is its own transaction, so it sees fresh figures).
pub async fn server_counters(db: impl PgExecutor<'_>) -> Result<ServerCounters, StoreError> {
    let (commits, wal_lsn): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()), \
                pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8",
    )
    .fetch_one(db)
    .await?;
    Ok(ServerCounters { commits, wal_lsn })
}

/// The tables a delivery can write, whose row counters a drain reports (a table this
/// schema does not have reads as zeros). `alert_lanes` is written when a delivery to an
/// ordered destination releases the last alert of its lane (the tail is cleared).
pub const DELIVERY_TABLES: [&str; 6] = [
    "outbox",
    "alerts",
    "alert_outcomes",
    "delivery_attempts",
    "alert_events",
    "alert_lanes",
];

/// One table's cumulative row counters, as `pg_stat_user_tables` reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowCounters {
    /// Rows inserted (`n_tup_ins`).
    pub inserted: i64,
    /// Rows updated, HOT updates included (`n_tup_upd`).
    pub updated: i64,
    /// Of those, HOT updates: no new index entries (`n_tup_hot_upd`).
    pub hot_updated: i64,
    /// Rows deleted (`n_tup_del`).
    pub deleted: i64,
}

/// Reads the row counters of `tables` in the connected database, in the order given.
/// Backends publish these counters lazily (when a transaction ends at least a second
/// after their last report, when they go idle for a second, and when they exit), so a
/// caller that wants every write of a finished phase reads until the figures stop moving.
pub async fn row_counters(
    db: impl PgExecutor<'_>,
    tables: &[&str],
) -> Result<Vec<RowCounters>, StoreError> {
    let rows: Vec<(i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT COALESCE(s.n_tup_ins, 0), COALESCE(s.n_tup_upd, 0), \
                COALESCE(s.n_tup_hot_upd, 0), COALESCE(s.n_tup_del, 0) \
         FROM unnest($1::text[]) WITH ORDINALITY AS t(name, n) \
         LEFT JOIN pg_stat_user_tables s \
             ON s.relname = t.name AND s.schemaname = current_schema() \
         ORDER BY t.n",
    )
    .bind(tables)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(inserted, updated, hot_updated, deleted)| RowCounters {
            inserted,
            updated,
            hot_updated,
            deleted,
        })
        .collect())
}

/// Makes `pg_walinspect` available in the connected database (the benchmark's own), for
/// [`database_wal`]. `false` when the server does not ship it.
pub async fn enable_wal_inspection(db: impl PgExecutor<'_>) -> bool {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        .execute(db)
        .await
        .is_ok()
}

/// Keeps the server's WAL from the current position on until [`release_wal`] (or until
/// `conn`'s session ends), with a temporary physical replication slot named after the
/// connected database, so that [`database_wal`] can still read it: on a busy
/// server, checkpoints recycle segments within a drain. `false` when no slot could be made.
pub async fn reserve_wal(conn: &mut sqlx::PgConnection) -> bool {
    sqlx::query(
        "SELECT pg_create_physical_replication_slot(current_database() || '_wal', true, true)",
    )
    .execute(conn)
    .await
    .is_ok()
}

/// Drops the slot [`reserve_wal`] made on `conn`.
pub async fn release_wal(conn: &mut sqlx::PgConnection) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_drop_replication_slot(current_database() || '_wal')")
        .execute(conn)
        .await?;
    Ok(())
}

/// One kind of WAL record over a stretch of WAL: its resource manager and type
/// (`Heap/UPDATE`) and the relation its first block belongs to (`outbox_due_idx`; `-`
/// for records without one, such as commits).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct WalShare {
    /// `resource manager/record type`.
    pub record: String,
    /// The relation of the record's first block, by name in the connected database.
    pub relation: String,
    /// Records.
    pub records: i64,
    /// Their bytes, full-page images included.
    pub bytes: i64,
    /// Of those, full-page images.
    pub fpi_bytes: i64,
}

/// The WAL between two positions that belongs to the connected database, by kind of
/// record and relation, most bytes first: every record that touches one of its relations
/// (full-page images included), and the other records (commits) of the transactions that
/// wrote those. Their sum is the database's WAL over the stretch; the cluster-wide WAL
/// position also counts what other databases on the server write meanwhile, this does not.
pub async fn database_wal(
    db: impl PgExecutor<'_>,
    from_lsn: i64,
    to_lsn: i64,
) -> Result<Vec<WalShare>, StoreError> {
    Ok(sqlx::query_as(
        "WITH records AS ( \
             SELECT xid, resource_manager || '/' || record_type AS record, record_length, \
                    fpi_length, \
                    substring(block_ref FROM 'rel \\d+/\\d+/(\\d+)')::oid AS relfilenode, \
                    block_ref LIKE '%/' || (SELECT oid FROM pg_database \
                                            WHERE datname = current_database()) || '/%' AS ours \
             FROM pg_get_wal_records_info('0/0'::pg_lsn + $1::numeric, '0/0'::pg_lsn + $2::numeric) \
         ), writers AS ( \
             SELECT DISTINCT xid FROM records WHERE ours AND NOT xid = '0'::xid \
         ) \
         SELECT r.record, COALESCE(c.relname::text, '-') AS relation, count(*) AS records, \
                sum(r.record_length)::int8 AS bytes, sum(r.fpi_length)::int8 AS fpi_bytes \
         FROM records r \
         LEFT JOIN pg_class c ON r.ours AND c.relfilenode = r.relfilenode AND c.relfilenode <> 0 \
         WHERE r.ours OR r.xid IN (SELECT xid FROM writers) \
         GROUP BY 1, 2 \
         ORDER BY bytes DESC, 1, 2",
    )
    .bind(from_lsn)
    .bind(to_lsn)
    .fetch_all(db)
    .await?)
}

/// The server settings a benchmark report names: version, `synchronous_commit`,
/// `shared_buffers`.
pub async fn server_settings(db: impl PgExecutor<'_>) -> Result<Vec<(String, String)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT name, setting FROM pg_settings \
         WHERE name IN ('server_version', 'synchronous_commit', 'shared_buffers', 'max_connections') \
         ORDER BY name",
    )
    .fetch_all(db)
    .await?)
}

/// `VACUUM ANALYZE` of the queue, lane and history tables, as after a bulk load.
pub async fn vacuum_analyze(pool: &PgPool) -> Result<(), StoreError> {
    sqlx::query(
        "VACUUM ANALYZE outbox, alerts, alert_outcomes, alert_events, delivery_attempts, \
         alert_lanes",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// One sample of the live queue during a drain.
#[derive(Debug, Clone, Copy)]
pub struct QueueSample {
    /// Rows in `sending` (claimed and not yet recorded).
    pub sending: i64,
    /// Dead tuples in `outbox`, as the statistics collector last reported them.
    pub outbox_dead_tuples: i64,
}

/// Samples the live queue: served by the partial lease index, so it stays cheap.
pub async fn queue_sample(db: impl PgExecutor<'_>) -> Result<QueueSample, StoreError> {
    let (sending, dead): (i64, i64) = sqlx::query_as(&format!(
        "SELECT (SELECT count(*) FROM outbox WHERE status = {sending}), \
                COALESCE((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'outbox'), 0)",
        sending = LiveStatus::Sending.sql(),
    ))
    .fetch_one(db)
    .await?;
    Ok(QueueSample {
        sending,
        outbox_dead_tuples: dead,
    })
}

/// Whether the live outbox is empty. Asked through the three partial indexes (due rows,
/// rows waiting in an ordered lane, leased rows), so that polling it during a drain does
/// not scan the table.
pub async fn queue_empty(db: impl PgExecutor<'_>) -> Result<bool, StoreError> {
    Ok(sqlx::query_scalar(&format!(
        "SELECT NOT EXISTS (SELECT 1 FROM outbox WHERE {due}) \
            AND NOT EXISTS (SELECT 1 FROM outbox WHERE lane_after IS NOT NULL) \
            AND NOT EXISTS (SELECT 1 FROM outbox WHERE status = {sending})",
        due = due_status("outbox"),
        sending = LiveStatus::Sending.sql(),
    ))
    .fetch_one(db)
    .await?)
}

/// What a drain left behind, counted from the tables.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct DrainEvidence {
    /// Alerts settled `accepted`.
    pub accepted: i64,
    /// Alerts in any other state.
    pub not_accepted: i64,
    /// Send attempts recorded.
    pub attempt_rows: i64,
    /// Evidence lines recorded.
    pub evidence_lines: i64,
}

/// Counts what a drain recorded.
pub async fn drain_evidence(db: impl PgExecutor<'_>) -> Result<DrainEvidence, StoreError> {
    let (accepted, not_accepted, attempt_rows, evidence_lines): (i64, i64, i64, i64) =
        sqlx::query_as(
            "SELECT count(*) FILTER (WHERE s.state = $1), \
                    count(*) FILTER (WHERE s.state IS DISTINCT FROM $1), \
                    (SELECT count(*) FROM delivery_attempts), \
                    (SELECT count(*) FROM alert_evidence) \
             FROM alert_states s",
        )
        .bind(AlertState::Accepted)
        .fetch_one(db)
        .await?;
    Ok(DrainEvidence {
        accepted,
        not_accepted,
        attempt_rows,
        evidence_lines,
    })
}

/// When each of the given alerts was approved, and when its first send started (the
/// claim's clock), to measure approval-to-acceptance latency and the part of it spent
/// before a dispatcher claimed the alert.
pub async fn approved_and_claimed_at(
    db: impl PgExecutor<'_>,
    ids: &[Uuid],
) -> Result<Vec<(Uuid, DateTime<Utc>, Option<DateTime<Utc>>)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT a.id, a.created_at, \
                (SELECT min(da.started_at) FROM delivery_attempts da \
                 WHERE da.alert_id = a.id AND da.kind = $2) \
         FROM alerts a WHERE a.id = ANY($1::uuid[])",
    )
    .bind(ids)
    .bind(AttemptKind::Send)
    .fetch_all(db)
    .await?)
}

/// Adds `count` alerts settled `accepted` some days ago, each with the attempt row that
/// accepted it (carrying its evidence line; a dispatcher's acceptance writes no outcome
/// row), in one statement: a history as a long-running system accumulates. Ids
/// are time-ordered like the product's own (UUIDv7 layout: milliseconds first).
pub async fn seed_history(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    destination_id: Uuid,
    from: i64,
    count: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "WITH made AS ( \
             SELECT i, \
                    now() - interval '40 days' + i * interval '1 millisecond' AS at, \
                    jsonb_build_object('alert_id', 'history-' || i, 'severity', 'warning', \
                        'title', 'renewal due for contract ' || i, \
                        'note', repeat('x', 400))::text AS payload \
             FROM generate_series($3::int8, $3::int8 + $4::int8 - 1) AS i \
         ), alerted AS ( \
             INSERT INTO alerts (id, tenant_id, subject, occurrence, destination_id, revision, \
                 payload, payload_sha256, created_at, created_by) \
             SELECT (lpad(to_hex((extract(epoch FROM at) * 1000)::int8), 12, '0') \
                        || '7' || substr(md5(i::text), 1, 3) || '8' || substr(md5(i::text), 4, 15))::uuid, \
                    $1, 'history:' || i, 'due', $2, 0, payload, \
                    sha256(convert_to(payload, 'UTF8')), at, 'benchmark' \
             FROM made \
             RETURNING id, payload_sha256, created_at \
         ) \
         INSERT INTO delivery_attempts (alert_id, attempt, kind, worker, fencing_token, \
             started_at, finished_at, idempotency_key, payload_sha256, outcome, http_status, \
             destination_reference, to_state, line) \
         SELECT id, 1, $5, 'benchmark', 0, created_at, created_at + interval '5 milliseconds', \
                id::text, payload_sha256, $6, 200, 'r-history', $7, \
                'attempt 1 accepted by the destination (HTTP 200)' \
         FROM alerted",
    )
    .bind(tenant_id)
    .bind(destination_id)
    .bind(from)
    .bind(count)
    .bind(AttemptKind::Send)
    .bind(AttemptOutcome::Accepted)
    .bind(AlertState::Accepted)
    .execute(db)
    .await?;
    Ok(())
}

/// Times `rounds` claims of `batch` rows each, every one rolled back so the queue stays
/// as it was: the claim statement's own cost (lease, fencing token, "attempt started"
/// lines, payload read), without sending. Returns the time of each round.
pub async fn time_claims(
    pool: &PgPool,
    batch: i64,
    rounds: usize,
) -> Result<Vec<Duration>, StoreError> {
    let mut took = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let mut tx = pool.begin().await?;
        let started = Instant::now();
        let claimed = outbox_store::dispatch::claim_on(
            &mut tx,
            "benchmark",
            batch,
            Duration::from_secs(60),
            &[],
        )
        .await?;
        took.push(started.elapsed());
        if claimed.len() as i64 != batch {
            return Err(StoreError::Refused(format!(
                "claimed {} rows of {batch}: the queue is too short for this measurement",
                claimed.len()
            )));
        }
        tx.rollback().await?;
    }
    Ok(took)
}

/// Live and dead tuples of one table, as the statistics collector last reported them.
#[derive(Debug, Clone, serde::Serialize, sqlx::FromRow)]
pub struct TableTuples {
    /// The table.
    pub table: String,
    /// `n_live_tup`.
    pub live: i64,
    /// `n_dead_tup`.
    pub dead: i64,
}

/// Live and dead tuples of every table that has been written to (inserts, updates or
/// deletes since the statistics were reset): the hot tables, read from the catalogue
/// itself so that a table added by a migration is reported without a list to keep.
pub async fn written_tables(db: impl PgExecutor<'_>) -> Result<Vec<TableTuples>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT relname::text AS table, n_live_tup AS live, n_dead_tup AS dead \
         FROM pg_stat_user_tables \
         WHERE schemaname = 'public' AND n_tup_ins + n_tup_upd + n_tup_del > 0 \
           AND relname <> '_sqlx_migrations' \
         ORDER BY relname",
    )
    .fetch_all(db)
    .await?)
}

/// Approval-to-acceptance latency of the sends accepted since attempt row `after_id`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AcceptedSince {
    /// The newest attempt row read (the next call's `after_id`).
    pub last_id: i64,
    /// Sends accepted.
    pub accepted: i64,
    /// Median, ms (nearest rank).
    pub p50_ms: f64,
    /// 99th percentile, ms (nearest rank).
    pub p99_ms: f64,
}

/// Latencies of the sends accepted since attempt row `after_id`, from the alert's approval
/// to the end of the accepted attempt (the destination's 2xx). Attempt ids grow, so an
/// interval counts only its own rows. Nothing indexes `id` alone (the key is
/// `(alert_id, id)`, which is how every product reader finds attempts), so each call reads
/// the attempts table through once: a few hundred milliseconds of one core per interval
/// at half a million rows, small beside the interval, and counted in the run's figures.
pub async fn accepted_since(
    db: impl PgExecutor<'_>,
    after_id: i64,
) -> Result<AcceptedSince, StoreError> {
    let (last_id, accepted, p50_ms, p99_ms): (i64, i64, Option<f64>, Option<f64>) =
        sqlx::query_as(
            "WITH fresh AS ( \
                 SELECT da.id, extract(epoch FROM da.finished_at - a.created_at)::float8 * 1000 AS ms \
                 FROM delivery_attempts da JOIN alerts a ON a.id = da.alert_id \
                 WHERE da.id > $1 AND da.kind = $2 AND da.outcome = $3 \
             ) \
             SELECT coalesce(max(id), $1), count(*), \
                    percentile_disc(0.5) WITHIN GROUP (ORDER BY ms), \
                    percentile_disc(0.99) WITHIN GROUP (ORDER BY ms) \
             FROM fresh",
        )
        .bind(after_id)
        .bind(AttemptKind::Send)
        .bind(AttemptOutcome::Accepted)
        .fetch_one(db)
        .await?;
    Ok(AcceptedSince {
        last_id,
        accepted,
        p50_ms: p50_ms.unwrap_or_default(),
        p99_ms: p99_ms.unwrap_or_default(),
    })
}

/// The lane position (`lane_seq`) of each of the given alerts (`None` for an alert in no
/// lane), in no particular order.
pub async fn lane_positions(
    db: impl PgExecutor<'_>,
    ids: &[Uuid],
) -> Result<Vec<(Uuid, Option<i64>)>, StoreError> {
    Ok(
        sqlx::query_as("SELECT id, lane_seq FROM alerts WHERE id = ANY($1::uuid[])")
            .bind(ids)
            .fetch_all(db)
            .await?,
    )
}

/// The first send attempt of each of the given alerts: when the dispatcher started it
/// (its clock) and when its outcome was recorded (the completion's transaction), in no
/// particular order.
pub async fn send_times(
    db: impl PgExecutor<'_>,
    ids: &[Uuid],
) -> Result<Vec<(Uuid, DateTime<Utc>, DateTime<Utc>)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT alert_id, started_at, finished_at FROM delivery_attempts \
         WHERE alert_id = ANY($1::uuid[]) AND kind = $2 AND attempt = 1",
    )
    .bind(ids)
    .bind(AttemptKind::Send)
    .fetch_all(db)
    .await?)
}

/// The id of synthetic lane alert number `i` (an SQL expression of `int8`s), approved at
/// epoch millisecond `epoch_ms + i` (`epoch_ms` another expression): UUIDv7's layout,
/// milliseconds first, as the product's own ids, so that an alert's id can be computed
/// from its number alone and its lane successor can name it.
fn lane_alert_id(i: &str, epoch_ms: &str) -> String {
    format!(
        "(lpad(to_hex({epoch_ms} + ({i})), 12, '0') || '7' || substr(md5(({i})::text), 1, 3) \
         || '8' || substr(md5(({i})::text), 4, 15))::uuid"
    )
}

/// Adds alerts `from..from + count` of a synthetic backlog for `destination_id`, all
/// pending and due, spread over `keys` subjects (alert `i` is about subject
/// `lane:{i % keys}`), approved one millisecond apart from `epoch_ms` on, in one
/// statement: the alerts and their outbox rows as an approval writes them (not their
/// `alert_events` lines, which the claim never reads). With `ordered`, the backlog is in
/// ordered lanes, as approvals to a destination that orders per key leave it: alert `i`
/// is number `i / keys + 1` of its lane, and every alert but a lane's first waits behind
/// the one before it (`outbox.lane_after`), so only `keys` rows are due. The lanes' own
/// rows are [`seed_lane_rows`].
#[allow(clippy::too_many_arguments)] // one statement's parameters, named
pub async fn seed_lane_backlog(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    destination_id: Uuid,
    from: i64,
    count: i64,
    keys: i64,
    epoch_ms: i64,
    ordered: bool,
) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "WITH made AS ( \
             SELECT i, i % $4::int8 AS k, i / $4::int8 AS place, \
                    to_timestamp(($5::int8 + i) / 1000.0) AS at \
             FROM generate_series($3::int8, $3::int8 + $6::int8 - 1) AS i \
         ), alerted AS ( \
             INSERT INTO alerts (id, tenant_id, subject, occurrence, destination_id, revision, \
                 payload, payload_sha256, created_at, created_by, lane_seq) \
             SELECT {id}, $1, 'lane:' || k, lpad(i::text, 12, '0'), $2, 0, p.payload, \
                    sha256(convert_to(p.payload, 'UTF8')), at, 'benchmark', \
                    CASE WHEN $7 THEN place + 1 END \
             FROM made, LATERAL (SELECT jsonb_build_object('alert_id', 'lane-' || i, \
                 'severity', 'warning', 'title', 'lane ' || k || ' alert ' || place, \
                 'note', repeat('x', 400))::text AS payload) p \
         ) \
         INSERT INTO outbox (alert_id, destination_id, next_attempt_at, budget_since, lane_after) \
         SELECT {id}, $2, at, at, CASE WHEN $7 AND place > 0 THEN {before} END \
         FROM made",
        id = lane_alert_id("i", "$5::int8"),
        before = lane_alert_id("i - $4::int8", "$5::int8"),
    ))
    .bind(tenant_id)
    .bind(destination_id)
    .bind(from)
    .bind(keys)
    .bind(epoch_ms)
    .bind(count)
    .bind(ordered)
    .execute(db)
    .await?;
    Ok(())
}

/// The lane rows of a backlog [`seed_lane_backlog`] wrote in full (`total` alerts over
/// `keys` subjects from `epoch_ms` on): each lane's last position handed out, and its
/// tail, its newest alert (none has been released).
pub async fn seed_lane_rows(
    db: impl PgExecutor<'_>,
    destination_id: Uuid,
    total: i64,
    keys: i64,
    epoch_ms: i64,
) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "INSERT INTO alert_lanes (destination_id, ordering_key, last_seq, tail_alert) \
         SELECT $1, 'lane:' || k, members, {tail} \
         FROM (SELECT k, ($2::int8 - k + $3::int8 - 1) / $3::int8 AS members \
               FROM generate_series(0, least($2::int8, $3::int8) - 1) AS k) lanes",
        tail = lane_alert_id("k + $3::int8 * (members - 1)", "$4::int8"),
    ))
    .bind(destination_id)
    .bind(total)
    .bind(keys)
    .bind(epoch_ms)
    .execute(db)
    .await?;
    Ok(())
}

/// How a synthetic backlog stands: rows due now (`outbox_due_idx`'s predicate), rows
/// waiting in a lane, lanes.
pub async fn backlog_shape(db: impl PgExecutor<'_>) -> Result<(i64, i64, i64), StoreError> {
    Ok(sqlx::query_as(&format!(
        "SELECT (SELECT count(*) FROM outbox WHERE {due}), \
                (SELECT count(*) FROM outbox WHERE lane_after IS NOT NULL), \
                (SELECT count(*) FROM alert_lanes)",
        due = due_status("outbox"),
    ))
    .fetch_one(db)
    .await?)
}

/// The plan of the product's claim statement (`outbox_store::dispatch::claim_sql`) for
/// `limit` rows, as `EXPLAIN (ANALYZE, BUFFERS)` prints it, one line each, and the rows
/// it claimed; in a transaction that is rolled back, so the queue stays as it was.
/// `generic`: the plan PostgreSQL builds without the parameters' values (a prepared
/// statement's generic plan, which a connection may switch to after five executions)
/// rather than with them.
pub async fn explain_claim(
    pool: &PgPool,
    limit: i64,
    generic: bool,
) -> Result<(Vec<String>, i64), StoreError> {
    let mut conn = pool.acquire().await?;
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let plan: Vec<String> = if generic {
        sqlx::raw_sql(&format!(
            "SET LOCAL plan_cache_mode = force_generic_plan; \
             PREPARE bench_claim (int8, text, int8, uuid[]) AS {}",
            outbox_store::dispatch::claim_sql()
        ))
        .execute(&mut *tx)
        .await?;
        sqlx::query_scalar(&format!(
            "EXPLAIN (ANALYZE, BUFFERS) \
             EXECUTE bench_claim ({limit}, 'explain-lanes', 60000, '{{}}')"
        ))
        .fetch_all(&mut *tx)
        .await?
    } else {
        sqlx::query_scalar(&format!(
            "EXPLAIN (ANALYZE, BUFFERS) {}",
            outbox_store::dispatch::claim_sql()
        ))
        .bind(limit)
        .bind("explain-lanes")
        .bind(60_000_i64)
        .bind(Vec::<Uuid>::new())
        .fetch_all(&mut *tx)
        .await?
    };
    let claimed: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM outbox WHERE status = {sending}",
        sending = LiveStatus::Sending.sql()
    ))
    .fetch_one(&mut *tx)
    .await?;
    tx.rollback().await?;
    if generic {
        // A prepared statement outlives the transaction.
        sqlx::raw_sql("DEALLOCATE bench_claim")
            .execute(&mut *conn)
            .await?;
    }
    Ok((plan, claimed))
}

/// Takes the evidence chain off the delivery path, or puts it back (the benchmark's A/B of
/// its cost). Off: the chain's triggers are disabled, and outbox rows are queued without
/// a chain head (a trigger of the benchmark's own clears it as an approval inserts the
/// row), so a completion links nothing either; attempt rows are written as before the
/// chain, without a hash or a position. On: the product as it ships.
pub async fn set_evidence_chain(pool: &PgPool, on: bool) -> anyhow::Result<()> {
    let verb = if on { "ENABLE" } else { "DISABLE" };
    for (table, trigger) in [
        ("alert_events", "alert_events_chain"),
        ("delivery_attempts", "delivery_attempts_chain"),
    ] {
        sqlx::query(&format!("ALTER TABLE {table} {verb} TRIGGER {trigger}"))
            .execute(pool)
            .await?;
    }
    if on {
        sqlx::raw_sql(
            "DROP TRIGGER IF EXISTS bench_chain_off ON outbox; \
             DROP FUNCTION IF EXISTS bench_chain_off()",
        )
        .execute(pool)
        .await?;
    } else {
        sqlx::raw_sql(
            "CREATE OR REPLACE FUNCTION bench_chain_off() RETURNS trigger LANGUAGE plpgsql AS \
                 'BEGIN NEW.chain_head := NULL; RETURN NEW; END'; \
             CREATE OR REPLACE TRIGGER bench_chain_off BEFORE INSERT ON outbox \
                 FOR EACH ROW EXECUTE FUNCTION bench_chain_off()",
        )
        .execute(pool)
        .await?;
    }
    Ok(())
}
