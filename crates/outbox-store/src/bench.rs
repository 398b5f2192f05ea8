//! Statements the benchmark needs besides the product's own: server counters (commits,
//! WAL position, dead tuples), queue samples, a synthetic history of settled alerts, and
//! the claim timed on its own. Nothing here is used by the product's processes.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::StoreError;

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

/// `VACUUM ANALYZE` of the queue and history tables, as after a bulk load.
pub async fn vacuum_analyze(pool: &PgPool) -> Result<(), StoreError> {
    sqlx::query("VACUUM ANALYZE outbox, alerts, alert_events, delivery_attempts")
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
    let (sending, dead): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM outbox WHERE status = 'sending'), \
                COALESCE((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'outbox'), 0)",
    )
    .fetch_one(db)
    .await?;
    Ok(QueueSample {
        sending,
        outbox_dead_tuples: dead,
    })
}

/// Whether the live outbox is empty. Asked through the two partial indexes (due rows,
/// leased rows), so that polling it during a drain does not scan the table.
pub async fn queue_empty(db: impl PgExecutor<'_>) -> Result<bool, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT NOT EXISTS (SELECT 1 FROM outbox WHERE status IN ('pending', 'uncertain')) \
            AND NOT EXISTS (SELECT 1 FROM outbox WHERE status = 'sending')",
    )
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
            "SELECT count(*) FILTER (WHERE outcome = 'accepted'), \
                    count(*) FILTER (WHERE outcome IS DISTINCT FROM 'accepted'), \
                    (SELECT count(*) FROM delivery_attempts), \
                    (SELECT count(*) FROM alert_events) \
             FROM alerts",
        )
        .fetch_one(db)
        .await?;
    Ok(DrainEvidence {
        accepted,
        not_accepted,
        attempt_rows,
        evidence_lines,
    })
}

/// Approval times of the given alerts, to measure approval-to-acceptance latency.
pub async fn approved_at(
    db: impl PgExecutor<'_>,
    ids: &[Uuid],
) -> Result<Vec<(Uuid, DateTime<Utc>)>, StoreError> {
    Ok(
        sqlx::query_as("SELECT id, created_at FROM alerts WHERE id = ANY($1::uuid[])")
            .bind(ids)
            .fetch_all(db)
            .await?,
    )
}

/// Adds `count` alerts settled `accepted` some days ago, each with its attempt row and
/// evidence lines, in one statement: a history as a long-running system accumulates. Ids
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
                        'note', repeat('x', 400)) AS payload \
             FROM generate_series($3::int8, $3::int8 + $4::int8 - 1) AS i \
         ), alerted AS ( \
             INSERT INTO alerts (id, tenant_id, subject, occurrence, destination_id, revision, \
                 payload, payload_sha256, outcome, destination_reference, created_at, created_by, \
                 settled_at) \
             SELECT (lpad(to_hex((extract(epoch FROM at) * 1000)::int8), 12, '0') \
                        || '7' || substr(md5(i::text), 1, 3) || '8' || substr(md5(i::text), 4, 15))::uuid, \
                    $1, 'history:' || i, 'due', $2, 0, payload, \
                    sha256(convert_to(payload::text, 'UTF8')), 'accepted', 'r-' || i, at, \
                    'benchmark', at + interval '5 milliseconds' \
             FROM made \
             RETURNING id, payload_sha256, created_at \
         ), attempted AS ( \
             INSERT INTO delivery_attempts (alert_id, attempt, kind, worker, fencing_token, \
                 started_at, finished_at, idempotency_key, payload_sha256, outcome, http_status, \
                 destination_reference) \
             SELECT id, 1, 'send', 'benchmark', 0, created_at, created_at + interval '5 milliseconds', \
                    id::text, payload_sha256, 'accepted', 200, 'r-history' \
             FROM alerted \
         ) \
         INSERT INTO alert_events (alert_id, at, from_state, to_state, attempt, actor, line) \
         SELECT id, created_at + interval '5 milliseconds', 'sending', 'accepted', 1, \
                'dispatcher:benchmark', 'attempt 1 accepted by the destination (HTTP 200)' \
         FROM alerted",
    )
    .bind(tenant_id)
    .bind(destination_id)
    .bind(from)
    .bind(count)
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
        let claimed =
            crate::dispatch::claim(&mut *tx, "benchmark", batch, Duration::from_secs(60), &[])
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
/// interval reads only its own rows, through the primary key.
pub async fn accepted_since(
    db: impl PgExecutor<'_>,
    after_id: i64,
) -> Result<AcceptedSince, StoreError> {
    let (last_id, accepted, p50_ms, p99_ms): (i64, i64, Option<f64>, Option<f64>) =
        sqlx::query_as(
            "WITH fresh AS ( \
                 SELECT da.id, extract(epoch FROM da.finished_at - a.created_at)::float8 * 1000 AS ms \
                 FROM delivery_attempts da JOIN alerts a ON a.id = da.alert_id \
                 WHERE da.id > $1 AND da.kind = 'send' AND da.outcome = 'accepted' \
             ) \
             SELECT coalesce(max(id), $1), count(*), \
                    percentile_disc(0.5) WITHIN GROUP (ORDER BY ms), \
                    percentile_disc(0.99) WITHIN GROUP (ORDER BY ms) \
             FROM fresh",
        )
        .bind(after_id)
        .fetch_one(db)
        .await?;
    Ok(AcceptedSince {
        last_id,
        accepted,
        p50_ms: p50_ms.unwrap_or_default(),
        p99_ms: p99_ms.unwrap_or_default(),
    })
}
