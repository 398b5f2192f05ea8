//! The dispatcher's statements: claim due rows, sweep expired leases, start a resend,
//! record outcomes, release unsent claims, queue figures. Wake-ups are `crate::wake_ups`'.
//!
//! Ordering rule: "attempt N started" is committed by the claim (or by [`begin_resend`])
//! before any byte goes to the destination; a crash mid-send therefore always leaves a
//! `sending` row whose lease runs out, which the sweep turns into `uncertain`.
//!
//! Fencing: every claim draws a fresh token from a sequence. Completions and releases
//! apply only while the row is still `sending` under that token, so a worker that stalled
//! past its lease (and was replaced) changes nothing when it wakes up.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use std::sync::LazyLock;
use std::time::Duration;
use uuid::Uuid;

use outbox_core::{
    AlertState, AttemptKind, AttemptOutcome, DestinationKind, LiveStatus, OnUncertain, Outcome,
};

use crate::lifecycle::{requeue_assignments, ATTEMPT_INSERT, COMPLETE_BATCH, EVENT_INSERT};
use crate::sql_names::{sql_list, SqlName};
use crate::StoreError;

/// The error class of a lookup that settled nothing (no answer, or one other than found
/// or not found). [`claim`] counts these per attempt, by this name in its SQL.
pub const FAILED_LOOKUP: &str = "lookup_failed";

/// A row a dispatcher now holds, with everything needed to act on it without another
/// query: the stored payload and the destination's capabilities. Its `Debug` leaves out
/// the secrets, the payload and the URL's credentials.
#[derive(Clone, sqlx::FromRow)]
pub struct ClaimedAlert {
    /// The alert (notification id, idempotency key).
    pub alert_id: Uuid,
    /// This claim's fencing token.
    pub fencing_token: i64,
    /// Attempts started so far, counting the one this claim starts (for a pending row).
    pub attempts: i32,
    /// `Pending` (send it) or `Uncertain` (settle the last attempt first).
    #[sqlx(try_from = "String")]
    pub claimed_from: LiveStatus,
    /// When this claim's lease runs out (database clock).
    pub lease_expires_at: DateTime<Utc>,
    /// The database clock at the claim, the start of the lease.
    pub db_now: DateTime<Utc>,
    /// The payload's exact bytes.
    pub payload: String,
    /// When the retry budget started: the approval, or the latest replay (or operator's
    /// "not delivered"). The retry window runs from here.
    pub budget_since: DateTime<Utc>,
    /// Attempts made before the budget started (a replay keeps counting attempt numbers).
    pub budget_base_attempts: i32,
    /// When the alert was approved.
    pub alert_created_at: DateTime<Utc>,
    /// Start of the first send attempt that used this key (uncertain rows only).
    pub first_send_started_at: Option<DateTime<Utc>>,
    /// Start of the latest send attempt (uncertain rows only).
    pub last_send_started_at: Option<DateTime<Utc>>,
    /// Lookups that failed (no answer, or an answer other than found / not found) while
    /// settling the current attempt since the budget started (uncertain rows only, else 0).
    pub failed_lookups: i64,
    /// When the first of those failed lookups started.
    pub first_failed_lookup_at: Option<DateTime<Utc>>,
    /// The destination.
    pub destination_id: Uuid,
    /// Its name.
    pub destination: String,
    /// Webhook or email.
    #[sqlx(try_from = "String")]
    pub kind: DestinationKind,
    /// Where to POST, or the SMTP relay (`smtp://host:port`) of an email destination.
    pub url: String,
    /// The secrets that sign now, as stored (`whsec_...` or sealed `enc:v1:...`): the
    /// current ones, and those a rotation replaced while its overlap runs.
    pub signing_secrets: Vec<String>,
    /// Header for the notification id.
    pub idempotency_header: String,
    /// De-duplication window in seconds, if the destination de-duplicates.
    pub idempotency_retention_secs: Option<f64>,
    /// Lookup URL template, if any.
    pub lookup_url_template: Option<String>,
    /// Header with the destination's reference, else body field `id`.
    pub reference_header: Option<String>,
    /// What to do with an uncertain send nothing else can settle.
    #[sqlx(try_from = "String")]
    pub on_uncertain: OnUncertain,
    /// Request timeout in milliseconds.
    pub timeout_ms: i32,
    /// Concurrency limit for this destination.
    pub max_in_flight: i32,
    /// Most send attempts.
    pub max_attempts: i32,
    /// Longest time from approval to the last retry, in seconds.
    pub max_retry_window_secs: f64,
    /// A webhook's body template, when it speaks to an HTTP email API: then the request
    /// body is the alert rendered once by it and stored, not the payload.
    pub body_template: Option<String>,
    /// The API key sent as `Authorization: Bearer`, as stored (sealed or plain).
    pub bearer_token: Option<String>,
}

