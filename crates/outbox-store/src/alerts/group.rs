//! Approvals written in groups: the API's approvals that arrive while earlier ones are
//! being written wait for the writer and are then written together, in one statement and
//! so one transaction and one commit, each with its own answer ([`ApprovalGroups`]).
//!
//! Why: an approval through the API is one row in each of three tables, and a statement
//! that writes one row spends most of PostgreSQL's time on what every statement pays
//! whatever its size (starting the executor over a dozen CTEs, preparing the tables'
//! CHECK constraints, the commit's flush). Thirty-two clients approving at once spent
//! about 800 µs of the server's CPU per approval that way; the monitors' bulk statement
//! writes the same three rows for about 60.
//!
//! Nothing waits for a group to fill: an approval that finds a writer free is written at
//! once, alone, by the single-approval statement, so an idle system answers as fast as
//! before; only approvals that arrive while every writer is busy are grouped.
//!
//! What a grouped approval is written as is exactly what it would be alone: the same
//! alert, outbox row and evidence line (the queueing fragment [`ENQUEUE`] is shared), the
//! same answer. Three kinds are answered by the single-approval statement after the
//! group's commit instead: an approval for a destination that orders per key (a lane's
//! positions are taken one identity at a time, under the lane's lock), an identity the
//! group's snapshot could not answer for (approved twice within the group, or committed
//! by another writer while the group waited for it), and, when the group's statement
//! fails, every approval of the group, so that one bad approval costs the others nothing;
//! unless the database is unavailable, when each is answered with that.

use outbox_core::trace_context::TraceContext;
use outbox_core::{CheckedPayloadBuf, Ordering};
use sqlx::PgPool;
use std::sync::{Arc, LazyLock, Mutex};
use uuid::Uuid;

use super::approve::{answer_of, approve_checked, approve_on, trace_id_of, trace_note};
use super::approve::{ApprovalRow, Approved, CheckedApproval};
use crate::lifecycle::ENQUEUE;
use crate::sql_names::SqlName;
use crate::StoreError;

/// Most approvals written in one group. The statement's cost grows with its rows while
/// what it saves per approval levels off well before this.
pub const MAX_GROUP: usize = 64;

/// Longest an approval waits for its group to be written before its caller is told the
/// database is busy: the pool's own wait for a free connection.
pub const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Most groups being written at once: each holds a connection, and two keep both of a
/// small server's cores busy while the next group gathers.
pub const MAX_WRITERS: usize = 2;

/// Writes approvals, concurrent ones in groups. Cloning shares the queue.
#[derive(Debug, Clone)]
pub struct ApprovalGroups {
    pool: PgPool,
    queue: Arc<Mutex<Queue>>,
}

#[derive(Debug, Default)]
struct Queue {
    waiting: Vec<Waiting>,
    writers: usize,
}

/// An approval waiting for a writer, with where its answer goes.
#[derive(Debug)]
struct Waiting {
    approval: HeldApproval,
    answer: tokio::sync::oneshot::Sender<Result<Approved, StoreError>>,
}

/// A [`CheckedApproval`] held by the group until it is written: owned, since the writer
/// is a task of its own.
#[derive(Debug)]
struct HeldApproval {
    tenant_id: Uuid,
    destination: String,
    subject: String,
    occurrence: String,
    payload: CheckedPayloadBuf,
    actor: String,
    ordering_key: Option<String>,
    notify_dispatchers: bool,
    trace: Option<TraceContext>,
}

impl HeldApproval {
    fn of(approval: &CheckedApproval<'_>) -> Self {
        HeldApproval {
            tenant_id: approval.tenant_id,
            destination: approval.destination.to_owned(),
            subject: approval.subject.to_owned(),
            occurrence: approval.occurrence.to_owned(),
            payload: approval.payload.to_buf(),
            actor: approval.actor.to_owned(),
            ordering_key: approval.ordering_key.map(str::to_owned),
            notify_dispatchers: approval.notify_dispatchers,
            trace: approval.trace.cloned(),
        }
    }

