//! The claim loop ([`ClaimLoop`]): claims due rows as capacity frees, sweeps expired
//! leases, starts a task per claim, and on shutdown lets sends in flight finish.

use crate::attempt_trace::{attempt_span, ClaimBatch};
use crate::delivery::work_one;
use crate::shared::HandedOn;
use crate::summary::{Outcome, RunSummary};
use crate::{Config, Shared};
use outbox_runtime::shutdown::Trigger;
use outbox_store::dispatch::{self, ClaimedAlert};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;
use uuid::Uuid;

/// The claim loop and what it keeps between rounds: claims are worked by tasks in
/// `tasks`, each holding a permit of `capacity` (this process's in-flight bound) and,
/// while it sends, one of its destination's slots.
pub(crate) struct ClaimLoop {
    shared: Arc<Shared>,
    /// Wake-ups forwarded from `NOTIFY outbox_due`.
    wake: Arc<Notify>,
    capacity: Arc<Semaphore>,
    destination_limits: Mutex<HashMap<Uuid, Arc<Semaphore>>>,
    tasks: JoinSet<Outcome>,
    summary: RunSummary,
    last_sweep: Option<Instant>,
    /// Lanes' next alerts, claimed by the completions that released their lanes
    /// (`Shared::handed_on`): each gets its task as a claimed row does.
    handed_on: mpsc::UnboundedReceiver<HandedOn>,
}

/// What one claim round did.
#[derive(Debug, Clone, Copy)]
struct Round {
    /// Capacity free for the round's claim (at most a batch).
    free: usize,
    /// Rows claimed.
    claimed: usize,
}

impl ClaimLoop {
    pub(crate) fn new(
        shared: Arc<Shared>,
        wake: Arc<Notify>,
        handed_on: mpsc::UnboundedReceiver<HandedOn>,
    ) -> Self {
        ClaimLoop {
            handed_on,
            capacity: Arc::new(Semaphore::new(shared.config.max_in_flight as usize)),
            shared,
            wake,
            destination_limits: Mutex::new(HashMap::new()),
            tasks: JoinSet::new(),
            summary: RunSummary::default(),
            last_sweep: None,
        }
    }

    /// Claims, sweeps and waits until the stop signal is set or a drain has ended.
    pub(crate) async fn run_until_stopped(&mut self) {
        loop {
            self.count_finished();
            self.start_handed_on();
            if self.shared.stopping() {
                return;
            }
            self.sweep_expired_leases().await;
            // Checked again after the sweep's round trip: a claim that starts after
            // shutdown began could pick up rows the stopping tasks have just given back.
            if self.shared.stopping() {
                return;
            }
            let Some(round) = self.claim_and_spawn().await else {
                continue;
            };
            // Claim again at once only after a full batch with capacity left; otherwise
            // wait for a wake-up, a finished task, the poll interval or the stop signal.
            let full = self.capacity.available_permits() < claim_threshold(&self.shared.config);
            let short = round.claimed < round.free;
            if !full && !short {
                continue;
            }
            // A task hands on its lane's next alert before it ends, so with no task left
            // every hand-on is in the channel.
            if round.claimed == 0
                && self.tasks.is_empty()
                && !self.start_handed_on()
                && self.drained().await
            {
                return;
            }
            self.wait_for_work(full).await;
        }
    }

    /// Adds the tasks that have finished to the summary.
    fn count_finished(&mut self) {
        while let Some(joined) = self.tasks.try_join_next() {
            self.summary.add(joined);
        }
    }

    /// At most once a second, turns expired leases into uncertain attempts.
    async fn sweep_expired_leases(&mut self) {
        if self
            .last_sweep
            .is_some_and(|at| at.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.last_sweep = Some(Instant::now());
        match dispatch::sweep_expired_leases(&self.shared.pool, 1000).await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(rows = n, "expired leases: attempts now uncertain"),
            Err(err) => tracing::error!(error = %err, "lease sweep failed"),
        }
    }