impl std::fmt::Debug for ClaimedAlert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimedAlert")
            .field("alert_id", &self.alert_id)
            .field("fencing_token", &self.fencing_token)
            .field("attempts", &self.attempts)
            .field("claimed_from", &self.claimed_from)
            .field("destination", &self.destination)
            .field("url", &outbox_core::redact::url(&self.url))
            .field("signing_secrets", &self.signing_secrets.len())
            .field("body_template", &self.body_template)
            .finish_non_exhaustive()
    }
}

/// The claim statement ([`claim`]). The states are written in as literals (`crate::sql_names`):
/// `outbox_due_idx` is a partial index on the due statuses, which only a constant matches.
static CLAIM: LazyLock<String> = LazyLock::new(|| {
    format!(
            "WITH full_destinations AS ( \
                 SELECT s.destination_id \
                 FROM (SELECT destination_id, count(*) AS in_flight FROM outbox \
                       WHERE status = {sending} GROUP BY destination_id) s \
                 JOIN destinations d ON d.id = s.destination_id \
                 WHERE s.in_flight >= d.max_in_flight \
             ), candidates AS ( \
                 SELECT o.alert_id, o.destination_id, o.next_attempt_at \
                 FROM outbox o JOIN destinations d ON d.id = o.destination_id \
                 WHERE o.status IN ({due}) AND o.next_attempt_at <= now() \
                   AND d.enabled AND o.destination_id <> ALL($4::uuid[]) \
                   AND o.destination_id NOT IN (SELECT f.destination_id FROM full_destinations f) \
                   AND (o.after_alert IS NULL \
                        OR NOT EXISTS (SELECT 1 FROM outbox p WHERE p.alert_id = o.after_alert)) \
                 ORDER BY o.next_attempt_at \
                 LIMIT $1 \
             ), room AS ( \
                 SELECT c.destination_id, outbox_claim_room(c.destination_id, d.max_in_flight) AS room \
                 FROM (SELECT DISTINCT destination_id FROM candidates) c \
                 JOIN destinations d ON d.id = c.destination_id \
             ), chosen AS ( \
                 SELECT c.alert_id \
                 FROM (SELECT alert_id, destination_id, row_number() OVER ( \
                           PARTITION BY destination_id ORDER BY next_attempt_at, alert_id) AS place \
                       FROM candidates) c \
                 JOIN room r ON r.destination_id = c.destination_id \
                 WHERE c.place <= r.room \
             ), due AS ( \
                 SELECT o.alert_id FROM outbox o \
                 WHERE o.alert_id = ANY(ARRAY(SELECT alert_id FROM chosen)) \
                   AND o.status IN ({due}) AND o.next_attempt_at <= now() \
                 FOR UPDATE OF o SKIP LOCKED \
             ), claimed AS ( \
                 UPDATE outbox o SET \
                     status = {sending}, \
                     lease_owner = $2, \
                     lease_expires_at = now() + greatest($3 * interval '1 millisecond', \
                         (2 * (SELECT d.timeout_ms FROM destinations d WHERE d.id = o.destination_id) \
                          + 1000) * interval '1 millisecond'), \
                     fencing_token = nextval('outbox_fencing_token_seq'), \
                     send_started_at = CASE WHEN o.status = {pending} THEN now() END, \
                     attempts = o.attempts + CASE WHEN o.status = {pending} THEN 1 ELSE 0 END \
                 WHERE o.alert_id = ANY(ARRAY(SELECT alert_id FROM due)) \
                 RETURNING o.alert_id, o.fencing_token, o.attempts, o.lease_expires_at, \
                     o.budget_since, o.budget_base_attempts, \
                     CASE WHEN o.send_started_at IS NOT NULL THEN {pending} ELSE {uncertain} END \
                         AS claimed_from \
             ), started AS ( \
                 {EVENT_INSERT} \
                 SELECT c.alert_id, c.claimed_from, {sending}, c.attempts, 'dispatcher:' || $2, \
                        format('claimed to settle uncertain attempt %s', c.attempts) \
                 FROM claimed c WHERE c.claimed_from = {uncertain} \
             ) \
             SELECT c.alert_id, c.fencing_token, c.attempts, c.claimed_from, c.lease_expires_at, \
                    now() AS db_now, \
                    a.payload::text AS payload, c.budget_since, \
                    c.budget_base_attempts, a.created_at AS alert_created_at, \
                    CASE WHEN c.claimed_from = {uncertain} THEN \
                        (SELECT min(da.started_at) FROM delivery_attempts da \
                         WHERE da.alert_id = c.alert_id AND da.kind = {send}) END AS first_send_started_at, \
                    CASE WHEN c.claimed_from = {uncertain} THEN \
                        (SELECT max(da.started_at) FROM delivery_attempts da \
                         WHERE da.alert_id = c.alert_id AND da.kind = {send}) END AS last_send_started_at, \
                    CASE WHEN c.claimed_from = {uncertain} THEN \
                        (SELECT count(*) FROM delivery_attempts da \
                         WHERE da.alert_id = c.alert_id AND da.kind = {lookup} AND da.attempt = c.attempts \
                           AND da.error_class = '{FAILED_LOOKUP}' AND da.started_at >= c.budget_since) \
                         ELSE 0 END AS failed_lookups, \
                    CASE WHEN c.claimed_from = {uncertain} THEN \
                        (SELECT min(da.started_at) FROM delivery_attempts da \
                         WHERE da.alert_id = c.alert_id AND da.kind = {lookup} AND da.attempt = c.attempts \
                           AND da.error_class = '{FAILED_LOOKUP}' AND da.started_at >= c.budget_since) \
                         END AS first_failed_lookup_at, \
                    d.id AS destination_id, d.name AS destination, d.kind, d.url, \
                    d.signing_secrets || CASE WHEN d.retiring_until > now() \
                        THEN d.retiring_signing_secrets ELSE '{{}}'::text[] END AS signing_secrets, \
                    d.idempotency_header, \
                    extract(epoch FROM d.idempotency_retention)::float8 AS idempotency_retention_secs, \
                    d.lookup_url_template, d.reference_header, d.on_uncertain, d.timeout_ms, \
                    d.max_in_flight, d.max_attempts, \
                    extract(epoch FROM d.max_retry_window)::float8 AS max_retry_window_secs, \
                    d.body_template, d.bearer_token \
             FROM claimed c \
             JOIN alerts a ON a.id = c.alert_id \
             JOIN destinations d ON d.id = a.destination_id",
        pending = LiveStatus::Pending.sql(),
        sending = LiveStatus::Sending.sql(),
        uncertain = LiveStatus::Uncertain.sql(),
        due = sql_list(DUE),
        send = AttemptKind::Send.sql(),
        lookup = AttemptKind::Lookup.sql(),
    )
});

