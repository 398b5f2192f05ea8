//! Approving alerts: an identity's first revision, its outbox row and its first evidence
//! line written in one statement, for one approval or many at once (a single approval is
//! a group of one), and what each approval came to.

use chrono::{DateTime, Utc};
use outbox_core::trace_context::TraceContext;
use outbox_core::{AlertState, CheckedPayload, Ordering};
use serde_json::value::RawValue;
use sqlx::{PgConnection, PgPool};
use std::sync::LazyLock;
use uuid::Uuid;

use super::insert::{approval_statement, trace_id_of, ApprovalLine};
use super::read_model::{AlertDetail, RevisionSummary};
use crate::lifecycle::{EvidenceLine, EVENT_INSERT, STATE, STATE_JOINS};
use crate::sql_names::SqlName;
use crate::StoreError;

/// SQL for the fingerprint of a JSON text parameter: of its `jsonb` rendering, the text
/// a payload is stored and sent as (the approval's `given`, [`revise`](super::revise)).
pub(super) const FINGERPRINT_OF_PARAM: &str = "sha256(convert_to($1::jsonb::text, 'UTF8'))";

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
    /// The ordering key (checked by the caller), or `None` for the subject.
    pub ordering_key: Option<&'a str>,
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
    /// The ordering key, or `None` for the subject. Stored whatever the destination's
    /// ordering; it places the alert in a lane only where the destination orders per key.
    /// A repeated approval keeps the first approval's key.
    pub ordering_key: Option<&'a str>,
    /// Whether the approval's own transaction notifies the dispatchers when it creates an
    /// alert (delivered on its commit, never before, and never if it rolls back). The API
    /// sets it for the first approval of a burst only: PostgreSQL serialises the commits
    /// of notifying transactions, so the others leave the wake-up to
    /// [`crate::wake_ups::WakeUpNotifier`].
    pub notify_dispatchers: bool,
    /// The approval's trace context, stored with a new alert (and named in its first
    /// evidence line); a repeated approval keeps the first one.
    pub trace: Option<&'a TraceContext>,
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
            ordering_key: self.ordering_key,
            notify_dispatchers: false,
            trace: None,
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

/// The row [`APPROVE`] answers with for each approval, in the order given.
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
    /// The trace id of the context stored with the new alert.
    trace_id: Option<String>,
    same_payload: Option<Vec<bool>>,
}

