//! Revising an alert: a correction written as the identity's next revision, with its own
//! outbox row, queued behind what it corrects, and the corrected alert superseded when it
//! provably never left.

use outbox_core::trace_context::TraceContext;
use outbox_core::{AlertState, AttemptOutcome, LiveStatus, Ordering, Outcome};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::approve::FINGERPRINT_OF_PARAM;
use super::insert::ALERT_INSERT;
use super::read_model::current_state;
use crate::lane_key::LANE_KEY;
use crate::lifecycle::{append_event, Event, ENQUEUE};
use crate::sql_names::SqlName;
use crate::StoreError;

/// A correction of an alert's payload.
#[derive(Debug, Clone, Copy)]
pub struct Revision<'a> {
    /// Restricts the alert to this tenant (`None`: an operator acting on any tenant).
    pub tenant_id: Option<Uuid>,
    /// The revision being corrected; must be the identity's latest.
    pub alert_id: Uuid,
    /// The corrected payload's JSON text, an object.
    pub payload_json: &'a str,
    /// Why, for the evidence trail and the new revision's record.
    pub reason: &'a str,
    /// Who revised.
    pub actor: &'a str,
    /// The revision's trace context (its approval's), stored with the new revision.
    pub trace: Option<&'a TraceContext>,
}

/// What a revision came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviseOutcome {
    /// A new revision with its own outbox row and notification id was committed.
    Created {
        /// The new revision's alert id.
        id: Uuid,
        /// Its revision number.
        revision: i32,
        /// Whether the revised alert had not been sent yet and was superseded.
        superseded_previous: bool,
    },
    /// The same correction was already made (a retried request); nothing was written.
    Existing(Uuid),
    /// The payload equals the current revision's; nothing was written.
    Unchanged(Uuid),
    /// The alert has been revised already; a correction must revise `latest`.
    NotLatest {
        /// The identity's latest revision.
        latest: Uuid,
    },
    /// No such alert (for this tenant).
    NotFound,
}

#[derive(Debug, sqlx::FromRow)]
struct RevisedAlert {
    tenant_id: Uuid,
    subject: String,
    occurrence: String,
    destination_id: Uuid,
    revision: i32,
    same_payload: bool,
    /// The ordering key the revised alert was approved with (a revision keeps it).
    ordering_key: Option<String>,
    /// The lane a revision joins, when the destination orders per key: the key, or the
    /// subject.
    lane_key: Option<String>,
}

/// Issues a revision: a new alert in the same identity with `revision + 1`, its own
/// outbox row and notification id. If the revised alert was never sent (pending, and no
/// attempt could have reached the destination), it is superseded and will never be sent;
/// otherwise it keeps its state and the destination receives the correction as well.
pub async fn revise(pool: &PgPool, rev: Revision<'_>) -> Result<ReviseOutcome, StoreError> {
    StoreError::check_payload(rev.payload_json)?;
    let mut tx = pool.begin().await?;
    // The lane's row before any other (the lifecycle's lock order): superseding the
    // revised alert hands its place in the lane on.
    crate::lifecycle::lock_lane_of(&mut tx, rev.alert_id).await?;
    // Then its outbox row while it is live, as every writer of its evidence holds it (a
    // dispatcher's completion among them): the lines written below extend its evidence
    // chain after whatever that writer committed, and read its state as it is now.
    lock_live_row(&mut tx, rev.alert_id).await?;
    let Some(target) = lock_revised(&mut tx, &rev).await? else {
        return Ok(ReviseOutcome::NotFound);
    };
    if let Some(answer) = revised_already(&mut tx, &rev, &target).await? {
        return Ok(answer);
    }
    if target.same_payload {
        return Ok(ReviseOutcome::Unchanged(rev.alert_id));
    }

    let superseded_previous = supersede_if_unsent(&mut tx, rev.alert_id, rev.actor).await?;
    let id = Uuid::now_v7();
    let revision = target.revision + 1;
    let place = join_lane(&mut tx, &target, id).await?;
    insert_revision(&mut tx, &rev, &target, id, revision, place.seq).await?;
    // An evidence line holds at most 2000 bytes, as long as the longest reason: the line
    // quotes the start of it, and the whole reason is the revision's own (`reason`).
    let mut line = format!(
        "revision {revision} approved as a correction of {}: {}; queued for delivery",
        rev.alert_id,
        outbox_core::untrusted::clip(rev.reason, QUOTED_REASON_BYTES)
    );
    if let Some(trace) = rev.trace {
        line.push_str("; trace ");
        line.push_str(&trace.trace_id_hex());
    }
    enqueue_revision(
        &mut tx,
        id,
        &target,
        revision,
        place.waits_behind,
        rev.actor,
        &line,
    )
    .await?;
    if !superseded_previous {
        note_correction(&mut tx, &rev, id, revision).await?;
    }
    tx.commit().await?;
    Ok(ReviseOutcome::Created {
        id,
        revision,
        superseded_previous,
    })
}

