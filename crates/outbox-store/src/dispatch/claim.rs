//! The claim: which rows are due (the predicate of the partial index `outbox_due_idx`), and
//! the one statement that takes them with a lease, within every destination's in-flight
//! bound, and commits "attempt N started".

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, PgPool, Row};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use uuid::Uuid;

use outbox_core::{AttemptKind, DestinationKind, LiveStatus, OnHeadFailed, OnUncertain, Ordering};

use crate::lane_key::LANE_KEY;
use crate::lifecycle::EVENT_INSERT;
use crate::sql_names::{sql_list, SqlName};
use crate::StoreError;

/// The error class of a lookup that settled nothing (no answer, or one other than found
/// or not found). [`claim`] counts these per attempt, by this name in its SQL.
pub const FAILED_LOOKUP: &str = "lookup_failed";

/// A row a dispatcher now holds, with everything needed to act on it without another
/// query: the stored payload and the destination's settings. Its `Debug` leaves out the
/// secrets, the payload and the URL's credentials.
#[derive(Clone)]
pub struct ClaimedAlert {
    /// The alert (notification id, idempotency key).
    pub alert_id: Uuid,
    /// This claim's fencing token.
    pub fencing_token: i64,
    /// Attempts started so far, counting the one this claim starts (for a pending row).
    pub attempts: i32,
    /// `Pending` (send it) or `Uncertain` (settle the last attempt first).
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
    /// The alert's tenant.
    pub tenant_id: Uuid,
    /// The approval's `traceparent`, which every attempt sends again with its own span;
    /// `None` for alerts approved before trace context was kept.
    pub traceparent: Option<String>,
    /// The caller's `tracestate`, if any.
    pub tracestate: Option<String>,
    /// The head of the alert's evidence chain as the claim left it (`None` where it is
    /// not kept), and the fingerprint of its payload: what the completion needs to link
    /// its attempt row in this process ([`ClaimedAlert::chain_seen`]).
    pub chain_head: Option<Vec<u8>>,
    /// SHA-256 of the payload's bytes, as approved.
    pub payload_sha256: Vec<u8>,
    /// The destination's settings, read once per claim for all of the claim's rows that
    /// go to it ([`ClaimedDestination`]).
    pub destination: Arc<ClaimedDestination>,
    /// The lane this alert heads, when its destination orders alerts per key: the
    /// ordering key (the approval's, else the subject). Settling the alert releases the
    /// lane or keeps it waiting ([`super::completion::LaneHead`]).
    pub lane_key: Option<String>,
}

/// A destination's settings as a claim read them: what its rows are sent with. A claim
/// reads each destination once and its rows share it, rather than each row carrying
/// the seventeen columns again (a claim of 500 rows to one destination decoded them 500
/// times: nearly half of the time spent turning claimed rows into [`ClaimedAlert`]s,
/// docs/performance-log.md#item-26-a-destinations-settings-read-once-per-claim). Its
/// `Debug` leaves out the secrets and the URL's credentials.
#[derive(Clone, sqlx::FromRow)]
pub struct ClaimedDestination {
    /// The destination.
    pub id: Uuid,
    /// Its name.
    pub name: String,
    /// Webhook or email.
    pub kind: DestinationKind,
    /// Where to POST; `None` for an email destination (its relay is in
    /// [`crate::rendered::EmailJob`]).
    pub url: Option<String>,
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
    /// Whether the destination lets a lane go on past a head that failed for good
    /// (`on_head_failed = skip`) instead of keeping it for an operator.
    pub lane_skips_failed: bool,
}

impl std::fmt::Debug for ClaimedDestination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimedDestination")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("url", &self.url.as_deref().map(outbox_core::redact::url))
            .field("signing_secrets", &self.signing_secrets.len())
            .field("body_template", &self.body_template)
            .finish_non_exhaustive()
    }
}

impl ClaimedAlert {
    /// The alert's evidence chain as this claim found it, for the completion to link its
    /// attempt row to ([`Completion::chain_seen`](super::Completion)); `None` when the
    /// row keeps no head (then the database links it).
    pub fn chain_seen(&self) -> Option<ChainSeen> {
        Some(ChainSeen {
            head: self.chain_head.as_deref()?.try_into().ok()?,
            payload_sha256: self.payload_sha256.as_slice().try_into().ok()?,
        })
    }
}