    fn as_checked(&self) -> CheckedApproval<'_> {
        CheckedApproval {
            tenant_id: self.tenant_id,
            destination: &self.destination,
            subject: &self.subject,
            occurrence: &self.occurrence,
            payload: self.payload.as_checked(),
            actor: &self.actor,
            ordering_key: self.ordering_key.as_deref(),
            notify_dispatchers: self.notify_dispatchers,
            trace: self.trace.as_ref(),
        }
    }
}

impl ApprovalGroups {
    /// Approval groups written on `pool`.
    pub fn new(pool: PgPool) -> Self {
        ApprovalGroups {
            pool,
            queue: Arc::default(),
        }
    }

    /// Approves as [`approve_checked`] does, written together with the approvals that
    /// wait alongside it. Must be called within a Tokio runtime: the group is written by
    /// a task of its own, so a caller that goes away (a client that hung up) does not
    /// cancel the others' write halfway.
    pub async fn approve(&self, approval: CheckedApproval<'_>) -> Result<Approved, StoreError> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let start_writer = {
            let mut queue = self.lock();
            queue.waiting.push(Waiting {
                approval: HeldApproval::of(&approval),
                answer,
            });
            let start = queue.writers < MAX_WRITERS;
            if start {
                queue.writers += 1;
            }
            start
        };
        if start_writer {
            // The writer is counted out by its guard however its task ends, even dropped
            // before it ever ran.
            let writer = Writer::counted_in(self.clone());
            tokio::spawn(ApprovalGroups::write_while_waiting(writer));
        }
        match tokio::time::timeout(MAX_WAIT, answered).await {
            Ok(Ok(answer)) => answer,
            // A writer that panicked dropped the answer: the approval may or may not have
            // been committed, as when a connection is lost.
            Ok(Err(_)) => Err(StoreError::Database(sqlx::Error::WorkerCrashed)),
            // The database is too slow to take it (or the group waits on a lock): the
            // caller is told busy, as a single approval is when no connection comes free;
            // the approval may still be written, and a retry with the same identity
            // finds it.
            Err(_) => Err(StoreError::Database(sqlx::Error::PoolTimedOut)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A writer (counted in by `writer`): takes what waits (at most [`MAX_GROUP`]),
    /// writes it, answers each, and goes on until nothing waits.
    async fn write_while_waiting(mut writer: Writer) {
        loop {
            let group: Vec<Waiting> = {
                let mut queue = writer.groups.lock();
                if queue.waiting.is_empty() {
                    // Counted out under the same lock that saw nothing waiting: an
                    // approval queued after this sees one writer fewer and starts its own.
                    // (Counted out after releasing it, one could be queued in between,
                    // find every writer busy, and wait for one that never comes.)
                    queue.writers -= 1;
                    drop(queue);
                    writer.counted_out = true;
                    return;
                }
                let take = queue.waiting.len().min(MAX_GROUP);
                queue.waiting.drain(..take).collect()
            };
            let (approvals, answers): (Vec<HeldApproval>, Vec<_>) = group
                .into_iter()
                .map(|waiting| (waiting.approval, waiting.answer))
                .unzip();
            let results = writer.groups.write(&approvals).await;
            for (answer, result) in answers.into_iter().zip(results) {
                let _ = answer.send(result);
            }
        }
    }

    /// Writes `approvals`: one alone by the single-approval statement, more as a group.
    async fn write(&self, approvals: &[HeldApproval]) -> Vec<Result<Approved, StoreError>> {
        if let [approval] = approvals {
            return vec![approve_checked(&self.pool, approval.as_checked()).await];
        }
        let checked: Vec<CheckedApproval<'_>> =
            approvals.iter().map(HeldApproval::as_checked).collect();
        match approve_group(&self.pool, &checked).await {
            Ok(answers) => answers,
            // The database is away (busy, the connection lost, a failover under way):
            // written one by one, each would wait for it again in turn, and the last
            // client would wait for them all. Or the group was committed and its answer
            // does not add up: written again, each would read as already there. Each is
            // answered with the group's error, which the API turns into `503`, retry with
            // the same identity (the group may have been committed).
            Err(err) if err.is_unavailable() || matches!(err, StoreError::Inconsistent(_)) => {
                approvals
                    .iter()
                    .map(|_| Err(err.unavailable_again()))
                    .collect()
            }
            Err(_) => {
                // The group's statement failed as a whole: each approval is written alone,
                // and answered with its own result or error.
                let mut answers = Vec::with_capacity(checked.len());
                for approval in checked {
                    answers.push(approve_checked(&self.pool, approval).await);
                }
                answers
            }
        }
    }
}

/// A running writer, counted in the queue's `writers`. One that ends other than by
/// finding nothing waiting (dropped with its runtime, even before it first ran, or
/// panicking) is counted out as it goes, so that the next approval starts another. The
/// approvals it leaves waiting are answered busy after [`MAX_WAIT`] unless a writer takes
/// them first.
struct Writer {
    groups: ApprovalGroups,
    counted_out: bool,
}

impl Writer {
    /// A writer for `groups`, which the caller has already counted in.
    fn counted_in(groups: ApprovalGroups) -> Self {
        Writer {
            groups,
            counted_out: false,
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if !self.counted_out {
            self.groups.lock().writers -= 1;
        }
    }
}

/// The row [`APPROVE_GROUP`] answers with for each approval, in the order given.
#[derive(Debug, sqlx::FromRow)]
struct GroupRow {
    /// The approval's destination orders per key: the group wrote nothing for it.
    in_lane: Option<bool>,
    #[sqlx(flatten)]
    row: ApprovalRow,
}

/// Many approvals in one statement: the single-approval statement ([`super::approve`]'s
/// `APPROVE`) over arrays, with the approvals numbered in the order given (`n`).
///
/// Locking: alerts are inserted in identity order (tenant, then subject, occurrence and
/// destination in byte order; of an identity given twice, the first given is the one
/// inserted), the order of the monitors' bulk approval too, so two
/// groups, or a group and a monitor's batch, that approve overlapping identities wait for
/// each other instead of deadlocking; a single approval inserts one identity and holds no
/// other. Destinations that order per key are left out (see the module's notes).
static APPROVE_GROUP: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH input AS ( \
             SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], \
                                  $6::jsonb[], $7::text[], $8::text[], $9::text[], $10::text[]) \
                 WITH ORDINALITY \
                 AS i(id, tenant_id, destination, subject, occurrence, payload, actor, \
                      traceparent, tracestate, ordering_key, n) \
         ), given AS ( \
             SELECT r.*, sha256(convert_to(r.text, 'UTF8')) AS sha256 \
             FROM (SELECT i.*, i.payload::text AS text FROM input i OFFSET 0) r \
         ), dest AS ( \
             SELECT g.n, d.id, d.ordering = {per_key} AS in_lane \
             FROM given g JOIN destinations d ON d.tenant_id = g.tenant_id AND d.name = g.destination \
         ), inserted AS ( \
             INSERT INTO alerts (id, tenant_id, subject, occurrence, destination_id, revision, \
                                 payload, payload_sha256, created_by, traceparent, tracestate, \
                                 ordering_key) \
             SELECT g.id, g.tenant_id, g.subject, g.occurrence, d.id, 0, g.text, g.sha256, \
                    g.actor, g.traceparent, g.tracestate, g.ordering_key \
             FROM given g JOIN dest d ON d.n = g.n \
             WHERE NOT d.in_lane \
             ORDER BY g.tenant_id, g.subject COLLATE \"C\", g.occurrence COLLATE \"C\", d.id, g.n \
             ON CONFLICT ON CONSTRAINT alerts_identity_key DO NOTHING \
             RETURNING id, destination_id, created_at, traceparent, {trace_id} AS trace_id, \
                       evidence_genesis(alerts) AS genesis \
         ), approved AS ( \
             SELECT n.id, n.destination_id, NULL::uuid AS after_alert, NULL::uuid AS lane_after, \
                    g.actor, \
                    format('alert approved for destination `%s`; queued for delivery', \
                           g.destination) || {trace_note} AS line, \
                    n.genesis \
             FROM inserted n JOIN given g ON g.id = n.id \
         ), {enqueue}, woken AS ( \
             SELECT pg_notify($12, '') WHERE $11 AND EXISTS (SELECT 1 FROM inserted) \
         ), earlier AS ( \
             SELECT g.n, array_agg(a.id ORDER BY a.revision) AS revisions, \
                    array_agg(a.payload_sha256 = g.sha256 ORDER BY a.revision) AS same_payload \
             FROM given g JOIN dest d ON d.n = g.n \
             JOIN alerts a ON a.tenant_id = g.tenant_id AND a.subject = g.subject \
                          AND a.occurrence = g.occurrence AND a.destination_id = d.id \
             WHERE NOT d.in_lane AND g.id NOT IN (SELECT id FROM inserted) \
             GROUP BY g.n \
         ) \
         SELECT d.id AS destination_id, d.in_lane, t.name AS tenant, \
                i.id, g.text AS payload, encode(g.sha256, 'hex') AS payload_sha256, \
                i.created_at, i.trace_id, q.next_attempt_at, e.at AS evidence_at, \
                e.line AS evidence_line, r.revisions, r.same_payload, \
                (SELECT count(*) FROM woken) AS woken \
         FROM given g \
         LEFT JOIN dest d ON d.n = g.n \
         LEFT JOIN tenants t ON t.id = g.tenant_id \
         LEFT JOIN inserted i ON i.id = g.id \
         LEFT JOIN queued q ON q.alert_id = g.id \
         LEFT JOIN explained e ON e.alert_id = g.id \
         LEFT JOIN earlier r ON r.n = g.n \
         ORDER BY g.n",
        enqueue = *ENQUEUE,
        trace_note = trace_note("n.traceparent"),
        trace_id = trace_id_of("traceparent"),
        per_key = Ordering::PerKey.sql(),
    )
});

