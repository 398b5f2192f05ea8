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
//! once, alone (a group of one), so an idle system answers as fast as before; only
//! approvals that arrive while every writer is busy are grouped.
//!
//! What a grouped approval is written as is exactly what it would be alone: a single
//! approval is a group of one, so both are written by the one approval statement
//! ([`approve_many_on`]), with the same alert, outbox row, evidence line, place in its
//! lane and answer. An identity the group's snapshot could not answer for (approved twice
//! within the group, or committed by another writer while the group waited for it) is
//! asked again in a fresh snapshot after the group's commit; when the group's statement
//! fails, every approval of the group is written again alone, so that one bad approval
//! costs the others nothing, unless the database is unavailable, when each is answered
//! with that.

use outbox_core::trace_context::TraceContext;
use outbox_core::CheckedPayloadBuf;
use sqlx::PgPool;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

use super::approve::{approve_checked, approve_many_on, Approved, CheckedApproval};
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

    /// Writes `approvals`: one alone (answered with its own error, if any), more as a
    /// group.
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

/// Approves `approvals` in one statement (autocommit: one transaction), each answered as
/// [`approve_checked`] would answer it alone, in the order given: the single approval's
/// statement over all of them ([`approve_many_on`]). An error of the statement is the whole
/// group's: nothing of it was written.
pub async fn approve_group(
    pool: &PgPool,
    approvals: &[CheckedApproval<'_>],
) -> Result<Vec<Result<Approved, StoreError>>, StoreError> {
    let mut conn = pool.acquire().await?;
    approve_many_on(&mut conn, approvals).await
}