/// Claims up to `limit` due rows (pending, or uncertain and due for resolution) of enabled
/// destinations, oldest due first, skipping rows other dispatchers hold and revisions
/// queued behind an earlier revision that is still live (`after_alert`: a correction is
/// never delivered before what it corrects has settled). One statement
/// commits the claim, the lease and "attempt N started": the row's attempt count, start
/// time and lease owner, which is what the lease sweep turns into an uncertain attempt
/// with its evidence line if the dispatcher never reports back. The finished attempt's
/// row (`delivery_attempts`) carries the start time, the worker and the evidence line (its
/// outcome); so a routine delivery writes no evidence row of its own. Claims that settle an uncertain
/// attempt do write a line, since they may lead to a resend. The lease is
/// at least `lease`, and always longer than two request timeouts of the destination (plus a second).
///
/// **In-flight bound, across processes.** A claim never leaves more than a destination's
/// `max_in_flight` rows in `sending`, counting every dispatcher's: those are the rows a
/// crash can leave uncertain there. The statement works in four steps:
/// 1. `candidates`: the oldest due rows, up to `limit`, not locked yet; destinations
///    already at their bound by the statement's snapshot (`full_destinations`, counted
///    from the small `sending` set, `outbox_lease_idx`) are left out, so that a full
///    destination's backlog does not fill the window. That count is only a hint: the
///    snapshot may be stale. It is written `NOT IN (subquery)`, which PostgreSQL computes
///    once as a hashed set: as a correlated `NOT EXISTS` it made the claim of 500 rows
///    from a 100,000 backlog take about 200 ms instead of 1 ms.
/// 2. `room`: for each destination among them, `outbox_claim_room` (migration
///    20261203000021) tries the destination's transaction-scoped advisory lock (a second
///    claimer skips the destination for this round rather than wait) and, holding it,
///    counts its `sending` rows with a fresh snapshot. The lock is held until this
///    statement commits, so the next claimer's count includes these claims.
/// 3. `chosen`: each destination's oldest candidates, as many as its room.
/// 4. `due`: those rows locked (`SKIP LOCKED`), the due condition checked again on the
///    newest row version (a row another claim took since the snapshot is skipped).
///
/// So claims may come back smaller than `limit` (or empty) while rows are due: a
/// destination's rows wait in `pending` rather than in `sending`.
///
/// `saturated` lists destinations this dispatcher leaves out of this claim (for example
/// one it has just seen answer 410 Gone); their rows are left for later or for other
/// dispatchers.
pub async fn claim(
    db: impl PgExecutor<'_>,
    worker: &str,
    limit: i64,
    lease: Duration,
    saturated: &[Uuid],
) -> Result<Vec<ClaimedAlert>, StoreError> {
    let rows = sqlx::query_as::<_, ClaimedAlert>(&CLAIM)
        .bind(limit)
        .bind(worker)
        .bind(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX))
        .bind(saturated)
        .fetch_all(db)
        .await?;
    Ok(rows)
}