/// The approval statement ([`approval_statement`]) for any number of approvals, given as
/// arrays and numbered in the order given (`n`); a single approval is one. Each payload is
/// parsed and rendered once (the `jsonb[]` cast, then `rendered`, whose `OFFSET 0` fence
/// keeps the planner from copying the conversion into each use), each destination
/// resolved within its approval's tenant. The answer, per approval: the alert as written
/// (its outbox row's due time and its evidence line), or, when nothing was inserted,
/// `earlier`: the identity's revisions, to tell "same alert" from "conflict". A revision
/// committed by a concurrent approval after this statement's snapshot (or by this
/// statement, for an identity given twice) is not among them, and the caller then asks
/// again in a fresh snapshot. `woken` notifies the dispatchers when any approval asks for
/// it and an alert was created (delivered on commit).
static APPROVE: LazyLock<String> = LazyLock::new(|| {
    approval_statement(
        &format!(
            "input AS ( \
                 SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], \
                                      $5::text[], $6::jsonb[], $7::text[], $8::text[], \
                                      $9::text[], $10::text[]) \
                     WITH ORDINALITY \
                     AS i(id, tenant_id, destination, subject, occurrence, payload, actor, \
                          traceparent, tracestate, ordering_key, n) \
             ), rendered AS ( \
                 SELECT i.*, i.payload::text AS text FROM input i OFFSET 0 \
             ), given AS ( \
                 SELECT r.n, r.id, r.tenant_id, d.id AS destination_id, \
                        d.ordering = {per_key} AS in_lane, r.subject, r.occurrence, r.text, \
                        sha256(convert_to(r.text, 'UTF8')) AS sha256, r.actor, \
                        r.traceparent, r.tracestate, r.ordering_key \
                 FROM rendered r \
                 LEFT JOIN destinations d ON d.tenant_id = r.tenant_id AND d.name = r.destination \
             )",
            per_key = Ordering::PerKey.sql(),
        ),
        ApprovalLine::Plain,
        &format!(
            ", woken AS ( \
                 SELECT pg_notify($12, '') WHERE $11 AND EXISTS (SELECT 1 FROM inserted) \
             ), earlier AS ( \
                 SELECT g.n, array_agg(a.id ORDER BY a.revision) AS revisions, \
                        array_agg(a.payload_sha256 = g.sha256 ORDER BY a.revision) \
                            AS same_payload \
                 FROM given g \
                 JOIN alerts a ON a.tenant_id = g.tenant_id AND a.subject = g.subject \
                              AND a.occurrence = g.occurrence \
                              AND a.destination_id = g.destination_id \
                 WHERE g.id NOT IN (SELECT id FROM inserted) \
                 GROUP BY g.n \
             ) \
             SELECT g.destination_id, t.name AS tenant, i.id, g.text AS payload, \
                    encode(g.sha256, 'hex') AS payload_sha256, i.created_at, \
                    {trace_id} AS trace_id, q.next_attempt_at, e.at AS evidence_at, \
                    e.line AS evidence_line, r.revisions, r.same_payload, \
                    (SELECT count(*) FROM woken) AS woken \
             FROM given g \
             LEFT JOIN tenants t ON t.id = g.tenant_id \
             LEFT JOIN inserted i ON i.id = g.id \
             LEFT JOIN queued q ON q.alert_id = g.id \
             LEFT JOIN explained e ON e.alert_id = g.id \
             LEFT JOIN earlier r ON r.n = g.n \
             ORDER BY g.n",
            trace_id = trace_id_of("i.traceparent"),
        ),
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

/// [`approve_checked`] on `conn`: [`approve_many_on`] of one. In autocommit the statement
/// is its own transaction; inside the caller's, the approval and its wake-up commit or
/// roll back with it.
pub async fn approve_on(
    conn: &mut PgConnection,
    approval: CheckedApproval<'_>,
) -> Result<Approved, StoreError> {
    approve_many_on(conn, std::slice::from_ref(&approval))
        .await?
        .into_iter()
        .next()
        .unwrap_or_else(|| Err(StoreError::Inconsistent("an approval had no answer".into())))
}

/// Approves `approvals` in one statement on `conn` ([`APPROVE`]; in autocommit, one
/// transaction), each answered as it would be answered alone, in the order given. An
/// error of the statement is the whole statement's: nothing of it was written.
pub(super) async fn approve_many_on(
    conn: &mut PgConnection,
    approvals: &[CheckedApproval<'_>],
) -> Result<Vec<Result<Approved, StoreError>>, StoreError> {
    let text = |field: for<'x> fn(&'x CheckedApproval<'x>) -> &'x str| -> Vec<&str> {
        approvals.iter().map(field).collect()
    };
    let traces: Vec<Option<&TraceContext>> = approvals.iter().map(|a| a.trace).collect();
    let rows = sqlx::query_as::<_, ApprovalRow>(&APPROVE)
        .bind(approvals.iter().map(|_| Uuid::now_v7()).collect::<Vec<_>>())
        .bind(approvals.iter().map(|a| a.tenant_id).collect::<Vec<_>>())
        .bind(text(|a| a.destination))
        .bind(text(|a| a.subject))
        .bind(text(|a| a.occurrence))
        .bind(text(|a| a.payload.as_str()))
        .bind(text(|a| a.actor))
        .bind(
            traces
                .iter()
                .map(|t| t.map(|t| t.parent.to_string()))
                .collect::<Vec<_>>(),
        )
        .bind(
            traces
                .iter()
                .map(|t| t.and_then(|t| t.state.as_ref()).map(|s| s.as_str()))
                .collect::<Vec<_>>(),
        )
        .bind(approvals.iter().map(|a| a.ordering_key).collect::<Vec<_>>())
        .bind(approvals.iter().any(|a| a.notify_dispatchers))
        .bind(crate::wake_ups::WAKE_UP_CHANNEL)
        .fetch_all(&mut *conn)
        .await
        .map_err(StoreError::from_payload_error)?;
    // The crash tests stop the process here: the approvals are written (and, in
    // autocommit, committed), and their callers have no answer yet.
    fail::fail_point!("approve-after-write");
    if rows.len() != approvals.len() {
        return Err(StoreError::Inconsistent(format!(
            "{} approvals were answered with {} rows",
            approvals.len(),
            rows.len()
        )));
    }
    let mut answers = Vec::with_capacity(approvals.len());
    for (approval, row) in approvals.iter().zip(rows) {
        answers.push(answer_of(conn, approval, row).await);
    }
    Ok(answers)
}

/// What the row an approval's statement answered with ([`APPROVE`], or one row of a
/// group's) means for `approval`: the alert created, or the identity's existing revision
/// or conflict, asked again in a fresh snapshot on `conn` when the statement's did not
/// hold it yet.
async fn answer_of(
    conn: &mut PgConnection,
    approval: &CheckedApproval<'_>,
    row: ApprovalRow,
) -> Result<Approved, StoreError> {
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
            None => existing_outcome(conn, approval, destination_id).await,
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
        trace_id: row.trace_id,
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

/// Most "approved again within another trace" lines one alert's trail holds: a scheduler
/// that reruns an agent every few minutes, each run in a new trace, must not grow the
/// trail without end (the spans of the later ones still say it).
pub const MAX_REPEATED_TRACE_NOTES: i64 = 10;

/// Notes in an alert's evidence that it was approved again with another trace than the
/// one it keeps (its first approval's): the alert, its payload and its trace do not
/// change, and the line says where the repeated approval came from. The state is read in
/// the statement, so the line never moves it. Written for the first
/// [`MAX_REPEATED_TRACE_NOTES`] such approvals only.
///
/// Locking: the line extends the alert's evidence chain, so it is written under the lock
/// the other writers of that chain hold (the outbox row while the alert is live, which
/// dispatchers hold; else the alert's row, which operators hold): it never forks the chain.
pub async fn note_repeated_trace(
    db: impl sqlx::PgExecutor<'_>,
    alert_id: Uuid,
    actor: &str,
    given: &TraceContext,
) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "WITH live AS (SELECT alert_id FROM outbox WHERE alert_id = $1 FOR UPDATE), \
              settled AS (SELECT id FROM alerts WHERE id = $1 FOR NO KEY UPDATE) \
         {EVENT_INSERT} \
         SELECT a.id, {STATE}, {STATE}, NULL, $2, \
                'approved again within trace ' || $3 || '; the alert keeps ' || \
                coalesce('its first approval''s trace ' || {trace_id}, \
                         'no trace (it was approved before trace context was kept)') \
         FROM alerts a {STATE_JOINS} WHERE a.id = $1 \
           AND (EXISTS (SELECT 1 FROM live) OR EXISTS (SELECT 1 FROM settled)) \
           AND (SELECT count(*) FROM alert_events e \
                WHERE e.alert_id = $1 AND e.line LIKE 'approved again within trace %') < $4",
        trace_id = trace_id_of("a.traceparent"),
    ))
    .bind(alert_id)
    .bind(actor)
    .bind(given.trace_id_hex())
    .bind(MAX_REPEATED_TRACE_NOTES)
    .execute(db)
    .await?;
    Ok(())
}
