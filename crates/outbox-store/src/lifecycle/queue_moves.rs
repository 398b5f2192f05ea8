//! The moves of the live queue, each written once: an approved alert queued, an alert
//! settled out of the queue, a live row put back with its claim cleared or a settled alert
//! brought back with a fresh budget, and the dispatcher's batch completion built from the
//! same pieces.

use outbox_core::{AlertState, LiveStatus, Ordering, Outcome};
use sqlx::PgConnection;
use std::sync::LazyLock;
use uuid::Uuid;

use super::evidence::{EVENT_INSERT, LINKED_ATTEMPT_INSERT, LINKED_EVENT_INSERT};
use crate::lane_key::LANE_KEY;
use crate::sql_names::SqlName;
use crate::StoreError;

/// Queues newly approved alerts. It follows a CTE named `approved` that yields each new
/// alert's `id`, `destination_id`, `after_alert` (an earlier revision it must wait for, or
/// `NULL`), `lane_after` (the unreleased alert it waits behind in its ordered lane, or
/// `NULL`), `actor`, evidence `line` and `genesis` (where its evidence chain starts:
/// `evidence_genesis` of its row), and adds three: `linked`, the first line of its
/// evidence linked to its chain, `queued`, its outbox row (returning `alert_id`,
/// `next_attempt_at`), and `explained`, that first line (returning `alert_id`, `at`,
/// `line`). An approval through the API, a monitor's batch and a revision all queue
/// through this one fragment, so a new alert is queued and explained alike whichever way
/// it came.
///
/// The first line is linked to the alert's chain here, set-based: the alert is new, so
/// its chain starts at `genesis`, and the insert brings its own hash (the chain's trigger
/// then leaves it alone). That spares each approval the trigger's lookups. The outbox row
/// starts with that hash as its `chain_head`, which the dispatcher's completion links its
/// attempt to. (`linked` is materialized, as a CTE with volatile functions always is, so
/// its time, position and hash are computed once per alert for both inserts.)
pub(crate) static ENQUEUE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "linked AS MATERIALIZED ( \
             SELECT p.id, p.destination_id, p.after_alert, p.lane_after, p.actor, p.line, \
                    stamp.at, nextval('evidence_chain_pos_seq') AS pos, \
                    sha256(p.genesis || evidence_event_bytes(stamp.at, NULL, {pending}, NULL, \
                                                             p.actor, p.line)) AS hash \
             FROM approved p CROSS JOIN LATERAL (SELECT clock_timestamp() AS at) stamp \
         ), queued AS ( \
             INSERT INTO outbox (alert_id, destination_id, after_alert, lane_after, chain_head) \
             SELECT id, destination_id, after_alert, lane_after, hash FROM linked \
             RETURNING alert_id, next_attempt_at \
         ), explained AS ( \
             {LINKED_EVENT_INSERT} \
             SELECT id, NULL, {pending}, NULL, actor, line, at, pos, hash FROM linked \
             RETURNING alert_id, at, line \
         )",
        pending = AlertState::Pending.sql(),
    )
});

/// The tail of [`settle`]'s `INSERT INTO alert_outcomes`: a settled alert has one outcome
/// row. An operator settling a held alert (which already has one) overwrites it, keeping
/// an earlier reference when none is given.
const SETTLE_CONFLICT: &str = "ON CONFLICT (alert_id) DO UPDATE SET \
     outcome = EXCLUDED.outcome, settled_at = EXCLUDED.settled_at, \
     destination_reference = COALESCE(EXCLUDED.destination_reference, \
                                      alert_outcomes.destination_reference)";

/// The `SET` list that puts a live row back in the queue with its claim cleared
/// (`UPDATE outbox o SET ...`): the status it returns to and when it is due, both SQL
/// expressions. The claim's columns go together, as the outbox's CHECK demands.
pub(crate) fn requeue_assignments(status: &str, due: &str) -> String {
    format!(
        "status = {status}, next_attempt_at = {due}, lease_owner = NULL, \
         lease_expires_at = NULL, fencing_token = NULL, send_started_at = NULL"
    )
}

