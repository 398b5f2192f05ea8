//! The decider's write path and the read model of one alert.
//!
//! Approving writes the alert, its pending outbox row and the first evidence line in one
//! statement (one transaction, one round trip), so a crash leaves all three or none, and
//! returns the alert as written, for the API's answer. The identity's UNIQUE constraint,
//! not a read-then-write check, is what makes concurrent approvals of one identity
//! produce one alert: `INSERT ... ON CONFLICT DO NOTHING` waits for a concurrent inserter
//! of the same identity to commit or roll back, then either inserts or yields to it.
//!
//! Payloads are stored as JSONB and always sent as `payload::text`; their fingerprint is
//! the SHA-256 of exactly those bytes, computed by PostgreSQL in the same statement, so
//! "same payload" means "same bytes on the wire".

use chrono::{DateTime, Utc};
use outbox_core::CheckedPayload;
use serde_json::value::RawValue;
use sqlx::{PgConnection, PgExecutor, PgPool};
use std::sync::LazyLock;
use uuid::Uuid;

use outbox_core::{AlertState, AttemptKind, AttemptOutcome, LiveStatus, Outcome};

pub use crate::lifecycle::EvidenceLine;
use crate::lifecycle::{append_event, evidence_trail, Event, ENQUEUE, STATE, STATE_JOINS};
use crate::StoreError;

/// SQL for the fingerprint of a JSON text parameter; must match how payloads are sent.
const FINGERPRINT_OF_PARAM: &str = "sha256(convert_to($1::jsonb::text, 'UTF8'))";

/// An approval as the decider (API or monitor) makes it. Fields are validated by the caller.
#[derive(Debug, Clone, Copy)]
pub struct Approval<'a> {
    /// The approving tenant.
    pub tenant_id: Uuid,
    /// The destination's name, resolved within the tenant.
    pub destination: &'a str,
    /// What the alert is about (e.g. `contract:ACME-7`).
    pub subject: &'a str,
    /// Which occurrence of it (e.g. `2027-01-31/30d`).
    pub occurrence: &'a str,
    /// The payload's JSON text, an object.
    pub payload_json: &'a str,
    /// Who approved, for the evidence trail (e.g. `api-token:<id>`).
    pub actor: &'a str,
}

/// What an approval came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApproveOutcome {
    /// A new alert (revision 0) and its outbox row were committed.
    Created(Uuid),
    /// This identity already has a revision with exactly this payload; nothing was written.
    Existing(Uuid),
    /// This identity exists with a different payload; nothing was written. A correction
    /// must be an explicit revision of `latest`.
    Conflict {
        /// The identity's original alert (revision 0).
        original: Uuid,
        /// Its latest revision, the one a correction should revise.
        latest: Uuid,
    },
}

/// An approval whose payload has been checked ([`CheckedPayload`]): what the write path
/// takes. The API checks the payload with the rest of its request body, so that it is
/// scanned once per approval; [`Approval::check`] checks it for everyone else.
#[derive(Debug, Clone, Copy)]
pub struct CheckedApproval<'a> {
    /// The approving tenant.
    pub tenant_id: Uuid,
    /// The destination's name, resolved within the tenant.
    pub destination: &'a str,
    /// What the alert is about.
    pub subject: &'a str,
    /// Which occurrence of it.
    pub occurrence: &'a str,
    /// The payload, an object.
    pub payload: CheckedPayload<'a>,
    /// Who approved, for the evidence trail.
    pub actor: &'a str,
    /// Whether the approval's own transaction notifies the dispatchers when it creates an
    /// alert (delivered on its commit, never before, and never if it rolls back). The API
    /// sets it for the first approval of a burst only: PostgreSQL serialises the commits
    /// of notifying transactions, so the others leave the wake-up to
    /// [`crate::wake_ups::WakeUpNotifier`].
    pub notify_dispatchers: bool,
}

impl<'a> Approval<'a> {
    /// Checks the payload by the API's rules (size, nesting, numbers PostgreSQL can hold).
    pub fn check(self) -> Result<CheckedApproval<'a>, StoreError> {
        Ok(CheckedApproval {
            tenant_id: self.tenant_id,
            destination: self.destination,
            subject: self.subject,
            occurrence: self.occurrence,
            payload: StoreError::check_payload(self.payload_json)?,
            actor: self.actor,
            notify_dispatchers: false,
        })
    }
}

