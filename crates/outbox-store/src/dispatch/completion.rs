//! Recording what became of a claim: the finished attempt or lookup, where the row goes
//! next, and the fenced batch that writes many completions in one transaction.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use uuid::Uuid;

use super::{ChainSeen, ClaimedAlert};

use outbox_core::evidence::chain::link;
use outbox_core::evidence::entries::{AttemptFacts, EntryFacts};
use outbox_core::{AlertState, AttemptKind, AttemptOutcome, LiveStatus, Outcome};

use crate::lifecycle::{ATTEMPT_INSERT, COMPLETE_BATCH};
use crate::sql_names::SqlName;
use crate::StoreError;

/// A finished attempt or lookup, as recorded in `delivery_attempts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    /// A send or a lookup.
    pub kind: AttemptKind,
    /// The send attempt it belongs to.
    pub attempt: i32,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The destination's status code, if it answered.
    pub http_status: Option<u16>,
    /// The destination's reference, if any.
    pub destination_reference: Option<String>,
    /// Failure class, if any.
    pub error_class: Option<String>,
    /// Start of the answer, as evidence.
    pub response_excerpt: Option<String>,
}

/// Where a claimed row goes next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Leaves the outbox for good or for an operator: accepted, failed or held.
    Settle {
        /// The outcome.
        outcome: Outcome,
        /// The destination's (or lookup's) reference for an accepted alert.
        reference: Option<String>,
    },
    /// Back to the queue as pending (retry) or uncertain (settle later), due at `at`.
    Requeue {
        /// Pending or uncertain (never sending: that is a claim).
        status: LiveStatus,
        /// When it is due.
        at: DateTime<Utc>,
    },
}

impl Next {
    /// The state the alert is in once this is recorded.
    pub fn state(&self) -> AlertState {
        match self {
            Next::Settle { outcome, .. } => (*outcome).into(),
            Next::Requeue { status, .. } => (*status).into(),
        }
    }
}

/// The outcome of one claim, to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The alert.
    pub alert_id: Uuid,
    /// The claim's fencing token.
    pub fencing_token: i64,
    /// The dispatcher.
    pub worker: String,
    /// The attempt or lookup that happened, if one did.
    pub attempt: Option<AttemptRecord>,
    /// Where the row goes.
    pub next: Next,
    /// The evidence line.
    pub line: String,
    /// Disable the destination, with this reason (410 Gone).
    pub disable_destination: Option<String>,
    /// The lane the alert heads, when its destination orders alerts per key.
    pub lane: Option<LaneHead>,
    /// The alert's evidence chain as the claim found it
    /// ([`ClaimedAlert::chain_seen`]): the attempt row's hash is then computed here, in
    /// the dispatcher's process, rather than by the database. `None` leaves it to the
    /// database.
    pub chain_seen: Option<ChainSeen>,
}

/// The lane a claimed alert heads ([`ClaimedAlert::lane_key`](super::ClaimedAlert)), and
/// whether settling it releases the lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneHead {
    /// The lane's ordering key (the destination is the alert's).
    pub key: String,
    /// The destination lets the lane go on past a head that failed for good.
    pub skips_failed: bool,
}

impl LaneHead {
    /// Whether settling the head as `outcome` releases its lane, so that the next alert
    /// may go: accepted and superseded always; failed only where the destination skips
    /// failed heads; held never (the lane waits for an operator).
    pub fn released_by(&self, outcome: Outcome) -> bool {
        match outcome {
            Outcome::Accepted | Outcome::Superseded => true,
            Outcome::Failed => self.skips_failed,
            Outcome::Held => false,
        }
    }
}

impl Completion {
    /// The lane this completion releases, if it does: the head settles as an outcome that
    /// lets the next alert of its lane go.
    fn released_lane(&self) -> Option<&str> {
        let lane = self.lane.as_ref()?;
        match &self.next {
            Next::Settle { outcome, .. } if lane.released_by(*outcome) => Some(&lane.key),
            _ => None,
        }
    }
}

/// Records a completion, fenced: returns `false` (and writes nothing) when the claim is no
/// longer the row's current one.
pub async fn complete(pool: &PgPool, done: &Completion) -> Result<bool, StoreError> {
    let applied = complete_batch(pool, std::slice::from_ref(done)).await?;
    Ok(applied.first().copied().unwrap_or(false))
}

