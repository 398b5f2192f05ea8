//! The statements of `bench hot-claim` ([`crate::hot_claim`]): a copy of the `outbox`
//! table (`hot_claim_queue`) under one index layout, filled with a backlog, and the claim's
//! and the completion's row work over it.

use outbox_core::LiveStatus;
use sqlx::PgConnection;
use std::time::{Duration, Instant};
use uuid::Uuid;

use outbox_store::dispatch::due_status;
use outbox_store::sql_names::SqlName;
use outbox_store::StoreError;

/// How the queue copy is indexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Layout {
    /// As `outbox` is: the due index's predicate names `status`, and a lease index covers
    /// the `sending` rows, so a claim (which sets `status`) is never a HOT update.
    Today,
    /// No index names a column the claim sets: the due index's predicate is on
    /// `lane_after` only and there is no lease index, so a claim can be a HOT update when
    /// the row's page has room. Claims filter `status` on the table instead.
    Hot,
}

impl Layout {
    /// The layout's name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Today => "today",
            Layout::Hot => "hot",
        }
    }
}

/// (Re)creates `hot_claim_queue` as a copy of `outbox`'s columns, defaults and checks (no
/// foreign keys) with `layout`'s indexes, pages filled to `fillfactor` percent, and no
/// autovacuum (a run lasts seconds; autovacuum would visit at random), then writes `ids`
/// as pending rows of one destination, due in the order given, and vacuums it.
pub async fn create_queue(
    conn: &mut PgConnection,
    layout: Layout,
    fillfactor: u8,
    ids: &[Uuid],
) -> Result<(), StoreError> {
    for statement in [
        "DROP TABLE IF EXISTS hot_claim_queue".to_owned(),
        "CREATE SEQUENCE IF NOT EXISTS hot_claim_token".to_owned(),
        format!(
            "CREATE TABLE hot_claim_queue (LIKE outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS) \
             WITH (fillfactor = {fillfactor}, autovacuum_enabled = false)"
        ),
        "ALTER TABLE hot_claim_queue ADD PRIMARY KEY (alert_id)".to_owned(),
        "CREATE INDEX ON hot_claim_queue (lane_after) WHERE lane_after IS NOT NULL".to_owned(),
    ] {
        sqlx::query(&statement).execute(&mut *conn).await?;
    }
    let indexes = match layout {
        Layout::Today => vec![
            format!(
                "CREATE INDEX ON hot_claim_queue (next_attempt_at) WHERE {due}",
                due = due_status("hot_claim_queue")
            ),
            format!(
                "CREATE INDEX ON hot_claim_queue (lease_expires_at) WHERE status = {sending}",
                sending = LiveStatus::Sending.sql()
            ),
        ],
        Layout::Hot => vec![
            "CREATE INDEX ON hot_claim_queue (next_attempt_at) WHERE lane_after IS NULL".to_owned(),
        ],
    };
    for statement in &indexes {
        sqlx::query(statement).execute(&mut *conn).await?;
    }
    sqlx::query(
        "INSERT INTO hot_claim_queue (alert_id, destination_id, next_attempt_at, chain_head) \
         SELECT i.id, '00000000-0000-7000-8000-000000000001', \
                now() - interval '1 hour' + i.n * interval '1 microsecond', \
                sha256(i.id::text::bytea) \
         FROM unnest($1::uuid[]) WITH ORDINALITY AS i(id, n)",
    )
    .bind(ids)
    .execute(&mut *conn)
    .await?;
    sqlx::query("VACUUM ANALYZE hot_claim_queue")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// One claim's row work, as the product's claim does it: up to `limit` due rows in due
/// order, locked (skipping locked ones), and set `sending` with a lease and a fencing
/// token, committed. (The product's claim also counts each destination's rows in
/// `sending`, through the lease index, and reads the alerts and destinations it sends;
/// neither is measured here.) Returns the claimed rows' ids and tokens, and the time.
pub async fn claim(
    conn: &mut PgConnection,
    limit: i64,
) -> Result<(Vec<Uuid>, Vec<i64>, Duration), StoreError> {
    let started = Instant::now();
    let rows: Vec<(Uuid, i64)> = sqlx::query_as(&format!(
        "WITH due AS ( \
             SELECT alert_id FROM hot_claim_queue \
             WHERE {due} AND next_attempt_at <= now() \
             ORDER BY next_attempt_at LIMIT $1 \
             FOR UPDATE SKIP LOCKED \
         ) \
         UPDATE hot_claim_queue o SET status = {sending}, lease_owner = 'bench', \
             lease_expires_at = now() + interval '30 seconds', \
             fencing_token = nextval('hot_claim_token'), send_started_at = now(), \
             attempts = o.attempts + 1 \
         WHERE o.alert_id = ANY(ARRAY(SELECT alert_id FROM due)) \
         RETURNING o.alert_id, o.fencing_token",
        due = due_status("hot_claim_queue"),
        sending = LiveStatus::Sending.sql(),
    ))
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    let took = started.elapsed();
    let (ids, tokens) = rows.into_iter().unzip();
    Ok((ids, tokens, took))
}

/// One completion's row work: the fenced delete of claimed rows (by id and fencing
/// token, as the product's completion matches them), committed. Returns the time.
pub async fn complete(
    conn: &mut PgConnection,
    ids: &[Uuid],
    tokens: &[i64],
) -> Result<Duration, StoreError> {
    let started = Instant::now();
    sqlx::query(
        "DELETE FROM hot_claim_queue o \
         USING unnest($1::uuid[], $2::int8[]) AS i(alert_id, fencing_token) \
         WHERE o.alert_id = i.alert_id AND o.fencing_token = i.fencing_token",
    )
    .bind(ids)
    .bind(tokens)
    .execute(&mut *conn)
    .await?;
    Ok(started.elapsed())
}

/// The queue copy's updates and HOT updates so far, with this session's own counters
/// published first (`pg_stat_force_next_flush`, PostgreSQL 15 and later, then a
/// transaction end): a backend otherwise publishes them at most once a second.
pub async fn updates(conn: &mut PgConnection) -> Result<(i64, i64), StoreError> {
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&mut *conn)
        .await?;
    Ok(sqlx::query_as(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables \
         WHERE relname = 'hot_claim_queue'",
    )
    .fetch_optional(&mut *conn)
    .await?
    .unwrap_or((0, 0)))
}