/// Settles one alert: its outbox row goes, its outcome (and reference) is recorded in
/// `alert_outcomes`; the wide alert row is not written. The single-row form of the
/// settling step of [`COMPLETE_BATCH`]; the caller holds the alert's locks (its lane's
/// first, [`lock_lane_of`]) and writes the evidence line in the same transaction.
///
/// Settling as anything but held releases the alert's place in its lane, if it has one
/// ([`LANE_RELEASE`]): the callers are an operator's resolution and a revision's
/// supersede, each a decision that lets the lane go on.
pub async fn settle(
    tx: &mut PgConnection,
    alert_id: Uuid,
    outcome: Outcome,
    reference: Option<&str>,
) -> Result<(), StoreError> {
    // A held alert being resolved has no outbox row: it waited behind nothing.
    let waited_behind: Option<Uuid> =
        sqlx::query_scalar("DELETE FROM outbox WHERE alert_id = $1 RETURNING lane_after")
            .bind(alert_id)
            .fetch_optional(&mut *tx)
            .await?
            .flatten();
    sqlx::query(&format!(
        "INSERT INTO alert_outcomes (alert_id, outcome, destination_reference) \
         VALUES ($1, $2, $3) {SETTLE_CONFLICT}"
    ))
    .bind(alert_id)
    .bind(outcome)
    .bind(reference)
    .execute(&mut *tx)
    .await?;
    // A held alert holds its lane until an operator resolves or replays it.
    if outcome != Outcome::Held {
        sqlx::query(&LANE_RELEASE)
            .bind(alert_id)
            .bind(waited_behind)
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// An alert (`$1`) leaves its lane: the rows waiting behind it wait behind what it
/// waited behind (`$2`; NULL for a head, so they become due), and when it was the lane's
/// tail, the tail becomes what it waited behind too (cleared for a head): a waiting tail
/// superseded by a revision leaves an unreleased alert ahead of it, which the revision
/// (and any later approval) must still wait behind. Nothing happens for an alert in no
/// lane, or in the lane of a destination that no longer orders. The caller holds the
/// lane's row ([`lock_lane_of`]) before any outbox row of the lane. [`COMPLETE_BATCH`]
/// does the same for a batch (whose alerts, claimed, are heads).
static LANE_RELEASE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH lane AS ( \
             {lane_of} \
         ), handed_on AS ( \
             UPDATE outbox o SET lane_after = $2 \
             WHERE o.lane_after = $1 AND EXISTS (SELECT 1 FROM lane) \
         ) \
         UPDATE alert_lanes l SET tail_alert = $2 FROM lane \
         WHERE l.destination_id = lane.destination_id AND l.ordering_key = lane.key \
           AND l.tail_alert = $1",
        lane_of = *LANE_OF,
    )
});

/// The lane of alert `$1` (`destination_id`, `key`), when it is in one at a destination
/// that orders per key: no row otherwise.
pub(crate) static LANE_OF: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT a.destination_id, {LANE_KEY} AS key \
         FROM alerts a JOIN destinations d ON d.id = a.destination_id \
         WHERE a.id = $1 AND a.lane_seq IS NOT NULL AND d.ordering = {per_key}",
        per_key = Ordering::PerKey.sql(),
    )
});

/// Locks the row of the lane alert `$1` is in, if any: what a revision or an operator's
/// transition takes before any outbox or alert row, so that they and the dispatchers'
/// completions (which lock lanes before outbox rows too) wait for each other in one order.
pub async fn lock_lane_of(tx: &mut PgConnection, alert_id: Uuid) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "WITH lane AS ({lane_of}) \
         SELECT 1 FROM alert_lanes l JOIN lane ON l.destination_id = lane.destination_id \
             AND l.ordering_key = lane.key \
         FOR UPDATE OF l",
        lane_of = *LANE_OF,
    ))
    .bind(alert_id)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Back in the queue as pending, due now, with a fresh retry budget; attempt numbers go