/// Records many completions in one transaction (one statement over `unnest` arrays, then
/// one commit), fenced row by row: the answer says, in input order, which were applied;
/// a completion whose claim was taken over writes nothing. This is what keeps the cost
/// of full evidence (an attempt row and an evidence line per delivery) affordable: one
/// commit, one round trip and one plan per batch instead of per alert.
///
/// Locking: the fenced outbox rows are locked in `alert_id` order, the same order for
/// every batch, so that concurrent recorders never deadlock; each alert row is updated
/// after its outbox row (the order operators' commands take too). The locks are taken by
/// the statement's own `DELETE` or `UPDATE` of each outbox row, which is also the fence
/// (see `lifecycle::COMPLETE_BATCH`). (A fencing token is set only while a row is
/// `sending`, a CHECK constraint holds that, so the token match is the fence; naming the
/// status as well would invite the planner onto the lease index.)
pub async fn complete_batch(pool: &PgPool, batch: &[Completion]) -> Result<Vec<bool>, StoreError> {
    Ok(record_batch(pool, batch, None)
        .await?
        .into_iter()
        .map(|recorded| recorded.applied)
        .collect())
}

/// What recording one completion did ([`complete_batch_handing_on`]).
#[derive(Debug)]
pub struct Recorded {
    /// The claim was still current, and the completion is recorded.
    pub applied: bool,
    /// The alert behind it in its ordered lane, claimed for the same dispatcher in the
    /// same transaction, to send next in the released alert's place (at most one while
    /// the lane is whole).
    pub next: Vec<ClaimedAlert>,
}

/// As [`complete_batch`], and each completion that releases its ordered lane claims the
/// lane's next alert for its own dispatcher when that alert is due now, with at least
/// `lease` (as [`claim`](super::claim) would, in the same update that releases it from
/// waiting; see `lifecycle::COMPLETE_BATCH`). The answer says, in input order, whether
/// each was applied and what it claimed, which the dispatcher must send or give back. A
/// completion that disables its destination claims nothing.
pub async fn complete_batch_handing_on(
    pool: &PgPool,
    batch: &[Completion],
    lease: Duration,
) -> Result<Vec<Recorded>, StoreError> {
    record_batch(pool, batch, Some(lease)).await
}

/// [`complete_batch`] and [`complete_batch_handing_on`]: `hand_on` is the lease of a lane's
/// next alert claimed by its release, `None` to claim none.
async fn record_batch(
    pool: &PgPool,
    batch: &[Completion],
    hand_on: Option<Duration>,
) -> Result<Vec<Recorded>, StoreError> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    // Rows are locked in input order, one index probe each: sorted by alert, so that
    // concurrent recorders lock in the same order and never deadlock.
    let mut sorted: Vec<&Completion> = batch.iter().collect();
    sorted.sort_by_key(|done| done.alert_id);
    let columns = CompletionColumns::of(&sorted, hand_on);
    let releases_lanes = columns.release_lane.iter().any(Option::is_some);
    if !releases_lanes && batch.iter().all(|done| done.disable_destination.is_none()) {
        return record_routine_batch(pool, batch, &columns).await;
    }
    let mut tx = pool.begin().await?;
    if releases_lanes {
        lock_released_lanes(&mut tx, &sorted).await?;
    }
    let applied = columns.completed().fetch_all(&mut *tx).await?;
    if applied.is_empty() {
        return Ok(batch
            .iter()
            .map(|_| Recorded {
                applied: false,
                next: Vec::new(),
            })
            .collect());
    }
    let (next_alerts, next_tokens): (Vec<Uuid>, Vec<i64>) = applied
        .iter()
        .filter_map(|(_, _, alert, token)| Some(((*alert)?, (*token)?)))
        .unzip();
    let mut next: HashMap<Uuid, ClaimedAlert> = if next_alerts.is_empty() {
        HashMap::new()
    } else {
        super::claim::handed_on_claims(&mut tx, &next_alerts, &next_tokens)
            .await?
            .into_iter()
            .map(|row| (row.alert_id, row))
            .collect()
    };
    // `return` ends the process inside the open transaction, as a crash would.
    fail::fail_point!("complete-before-commit", |_| std::process::abort());
    // Keyed by claim, not alert: a stale completion and the current one of the same
    // alert can meet in one batch.
    let mut claimed_next: HashMap<(Uuid, i64), Vec<ClaimedAlert>> = HashMap::new();
    for (alert, token, next_alert, _) in &applied {
        if let Some(row) = next_alert.and_then(|id| next.remove(&id)) {
            claimed_next.entry((*alert, *token)).or_default().push(row);
        }
    }
    let applied: HashSet<(Uuid, i64)> = applied
        .into_iter()
        .map(|(alert, token, _, _)| (alert, token))
        .collect();
    let (gone_alerts, gone_reasons): (Vec<Uuid>, Vec<String>) = batch
        .iter()
        .filter(|done| applied.contains(&(done.alert_id, done.fencing_token)))
        .filter_map(|done| Some((done.alert_id, done.disable_destination.clone()?)))
        .unzip();
    if !gone_alerts.is_empty() {
        // Destination rows are locked in id order first, so two recorders disabling the
        // same destinations cannot deadlock.
        sqlx::query(
            "WITH gone AS ( \
                 SELECT DISTINCT ON (a.destination_id) a.destination_id, i.reason \
                 FROM unnest($1::uuid[], $2::text[]) AS i(alert_id, reason) \
                 JOIN alerts a ON a.id = i.alert_id \
                 ORDER BY a.destination_id \
             ), locked AS ( \
                 SELECT d.id FROM destinations d WHERE d.id IN (SELECT destination_id FROM gone) \
                 ORDER BY d.id FOR UPDATE \
             ) \
             UPDATE destinations d SET enabled = false, disabled_reason = g.reason, updated_at = now() \
             FROM gone g JOIN locked l ON l.id = g.destination_id \
             WHERE d.id = g.destination_id",
        )
        .bind(&gone_alerts)
        .bind(&gone_reasons)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(batch
        .iter()
        .map(|done| {
            let claim = (done.alert_id, done.fencing_token);
            Recorded {
                applied: applied.contains(&claim),
                next: claimed_next.remove(&claim).unwrap_or_default(),
            }
        })
        .collect())
}