/// Turns `sending` rows whose lease has expired into `uncertain`: their dispatcher died or
/// stalled after committing "attempt N started", so the send may have happened. Records
/// the attempt as uncertain, with its evidence line in the attempt row (a lookup's
/// lease, which started no send, gets an evidence line of its own). The actor is the
/// dispatcher whose lease expired. Returns how many rows it moved.
pub async fn sweep_expired_leases(db: impl PgExecutor<'_>, limit: i64) -> Result<u64, StoreError> {
    let moved: i64 = sqlx::query_scalar(&format!(
        "WITH expired AS ( \
             SELECT o.alert_id, o.attempts, o.lease_owner, o.fencing_token, o.send_started_at \
             FROM outbox o \
             WHERE o.status = {sending} AND o.lease_expires_at < now() \
             ORDER BY o.lease_expires_at \
             LIMIT $1 \
             FOR UPDATE SKIP LOCKED \
         ), moved AS ( \
             UPDATE outbox o SET {requeue} \
             FROM expired e WHERE o.alert_id = e.alert_id \
             RETURNING o.alert_id \
         ), recorded AS ( \
             {ATTEMPT_INSERT} \
             SELECT e.alert_id, e.attempts, {send}, e.lease_owner, e.fencing_token, \
                    e.send_started_at, now(), e.alert_id::text, a.payload_sha256, \
                    {attempt_uncertain}, NULL, NULL, 'lease_expired', NULL, {uncertain}, \
                    format('lease expired during attempt %s; the send may have happened; \
destination acceptance unknown', e.attempts) \
             FROM expired e JOIN alerts a ON a.id = e.alert_id \
             WHERE e.send_started_at IS NOT NULL \
         ), explained AS ( \
             {EVENT_INSERT} \
             SELECT e.alert_id, {sending}, {uncertain}, e.attempts, 'dispatcher:' || e.lease_owner, \
                    format('lease expired while settling attempt %s; still uncertain', e.attempts) \
             FROM expired e WHERE e.send_started_at IS NULL \
         ) \
         SELECT count(*) FROM moved",
        requeue = requeue_assignments(&LiveStatus::Uncertain.sql(), "now()"),
        sending = LiveStatus::Sending.sql(),
        uncertain = LiveStatus::Uncertain.sql(),
        send = AttemptKind::Send.sql(),
        attempt_uncertain = AttemptOutcome::Uncertain.sql(),
    ))
    .bind(limit)
    .fetch_one(db)
    .await?;
    Ok(u64::try_from(moved).unwrap_or(0))
}