/// What a claim saw of its alert's evidence chain: the head its outbox row carried and
/// the payload's fingerprint. The completion stores that fingerprint on its attempt row
/// (with no lookup of the alert) and links the row to `head`; the
/// statement uses that hash only if the row still carries `head` when it is fenced (a
/// line another writer added meanwhile moved it), and links from the row's newest head
/// otherwise (see `lifecycle::COMPLETE_BATCH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainSeen {
    /// The chain's head as the claim found it.
    pub head: [u8; 32],
    /// SHA-256 of the alert's payload.
    pub payload_sha256: [u8; 32],
}

impl std::fmt::Debug for ClaimedAlert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimedAlert")
            .field("alert_id", &self.alert_id)
            .field("fencing_token", &self.fencing_token)
            .field("attempts", &self.attempts)
            .field("claimed_from", &self.claimed_from)
            .field("destination", &self.destination)
            .field("lane_key", &self.lane_key)
            .finish_non_exhaustive()
    }
}

/// The claim statement ([`claim`]). The states are written in as literals (`crate::sql_names`):
/// `outbox_due_idx` is a partial index on the due statuses ([`due_status`]), which only a
/// constant matches.
static CLAIM: LazyLock<String> = LazyLock::new(|| {
    format!(
            "WITH unclaimable AS ( \
                 SELECT s.destination_id \
                 FROM (SELECT destination_id, count(*) AS in_flight FROM outbox \
                       WHERE status = {sending} GROUP BY destination_id) s \
                 JOIN destinations d ON d.id = s.destination_id \
                 WHERE s.in_flight >= d.max_in_flight \
                 UNION ALL \
                 SELECT d.id FROM destinations d WHERE NOT d.enabled \
             ), candidates AS ( \
                 SELECT o.ctid, o.alert_id, o.destination_id, o.next_attempt_at \
                 FROM outbox o \
                 WHERE {due} AND o.next_attempt_at <= now() \
                   AND o.destination_id <> ALL($4::uuid[]) \
                   AND o.destination_id NOT IN (SELECT u.destination_id FROM unclaimable u) \
                   AND (o.after_alert IS NULL \
                        OR NOT EXISTS (SELECT 1 FROM outbox p WHERE p.alert_id = o.after_alert)) \
                 ORDER BY o.next_attempt_at \
                 LIMIT $1 \
             ), room AS ( \
                 SELECT c.destination_id, outbox_claim_room(c.destination_id, d.max_in_flight) AS room \
                 FROM (SELECT DISTINCT destination_id FROM candidates) c \
                 JOIN destinations d ON d.id = c.destination_id \
             ), chosen AS ( \
                 SELECT c.ctid \
                 FROM (SELECT ctid, destination_id, row_number() OVER ( \
                           PARTITION BY destination_id ORDER BY next_attempt_at, alert_id) AS place \
                       FROM candidates) c \
                 JOIN room r ON r.destination_id = c.destination_id \
                 WHERE c.place <= r.room \
             ), due AS ( \
                 SELECT o.ctid FROM outbox o \
                 WHERE o.ctid = ANY(ARRAY(SELECT ctid FROM chosen)) \
                   AND {due} AND o.next_attempt_at <= now() \
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
                 WHERE o.ctid = ANY(ARRAY(SELECT ctid FROM due)) \
                 RETURNING o.alert_id, o.fencing_token, o.attempts, o.lease_expires_at, \
                     o.budget_since, o.budget_base_attempts, o.chain_head, \
                     CASE WHEN o.send_started_at IS NOT NULL THEN {pending} ELSE {uncertain} END \
                         AS claimed_from \
             ), started AS ( \
                 {EVENT_INSERT} \
                 SELECT c.alert_id, c.claimed_from, {sending}, c.attempts, 'dispatcher:' || $2, \
                        format('claimed to settle uncertain attempt %s', c.attempts) \
                 FROM claimed c WHERE c.claimed_from = {uncertain} \
             ) \
             {claimed_rows}",
        pending = LiveStatus::Pending.sql(),
        sending = LiveStatus::Sending.sql(),
        uncertain = LiveStatus::Uncertain.sql(),
        due = due_status("o"),
        claimed_rows = *CLAIMED_ROWS,
    )
});