/// What an approval came to, with what an answer needs.
#[derive(Debug, Clone)]
pub enum Approved {
    /// A new alert (revision 0), its outbox row and its evidence line were committed:
    /// the alert as that commit left it (pending, its one evidence line).
    Created(Box<AlertDetail>),
    /// This identity already has a revision with exactly this payload; nothing was written.
    Existing(Uuid),
    /// This identity exists with a different payload; nothing was written.
    Conflict {
        /// The identity's original alert (revision 0).
        original: Uuid,
        /// Its latest revision, the one a correction should revise.
        latest: Uuid,
    },
}

/// Approves an alert: alert row, pending outbox row and evidence line in one statement,
/// so in one transaction. Checks the payload first.
pub async fn approve(pool: &PgPool, approval: Approval<'_>) -> Result<ApproveOutcome, StoreError> {
    Ok(match approve_checked(pool, approval.check()?).await? {
        Approved::Created(alert) => ApproveOutcome::Created(alert.id),
        Approved::Existing(id) => ApproveOutcome::Existing(id),
        Approved::Conflict { original, latest } => ApproveOutcome::Conflict { original, latest },
    })
}

/// The row [`APPROVE`] answers with.
#[derive(Debug, sqlx::FromRow)]
struct ApprovalRow {
    /// `None`: the tenant has no destination of that name.
    destination_id: Option<Uuid>,
    tenant: Option<String>,
    /// The new alert's id; `None` when the identity existed.
    id: Option<Uuid>,
    /// The payload as stored (and sent): the JSONB's text form.
    payload: String,
    payload_sha256: String,
    created_at: Option<DateTime<Utc>>,
    next_attempt_at: Option<DateTime<Utc>>,
    evidence_at: Option<DateTime<Utc>>,
    evidence_line: Option<String>,
    /// When nothing was inserted: the identity's revisions in this statement's snapshot,
    /// oldest first, and whether each has exactly this payload.
    revisions: Option<Vec<Uuid>>,
    same_payload: Option<Vec<bool>>,
}

/// The write path in one statement. The payload is parsed and rendered once (`given`; the
/// `OFFSET 0` fences keep the planner from copying the conversions into each use); the destination
/// is resolved within the tenant; the INSERT's `ON CONFLICT DO NOTHING` on the identity is
/// what makes concurrent approvals produce one alert (it waits for a concurrent inserter of
/// the same identity to commit or roll back). Only when it inserted do the outbox row, the
/// evidence line and the optional wake-up follow. When it did not, `earlier` reads the
/// identity's revisions to tell "same alert" from "conflict"; a revision committed by a
/// concurrent approval after this statement's snapshot is not among them, and the caller
/// then asks again in a fresh snapshot.
static APPROVE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH given AS ( \
        SELECT p AS payload, t AS text, sha256(convert_to(t, 'UTF8')) AS sha256 \
        FROM (SELECT p, p::text AS t FROM (SELECT $1::jsonb AS p OFFSET 0) parsed OFFSET 0) \
             AS rendered \
    ), dest AS ( \
        SELECT id FROM destinations WHERE tenant_id = $3 AND name = $4 \
    ), inserted AS ( \
        INSERT INTO alerts (id, tenant_id, subject, occurrence, destination_id, revision, \
                            payload, payload_sha256, created_by) \
        SELECT $2, $3, $5, $6, d.id, 0, g.payload, g.sha256, $7 FROM dest d, given g \
        ON CONFLICT ON CONSTRAINT alerts_identity_key DO NOTHING \
        RETURNING id, destination_id, created_at \
    ), approved AS ( \
        SELECT id, destination_id, NULL::uuid AS after_alert, $7::text AS actor, \
               format('alert approved for destination `%s`; queued for delivery', $4::text) \
                   AS line \
        FROM inserted \
    ), {enqueue}, woken AS ( \
        SELECT pg_notify($9, '') FROM inserted WHERE $8 \
    ), earlier AS ( \
        SELECT a.id, a.revision, a.payload_sha256 = g.sha256 AS same_payload \
        FROM alerts a, dest d, given g \
        WHERE a.tenant_id = $3 AND a.subject = $5 AND a.occurrence = $6 \
          AND a.destination_id = d.id AND NOT EXISTS (SELECT 1 FROM inserted) \
    ) \
    SELECT (SELECT id FROM dest) AS destination_id, \
           (SELECT name FROM tenants WHERE id = $3) AS tenant, \
           i.id, g.text AS payload, encode(g.sha256, 'hex') AS payload_sha256, i.created_at, \
           q.next_attempt_at, e.at AS evidence_at, e.line AS evidence_line, \
           (SELECT array_agg(id ORDER BY revision) FROM earlier) AS revisions, \
           (SELECT array_agg(same_payload ORDER BY revision) FROM earlier) AS same_payload, \
           (SELECT count(*) FROM woken) AS woken \
    FROM given g \
    LEFT JOIN inserted i ON true \
    LEFT JOIN queued q ON true \
    LEFT JOIN explained e ON true",
        enqueue = *ENQUEUE,
    )
});