/// Starts a resend of a claimed uncertain row (same key, same payload): commits
/// "attempt N started" with the reason before the send, and flags the alert as a possible
/// duplicate when nothing rules a duplicate out. Returns the new attempt number, or `None`
/// when the claim is no longer ours.
pub async fn begin_resend(
    db: impl PgExecutor<'_>,
    alert_id: Uuid,
    fencing_token: i64,
    worker: &str,
    why: &str,
    possible_duplicate: bool,
) -> Result<Option<i32>, StoreError> {
    let attempt = sqlx::query_scalar::<_, i32>(&format!(
        "WITH resend AS ( \
             UPDATE outbox SET attempts = attempts + 1, send_started_at = now() \
             WHERE alert_id = $1 AND fencing_token = $2 AND status = {sending} \
             RETURNING alert_id, attempts \
         ), flagged AS ( \
             UPDATE alerts SET possible_duplicate = true \
             WHERE id IN (SELECT alert_id FROM resend) AND $5 \
         ), started AS ( \
             {EVENT_INSERT} \
             SELECT alert_id, {sending}, {sending}, attempts, 'dispatcher:' || $3, \
                    format('attempt %s started: %s', attempts, $4::text) \
             FROM resend \
         ) \
         SELECT attempts FROM resend",
        sending = LiveStatus::Sending.sql(),
    ))
    .bind(alert_id)
    .bind(fencing_token)
    .bind(worker)
    .bind(why)
    .bind(possible_duplicate)
    .fetch_optional(db)
    .await?;
    Ok(attempt)
}

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
/// after its outbox row (the order operators' commands take too). The lock is taken in a
/// `LATERAL` probe per input row, which pins the plan to one primary-key lookup each
/// whatever the statistics say about how many rows are `sending`. (A fencing token is set
/// only while a row is `sending`, a CHECK constraint holds that, so the token match is the
/// fence; naming the status as well would invite the planner onto the lease index.)
pub async fn complete_batch(pool: &PgPool, batch: &[Completion]) -> Result<Vec<bool>, StoreError> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    // Rows are locked in input order, one index probe each: sorted by alert, so that
    // concurrent recorders lock in the same order and never deadlock.
    let mut sorted: Vec<&Completion> = batch.iter().collect();
    sorted.sort_by_key(|done| done.alert_id);
    let columns = CompletionColumns::of(&sorted);
    let mut tx = pool.begin().await?;
    let applied: Vec<(Uuid, i64)> = sqlx::query_as(COMPLETE_BATCH.as_str())
        .bind(&columns.alert_id)
        .bind(&columns.fencing_token)
        .bind(&columns.worker)
        .bind(&columns.attempt)
        .bind(&columns.kind)
        .bind(&columns.started_at)
        .bind(&columns.outcome)
        .bind(&columns.http_status)
        .bind(&columns.destination_reference)
        .bind(&columns.error_class)
        .bind(&columns.response_excerpt)
        .bind(&columns.requeue_status)
        .bind(&columns.requeue_at)
        .bind(&columns.settle)
        .bind(&columns.settle_reference)
        .bind(&columns.to_state)
        .bind(&columns.line)
        .fetch_all(&mut *tx)
        .await?;
    if applied.is_empty() {
        return Ok(vec![false; batch.len()]);
    }
    // `return` ends the process inside the open transaction, as a crash would.
    fail::fail_point!("complete-before-commit", |_| std::process::abort());
    // Keyed by claim, not alert: a stale completion and the current one of the same
    // alert can meet in one batch.
    let applied: std::collections::HashSet<(Uuid, i64)> = applied.into_iter().collect();
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
        .map(|done| applied.contains(&(done.alert_id, done.fencing_token)))
        .collect())
}

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
}