/// What a dispatcher gets for each row it claimed ([`ClaimedAlert`]'s columns but the
/// destination's settings, which [`with_destinations`] reads once per destination),
/// following a CTE named `claimed` that yields the claimed rows' `alert_id`,
/// `fencing_token`, `attempts`, `claimed_from`, `lease_expires_at`, `budget_since` and
/// `budget_base_attempts`: the payload and, for an uncertain row, what its earlier attempts
/// tell. The claim statement and a completion that claims the next alert of a lane
/// ([`handed_on_claims`]) return the same rows.
static CLAIMED_ROWS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT c.alert_id, c.fencing_token, c.attempts, c.claimed_from, c.lease_expires_at, \
                    now() AS db_now, \
                    a.payload, c.budget_since, \
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
                    a.tenant_id, a.traceparent, a.tracestate, c.chain_head, a.payload_sha256, \
                    a.destination_id, \
                    CASE WHEN a.lane_seq IS NOT NULL AND d.ordering = {per_key} \
                        THEN {LANE_KEY} END AS lane_key \
             FROM claimed c \
             JOIN alerts a ON a.id = c.alert_id \
             JOIN destinations d ON d.id = a.destination_id",
        uncertain = LiveStatus::Uncertain.sql(),
        send = AttemptKind::Send.sql(),
        lookup = AttemptKind::Lookup.sql(),
        per_key = Ordering::PerKey.sql(),
    )
});

/// The settings of the destinations `$1` ([`ClaimedDestination`]'s columns), as the rows
/// claimed for them are sent: the signing secrets are the current ones and, while a
/// rotation's overlap runs, the ones it replaced.
static CLAIMED_DESTINATIONS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT d.id, d.name, d.kind, d.url, \
                d.signing_secrets || CASE WHEN d.retiring_until > now() \
                    THEN d.retiring_signing_secrets ELSE '{{}}'::text[] END AS signing_secrets, \
                d.idempotency_header, \
                date_part('epoch', d.idempotency_retention) AS idempotency_retention_secs, \
                d.lookup_url_template, d.reference_header, d.on_uncertain, d.timeout_ms, \
                d.max_in_flight, d.max_attempts, \
                date_part('epoch', d.max_retry_window) AS max_retry_window_secs, \
                d.body_template, d.bearer_token, \
                d.on_head_failed = {skip} AS lane_skips_failed \
         FROM destinations d WHERE d.id = ANY($1)",
        skip = OnHeadFailed::Skip.sql(),
    )
});

/// The claimed rows (each as [`CLAIMED_ROWS`] projects it) as [`ClaimedAlert`]s, with
/// the settings of their destinations read once per destination, on the same connection
/// right after the rows (in the caller's transaction, if it has one). A destination
/// cannot go away meanwhile: its claimed rows reference it.
async fn with_destinations(
    conn: &mut PgConnection,
    rows: Vec<PgRow>,
) -> Result<Vec<ClaimedAlert>, StoreError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let row_destinations: Vec<Uuid> = rows
        .iter()
        .map(|row| row.try_get("destination_id"))
        .collect::<Result<_, _>>()?;
    let mut ids = row_destinations.clone();
    ids.sort_unstable();
    ids.dedup();
    let destinations: HashMap<Uuid, Arc<ClaimedDestination>> =
        sqlx::query_as::<_, ClaimedDestination>(&CLAIMED_DESTINATIONS)
            .bind(&ids)
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .map(|destination| (destination.id, Arc::new(destination)))
            .collect();
    rows.iter()
        .zip(row_destinations)
        .map(|(row, destination_id)| {
            let destination = destinations.get(&destination_id).cloned().ok_or_else(|| {
                StoreError::Inconsistent(format!(
                    "destination {destination_id} of a claimed row was not found"
                ))
            })?;
            Ok(claimed_alert(row, destination)?)
        })
        .collect()
}

