//! A delivery's work: one claim from its turn to send to its recorded outcome (or its
//! claim given back).

use crate::summary::Outcome;
use crate::{attempt_trace, work, Shared};
use outbox_core::trace_context::TraceContext;
use outbox_store::dispatch::{self, ClaimedAlert, Completion};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

/// A claim's turn to send: one of its destination's slots, then one of the process's
/// sends (always in this order, so no two claims can each hold what the other waits for).
async fn take_turn(
    destination: &Arc<Semaphore>,
    process: &Arc<Semaphore>,
) -> Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)> {
    let slot = destination.clone().acquire_owned().await.ok()?;
    let send = process.clone().acquire_owned().await.ok()?;
    Some((slot, send))
}

/// Works one claim: waits for the destination's turn (or gives the claim back on
/// shutdown), works it, records the result, then frees its capacity.
pub(crate) async fn work_one(
    shared: Arc<Shared>,
    row: ClaimedAlert,
    trace: Option<TraceContext>,
    claimed_at: Instant,
    limit: Arc<Semaphore>,
    capacity: OwnedSemaphorePermit,
) -> Outcome {
    let lease = (row.lease_expires_at - row.db_now)
        .to_std()
        .unwrap_or_default();
    let claim = work::Claim {
        local_claimed_at: claimed_at,
        local_lease_deadline: claimed_at + lease,
        row,
        outgoing_trace: trace,
    };
    match work_in_turn(&shared, &claim, &limit).await {
        work::Finished::Release(why) => give_back(&shared, &claim, &why).await,
        work::Finished::Done(completion) => {
            record_done(&shared, &claim, &completion, capacity).await
        }
    }
}

/// Waits for the claim's turn and works it, unless shutdown began first or its
/// destination was disabled while it waited (then the claim is to be given back). The
/// turn (destination slot and send permit) is held for the exchange only.
async fn work_in_turn(
    shared: &Shared,
    claim: &work::Claim,
    limit: &Arc<Semaphore>,
) -> work::Finished {
    // Stopping wins over a free slot: once shutdown began, nothing new is sent.
    let mut stop = shared.stop.clone();
    let turn = tokio::select! {
        biased;
        () = stop.wait() => None,
        turn = take_turn(limit, &shared.sends) => turn,
    };
    let Some(_turn) = turn else {
        return work::Finished::Release(work::SHUTTING_DOWN.to_owned());
    };
    if shared.is_disabled(claim.row.destination.id) {
        return work::Finished::Release(
            "the destination was disabled while this claim waited".to_owned(),
        );
    }
    let finished = work::work(shared, claim).await;
    // What the exchange taught (a 410 disables the destination) is marked before the
    // turn is freed, so the next claim waiting for this destination's slot sees it.
    mark_gone_if_told(shared, claim, &finished);
    finished
}

/// Marks the destination disabled in this process when the exchange's completion
/// disables it (a 410 Gone).
fn mark_gone_if_told(shared: &Shared, claim: &work::Claim, finished: &work::Finished) {
    if let work::Finished::Done(completion) = finished {
        if completion.disable_destination.is_some() {
            shared.mark_disabled(claim.row.destination.id);
            shared
                .metrics
                .destination_disabled(&claim.row.destination.name, "gone");
        }
    }
}

/// Gives an unsent claim back. On shutdown, only once the claim loop has ended, so no
/// claim still on its way to the database can pick the row up again.
async fn give_back(shared: &Shared, claim: &work::Claim, why: &str) -> Outcome {
    if shared.stopping() {
        shared.claims_ended.clone().wait().await;
    }
    match dispatch::release(&shared.pool, &claim.row, &shared.config.worker_id, why).await {
        Ok(true) => Outcome::Released,
        Ok(false) => Outcome::Stale,
        Err(err) => {
            tracing::error!(error = %err, "could not give the claim back; its lease will expire");
            Outcome::Failed
        }
    }
}

/// Records a worked claim's completion and counts a delivery's wait in the metrics. What
/// the completion claimed as it released an ordered lane (the lane's next alert) goes to
/// the claim loop with this claim's in-flight permit (`capacity`), so the process's bound
/// holds as the next alert takes this one's place.
async fn record_done(
    shared: &Shared,
    claim: &work::Claim,
    completion: &Completion,
    capacity: OwnedSemaphorePermit,
) -> Outcome {
    let started = std::time::SystemTime::now();
    let recorded = record(shared, claim, completion)
        .instrument(attempt_trace::step_span("settle"))
        .await;
    let recorded = recorded.map(|recorded| {
        hand_on_to_claim_loop(shared, recorded.next, capacity, started);
        recorded.applied
    });
    match recorded {
        Ok(true) => {
            if delivered(completion) {
                let waited = chrono::Utc::now() - claim.row.alert_created_at;
                shared.metrics.delivered_after(
                    &claim.row.destination.name,
                    waited.num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6,
                );
            }
            tracing::debug!(line = %completion.line, "recorded");
            Outcome::Recorded
        }
        Ok(false) => {
            tracing::warn!(line = %completion.line, "stale completion ignored: the claim was taken over after its lease expired");
            Outcome::Stale
        }
        Err(err) => {
            tracing::error!(error = %err, "could not record the outcome; the lease will expire and the attempt becomes uncertain");
            Outcome::Failed
        }
    }
}

/// Passes what a completion claimed to the claim loop, the first with `capacity`. Should
/// the loop be gone (the process is stopping), the rows stay claimed until their leases
/// expire, as a crash leaves them.
fn hand_on_to_claim_loop(
    shared: &Shared,
    next: Vec<ClaimedAlert>,
    capacity: OwnedSemaphorePermit,
    started: std::time::SystemTime,
) {
    let claimed_at = Instant::now();
    let finished = std::time::SystemTime::now();
    let mut permit = Some(capacity);
    for row in next {
        let handed = crate::shared::HandedOn {
            row,
            permit: permit.take(),
            claimed_at,
            started,
            finished,
        };
        if shared.handed_on.send(handed).is_err() {
            tracing::warn!(
                "a lane's next alert was claimed as the dispatcher stopped; its lease will expire"
            );
        }
    }
}

/// Whether the completion settles the alert as accepted by the destination.
fn delivered(completion: &Completion) -> bool {
    matches!(
        completion.next,
        dispatch::Next::Settle {
            outcome: outbox_core::Outcome::Accepted,
            ..
        }
    )
}

/// Records a completion, trying again on a database error while the lease lasts: the
/// send already happened, and a lost record would turn a known outcome into an uncertain
/// one. Fencing makes a repeated attempt harmless.
async fn record(
    shared: &Shared,
    claim: &work::Claim,
    completion: &Completion,
) -> Result<dispatch::Recorded, String> {
    let mut pause = Duration::from_millis(100);
    loop {
        match shared.recorder.record(completion.clone()).await {
            Err(err) if Instant::now() + pause < claim.local_lease_deadline => {
                tracing::warn!(error = %err, retry_in = ?pause, "recording the outcome failed; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}