/// on from `last_attempt`. The alert's outcome row goes: it is live again. A settled
/// alert's new row takes its chain head from its entries (the caller holds its alert
/// row, as every writer of a settled alert's chain does).
pub async fn requeue_with_fresh_budget(
    tx: &mut PgConnection,
    alert_id: Uuid,
    destination_id: Uuid,
    last_attempt: i32,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM alert_outcomes WHERE alert_id = $1")
        .bind(alert_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(&format!(
        "INSERT INTO outbox AS o (alert_id, destination_id, attempts, budget_base_attempts, \
             chain_head) \
         VALUES ($1, $2, $3, $3, evidence_chain_head($1)) \
         ON CONFLICT (alert_id) DO UPDATE SET {}, budget_since = now(), \
             budget_base_attempts = o.attempts",
        requeue_assignments("$4", "now()")
    ))
    .bind(alert_id)
    .bind(destination_id)
    .bind(last_attempt)
    .bind(LiveStatus::Pending)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Records a batch of dispatcher completions in one statement over `unnest` arrays: the
/// set-based form of the same transitions, for speed (one plan, one round trip per
/// batch). Built from the same pieces as the single-row forms: settling inserts the
/// outcome row after deleting the outbox row, as in [`settle`]; requeueing is
/// [`requeue_assignments`]. The `lifecycle_batch_and_single_row_settle_alike` test holds
/// the batch and [`settle`] to the same rows.
///
/// The outcome row is a plain insert, without [`settle`]'s [`SETTLE_CONFLICT`]: a live
/// alert has no outcome row (an alert brought back deletes its own,
/// [`requeue_with_fresh_budget`]), and only the completion whose fence deleted the live
/// row reaches this insert, so there is never one to overwrite. Should one exist (written
/// behind the product's back), the insert fails and the batch records nothing, rather
/// than replace an outcome already decided; the dispatcher then records the batch's rows
/// one by one, so only that alert's completion fails. (`ON CONFLICT` is a speculative insertion: it wrote one more WAL record per
/// delivery, 48 bytes, to confirm the row.)
///
/// Evidence: a completion that recorded an attempt (or lookup) writes its state and line
/// into that attempt row; [`evidence_trail`](super::evidence_trail) reads them back with
/// the other lines. A completion without one (nothing was sent) writes a line of its own.
///
/// An acceptance writes no outcome row when its attempt row says all of it: the attempt
/// led to `accepted` and carries the reference the alert settles with
/// (`attempt_says_accepted`). Readers take the state from that row ([`STATE_JOINS`]). So
/// a routine delivery costs three row writes (the claim's outbox update, the attempt row,
/// the outbox row's delete) and no evidence row of its own. Every other settlement (held,
/// failed, superseded, or accepted with no attempt row or another reference) writes its
/// outcome row as before.
///
/// The evidence chain: the attempt row (or line) is linked to the alert's chain here,
/// set-based, from the head its outbox row carries (`chain_head`). The fence's `DELETE`
/// or `UPDATE` returns that column from the row's newest version, after any wait for the
/// row, so a line another writer added meanwhile (under the same row's lock) is the head
/// this entry chains from, never a sibling. The dispatcher computes an attempt row's
/// hash itself from the head its claim returned (`head_seen`, `attempt_hash`: SHA-256
/// there costs about a microsecond, where the database spent about 12 µs of its CPU per
/// delivery on the encoding and the hash); the statement takes that hash only where the
/// fenced row still carries `head_seen`, and otherwise links the row itself from the
/// newest head. A requeue's `UPDATE` writes the new head into
/// the row it updates anyway; a settled row needs none. A row without a kept head (NULL)
/// gets NULL here, and the chain's trigger links its entry instead. The lines that say a
/// lane moved past a failed head (`skipped`) are written for other rows, which this
/// statement updates first, and are linked by the trigger.
///
/// Parameters, one array each, in this order: alert_id, fencing_token, worker, attempt,
/// kind, started_at, outcome, http_status, destination_reference, error_class,
/// response_excerpt, requeue_status, requeue_at, settle, settle_reference, to_state, line,
/// release_lane (the lane key when settling releases the alert's lane, else NULL),
/// hand_on_lease_ms (the dispatcher's lease when it takes the next alert of a lane it
/// releases, else NULL), finished_at (the attempt row's finish time, the dispatcher's
/// clock at the batch), head_seen and attempt_hash (the chain head the claim saw and the
/// attempt row's hash linked to it, computed by the dispatcher; NULL to let this
/// statement link it), payload_sha256 (the alert's payload fingerprint as the claim read
/// it; NULL to read it from the alert). Returns `(alert_id, fencing_token, next_alert,
/// next_token)` of every completion whose claim was still current: the next two name the
/// alert behind it that the completion claimed, if it did.
///
/// Fencing and locking: the outbox row's own `DELETE` (to settle) or `UPDATE` (to
/// requeue) is the fence. Each matches the row by alert and fencing token, so a completion
/// whose claim was taken over matches nothing, and only the rows these statements
/// return go on to the attempt, outcome and evidence inserts. Under READ COMMITTED a
/// `DELETE` or `UPDATE` that meets a row another transaction is changing (the lease sweep,
/// an operator) waits for it and checks the token again on the row's newest version, so
/// the fence holds without a `SELECT ... FOR UPDATE` first. That lock was a write of its
/// own (the row's header and a WAL record) on every delivery; without it a delivery
/// writes about 55 bytes less WAL (1,290 to 1,235 B in `bench run --only approvals`).
/// The `a_completion_that_waits_on_a_takeover_writes_nothing` test holds the fence to
/// that.
///
/// Lanes: a settled alert that releases its lane hands its place on in the same
/// statement ([`LANE_RELEASE`]'s set-based form): the rows waiting behind it take its own
/// `lane_after` (NULL for a head, so they are due), and the lane's tail is cleared when it
/// was the tail. The caller holds those lanes' rows already (`lock_released_lanes`), so no
/// member can commit behind the alert after this statement's snapshot. A lane moving on
/// past a failed head (`on_head_failed = skip`) says so in the next alert's trail too.
///
/// Handing on and claiming at once: when the next alert becomes the lane's head and is due
/// ([`HAND_ON_CLAIM`]), the completion claims it for the same dispatcher in the same
/// update (`taken`): status `sending`, a lease, a new fencing token, "attempt N started",
/// exactly as the claim statement writes them. The dispatcher then sends it with the
/// released alert's in-flight slot, so the destination's bound holds without a count. This
/// is what keeps an ordered lane as cheap as an unordered row: the head's one update is
/// both its release from waiting and its claim (no second update of the row, which would
/// be another heap tuple and index entries, about 250 bytes of WAL), and a lane of one key
/// goes on after one commit instead of two (the completion, then a claim).
pub(crate) static COMPLETE_BATCH: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH input AS ( \
             SELECT * FROM unnest($1::uuid[], $2::int8[], $3::text[], $4::int4[], $5::text[], \
                 $6::timestamptz[], $7::text[], $8::int2[], $9::text[], $10::text[], $11::text[], \
                 $12::text[], $13::timestamptz[], $14::text[], $15::text[], $16::text[], $17::text[], \
                 $18::text[], $19::int8[], $20::timestamptz[], $21::bytea[], $22::bytea[], \
                 $23::bytea[]) \
             AS i(alert_id, fencing_token, worker, attempt, kind, started_at, outcome, http_status, \
                  destination_reference, error_class, response_excerpt, requeue_status, requeue_at, \
                  settle, settle_reference, to_state, line, release_lane, hand_on_lease_ms, \
                  finished_at, head_seen, attempt_hash, payload_sha256) \
         ), removed AS ( \
             DELETE FROM outbox o USING input i \
             WHERE o.alert_id = i.alert_id AND o.fencing_token = i.fencing_token \
               AND i.settle IS NOT NULL \
             RETURNING i.alert_id, i.fencing_token, o.destination_id, o.lane_after, \
                       i.release_lane, i.settle, i.worker, i.hand_on_lease_ms, o.chain_head \
         ), handed_on AS ( \
             UPDATE outbox o SET lane_after = r.lane_after \
             FROM removed r JOIN destinations d ON d.id = r.destination_id \
             WHERE r.release_lane IS NOT NULL AND o.lane_after = r.alert_id \
               AND NOT ({takes}) \
             RETURNING o.alert_id, o.status, r.alert_id AS released, r.settle, r.worker \
         ), taken AS ( \
             UPDATE outbox o SET lane_after = NULL, status = {sending_live}, lease_owner = r.worker, \
                 lease_expires_at = now() + greatest(r.hand_on_lease_ms * interval '1 millisecond', \
                     (2 * d.timeout_ms + 1000) * interval '1 millisecond'), \
                 fencing_token = nextval('outbox_fencing_token_seq'), \
                 send_started_at = now(), attempts = o.attempts + 1 \
             FROM removed r JOIN destinations d ON d.id = r.destination_id \
             WHERE r.release_lane IS NOT NULL AND o.lane_after = r.alert_id AND ({takes}) \
             RETURNING o.alert_id, {pending_live} AS status, o.fencing_token, r.alert_id AS released, \
                       r.settle, r.worker \
         ), untailed AS ( \
             UPDATE alert_lanes l SET tail_alert = NULL \
             FROM removed r \
             WHERE r.release_lane IS NOT NULL AND l.destination_id = r.destination_id \
               AND l.ordering_key = r.release_lane AND l.tail_alert = r.alert_id \
         ), skipped AS ( \
             {EVENT_INSERT} \
             SELECT h.alert_id, h.status, h.status, NULL, 'dispatcher:' || h.worker, \
                    format('alert %s before this one in its lane failed for good; the destination skips failed lane heads, so this one no longer waits for it', h.released) \
             FROM (SELECT alert_id, status, released, settle, worker FROM handed_on \
                   UNION ALL SELECT alert_id, status, released, settle, worker FROM taken) h \
             WHERE h.settle = {failed} \
         ), requeued AS ( \
             UPDATE outbox o SET {requeue}, chain_head = CASE WHEN i.kind IS NULL \
                 THEN {requeued_line_hash} \
                 WHEN o.chain_head = i.head_seen THEN i.attempt_hash \
                 ELSE {requeued_attempt_hash} END \
             FROM input i \
             WHERE o.alert_id = i.alert_id AND o.fencing_token = i.fencing_token \
               AND i.requeue_status IS NOT NULL \
             RETURNING i.alert_id, i.fencing_token, o.chain_head \
         ), fenced AS ( \
             SELECT i.*, current_claim.chain_head, current_claim.linked FROM input i \
             JOIN (SELECT alert_id, fencing_token, chain_head, false AS linked FROM removed \
                   UNION ALL SELECT alert_id, fencing_token, chain_head, true FROM requeued) \
                  AS current_claim \
               ON current_claim.alert_id = i.alert_id \
              AND current_claim.fencing_token = i.fencing_token \
         ), recorded AS ( \
             {LINKED_ATTEMPT_INSERT} \
             SELECT f.alert_id, f.attempt, f.kind, f.worker, f.fencing_token, f.started_at, \
                    f.finished_at, \
                    f.alert_id::text, {settled_fingerprint}, f.outcome, f.http_status, \
                    f.destination_reference, f.error_class, left(f.response_excerpt, 1000), \
                    f.to_state, f.line, \
                    CASE WHEN f.chain_head IS NOT NULL THEN nextval('evidence_chain_pos_seq') END, \
                    CASE WHEN f.linked THEN f.chain_head \
                         WHEN f.chain_head = f.head_seen THEN f.attempt_hash \
                         ELSE {settled_attempt_hash} END \
             FROM fenced f \
             WHERE f.kind IS NOT NULL \
         ), settled AS ( \
             INSERT INTO alert_outcomes (alert_id, outcome, destination_reference) \
             SELECT f.alert_id, f.settle, f.settle_reference FROM fenced f \
             WHERE f.settle IS NOT NULL AND NOT ({attempt_says_accepted}) \
         ), explained AS ( \
             {LINKED_EVENT_INSERT} \
             SELECT f.alert_id, {sending}, f.to_state, f.attempt, 'dispatcher:' || f.worker, f.line, \
                    now(), \
                    CASE WHEN f.chain_head IS NOT NULL THEN nextval('evidence_chain_pos_seq') END, \
                    CASE WHEN f.linked THEN f.chain_head ELSE {settled_line_hash} END \
             FROM fenced f WHERE f.kind IS NULL \
         ) \
         SELECT f.alert_id, f.fencing_token, t.alert_id AS next_alert, t.fencing_token AS next_token \
         FROM fenced f LEFT JOIN taken t ON t.released = f.alert_id",
        requeue = requeue_assignments("i.requeue_status", "i.requeue_at"),
        sending = AlertState::Sending.sql(),
        failed = Outcome::Failed.sql(),
        sending_live = LiveStatus::Sending.sql(),
        pending_live = LiveStatus::Pending.sql(),
        takes = *HAND_ON_CLAIM,
        requeued_line_hash = completion_line_hash("o.chain_head", "i"),
        requeued_attempt_hash = completion_attempt_hash(
            "o.chain_head",
            "i",
            &payload_fingerprint("i")
        ),
        settled_line_hash = completion_line_hash("f.chain_head", "f"),
        settled_attempt_hash =
            completion_attempt_hash("f.chain_head", "f", &payload_fingerprint("f")),
        settled_fingerprint = payload_fingerprint("f"),
        attempt_says_accepted = attempt_says_accepted("f"),
    )
});