/// Approves `approvals` in one statement (autocommit: one transaction), each answered as
/// [`approve_checked`] would answer it alone, in the order given. The approvals the
/// statement leaves to the single-approval statement (see the module's notes) are written
/// by it afterwards, on the same connection. An error of the statement is the whole
/// group's: nothing of it was written.
pub async fn approve_group(
    pool: &PgPool,
    approvals: &[CheckedApproval<'_>],
) -> Result<Vec<Result<Approved, StoreError>>, StoreError> {
    let text = |field: for<'x> fn(&'x CheckedApproval<'x>) -> &'x str| -> Vec<&str> {
        approvals.iter().map(field).collect()
    };
    let traces: Vec<Option<&TraceContext>> = approvals.iter().map(|a| a.trace).collect();
    let mut conn = pool.acquire().await?;
    let rows = sqlx::query_as::<_, GroupRow>(&APPROVE_GROUP)
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
    // As after a single approval: the group is committed and nobody has an answer yet.
    fail::fail_point!("approve-after-write");
    if rows.len() != approvals.len() {
        return Err(StoreError::Inconsistent(format!(
            "a group of {} approvals was answered with {} rows",
            approvals.len(),
            rows.len()
        )));
    }
    let mut answers = Vec::with_capacity(approvals.len());
    for (approval, group_row) in approvals.iter().zip(rows) {
        answers.push(if group_row.in_lane == Some(true) {
            approve_on(&mut conn, *approval).await
        } else {
            answer_of(&mut conn, approval, group_row.row).await
        });
    }
    Ok(answers)
}