/// Approves an alert whose payload has been checked, in one statement (one round trip):
/// alert row, pending outbox row and evidence line, and the answer the API gives (the new
/// alert as committed, so it is not read back in another snapshot).
pub async fn approve_checked(
    pool: &PgPool,
    approval: CheckedApproval<'_>,
) -> Result<Approved, StoreError> {
    let mut conn = pool.acquire().await?;
    approve_on(&mut conn, approval).await
}

/// [`approve_checked`] on `conn`. In autocommit the statement is its own transaction;
/// inside the caller's, the approval and its wake-up commit or roll back with it.
pub async fn approve_on(
    conn: &mut PgConnection,
    approval: CheckedApproval<'_>,
) -> Result<Approved, StoreError> {
    let row = sqlx::query_as::<_, ApprovalRow>(&APPROVE)
        .bind(approval.payload.as_str())
        .bind(Uuid::now_v7())
        .bind(approval.tenant_id)
        .bind(approval.destination)
        .bind(approval.subject)
        .bind(approval.occurrence)
        .bind(approval.actor)
        .bind(approval.notify_dispatchers)
        .bind(crate::wake_ups::WAKE_UP_CHANNEL)
        .fetch_one(&mut *conn)
        .await
        .map_err(StoreError::from_payload_error)?;
    // The crash tests stop the process here: the approval is written (and, in autocommit,
    // committed), and its caller has no answer yet.
    fail::fail_point!("approve-after-write");

    let Some(destination_id) = row.destination_id else {
        return Err(StoreError::UnknownDestination(
            approval.destination.to_owned(),
        ));
    };
    let (Some(id), Some(created_at)) = (row.id, row.created_at) else {
        let revisions = row.revisions.unwrap_or_default();
        let same = row.same_payload.unwrap_or_default();
        return match outcome_among(revisions.iter().copied().zip(same)) {
            Some(outcome) => Ok(outcome),
            // The identity was committed by someone else after this statement's snapshot
            // was taken (ON CONFLICT waited for them): ask again in a fresh one.
            None => existing_outcome(conn, &approval, destination_id).await,
        };
    };
    let payload = RawValue::from_string(row.payload)
        .map_err(|err| StoreError::UnstorablePayload(err.to_string()))?;
    let created_by = approval.actor.to_owned();
    Ok(Approved::Created(Box::new(AlertDetail {
        id,
        tenant: row.tenant.unwrap_or_default(),
        subject: approval.subject.to_owned(),
        occurrence: approval.occurrence.to_owned(),
        destination: approval.destination.to_owned(),
        revision: 0,
        state: AlertState::Pending,
        possible_duplicate: false,
        payload,
        payload_sha256: row.payload_sha256,
        reason: None,
        destination_reference: None,
        created_at,
        created_by: created_by.clone(),
        settled_at: None,
        pruned_at: None,
        next_attempt_at: row.next_attempt_at,
        revisions: vec![RevisionSummary {
            id,
            revision: 0,
            state: AlertState::Pending,
            reason: None,
            created_at,
        }],
        attempts: Vec::new(),
        evidence: vec![EvidenceLine {
            at: row.evidence_at.unwrap_or(created_at),
            from_state: None,
            to_state: AlertState::Pending,
            attempt: None,
            actor: created_by,
            line: row.evidence_line.unwrap_or_default(),
        }],
    })))
}

/// Among an identity's revisions (oldest first, each with whether it has exactly the
/// approved payload): the one with the same payload, else a conflict naming the original
/// and the latest; `None` when there are none.
fn outcome_among(revisions: impl Iterator<Item = (Uuid, bool)>) -> Option<Approved> {
    let mut first_and_last = None;
    for (id, same_payload) in revisions {
        if same_payload {
            return Some(Approved::Existing(id));
        }
        let original = first_and_last.map_or(id, |(original, _)| original);
        first_and_last = Some((original, id));
    }
    first_and_last.map(|(original, latest)| Approved::Conflict { original, latest })
}

