//! Ordered lanes as operators see and change them: a destination's ordering settings
//! (and what switching them releases), the lanes held up by their head, and the count of
//! blocked lanes per destination that `/metrics` shows.
//!
//! How lanes are kept (joined at approval, released at settling) is in the migrations
//! 20261207000001 and 20261217000056 and in `lifecycle`; this module only reads them, and
//! dissolves them when a destination stops ordering. Which lane an alert is in is
//! `lane_key::LANE_KEY`, written once for every statement.

use chrono::{DateTime, Utc};
use outbox_core::{AlertState, LiveStatus, OnHeadFailed, Ordering, Outcome};
use sqlx::{PgConnection, PgExecutor, PgPool};
use std::sync::LazyLock;
use uuid::Uuid;

use crate::lane_key::LANE_KEY;
use crate::lifecycle::{EVENT_INSERT, LAST_EVIDENCE_LINE, STATE, STATE_JOINS};
use crate::sql_names::{sql_list, SqlName};
use crate::StoreError;

/// A destination's ordering settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderingSettings {
    /// Per key, or none.
    pub ordering: Ordering,
    /// What a lane does past a head that failed for good.
    pub on_head_failed: OnHeadFailed,
}

/// What changing a destination's ordering did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderingChange {
    /// The settings before.
    pub before: OrderingSettings,
    /// The settings now.
    pub after: OrderingSettings,
    /// Alerts that were waiting in a lane and no longer wait (ordering turned off).
    pub released: i64,
    /// Lanes that were blocked by a held or failed head when ordering was turned off.
    pub blocked_lanes: i64,
    /// Lanes that moved on past their failed head because the destination now skips
    /// failed heads (`block` to `skip`).
    pub skipped_heads: i64,
}

/// The alerts of destination `$1` that hold up their lane from where they came to rest
/// (held, or failed where the destination does not skip failed heads): each is the head
/// of a blocked lane. Found from the small set of held and failed alerts
/// (`alert_outcomes_attention_idx`), never from the backlog.
static BLOCKED_HEADS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT a.id, a.destination_id, {LANE_KEY} AS key, \
                a.lane_seq, ao.outcome, ao.settled_at \
         FROM alert_outcomes ao JOIN alerts a ON a.id = ao.alert_id \
         WHERE ao.outcome IN ({held_failed}) AND a.lane_seq IS NOT NULL \
           AND {blocks}",
        held_failed = sql_list(&[Outcome::Held, Outcome::Failed]),
        blocks = crate::lifecycle::BLOCKS_LANE,
    )
});

/// Changes destination `destination_id`'s ordering settings. Turning ordering off
/// dissolves its lanes: every alert waiting in one is released at once (and a held or
/// failed head no longer holds anything up). When lanes are blocked that is refused
/// unless `force`, with how many alerts it would release. Turning ordering on orders the
/// alerts approved from then on; alerts already queued keep no order among themselves.
///
/// Switching an ordered destination from `block` to `skip` lets every lane blocked by a
/// head that failed for good move on at once, as a head failing under `skip` would, and
/// says so in both alerts' evidence (by `actor`).
///
/// Locking: the destination row, then its lane rows (so no approval is joining a lane
/// meanwhile), then its outbox rows: the lifecycle's order.
pub async fn set_ordering(
    pool: &PgPool,
    destination_id: Uuid,
    wanted: OrderingSettings,
    force: bool,
    actor: &str,
) -> Result<OrderingChange, StoreError> {
    let mut tx = pool.begin().await?;
    let (ordering, on_head_failed): (String, String) = sqlx::query_as(
        "SELECT ordering, on_head_failed FROM destinations WHERE id = $1 FOR NO KEY UPDATE",
    )
    .bind(destination_id)
    .fetch_one(&mut *tx)
    .await?;
    let before = OrderingSettings {
        ordering: ordering.parse()?,
        on_head_failed: on_head_failed.parse()?,
    };
    let mut change = OrderingChange {
        before,
        after: wanted,
        released: 0,
        blocked_lanes: 0,
        skipped_heads: 0,
    };
    if before.ordering == Ordering::PerKey && wanted.ordering == Ordering::None {
        (change.released, change.blocked_lanes) = dissolve_lanes(&mut tx, destination_id).await?;
        if change.blocked_lanes > 0 && !force {
            return Err(StoreError::Refused(format!(
                "{} lane(s) of this destination are blocked by a held or failed head; turning \
                 ordering off releases {} waiting alert(s) past them: give --force to do so",
                change.blocked_lanes, change.released
            )));
        }
    }
    if before.ordering == Ordering::PerKey
        && wanted.ordering == Ordering::PerKey
        && before.on_head_failed == OnHeadFailed::Block
        && wanted.on_head_failed == OnHeadFailed::Skip
    {
        change.skipped_heads = skip_failed_heads(&mut tx, destination_id, actor).await?;
    }
    sqlx::query(
        "UPDATE destinations SET ordering = $2, on_head_failed = $3, updated_at = now() \
         WHERE id = $1",
    )
    .bind(destination_id)
    .bind(wanted.ordering)
    .bind(wanted.on_head_failed)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(change)
}