    /// Claims as many due rows as there is capacity for (when that is worth a statement,
    /// or nothing is in flight) and starts a task for each. `None` after a failed claim,
    /// once the poll interval has passed.
    async fn claim_and_spawn(&mut self) -> Option<Round> {
        let config = &self.shared.config;
        let free = self
            .capacity
            .available_permits()
            .min(config.batch_size as usize);
        let mut claimed = Vec::new();
        let claimed_at = Instant::now();
        let claim_started = std::time::SystemTime::now();
        if free >= claim_threshold(config) || self.tasks.is_empty() {
            let mut saturated = saturated_destinations(&self.destination_limits);
            saturated.extend(self.shared.disabled_now());
            match dispatch::claim(
                &self.shared.pool,
                &config.worker_id,
                free as i64,
                config.lease,
                &saturated,
            )
            .await
            {
                Ok(rows) => {
                    self.shared.metrics.claim_ran();
                    claimed = rows;
                }
                Err(err) => {
                    tracing::error!(error = %err, "claim failed; retrying");
                    tokio::time::sleep(config.poll_interval).await;
                    return None;
                }
            }
        }
        let round = Round {
            free,
            claimed: claimed.len(),
        };
        self.summary.claimed += claimed.len() as u64;
        let batch = ClaimBatch {
            started: claim_started,
            finished: std::time::SystemTime::now(),
            rows: claimed.len(),
        };
        for row in claimed {
            self.spawn(row, claimed_at, batch);
        }
        Some(round)
    }

    /// Starts the tasks of the lanes' next alerts that completions have claimed; whether
    /// there were any.
    fn start_handed_on(&mut self) -> bool {
        let mut any = false;
        while let Ok(handed) = self.handed_on.try_recv() {
            self.start_one_handed_on(handed);
            any = true;
        }
        any
    }

    /// Starts the task of one lane's next alert, with the in-flight permit of the alert
    /// it follows. (Only a lane broken by hand would hand on two at once: the second
    /// takes a free permit, or waits for its lease to expire, as after a crash.)
    fn start_one_handed_on(&mut self, handed: HandedOn) {
        let permit = match handed.permit {
            Some(permit) => permit,
            None => match self.capacity.clone().try_acquire_owned() {
                Ok(permit) => permit,
                Err(_) => {
                    tracing::warn!(alert_id = %handed.row.alert_id, "two alerts of one lane were handed on at once and no capacity is free; its lease will expire");
                    return;
                }
            },
        };
        self.summary.claimed += 1;
        let batch = ClaimBatch {
            started: handed.started,
            finished: handed.finished,
            rows: 1,
        };
        self.spawn_with(handed.row, handed.claimed_at, batch, permit);
    }

    /// Starts the task that works one claim.
    fn spawn(&mut self, row: ClaimedAlert, claimed_at: Instant, batch: ClaimBatch) {
        let permit = self
            .capacity
            .clone()
            .try_acquire_owned()
            .expect("claims never exceed the free capacity");
        self.spawn_with(row, claimed_at, batch, permit);
    }

    /// Starts the task that works one claim, holding `permit` of the process's capacity.
    fn spawn_with(
        &mut self,
        row: ClaimedAlert,
        claimed_at: Instant,
        batch: ClaimBatch,
        permit: OwnedSemaphorePermit,
    ) {
        let limit = destination_limit(&self.destination_limits, &row);
        let (span, trace) = attempt_span(&row, &self.shared.config.worker_id, batch);
        // Boxed: a delivery's future (the whole request and its recording, about 15 KB)
        // is never moved by value into the task, into its cell, and out of it again when
        // the task is joined (10 % of a dispatcher's CPU in `perf` was such copies). And
        // written straight into its box, which is only then wrapped in its span: built on
        // the stack and moved into the box, it cost one 15 KB copy per delivery, 3 % of a
        // dispatcher's CPU in an HTTP drain.
        let work =
            boxed_in_place(|| work_one(self.shared.clone(), row, trace, claimed_at, limit, permit));
        self.tasks.spawn(Box::into_pin(work).instrument(span));
    }