impl CompletionColumns {
    fn of(batch: &[&Completion]) -> Self {
        let mut c = CompletionColumns::default();
        for done in batch {
            let attempt = done.attempt.as_ref();
            c.alert_id.push(done.alert_id);
            c.fencing_token.push(done.fencing_token);
            c.worker.push(done.worker.clone());
            c.attempt.push(attempt.map(|a| a.attempt));
            c.kind.push(attempt.map(|a| a.kind.as_str()));
            c.started_at.push(attempt.map(|a| a.started_at));
            c.outcome.push(attempt.map(|a| a.outcome.as_str()));
            c.http_status
                .push(attempt.and_then(|a| a.http_status).map(|s| s as i16));
            c.destination_reference
                .push(attempt.and_then(|a| a.destination_reference.clone()));
            c.error_class
                .push(attempt.and_then(|a| a.error_class.clone()));
            c.response_excerpt
                .push(attempt.and_then(|a| a.response_excerpt.clone()));
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

/// Gives back a claim that was never acted on (shutdown, a destination disabled meanwhile,
/// a lease too short for the send): the row returns to the state it was claimed from, and
/// a pending row's attempt count is restored, since nothing was sent. `why` goes into the
/// evidence. Fenced like a completion.
pub async fn release(
    db: impl PgExecutor<'_>,
    claim: &ClaimedAlert,
    worker: &str,
    why: &str,
) -> Result<bool, StoreError> {
    let released = sqlx::query_scalar::<_, Uuid>(&format!(
        "WITH released AS ( \
             UPDATE outbox o SET {requeue}, \
                 attempts = o.attempts - CASE WHEN $3 = {pending} THEN 1 ELSE 0 END \
             WHERE o.alert_id = $1 AND o.fencing_token = $2 AND o.status = {sending} \
             RETURNING o.alert_id, o.attempts \
         ), explained AS ( \
             {EVENT_INSERT} \
             SELECT alert_id, {sending}, $3, NULL, 'dispatcher:' || $4, \
                    format('claim given back: %s; nothing was sent; back to %s', $5::text, $3) \
             FROM released \
         ) \
         SELECT alert_id FROM released",
        requeue = requeue_assignments("$3", "now()"),
        pending = LiveStatus::Pending.sql(),
        sending = LiveStatus::Sending.sql(),
    ))
    .bind(claim.alert_id)
    .bind(claim.fencing_token)
    .bind(claim.claimed_from)
    .bind(worker)
    .bind(why)
    .fetch_optional(db)
    .await?;
    Ok(released.is_some())
}

/// Whether any live row of an enabled destination is due now or within `horizon`
/// (counting a `sending` row as due when its lease runs out): what `--drain` waits for.
pub async fn work_due_within(
    db: impl PgExecutor<'_>,
    horizon: Duration,
) -> Result<bool, StoreError> {
    let due: bool = sqlx::query_scalar(&format!(
        "SELECT EXISTS ( \
             SELECT 1 FROM outbox o JOIN destinations d ON d.id = o.destination_id \
             WHERE d.enabled \
               AND CASE WHEN o.status = {sending} THEN o.lease_expires_at ELSE o.next_attempt_at END \
                   <= now() + $1 * interval '1 millisecond' \
               AND (o.after_alert IS NULL \
                    OR NOT EXISTS (SELECT 1 FROM outbox p WHERE p.alert_id = o.after_alert)))",
        sending = LiveStatus::Sending.sql(),
    ))
    .bind(i64::try_from(horizon.as_millis()).unwrap_or(i64::MAX))
    .fetch_one(db)
    .await?;
    Ok(due)
}

/// The age in seconds of the oldest row that is due and that no dispatcher holds (NULL
/// when there is none): `/metrics` and `outboxctl stats` both show it.
pub(crate) static OLDEST_DUE_AGE_SECS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT extract(epoch FROM now() - min(next_attempt_at))::float8 FROM outbox \
         WHERE status IN ({due}) AND next_attempt_at <= now()",
        due = sql_list(DUE),
    )
});

/// The statuses a row is due in (at its `next_attempt_at`): the predicate of the partial
/// index `outbox_due_idx`.
pub(crate) const DUE: &[LiveStatus] = &[LiveStatus::Pending, LiveStatus::Uncertain];

/// Queue figures for `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct QueueFigures {
    /// Live rows by status.
    pub live: Vec<(LiveStatus, i64)>,
    /// Age in seconds of the oldest row that is due and not being worked on.
    pub oldest_due_age_secs: f64,
    /// Alerts held for an operator.
    pub held: i64,
}

/// Reads the queue figures.
pub async fn queue_figures(pool: &PgPool) -> Result<QueueFigures, StoreError> {
    let live = sqlx::query_as::<_, (String, i64)>(
        "SELECT status, count(*) FROM outbox GROUP BY status ORDER BY status",
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|(status, n)| Ok((status.parse::<LiveStatus>()?, n)))
    .collect::<Result<Vec<_>, StoreError>>()?;
    let oldest: Option<f64> = sqlx::query_scalar(&OLDEST_DUE_AGE_SECS)
        .fetch_one(pool)
        .await?;
    let held: i64 = sqlx::query_scalar("SELECT count(*) FROM alert_outcomes WHERE outcome = $1")
        .bind(Outcome::Held)
        .fetch_one(pool)
        .await?;
    Ok(QueueFigures {
        live,
        oldest_due_age_secs: oldest.unwrap_or(0.0),
        held,
    })
}