/// Locks the revised alert's outbox row, if it is live (the lifecycle's lock order: the
/// lane, then the outbox row, then the alert row).
async fn lock_live_row(tx: &mut PgConnection, alert_id: Uuid) -> Result<(), StoreError> {
    sqlx::query("SELECT alert_id FROM outbox WHERE alert_id = $1 FOR UPDATE")
        .bind(alert_id)
        .fetch_optional(tx)
        .await?;
    Ok(())
}

/// Reads and locks the revised alert (`None`: no such alert for this tenant), with whether
/// the correction's payload equals its own. Every reviser of the latest revision
/// serialises on this lock, and the next statement (a fresh snapshot under READ COMMITTED)
/// then sees any revision committed while we waited. NO KEY UPDATE, the weakest lock that
/// serialises revisers: it does not conflict with key-share locks that foreign keys to the
/// alert (the outbox row's) take while other work holds an outbox row.
async fn lock_revised(
    tx: &mut PgConnection,
    rev: &Revision<'_>,
) -> Result<Option<RevisedAlert>, StoreError> {
    sqlx::query_as::<_, RevisedAlert>(&format!(
        "SELECT a.tenant_id, a.subject, a.occurrence, a.destination_id, a.revision, \
                a.payload_sha256 = {FINGERPRINT_OF_PARAM} AS same_payload, a.ordering_key, \
                CASE WHEN d.ordering = {per_key} THEN {LANE_KEY} END \
                    AS lane_key \
         FROM alerts a JOIN destinations d ON d.id = a.destination_id \
         WHERE a.id = $2 AND ($3::uuid IS NULL OR a.tenant_id = $3) \
         FOR NO KEY UPDATE OF a",
        per_key = Ordering::PerKey.sql(),
    ))
    .bind(rev.payload_json)
    .bind(rev.alert_id)
    .bind(rev.tenant_id)
    .fetch_optional(tx)
    .await
    .map_err(StoreError::from_payload_error)
}

/// The answer when the target is no longer the identity's latest revision: this very
/// correction made before (a retried request finds its own earlier success: same payload,
/// same reason), or the latest revision, which a correction must revise instead. `None`
/// when the target is the latest.
async fn revised_already(
    tx: &mut PgConnection,
    rev: &Revision<'_>,
    target: &RevisedAlert,
) -> Result<Option<ReviseOutcome>, StoreError> {
    let later = sqlx::query_as::<_, (Uuid, i32, bool, Option<String>)>(&format!(
        "SELECT id, revision, payload_sha256 = {FINGERPRINT_OF_PARAM}, reason \
         FROM alerts \
         WHERE tenant_id = $2 AND subject = $3 AND occurrence = $4 AND destination_id = $5 \
           AND revision > $6 \
         ORDER BY revision"
    ))
    .bind(rev.payload_json)
    .bind(target.tenant_id)
    .bind(&target.subject)
    .bind(&target.occurrence)
    .bind(target.destination_id)
    .bind(target.revision)
    .fetch_all(tx)
    .await?;
    let Some((next_id, _, same_payload, reason)) = later.first() else {
        return Ok(None);
    };
    if *same_payload && reason.as_deref() == Some(rev.reason) {
        return Ok(Some(ReviseOutcome::Existing(*next_id)));
    }
    let latest = later.last().map_or(*next_id, |(id, ..)| *id);
    Ok(Some(ReviseOutcome::NotLatest { latest }))
}

/// A revision's place in its ordered lane.
#[derive(Debug, Default, sqlx::FromRow)]
struct LanePlace {
    seq: Option<i64>,
    waits_behind: Option<Uuid>,
}

/// Joins revision `id` to the revised alert's lane, when the destination orders per key:
/// a correction goes behind everything approved in its lane before it, which includes
/// what it corrects (the revision rule and the lane rule agree). Nothing otherwise. The
/// place is taken as every approval takes one (`outbox_lanes_join`), without the
/// approvals' identity check: a revision's identity exists by definition, and its
/// revisers are serialised by the revised alert's row lock.
async fn join_lane(
    tx: &mut PgConnection,
    target: &RevisedAlert,
    id: Uuid,
) -> Result<LanePlace, StoreError> {
    let Some(key) = &target.lane_key else {
        return Ok(LanePlace::default());
    };
    Ok(sqlx::query_as::<_, LanePlace>(
        "SELECT seq, waits_behind \
             FROM outbox_lanes_join(ARRAY[$1::uuid], ARRAY[$2::text], ARRAY[$3::uuid])",
    )
    .bind(target.destination_id)
    .bind(key)
    .bind(id)
    .fetch_one(tx)
    .await?)
}