    /// With `--drain`: whether nothing is due now or within the horizon, so the run ends.
    async fn drained(&self) -> bool {
        let Some(horizon) = self.shared.config.drain else {
            return false;
        };
        // Work due within the next second counts as due now: a row requeued "now" by a
        // completion a moment ago must not end the drain.
        let horizon = horizon.max(Duration::from_secs(1));
        match dispatch::work_due_within(&self.shared.pool, horizon).await {
            Ok(due) => !due,
            Err(err) => {
                tracing::error!(error = %err, "drain check failed");
                false
            }
        }
    }

    /// Waits for a reason to claim again: a wake-up (unless there is no capacity for
    /// it), a finished task, the poll interval, or the stop signal.
    async fn wait_for_work(&mut self, full: bool) {
        let config = &self.shared.config;
        let poll = if config.drain.is_some() {
            config.poll_interval.min(Duration::from_millis(100))
        } else {
            config.poll_interval
        };
        let mut stop = self.shared.stop.clone();
        tokio::select! {
            () = self.wake.notified(), if !full => {}
            Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => self.summary.add(joined),
            Some(handed) = self.handed_on.recv() => self.start_one_handed_on(handed),
            () = tokio::time::sleep(poll) => {}
            () = stop.wait() => {}
        }
    }

    /// Shutdown: sends under way finish (bounded by the deadline); claims waiting for
    /// their turn are given back by their tasks, which see the stop signal, once
    /// `claims_ended` says no claim can be under way.
    pub(crate) async fn shut_down(mut self, claims_ended: &Trigger) -> RunSummary {
        claims_ended.set();
        tracing::info!(
            in_flight = self.tasks.len(),
            "stopping: finishing sends in flight"
        );
        let deadline = tokio::time::sleep(self.shared.config.shutdown_deadline);
        tokio::pin!(deadline);
        loop {
            // A lane's next alert claimed by a completion already under way when
            // shutdown began gets its task too, which gives it back unsent. First: its
            // task hands it on before it ends, so it is taken before the last task's end
            // can end this loop.
            tokio::select! {
                biased;
                Some(handed) = self.handed_on.recv() => self.start_one_handed_on(handed),
                joined = self.tasks.join_next() => match joined {
                    Some(joined) => self.summary.add(joined),
                    None => break,
                },
                () = &mut deadline => {
                    tracing::warn!(abandoned = self.tasks.len(), "shutdown deadline passed; their leases will expire and they become uncertain");
                    self.tasks.abort_all();
                    break;
                }
            }
        }
        self.summary
    }
}

/// Free capacity worth a claim: half a batch (or half the in-flight bound, if smaller),
/// so that a busy dispatcher claims in large batches rather than one row per finished send.
fn claim_threshold(config: &Config) -> usize {
    (config.batch_size.min(config.max_in_flight) as usize / 2).max(1)
}

/// Destinations whose every slot in this process is busy: claiming more of their rows
/// now would only make them wait while their leases run.
fn saturated_destinations(limits: &Mutex<HashMap<Uuid, Arc<Semaphore>>>) -> Vec<Uuid> {
    limits
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(_, slots)| slots.available_permits() == 0)
        .map(|(id, _)| *id)
        .collect()
}

fn destination_limit(
    limits: &Mutex<HashMap<Uuid, Arc<Semaphore>>>,
    row: &ClaimedAlert,
) -> Arc<Semaphore> {
    let mut limits = limits.lock().unwrap_or_else(|e| e.into_inner());
    limits
        .entry(row.destination.id)
        .or_insert_with(|| Arc::new(Semaphore::new(row.destination.max_in_flight.max(1) as usize)))
        .clone()
}

/// `make()`'s value in a box of its own. Writing it into memory allocated first lets the
/// compiler build it there, where `Box::new(make())` builds it on the stack and copies it.
fn boxed_in_place<T>(make: impl FnOnce() -> T) -> Box<T> {
    Box::write(Box::new_uninit(), make())
}