/// One claimed row ([`CLAIMED_ROWS`]) with its destination's settings.
fn claimed_alert(
    row: &PgRow,
    destination: Arc<ClaimedDestination>,
) -> Result<ClaimedAlert, sqlx::Error> {
    Ok(ClaimedAlert {
        alert_id: row.try_get("alert_id")?,
        fencing_token: row.try_get("fencing_token")?,
        attempts: row.try_get("attempts")?,
        claimed_from: row.try_get("claimed_from")?,
        lease_expires_at: row.try_get("lease_expires_at")?,
        db_now: row.try_get("db_now")?,
        payload: row.try_get("payload")?,
        budget_since: row.try_get("budget_since")?,
        budget_base_attempts: row.try_get("budget_base_attempts")?,
        alert_created_at: row.try_get("alert_created_at")?,
        first_send_started_at: row.try_get("first_send_started_at")?,
        last_send_started_at: row.try_get("last_send_started_at")?,
        failed_lookups: row.try_get("failed_lookups")?,
        first_failed_lookup_at: row.try_get("first_failed_lookup_at")?,
        tenant_id: row.try_get("tenant_id")?,
        traceparent: row.try_get("traceparent")?,
        tracestate: row.try_get("tracestate")?,
        chain_head: row.try_get("chain_head")?,
        payload_sha256: row.try_get("payload_sha256")?,
        destination,
        lane_key: row.try_get("lane_key")?,
    })
}

/// The rows a completion claimed as it released their lanes (`taken` in
/// `lifecycle::COMPLETE_BATCH`), read in the completion's own transaction: the
/// [`ClaimedAlert`]s the dispatcher sends next, as a claim returns them.
pub(crate) async fn handed_on_claims(
    conn: &mut PgConnection,
    alerts: &[Uuid],
    fencing_tokens: &[i64],
) -> Result<Vec<ClaimedAlert>, StoreError> {
    let rows = sqlx::query(&HANDED_ON_CLAIMS)
        .bind(alerts)
        .bind(fencing_tokens)
        .fetch_all(&mut *conn)
        .await?;
    with_destinations(conn, rows).await
}