/// After a lost insert race: the identity's revisions read in a fresh snapshot (a new
/// statement under READ COMMITTED).
async fn existing_outcome(
    conn: &mut PgConnection,
    approval: &CheckedApproval<'_>,
    destination_id: Uuid,
) -> Result<Approved, StoreError> {
    let revisions = sqlx::query_as::<_, (Uuid, bool)>(&format!(
        "SELECT id, payload_sha256 = {FINGERPRINT_OF_PARAM} AS same_payload \
         FROM alerts \
         WHERE tenant_id = $2 AND subject = $3 AND occurrence = $4 AND destination_id = $5 \
         ORDER BY revision"
    ))
    .bind(approval.payload.as_str())
    .bind(approval.tenant_id)
    .bind(approval.subject)
    .bind(approval.occurrence)
    .bind(destination_id)
    .fetch_all(conn)
    .await
    .map_err(StoreError::from_payload_error)?;
    // Empty only if the identity's rows were deleted in between.
    outcome_among(revisions.into_iter()).ok_or(StoreError::Database(sqlx::Error::RowNotFound))
}

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
}

/// Issues a revision: a new alert in the same identity with `revision + 1`, its own
/// outbox row and notification id. If the revised alert was never sent (pending, and no
/// attempt could have reached the destination), it is superseded and will never be sent;
/// otherwise it keeps its state and the destination receives the correction as well.
pub async fn revise(pool: &PgPool, rev: Revision<'_>) -> Result<ReviseOutcome, StoreError> {
    StoreError::check_payload(rev.payload_json)?;
    let mut tx = pool.begin().await?;
    // Lock the revised row: every reviser of the latest revision serialises here, and
    // the next statement (a fresh snapshot under READ COMMITTED) then sees any revision
    // committed while we waited. NO KEY UPDATE, the weakest lock that serialises revisers:
    // it does not conflict with key-share locks that foreign keys to the alert (the
    // outbox row's) take while other work holds an outbox row.
    let target = sqlx::query_as::<_, RevisedAlert>(&format!(
        "SELECT tenant_id, subject, occurrence, destination_id, revision, \
                payload_sha256 = {FINGERPRINT_OF_PARAM} AS same_payload \
         FROM alerts WHERE id = $2 AND ($3::uuid IS NULL OR tenant_id = $3) \
         FOR NO KEY UPDATE"
    ))
    .bind(rev.payload_json)
    .bind(rev.alert_id)
    .bind(rev.tenant_id)
    .fetch_optional(&mut *tx)
    .await
    .map_err(StoreError::from_payload_error)?;
    let Some(target) = target else {
        return Ok(ReviseOutcome::NotFound);
    };

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
    .fetch_all(&mut *tx)
    .await?;
    if let Some((next_id, _, same_payload, reason)) = later.first() {
        // A retried request finds its own earlier success: same payload, same reason.
        if *same_payload && reason.as_deref() == Some(rev.reason) {
            return Ok(ReviseOutcome::Existing(*next_id));
        }
        let latest = later.last().map_or(*next_id, |(id, ..)| *id);
        return Ok(ReviseOutcome::NotLatest { latest });
    }
    if target.same_payload {
        return Ok(ReviseOutcome::Unchanged(rev.alert_id));
    }

    let superseded_previous = supersede_if_unsent(&mut tx, rev.alert_id, rev.actor).await?;

    let id = Uuid::now_v7();
    let revision = target.revision + 1;
    sqlx::query(&format!(
        "INSERT INTO alerts (id, tenant_id, subject, occurrence, destination_id, revision, \
                             payload, payload_sha256, reason, created_by) \
         VALUES ($2, $3, $4, $5, $6, $7, $1::jsonb, {FINGERPRINT_OF_PARAM}, $8, $9)"
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
    .execute(&mut *tx)
    .await
    .map_err(StoreError::from_payload_error)?;
    let line = format!(
        "revision {revision} approved as a correction of {}: {}; queued for delivery",
        rev.alert_id, rev.reason
    );
    enqueue_revision(&mut tx, id, &target, revision, rev.actor, &line).await?;
    if !superseded_previous {
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
        .await?;
    }
    tx.commit().await?;
    Ok(ReviseOutcome::Created {
        id,
        revision,
        superseded_previous,
    })
}

/// Queues a new revision behind the latest earlier revision of its identity that is
/// still live (it may yet reach the destination): dispatchers do not claim the revision
/// until that one has settled, so a correction never arrives before what it corrects.
/// Queued through [`ENQUEUE`], as every approval is.
async fn enqueue_revision(
    tx: &mut PgConnection,
    alert_id: Uuid,
    target: &RevisedAlert,
    revision: i32,
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
                 $7::text AS actor, $8::text AS line \
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

/// An alert's state, or `None` when there is no such alert.
pub async fn state_of(
    db: impl PgExecutor<'_>,
    alert_id: Uuid,
) -> Result<Option<AlertState>, StoreError> {
    let state = sqlx::query_scalar::<_, Option<String>>(&format!(
        "SELECT {STATE} FROM alerts a {STATE_JOINS} WHERE a.id = $1"
    ))
    .bind(alert_id)
    .fetch_optional(db)
    .await?
    .flatten();
    crate::lifecycle::parse_optional(state)
}

/// An alert's current state: its outbox row's status while live, else its outcome.
pub async fn current_state(
    db: impl PgExecutor<'_>,
    alert_id: Uuid,
) -> Result<AlertState, StoreError> {
    state_of(db, alert_id)
        .await?
        .ok_or(StoreError::UnknownAlert(alert_id))
}

/// One alert with everything known about it, for the API and for operators.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AlertDetail {
    /// The notification id (also the idempotency key).
    pub id: Uuid,
    /// Tenant name.
    pub tenant: String,
    /// Identity: subject.
    pub subject: String,
    /// Identity: occurrence.
    pub occurrence: String,
    /// Identity: destination name.
    pub destination: String,
    /// Identity: revision number (0 for the original approval).
    pub revision: i32,
    /// Current state.
    pub state: AlertState,
    /// Set when a send was repeated without evidence that the first did not arrive.
    pub possible_duplicate: bool,
    /// The payload exactly as stored and sent.
    pub payload: Box<RawValue>,
    /// SHA-256 of the payload bytes, hex.
    pub payload_sha256: String,
    /// Why this revision was made (revisions only).
    pub reason: Option<String>,
    /// The destination's reference for the accepted alert.
    pub destination_reference: Option<String>,
    /// When it was approved.
    pub created_at: DateTime<Utc>,
    /// Who approved it.
    pub created_by: String,
    /// When it left the outbox for good or for an operator.
    pub settled_at: Option<DateTime<Utc>>,
    /// When retention removed its payload, attempts and evidence (`outboxctl prune`).
    pub pruned_at: Option<DateTime<Utc>>,
    /// When a dispatcher will next work on it (live alerts only).
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Every revision of the identity, this one included, oldest first.
    pub revisions: Vec<RevisionSummary>,
    /// Every finished delivery attempt and lookup, oldest first.
    pub attempts: Vec<AttemptRecord>,
    /// The evidence trail, oldest first.
    pub evidence: Vec<EvidenceLine>,
}

/// One revision in an identity's chain.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct RevisionSummary {
    /// Its alert id.
    pub id: Uuid,
    /// Its number.
    pub revision: i32,
    /// Its state.
    #[sqlx(try_from = "String")]
    pub state: AlertState,
    /// Why it was made.
    pub reason: Option<String>,
    /// When it was approved.
    pub created_at: DateTime<Utc>,
}

/// One finished delivery attempt or lookup.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct AttemptRecord {
    /// Attempt number.
    pub attempt: i32,
    /// A send or a lookup.
    #[sqlx(try_from = "String")]
    pub kind: AttemptKind,
    /// The dispatcher that made it.
    pub worker: String,
    /// When it started (committed before any byte was sent).
    pub started_at: DateTime<Utc>,
    /// When its outcome was recorded.
    pub finished_at: DateTime<Utc>,
    /// How it ended.
    #[sqlx(try_from = "String")]
    pub outcome: AttemptOutcome,
    /// The destination's HTTP status, if it answered.
    pub http_status: Option<i16>,
    /// The destination's reference, if it gave one.
    pub destination_reference: Option<String>,
    /// What kind of failure, if any.
    pub error_class: Option<String>,
    /// The start of the destination's answer, as evidence. Untrusted text, kept byte
    /// for byte as the destination sent it: it may hold escape sequences and
    /// bidirectional controls, so views escape it before showing it to people.
    pub response_excerpt: Option<String>,
}

