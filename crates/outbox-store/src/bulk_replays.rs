//! Operators' bulk replays: what each selected, how far it has come (its cursor and
//! counts), and where it stands ([`BulkReplayState`]), with the lease that lets one worker
//! at a time carry it on. The replays themselves go through [`crate::alert_actions`].

use chrono::{DateTime, Utc};
use outbox_core::BulkReplayState;
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::alert_listings::AlertFilter;
use crate::tenants::Scope;
use crate::StoreError;

/// A bulk replay and how far it has come.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct BulkReplay {
    /// Its id.
    pub id: Uuid,
    /// Who started it.
    pub operator: String,
    /// Their note, on every replayed alert's evidence.
    pub note: String,
    /// The tenants it may touch (`None`: every tenant).
    pub tenant_ids: Option<Vec<Uuid>>,
    /// The selection.
    #[sqlx(json)]
    pub filter: AlertFilter,
    /// Where it stands.
    pub state: BulkReplayState,
    /// How many matched when it started (the dry run's count).
    pub planned: i32,
    /// Replayed so far.
    pub replayed: i32,
    /// Skipped so far (another operator or a dispatcher got there first).
    pub skipped: i32,
    /// The last alert handled.
    pub cursor_id: Option<Uuid>,
    /// When it started.
    pub created_at: DateTime<Utc>,
    /// When it last moved.
    pub updated_at: DateTime<Utc>,
}

/// Records a bulk replay, running.
pub async fn create_bulk_replay(
    db: impl PgExecutor<'_>,
    operator: &str,
    note: &str,
    scope: Scope<'_>,
    filter: &AlertFilter,
    planned: i64,
) -> Result<Uuid, StoreError> {
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO console_bulk_replays (id, operator, note, tenant_ids, filter, state, planned) \
         VALUES ($1, $2, $3, $4, $5, $7, $6)",
    )
    .bind(id)
    .bind(operator)
    .bind(note)
    .bind(scope)
    .bind(sqlx::types::Json(filter))
    .bind(i32::try_from(planned).unwrap_or(i32::MAX))
    .bind(BulkReplayState::Running)
    .execute(db)
    .await?;
    Ok(id)
}

/// A bulk replay by id.
pub async fn bulk_replay(
    db: impl PgExecutor<'_>,
    id: Uuid,
) -> Result<Option<BulkReplay>, StoreError> {
    Ok(sqlx::query_as::<_, BulkReplay>(
        "SELECT id, operator, note, tenant_ids, filter, state, planned, replayed, skipped, \
                cursor_id, created_at, updated_at \
         FROM console_bulk_replays WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(db)
    .await?)
}

/// Takes a running bulk replay nobody works on (none started, or its worker's lease ran
/// out: that process stopped or died), leasing it for `lease`.
pub async fn take_bulk_replay(
    db: impl PgExecutor<'_>,
    lease: std::time::Duration,
) -> Result<Option<BulkReplay>, StoreError> {
    Ok(sqlx::query_as::<_, BulkReplay>(
        "WITH next AS ( \
             SELECT id FROM console_bulk_replays \
             WHERE state = $2 AND (lease_until IS NULL OR lease_until < now()) \
             ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED \
         ) \
         UPDATE console_bulk_replays b SET lease_until = now() + make_interval(secs => $1) \
         FROM next WHERE b.id = next.id \
         RETURNING b.id, b.operator, b.note, b.tenant_ids, b.filter, b.state, b.planned, \
                   b.replayed, b.skipped, b.cursor_id, b.created_at, b.updated_at",
    )
    .bind(lease.as_secs_f64())
    .bind(BulkReplayState::Running)
    .fetch_optional(db)
    .await?)
}

/// Records a batch's progress and renews the lease; returns the replay's state now
/// (stopped when an operator stopped it meanwhile).
pub async fn advance_bulk_replay(
    db: impl PgExecutor<'_>,
    id: Uuid,
    replayed: i32,
    skipped: i32,
    cursor_id: Option<Uuid>,
    finished: bool,
    lease: std::time::Duration,
) -> Result<BulkReplayState, StoreError> {
    Ok(sqlx::query_scalar::<_, BulkReplayState>(
        "UPDATE console_bulk_replays SET replayed = replayed + $2, skipped = skipped + $3, \
             cursor_id = COALESCE($4, cursor_id), updated_at = now(), \
             state = CASE WHEN $5 AND state = $7 THEN $8 ELSE state END, \
             lease_until = CASE WHEN $5 OR state <> $7 THEN NULL \
                                ELSE now() + make_interval(secs => $6) END \
         WHERE id = $1 RETURNING state",
    )
    .bind(id)
    .bind(replayed)
    .bind(skipped)
    .bind(cursor_id)
    .bind(finished)
    .bind(lease.as_secs_f64())
    .bind(BulkReplayState::Running)
    .bind(BulkReplayState::Done)
    .fetch_one(db)
    .await?)
}

/// Stops a running bulk replay, or sets a stopped one running again (it resumes after its
/// cursor). Returns `false` when it was not in the state to change from. The lease stays:
/// a worker in the middle of a batch finishes it, sees the state, and lets go.
pub async fn set_bulk_replay_running(
    db: impl PgExecutor<'_>,
    id: Uuid,
    running: bool,
) -> Result<bool, StoreError> {
    let (from, to) = if running {
        (BulkReplayState::Stopped, BulkReplayState::Running)
    } else {
        (BulkReplayState::Running, BulkReplayState::Stopped)
    };
    let changed = sqlx::query(
        "UPDATE console_bulk_replays SET state = $3, updated_at = now() \
         WHERE id = $1 AND state = $2",
    )
    .bind(id)
    .bind(from)
    .bind(to)
    .execute(db)
    .await?;
    Ok(changed.rows_affected() == 1)
}