/// [`handed_on_claims`]' statement: the rows by alert and fencing token, as [`CLAIMED_ROWS`]
/// projects them (each a pending row's first claim of its attempt).
static HANDED_ON_CLAIMS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH claimed AS ( \
             SELECT o.alert_id, o.fencing_token, o.attempts, {pending}::text AS claimed_from, \
                    o.lease_expires_at, o.budget_since, o.budget_base_attempts, o.chain_head \
             FROM outbox o \
             JOIN unnest($1::uuid[], $2::int8[]) AS t(alert_id, fencing_token) \
               ON t.alert_id = o.alert_id AND t.fencing_token = o.fencing_token \
         ) \
         {claimed_rows}",
        pending = LiveStatus::Pending.sql(),
        claimed_rows = *CLAIMED_ROWS,
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
///    already at their bound by the statement's snapshot (counted from the small
///    `sending` set, `outbox_lease_idx`) are left out, so that a full destination's
///    backlog does not fill the window, and so are disabled ones: together, the
///    `unclaimable` set. The count is only a hint: the snapshot may be stale. The set is
///    written `NOT IN (subquery)`, which PostgreSQL computes once as a hashed set: as a
///    correlated `NOT EXISTS` it made the claim of 500 rows from a 100,000 backlog take
///    about 200 ms instead of 1 ms. Disabled destinations are in the set rather than
///    joined as `destinations` rows: the generic plan of that join scanned the table
///    again for every candidate row (a sequential scan, rescanned: a file-size `lseek`
///    and a page read per row).
/// 2. `room`: for each destination among them, `outbox_claim_room` (migration
///    20261203000021) tries the destination's transaction-scoped advisory lock (a second
///    claimer skips the destination for this round rather than wait) and, holding it,
///    counts its `sending` rows with a fresh snapshot. The lock is held until this
///    statement commits, so the next claimer's count includes these claims.
/// 3. `chosen`: each destination's oldest candidates, as many as its room.
/// 4. `due`: those rows locked (`SKIP LOCKED`), the due condition checked again on the
///    newest row version (a row another claim took since the snapshot is skipped).
///
/// **Rows found by their address.** After `candidates` found the rows through the due
/// index, `due` and the update reach them by `ctid` (a TID scan) rather than by alert id,
/// which searched the primary key once per row, twice: a claim of 500 rows took about a
/// tenth less time (`pgbench`, the statement alone, alternated;
/// docs/performance-log.md#item-19-the-claim-reaches-its-rows-by-address). A
/// row's address cannot change under the claim: `due` holds its lock until the statement
/// commits, and the update reaches the version `due` locked. A row another transaction
/// changed after this statement's snapshot is locked in its newest version (the due
/// condition checked on it), which the update's scan, with that snapshot, does not see:
/// it stays locked, unclaimed, until this statement commits, and is due for the next
/// claim. Only the returned rows are claimed.
///
/// So claims may come back smaller than `limit` (or empty) while rows are due: a
/// destination's rows wait in `pending` rather than in `sending`.
///
/// **Ordered lanes, and the plan.** A row waiting behind another in its ordered lane has
/// `lane_after` set and is not due ([`due_status`]); it is also outside the partial index
/// `outbox_due_idx`, whose predicate is the due condition. So `candidates` is an index
/// scan of `outbox_due_idx` in `next_attempt_at` order, stopped at `limit` rows, that
/// meets lane heads and unordered rows only: it never reads the waiting members and never
/// searches for heads, however long the lanes are. Finding the next head is the
/// releasing completion's work (`lane_after` handed on, through `outbox_lane_after_idx`),
/// done once per release instead of once per claim. The `due` step checks the condition
/// again on the newest row version, so a row that started waiting since the snapshot is
/// not taken. `the_claim_can_use_the_due_index` holds the planner to the index.
///
/// **The destinations' settings** come with a second, small statement on the same
/// connection, once per destination of the claim ([`ClaimedDestination`]), shared by its
/// rows. It reads them a moment after the claim committed (the claim statement is its own
/// transaction on a pool), which is as current as a read in the claim itself; a
/// destination cannot be deleted meanwhile, since the claimed rows reference it.
///
/// `saturated` lists destinations this dispatcher leaves out of this claim (for example
/// one it has just seen answer 410 Gone); their rows are left for later or for other
/// dispatchers.
pub async fn claim(
    pool: &PgPool,
    worker: &str,
    limit: i64,
    lease: Duration,
    saturated: &[Uuid],
) -> Result<Vec<ClaimedAlert>, StoreError> {
    let mut conn = pool.acquire().await?;
    claim_on(&mut conn, worker, limit, lease, saturated).await
}

/// [`claim`] on a connection of the caller's, in its transaction if it has one open
/// (then the claim commits with it).
pub async fn claim_on(
    conn: &mut PgConnection,
    worker: &str,
    limit: i64,
    lease: Duration,
    saturated: &[Uuid],
) -> Result<Vec<ClaimedAlert>, StoreError> {
    let rows = sqlx::query(&CLAIM)
        .bind(limit)
        .bind(worker)
        .bind(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX))
        .bind(saturated)
        .fetch_all(&mut *conn)
        .await?;
    with_destinations(conn, rows).await
}

/// The text of the claim statement [`claim`] runs, for a tool that shows its plan: the
/// benchmark's `bench explain-lanes` runs it under `EXPLAIN (ANALYZE, BUFFERS)` in a
/// transaction it rolls back. Its parameters are [`claim`]'s, in this order and of these
/// types: `$1` the most rows (`int8`), `$2` the worker (`text`), `$3` the shortest lease
/// in milliseconds (`int8`), `$4` the destinations left out (`uuid[]`). Run as it stands,
/// it claims: only inside a transaction that is rolled back does it change nothing.
pub fn claim_sql() -> &'static str {
    CLAIM.as_str()
}

/// The statuses a row is due in (at its `next_attempt_at`).
const DUE: &[LiveStatus] = &[LiveStatus::Pending, LiveStatus::Uncertain];