/// The payload fingerprint of completion `i`'s alert: the one its claim read and the
/// dispatcher passed in (`i.payload_sha256`), so the statement needs no lookup of the alert
/// per delivery; the alert's own where the dispatcher passed none. An alert's payload
/// never changes while it is live (a correction is a new revision, and retention prunes
/// settled alerts only), so the two are the same fingerprint.
fn payload_fingerprint(i: &str) -> String {
    format!(
        "COALESCE({i}.payload_sha256, \
             (SELECT a.payload_sha256 FROM alerts a WHERE a.id = {i}.alert_id))"
    )
}

/// Whether completion `f` (a `fenced` row) settles its alert `accepted` with an attempt
/// row that says all of it: the attempt led to `accepted` and carries the reference the
/// alert settles with. Such a completion writes no outcome row ([`COMPLETE_BATCH`]).
fn attempt_says_accepted(f: &str) -> String {
    format!(
        "{f}.kind IS NOT NULL AND {f}.settle = {accepted} AND {f}.to_state = {accepted} \
         AND {f}.settle_reference IS NOT DISTINCT FROM {f}.destination_reference",
        accepted = Outcome::Accepted.sql()
    )
}

/// The chain hash of a completion's attempt row, linked to `head` (NULL when the head is
/// not kept, and then the chain's trigger links the row): the row's record
/// (`evidence_attempt_bytes`) from the completion's input columns (`i`, an `input` row or
/// one of `fenced`) exactly as [`COMPLETE_BATCH`] stores them, with `payload_sha256` the
/// alert's fingerprint. A requeued row's hash is computed in the `UPDATE` that keeps it
/// as the row's new head, a settled row's in its insert. Only where the dispatcher's own
/// hash does not apply (no head seen, or the head moved since the claim).
fn completion_attempt_hash(head: &str, i: &str, payload_sha256: &str) -> String {
    format!(
        "sha256({head} || evidence_attempt_bytes({i}.attempt, {i}.kind, {i}.worker, \
             {i}.fencing_token, {i}.started_at, {i}.finished_at, {i}.alert_id::text, {payload_sha256}, \
             {i}.outcome, {i}.http_status, {i}.destination_reference, {i}.error_class, \
             left({i}.response_excerpt, 1000), {i}.to_state, {i}.line))"
    )
}