/// A batch that releases no lane and disables no destination: its completion statement
/// is the whole of it, so it runs on its own, committed as it ends, rather than inside
/// `BEGIN` and `COMMIT` of its own. Under load a recorder's connection spent about half
/// its time in such a transaction waiting for the dispatcher's next message; one round
/// trip instead of three holds the rows' locks, and the claims' capacity, for less time.
/// (Nothing else needs the transaction: with no lane released, the statement claims no
/// lane's next alert, so there is nothing to read back in it.)
async fn record_routine_batch(
    pool: &PgPool,
    batch: &[Completion],
    columns: &CompletionColumns,
) -> Result<Vec<Recorded>, StoreError> {
    // `return` ends the process before the completion reaches the database, as a crash
    // inside the transaction before its commit would leave it.
    fail::fail_point!("complete-before-commit", |_| std::process::abort());
    let applied: HashSet<(Uuid, i64)> = columns
        .completed()
        .fetch_all(pool)
        .await?
        .into_iter()
        .map(|(alert, token, _, _)| (alert, token))
        .collect();
    Ok(batch
        .iter()
        .map(|done| Recorded {
            applied: applied.contains(&(done.alert_id, done.fencing_token)),
            next: Vec::new(),
        })
        .collect())
}

/// Locks the lane rows that this batch's completions release, before anything else, in
/// the one order every locker of several lanes uses (key in byte order, then destination).
///
/// Why first: an approval joining a lane holds its lane row until it commits, and its
/// outbox row names the tail it found there. Holding the lane row before the batch's
/// statement begins means every member that names a released alert has committed before
/// that statement's snapshot, so the release hands its place to all of them; a member
/// approved later waits for this commit and finds the tail already cleared. Revisions and
/// operators also take the lane row before any outbox row of the lane, so no cycle of
/// waits can form.
async fn lock_released_lanes(
    tx: &mut sqlx::PgConnection,
    batch: &[&Completion],
) -> Result<(), StoreError> {
    let (alerts, keys): (Vec<Uuid>, Vec<&str>) = batch
        .iter()
        .filter_map(|done| Some((done.alert_id, done.released_lane()?)))
        .unzip();
    sqlx::query(
        "SELECT 1 FROM alert_lanes l \
         JOIN (SELECT DISTINCT a.destination_id, i.key \
               FROM unnest($1::uuid[], $2::text[]) AS i(alert_id, key) \
               JOIN alerts a ON a.id = i.alert_id) r \
           ON r.destination_id = l.destination_id AND r.key = l.ordering_key \
         ORDER BY l.ordering_key COLLATE \"C\", l.destination_id \
         FOR UPDATE OF l",
    )
    .bind(&alerts)
    .bind(&keys)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The longest response excerpt kept, in characters (as the statement's `left()` counts).
const RESPONSE_EXCERPT_CHARS: usize = 1000;

/// A time at the database's precision (microseconds), as it will be stored.
fn to_micros(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(at.timestamp_micros()).unwrap_or(at)
}

/// The completion statement with its arrays bound ([`CompletionColumns::completed`]).
type CompletedQuery<'c> = sqlx::query::QueryAs<
    'c,
    sqlx::Postgres,
    (Uuid, i64, Option<Uuid>, Option<i64>),
    sqlx::postgres::PgArguments,
>;

/// [`Completion`]s turned into one array per column, for `unnest`.
#[derive(Default)]
struct CompletionColumns {
    alert_id: Vec<Uuid>,
    fencing_token: Vec<i64>,
    worker: Vec<String>,
    attempt: Vec<Option<i32>>,
    kind: Vec<Option<&'static str>>,
    started_at: Vec<Option<DateTime<Utc>>>,
    outcome: Vec<Option<&'static str>>,
    http_status: Vec<Option<i16>>,
    destination_reference: Vec<Option<String>>,
    error_class: Vec<Option<String>>,
    response_excerpt: Vec<Option<String>>,
    requeue_status: Vec<Option<&'static str>>,
    requeue_at: Vec<Option<DateTime<Utc>>>,
    settle: Vec<Option<&'static str>>,
    settle_reference: Vec<Option<String>>,
    to_state: Vec<&'static str>,
    line: Vec<String>,
    release_lane: Vec<Option<String>>,
    hand_on_lease_ms: Vec<Option<i64>>,
    finished_at: Vec<DateTime<Utc>>,
    head_seen: Vec<Option<Vec<u8>>>,
    attempt_hash: Vec<Option<Vec<u8>>>,
    payload_sha256: Vec<Option<Vec<u8>>>,
}

impl CompletionColumns {
    /// The completion statement over these columns (`lifecycle::COMPLETE_BATCH`): per
    /// completion whose claim was current, `(alert_id, fencing_token, next_alert,
    /// next_token)`.
    fn completed(&self) -> CompletedQuery<'_> {
        sqlx::query_as(COMPLETE_BATCH.as_str())
            .bind(&self.alert_id)
            .bind(&self.fencing_token)
            .bind(&self.worker)
            .bind(&self.attempt)
            .bind(&self.kind)
            .bind(&self.started_at)
            .bind(&self.outcome)
            .bind(&self.http_status)
            .bind(&self.destination_reference)
            .bind(&self.error_class)
            .bind(&self.response_excerpt)
            .bind(&self.requeue_status)
            .bind(&self.requeue_at)
            .bind(&self.settle)
            .bind(&self.settle_reference)
            .bind(&self.to_state)
            .bind(&self.line)
            .bind(&self.release_lane)
            .bind(&self.hand_on_lease_ms)
            .bind(&self.finished_at)
            .bind(&self.head_seen)
            .bind(&self.attempt_hash)
            .bind(&self.payload_sha256)
    }

    fn of(batch: &[&Completion], hand_on: Option<Duration>) -> Self {
        let lease_ms = hand_on.map(|lease| i64::try_from(lease.as_millis()).unwrap_or(i64::MAX));
        // One finish time for the batch, at the database's precision, so that the time
        // hashed here is the time stored.
        let finished_at = to_micros(Utc::now());
        let mut c = CompletionColumns::default();
        for done in batch {
            let attempt = done.attempt.as_ref();
            let started_at = attempt.map(|a| to_micros(a.started_at));
            let response_excerpt =
                attempt
                    .and_then(|a| a.response_excerpt.as_deref())
                    .map(|excerpt| {
                        excerpt
                            .chars()
                            .take(RESPONSE_EXCERPT_CHARS)
                            .collect::<String>()
                    });
            c.alert_id.push(done.alert_id);
            c.fencing_token.push(done.fencing_token);
            c.worker.push(done.worker.clone());
            c.attempt.push(attempt.map(|a| a.attempt));
            c.kind.push(attempt.map(|a| a.kind.as_str()));
            c.started_at.push(started_at);
            c.outcome.push(attempt.map(|a| a.outcome.as_str()));
            c.http_status
                .push(attempt.and_then(|a| a.http_status).map(|s| s as i16));
            c.destination_reference
                .push(attempt.and_then(|a| a.destination_reference.clone()));
            c.error_class
                .push(attempt.and_then(|a| a.error_class.clone()));
            c.finished_at.push(finished_at);
            let linked = attempt.zip(done.chain_seen.as_ref()).and_then(|(a, seen)| {
                let facts = AttemptFacts {
                    attempt: a.attempt,
                    attempt_kind: a.kind,
                    worker: done.worker.clone(),
                    fencing_token: done.fencing_token,
                    started_at_micros: a.started_at.timestamp_micros(),
                    finished_at_micros: finished_at.timestamp_micros(),
                    idempotency_key: done.alert_id.to_string(),
                    payload_sha256: seen.payload_sha256,
                    outcome: a.outcome.as_str().to_owned(),
                    http_status: a.http_status.map(|s| s as i16),
                    destination_reference: a.destination_reference.clone(),
                    error_class: a.error_class.clone(),
                    response_excerpt: response_excerpt.clone(),
                    to_state: Some(done.next.state().as_str().to_owned()),
                    line: Some(done.line.clone()),
                };
                // An entry the encoding refuses (it cannot be: every name is fixed) is
                // left to the database, which links what it stores.
                let hash = link(&seen.head, &EntryFacts::Attempt(facts).record()).ok()?;
                Some((seen.head.to_vec(), hash.to_vec()))
            });
            let (head_seen, attempt_hash) = linked.unzip();
            c.head_seen.push(head_seen);
            c.attempt_hash.push(attempt_hash);
            c.payload_sha256.push(
                done.chain_seen
                    .as_ref()
                    .map(|seen| seen.payload_sha256.to_vec()),
            );
            c.response_excerpt.push(response_excerpt);
            match &done.next {
                Next::Settle { outcome, reference } => {
                    c.requeue_status.push(None);
                    c.requeue_at.push(None);
                    c.settle.push(Some(outcome.as_str()));
                    c.settle_reference.push(reference.clone());
                }
                Next::Requeue { status, at } => {
                    c.requeue_status.push(Some(status.as_str()));
                    c.requeue_at.push(Some(*at));
                    c.settle.push(None);
                    c.settle_reference.push(None);
                }
            }
            c.to_state.push(done.next.state().as_str());
            c.line.push(done.line.clone());
            c.release_lane.push(done.released_lane().map(str::to_owned));
            // A completion that disables its destination sends nothing more there.
            c.hand_on_lease_ms.push(
                lease_ms.filter(|_| {
                    done.released_lane().is_some() && done.disable_destination.is_none()
                }),
            );
        }
        c
    }
}

/// Records one finished attempt or lookup on its own, fenced (a lookup whose finding led
/// to a resend). Returns `false` when the claim is no longer current.
pub async fn record_attempt(
    db: impl PgExecutor<'_>,
    alert_id: Uuid,
    fencing_token: i64,
    worker: &str,
    attempt: &AttemptRecord,
) -> Result<bool, StoreError> {
    let inserted = sqlx::query(&format!(
        "{ATTEMPT_INSERT} \
         SELECT o.alert_id, $4, $5, $3, $2, $6, now(), o.alert_id::text, a.payload_sha256, \
                $7, $8, $9, $10, left($11, 1000), NULL, NULL \
         FROM outbox o JOIN alerts a ON a.id = o.alert_id \
         WHERE o.alert_id = $1 AND o.fencing_token = $2 AND o.status = {sending}",
        sending = LiveStatus::Sending.sql(),
    ))
    .bind(alert_id)
    .bind(fencing_token)
    .bind(worker)
    .bind(attempt.attempt)
    .bind(attempt.kind)
    .bind(attempt.started_at)
    .bind(attempt.outcome)
    .bind(attempt.http_status.map(|s| s as i16))
    .bind(&attempt.destination_reference)
    .bind(&attempt.error_class)
    .bind(&attempt.response_excerpt)
    .execute(db)
    .await?;
    Ok(inserted.rows_affected() == 1)
}