#[derive(Debug, sqlx::FromRow)]
struct AlertRow {
    id: Uuid,
    tenant_id: Uuid,
    tenant: String,
    subject: String,
    occurrence: String,
    destination_id: Uuid,
    destination: String,
    revision: i32,
    #[sqlx(try_from = "String")]
    state: AlertState,
    possible_duplicate: bool,
    payload: String,
    payload_sha256: String,
    reason: Option<String>,
    destination_reference: Option<String>,
    created_at: DateTime<Utc>,
    created_by: String,
    settled_at: Option<DateTime<Utc>>,
    pruned_at: Option<DateTime<Utc>>,
    next_attempt_at: Option<DateTime<Utc>>,
}

/// Reads one alert with its revisions, attempts and evidence, from one snapshot.
/// With `tenant_id`, an alert of another tenant is reported as absent.
pub async fn detail(
    pool: &PgPool,
    tenant_id: Option<Uuid>,
    alert_id: Uuid,
) -> Result<Option<AlertDetail>, StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    let row = sqlx::query_as::<_, AlertRow>(&format!(
        "SELECT a.id, a.tenant_id, t.name AS tenant, a.subject, a.occurrence, a.destination_id, \
                d.name AS destination, a.revision, {STATE} AS state, \
                a.possible_duplicate, a.payload::text AS payload, \
                encode(a.payload_sha256, 'hex') AS payload_sha256, a.reason, \
                ao.destination_reference, a.created_at, a.created_by, ao.settled_at, \
                a.pruned_at, o.next_attempt_at \
         FROM alerts a \
         JOIN tenants t ON t.id = a.tenant_id \
         JOIN destinations d ON d.id = a.destination_id \
         {STATE_JOINS} \
         WHERE a.id = $1 AND ($2::uuid IS NULL OR a.tenant_id = $2)"
    ))
    .bind(alert_id)
    .bind(tenant_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };

    let revisions = sqlx::query_as::<_, RevisionSummary>(&format!(
        "SELECT a.id, a.revision, {STATE} AS state, a.reason, a.created_at \
         FROM alerts a {STATE_JOINS} \
         WHERE a.tenant_id = $1 AND a.subject = $2 AND a.occurrence = $3 AND a.destination_id = $4 \
         ORDER BY a.revision"
    ))
    .bind(row.tenant_id)
    .bind(&row.subject)
    .bind(&row.occurrence)
    .bind(row.destination_id)
    .fetch_all(&mut *tx)
    .await?;
    let attempts = sqlx::query_as::<_, AttemptRecord>(
        "SELECT attempt, kind, worker, started_at, finished_at, outcome, http_status, \
                destination_reference, error_class, response_excerpt \
         FROM delivery_attempts WHERE alert_id = $1 ORDER BY id",
    )
    .bind(alert_id)
    .fetch_all(&mut *tx)
    .await?;
    let evidence = evidence_trail(&mut *tx, alert_id).await?;
    tx.commit().await?;

    let payload = RawValue::from_string(row.payload)
        .map_err(|err| StoreError::UnstorablePayload(err.to_string()))?;
    Ok(Some(AlertDetail {
        id: row.id,
        tenant: row.tenant,
        subject: row.subject,
        occurrence: row.occurrence,
        destination: row.destination,
        revision: row.revision,
        state: row.state,
        possible_duplicate: row.possible_duplicate,
        payload,
        payload_sha256: row.payload_sha256,
        reason: row.reason,
        destination_reference: row.destination_reference,
        created_at: row.created_at,
        created_by: row.created_by,
        settled_at: row.settled_at,
        pruned_at: row.pruned_at,
        next_attempt_at: row.next_attempt_at,
        revisions,
        attempts,
        evidence,
    }))
}

/// The tenant of an alert, if it exists.
pub async fn alert_tenant(
    db: impl PgExecutor<'_>,
    alert_id: Uuid,
) -> Result<Option<Uuid>, StoreError> {
    Ok(
        sqlx::query_scalar::<_, Uuid>("SELECT tenant_id FROM alerts WHERE id = $1")
            .bind(alert_id)
            .fetch_optional(db)
            .await?,
    )
}