/// As [`completion_attempt_hash`], for a completion that sent nothing: its evidence line
/// (`evidence_event_bytes`), from sending to its new state, at `now()`.
fn completion_line_hash(head: &str, i: &str) -> String {
    format!(
        "sha256({head} || evidence_event_bytes(now(), {sending}, {i}.to_state, {i}.attempt, \
             'dispatcher:' || {i}.worker, {i}.line))",
        sending = AlertState::Sending.sql(),
    )
}

/// Whether a completion that releases alert `r` (a `removed` row, at destination `d`)
/// claims the row behind it (`o`) for its own dispatcher, in [`COMPLETE_BATCH`]: when the
/// dispatcher asked for it (`hand_on_lease_ms`, its lease, is set), and the row becomes its
/// lane's head and is due now (pending, due time passed, its destination enabled, not a
/// revision waiting for another live alert than the one released). Written once, so that
/// handing on and claiming split the rows behind released alerts exactly.
static HAND_ON_CLAIM: LazyLock<String> = LazyLock::new(|| {
    format!(
        "r.hand_on_lease_ms IS NOT NULL AND r.lane_after IS NULL \
         AND o.status = {pending} AND o.next_attempt_at <= now() AND d.enabled \
         AND (o.after_alert IS NULL OR o.after_alert = r.alert_id \
              OR NOT EXISTS (SELECT 1 FROM outbox p WHERE p.alert_id = o.after_alert))",
        pending = LiveStatus::Pending.sql(),
    )
});