/// A destination's ordering settings now.
pub async fn ordering_of(
    db: impl PgExecutor<'_>,
    destination_id: Uuid,
) -> Result<OrderingSettings, StoreError> {
    let (ordering, on_head_failed): (String, String) =
        sqlx::query_as("SELECT ordering, on_head_failed FROM destinations WHERE id = $1")
            .bind(destination_id)
            .fetch_one(db)
            .await?;
    Ok(OrderingSettings {
        ordering: ordering.parse()?,
        on_head_failed: on_head_failed.parse()?,
    })
}

/// Locks every lane row of the destination, in the one order of every locker of several
/// lanes: an approval joining one of them finishes (or waits) before the waiting rows are
/// read, in a later statement's snapshot.
async fn lock_lanes_of(tx: &mut PgConnection, destination_id: Uuid) -> Result<(), StoreError> {
    sqlx::query(
        "SELECT 1 FROM alert_lanes WHERE destination_id = $1 \
         ORDER BY ordering_key COLLATE \"C\" FOR UPDATE",
    )
    .bind(destination_id)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Lets the lanes of the destination that wait behind a head that failed for good move
/// on: the alerts behind each such head no longer wait (a failed head was its lane's
/// head, so they become due), the tail naming it is cleared, and both alerts' evidence
/// says why. Returns how many heads were passed. The caller commits or rolls back.
async fn skip_failed_heads(
    tx: &mut PgConnection,
    destination_id: Uuid,
    actor: &str,
) -> Result<i64, StoreError> {
    lock_lanes_of(tx, destination_id).await?;
    Ok(sqlx::query_scalar(&format!(
        "WITH heads AS ( \
             SELECT b.id FROM ({blocked}) b \
             WHERE b.destination_id = $1 AND b.outcome = {failed} \
         ), moved AS ( \
             UPDATE outbox o SET lane_after = NULL FROM heads h \
             WHERE o.lane_after = h.id \
             RETURNING o.alert_id, o.status, h.id AS head \
         ), untailed AS ( \
             UPDATE alert_lanes l SET tail_alert = NULL FROM heads h \
             WHERE l.destination_id = $1 AND l.tail_alert = h.id \
         ), told_next AS ( \
             {EVENT_INSERT} \
             SELECT m.alert_id, m.status, m.status, NULL, $2, \
                    format('alert %s before this one in its lane failed for good; the destination now skips failed lane heads, so this one no longer waits for it', m.head) \
             FROM moved m \
         ), told_head AS ( \
             {EVENT_INSERT} \
             SELECT h.id, {failed_state}, {failed_state}, NULL, $2, \
                    'the destination now skips failed lane heads: its ordered lane moves on without it' \
             FROM heads h \
         ) \
         SELECT count(*) FROM heads",
        blocked = *BLOCKED_HEADS,
        failed = Outcome::Failed.sql(),
        failed_state = AlertState::Failed.sql(),
    ))
    .bind(destination_id)
    .bind(actor)
    .fetch_one(&mut *tx)
    .await?)
}

/// Releases every alert waiting in a lane of the destination and clears its lanes'
/// tails; returns (alerts released, lanes that were blocked). The caller commits or rolls
/// back.
async fn dissolve_lanes(
    tx: &mut PgConnection,
    destination_id: Uuid,
) -> Result<(i64, i64), StoreError> {
    lock_lanes_of(tx, destination_id).await?;
    let blocked: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM ({}) b WHERE b.destination_id = $1",
        *BLOCKED_HEADS
    ))
    .bind(destination_id)
    .fetch_one(&mut *tx)
    .await?;
    let released = sqlx::query(
        "UPDATE outbox SET lane_after = NULL WHERE destination_id = $1 AND lane_after IS NOT NULL",
    )
    .bind(destination_id)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    sqlx::query(
        "UPDATE alert_lanes SET tail_alert = NULL WHERE destination_id = $1 AND tail_alert IS NOT NULL",
    )
    .bind(destination_id)
    .execute(&mut *tx)
    .await?;
    Ok((i64::try_from(released).unwrap_or(i64::MAX), blocked))
}