/// Inserts the new revision's alert row, `id`, in the target's identity, with its
/// ordering key and lane position.
async fn insert_revision(
    tx: &mut PgConnection,
    rev: &Revision<'_>,
    target: &RevisedAlert,
    id: Uuid,
    revision: i32,
    lane_seq: Option<i64>,
) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "{ALERT_INSERT} \
         VALUES ($2, $3, $4, $5, $6, $7, $1::jsonb::text, {FINGERPRINT_OF_PARAM}, $8, $9, $10, $11, \
                 $12, $13)"
    ))
    .bind(rev.payload_json)
    .bind(id)
    .bind(target.tenant_id)
    .bind(&target.subject)
    .bind(&target.occurrence)
    .bind(target.destination_id)
    .bind(revision)
    .bind(rev.reason)
    .bind(rev.actor)
    .bind(rev.trace.map(|t| t.parent.to_string()))
    .bind(rev.trace.and_then(|t| t.state.as_ref()).map(|s| s.as_str()))
    .bind(&target.ordering_key)
    .bind(lane_seq)
    .execute(tx)
    .await
    .map_err(StoreError::from_payload_error)?;
    Ok(())
}

/// How much of a revision's reason its approval's evidence line quotes: room for the rest
/// of the line within the 2000 bytes an evidence line may hold.
const QUOTED_REASON_BYTES: usize = 1500;

/// Tells the revised alert's trail, when it was not superseded, that a correction follows
/// it: it may already have reached the destination, so it keeps its state.
async fn note_correction(
    tx: &mut PgConnection,
    rev: &Revision<'_>,
    id: Uuid,
    revision: i32,
) -> Result<(), StoreError> {
    let state_now = current_state(&mut *tx, rev.alert_id).await?;
    append_event(
        &mut *tx,
        Event {
            alert_id: rev.alert_id,
            from: None,
            to: state_now,
            attempt: None,
            actor: rev.actor,
            line: &format!(
                "corrected by revision {revision} ({id}); this revision may already have \
                 reached the destination, so it keeps its state and the correction is \
                 delivered as well"
            ),
        },
    )
    .await
}

/// Queues a new revision behind the latest earlier revision of its identity that is
/// still live (it may yet reach the destination): dispatchers do not claim the revision
/// until that one has settled, so a correction never arrives before what it corrects.
/// In an ordered lane it also waits behind the lane's tail (`lane_after`).
/// Queued through [`ENQUEUE`], as every approval is.
async fn enqueue_revision(
    tx: &mut PgConnection,
    alert_id: Uuid,
    target: &RevisedAlert,
    revision: i32,
    lane_after: Option<Uuid>,
    actor: &str,
    line: &str,
) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "WITH approved AS ( \
             SELECT $1::uuid AS id, $2::uuid AS destination_id, ( \
                 SELECT p.id FROM alerts p JOIN outbox po ON po.alert_id = p.id \
                 WHERE p.tenant_id = $3 AND p.subject = $4 AND p.occurrence = $5 \
                   AND p.destination_id = $2 AND p.revision < $6 \
                 ORDER BY p.revision DESC LIMIT 1) AS after_alert, \
                 $9::uuid AS lane_after, $7::text AS actor, $8::text AS line, \
                 (SELECT evidence_genesis(a) FROM alerts a WHERE a.id = $1) AS genesis \
         ), {enqueue} \
         SELECT count(*) FROM queued",
        enqueue = *ENQUEUE,
    ))
    .bind(alert_id)
    .bind(target.destination_id)
    .bind(target.tenant_id)
    .bind(&target.subject)
    .bind(&target.occurrence)
    .bind(revision)
    .bind(actor)
    .bind(line)
    .bind(lane_after)
    .execute(tx)
    .await?;
    Ok(())
}

/// Supersedes an alert that provably never reached its destination: its outbox row is
/// pending and no attempt ended accepted or uncertain. The row lock keeps a dispatcher from
/// claiming it meanwhile (claims skip locked rows); a row a dispatcher already holds is
/// `sending` and is left alone.
async fn supersede_if_unsent(
    tx: &mut PgConnection,
    alert_id: Uuid,
    actor: &str,
) -> Result<bool, StoreError> {
    let unsent = sqlx::query_scalar::<_, Uuid>(
        "SELECT o.alert_id FROM outbox o \
         WHERE o.alert_id = $1 AND o.status = $2 \
           AND NOT EXISTS (SELECT 1 FROM delivery_attempts d \
                           WHERE d.alert_id = o.alert_id AND d.outcome = ANY($3)) \
         FOR UPDATE OF o",
    )
    .bind(alert_id)
    .bind(LiveStatus::Pending)
    .bind(
        [
            AttemptOutcome::Accepted,
            AttemptOutcome::Uncertain,
            AttemptOutcome::Found,
        ]
        .as_slice(),
    )
    .fetch_optional(&mut *tx)
    .await?;
    if unsent.is_none() {
        return Ok(false);
    }
    crate::lifecycle::settle(tx, alert_id, Outcome::Superseded, None).await?;
    append_event(
        &mut *tx,
        Event {
            alert_id,
            from: Some(AlertState::Pending),
            to: AlertState::Superseded,
            attempt: None,
            actor,
            line: "superseded by a revision before it was sent; it will never be sent",
        },
    )
    .await?;
    Ok(true)
}