/// `status IN ('pending', 'uncertain') AND lane_after IS NULL` on the outbox row named
/// `row` (an alias, or the table's name): the predicate of the partial index
/// `outbox_due_idx`, which the claim and every due figure write, so that the planner can
/// use the index (the tests below hold the two together). A row waiting behind another in
/// its lane (`lane_after`, migration 20261207000001) is not due, and not in the index.
/// Public for the benchmark, whose statements over the queue (and over its copies of the
/// queue's table) say "due" with it.
pub fn due_status(row: &str) -> String {
    format!(
        "{row}.status IN ({}) AND {row}.lane_after IS NULL",
        sql_list(DUE)
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

    use super::*;
    use outbox_testkit::TestDb;

    /// The predicate of a partial index, as PostgreSQL prints it back.
    async fn index_predicate(conn: &mut sqlx::PgConnection, index: &str) -> String {
        sqlx::query_scalar(
            "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i \
             WHERE i.indexrelid = $1::regclass",
        )
        .bind(index)
        .fetch_one(conn)
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn the_due_predicate_is_the_due_index_predicate() {
        let db = TestDb::new().await;
        let mut tx = db.pool.begin().await.unwrap();
        // PostgreSQL reads the claim's predicate the way it read the migration's: an index
        // made with it, inside a transaction that is rolled back, prints the same text.
        sqlx::query(&format!(
            "CREATE INDEX due_predicate_probe ON outbox (next_attempt_at) WHERE {}",
            due_status("outbox")
        ))
        .execute(&mut *tx)
        .await
        .unwrap();
        let claims = index_predicate(&mut tx, "due_predicate_probe").await;
        let migrated = index_predicate(&mut tx, "outbox_due_idx").await;
        tx.rollback().await.unwrap();
        assert_eq!(claims, migrated);
    }

    #[tokio::test]
    async fn the_claim_can_use_the_due_index() {
        let db = TestDb::new().await;
        let mut tx = db.pool.begin().await.unwrap();
        // Without sequential scans, the planner reaches the due rows through an index; the
        // claim takes `outbox_due_idx` only if its predicate implies the index's.
        sqlx::query("SET LOCAL enable_seqscan = off")
            .execute(&mut *tx)
            .await
            .unwrap();
        let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {}", *CLAIM))
            .bind(10_i64)
            .bind("w")
            .bind(60_000_i64)
            .bind(Vec::<Uuid>::new())
            .fetch_all(&mut *tx)
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        let plan = plan.join("\n");
        assert!(plan.contains("outbox_due_idx"), "{plan}");
    }

    /// A dispatcher's pool plans generically (`outbox_dispatcher::POOL_PLANS`): the plan
    /// made without the values must reach the due rows through the partial index too,
    /// which it can only because the states it names are literals.
    #[tokio::test]
    async fn the_claims_generic_plan_can_use_the_due_index() {
        let db = TestDb::new().await;
        let mut tx = db.pool.begin().await.unwrap();
        for setting in [
            "SET LOCAL enable_seqscan = off",
            "SET LOCAL plan_cache_mode = force_generic_plan",
        ] {
            sqlx::query(setting).execute(&mut *tx).await.unwrap();
        }
        sqlx::raw_sql(&format!(
            "PREPARE claim_probe(int8, text, int8, uuid[]) AS {}",
            *CLAIM
        ))
        .execute(&mut *tx)
        .await
        .unwrap();
        let plan: Vec<String> = sqlx::raw_sql("EXPLAIN EXECUTE claim_probe(10, 'w', 60000, '{}')")
            .fetch_all(&mut *tx)
            .await
            .unwrap()
            .iter()
            .map(|row| sqlx::Row::get(row, 0))
            .collect();
        tx.rollback().await.unwrap();
        let plan = plan.join("\n");
        // `$1` in the plan: it was made without the values.
        assert!(plan.contains("$1"), "not a generic plan: {plan}");
        assert!(plan.contains("outbox_due_idx"), "{plan}");
        // The rows claimed are reached by address, not searched for again. (How the
        // locking step reaches them depends on the statistics: on this empty table,
        // through the due index.)
        assert!(plan.contains("Tid Scan on outbox"), "{plan}");
    }
}