/// A lane held up by its head.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StalledLane {
    /// The lane's ordering key.
    pub key: String,
    /// The head: the alert the lane waits for.
    pub head: Uuid,
    /// Where the head stands: held or failed (blocked until an operator acts), or
    /// pending, sending or uncertain after a failed attempt (retrying on its own).
    pub head_state: AlertState,
    /// Whether only an operator can move the lane on (the head is held or failed).
    pub blocked: bool,
    /// The head's latest evidence line: why it stands where it does.
    pub reason: Option<String>,
    /// Since when the lane has been held up: when the head came to rest, or its first
    /// attempt.
    pub since: DateTime<Utc>,
    /// Alerts approved in the lane after the head (some may have been released since, by
    /// a revision or an operator).
    pub behind: i64,
}

/// The lanes of destination `destination_id` held up by their head, longest held up
/// first, at most `limit`: blocked ones (held or failed head), and with `retrying` also
/// those whose head is live but has failed an attempt (which reads the destination's
/// live rows, so it costs a scan of its backlog).
pub async fn stalled(
    db: impl PgExecutor<'_>,
    destination_id: Uuid,
    retrying: bool,
    limit: i64,
) -> Result<Vec<StalledLane>, StoreError> {
    let rows = sqlx::query_as::<
        _,
        (
            String,
            Uuid,
            String,
            bool,
            Option<String>,
            DateTime<Utc>,
            i64,
        ),
    >(&format!(
        "WITH heads AS ( \
                 SELECT b.id, b.key, b.lane_seq, true AS blocked, b.settled_at AS since \
                 FROM ({blocked}) b WHERE b.destination_id = $1 \
                 UNION ALL \
                 SELECT o.alert_id, {LANE_KEY}, a.lane_seq, false, \
                        (SELECT min(da.started_at) FROM delivery_attempts da \
                         WHERE da.alert_id = o.alert_id) \
                 FROM outbox o JOIN alerts a ON a.id = o.alert_id \
                 WHERE $2 AND o.destination_id = $1 AND o.lane_after IS NULL \
                   AND a.lane_seq IS NOT NULL \
                   AND (o.status = {uncertain} OR o.attempts > 0) \
             ) \
             SELECT h.key, h.id, {STATE} AS state, h.blocked, {LAST_EVIDENCE_LINE} AS reason, \
                    COALESCE(h.since, a.created_at) AS since, \
                    COALESCE(l.last_seq - h.lane_seq, 0) AS behind \
             FROM heads h JOIN alerts a ON a.id = h.id {STATE_JOINS} \
             LEFT JOIN alert_lanes l ON l.destination_id = a.destination_id \
                  AND l.ordering_key = h.key \
             ORDER BY since, h.key \
             LIMIT $3",
        blocked = *BLOCKED_HEADS,
        uncertain = LiveStatus::Uncertain.sql(),
    ))
    .bind(destination_id)
    .bind(retrying)
    .bind(limit)
    .fetch_all(db)
    .await?;
    rows.into_iter()
        .map(|(key, head, state, blocked, reason, since, behind)| {
            Ok(StalledLane {
                key,
                head,
                head_state: state.parse()?,
                blocked,
                reason,
                since,
                behind,
            })
        })
        .collect()
}

/// A destination's lanes at a glance.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LaneCounts {
    /// The tenant's name.
    pub tenant: String,
    /// The destination's name.
    pub destination: String,
    /// Lanes with an unreleased alert.
    pub open: i64,
    /// Lanes blocked by a held or failed head.
    pub blocked: i64,
}

/// Every ordered destination's open and blocked lanes (`/metrics`, `outboxctl lanes`).
pub async fn counts(db: impl PgExecutor<'_>) -> Result<Vec<LaneCounts>, StoreError> {
    let rows = sqlx::query_as::<_, (String, String, i64, i64)>(&format!(
        "SELECT t.name, d.name, \
                (SELECT count(*) FROM alert_lanes l \
                 WHERE l.destination_id = d.id AND l.tail_alert IS NOT NULL), \
                (SELECT count(*) FROM ({blocked}) b WHERE b.destination_id = d.id) \
         FROM destinations d JOIN tenants t ON t.id = d.tenant_id \
         WHERE d.ordering = {per_key} \
         ORDER BY t.name, d.name",
        blocked = *BLOCKED_HEADS,
        per_key = Ordering::PerKey.sql(),
    ))
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(tenant, destination, open, blocked)| LaneCounts {
            tenant,
            destination,
            open,
            blocked,
        })
        .collect())
}
