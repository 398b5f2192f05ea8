//! The dispatcher: claims due outbox rows with `FOR UPDATE SKIP LOCKED`, sends each with
//! its idempotency key and Standard Webhooks signature, and records what the destination
//! confirmed. Any number run side by side on one database.
//!
//! Layout:
//! - [`Config`] and [`run`]: the claim loop (wake-ups, capacity, lease sweep, shutdown).
//! - `work`: one claimed row to its next state (send, or settle an uncertain attempt).
//! - `classify`: what an HTTP or SMTP exchange means (accepted, rejected, not processed, not sent,
//!   uncertain).
//! - `http`: the request every attempt sends, and lookups, through the egress guard
//!   (`outbox_egress`): a destination whose address is not allowed is never connected
//!   to; its alert fails and the destination is disabled, as after a 410.
//! - `smtp`: email destinations: the message rendered once and stored before the first
//!   send, then sent byte for byte on every attempt over an SMTP dialogue driven command
//!   by command (so a lost final reply is told apart from a refusal before the data), to
//!   the relay's address vetted by the egress guard.
//! - `email_api`: webhook destinations with a body template (HTTP email APIs): the
//!   request body rendered once from the alert's email and stored before the first send,
//!   then sent byte for byte by `http` on every attempt.
//! - `recorder`: outcomes written in batches (one statement and one commit for many).
//! - `metrics`, `server`: `/metrics`, `/healthz`, `/readyz`.
//!
//! Bounds: a dispatcher holds at most `max_in_flight` rows in `sending` at once (claimed
//! and not yet recorded), so the rows a crash can leave uncertain are at most
//! `max_in_flight` per dispatcher process: the crash blast radius.
//!
//! Throughput: claims are taken in batches into local tasks (one statement commits the
//! leases and the "attempt started" lines of a whole batch before anything is sent), sends
//! run concurrently within each destination's limit, and outcomes are written in batches
//! by the recorder. A new batch is claimed once half a batch of capacity is free, so the
//! database sees few, large statements under load and an idle dispatcher still claims a
//! single new row at once.

mod classify;
mod email_api;
mod http;
mod metrics;
mod recorder;
mod server;
mod smtp;
mod work;

use outbox_core::retry::RetrySchedule;
use outbox_store::dispatch::{self, ClaimedAlert};
use outbox_store::PgPool;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;
use uuid::Uuid;

pub use classify::{classify, Exchange, Verdict};
pub use metrics::Metrics;

/// How a dispatcher runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Names this dispatcher in leases and evidence (default: host and pid).
    pub worker_id: String,
    /// Most rows claimed per statement.
    pub batch_size: u32,
    /// Most rows held in `sending` at once by this process.
    pub max_in_flight: u32,
    /// Minimum lease; a destination's lease is always longer than two of its timeouts.
    pub lease: Duration,
    /// Poll when no wake-up arrives.
    pub poll_interval: Duration,
    /// Delays between retries.
    pub retry_schedule: RetrySchedule,
    /// Exit once nothing is due now or within this long (`--drain`).
    pub drain: Option<Duration>,
    /// On shutdown, how long in-flight sends may take to finish.
    pub shutdown_deadline: Duration,
    /// Serve `/metrics`, `/healthz`, `/readyz` here.
    pub metrics_listen: Option<SocketAddr>,
    /// Connect timeout for every destination.
    pub connect_timeout: Duration,
    /// How sends reach destinations.
    pub transport: Transport,
    /// Keys that open sealed signing secrets (`OUTBOX_SECRET_KEYS`); empty when secrets
    /// are stored in plain text.
    pub secret_keys: outbox_core::sealing::SealingKeys,
    /// Which addresses sends and lookups may connect to.
    pub egress: outbox_egress::Guard,
}

/// How sends reach destinations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// HTTP, the real thing.
    #[default]
    Http,
    /// No request at all: every send is taken as accepted at once. For benchmarks only,
    /// to measure the pipeline's own ceiling (claims, evidence, recording) without the
    /// network; it records evidence of deliveries that never happened.
    Discard,
}

/// The dispatcher's default name: host and process id.
pub fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}

/// What a run did, for logs and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct RunSummary {
    /// Rows claimed.
    pub claimed: u64,
    /// Completions recorded.
    pub recorded: u64,
    /// Completions refused because the claim had been taken over (fencing).
    pub stale: u64,
    /// Claims given back unsent.
    pub released: u64,
}

/// Errors that stop a dispatcher.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// The database failed in a way retrying did not fix.
    #[error(transparent)]
    Store(#[from] outbox_store::StoreError),
    /// The metrics address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// What every worker task shares.
pub(crate) struct Shared {
    pub pool: PgPool,
    pub http: reqwest::Client,
    pub config: Config,
    pub metrics: Arc<Metrics>,
    recorder: recorder::Recorder,
    /// Destinations this process saw answer 410 Gone, and when: rows of theirs it claimed
    /// are given back unsent instead of being sent to a destination known to be gone, and
    /// it claims none of theirs for a while. The mark expires, after which the database's
    /// `enabled` decides again (the 410 may not have been recorded, or an operator may
    /// have enabled the destination since).
    disabled: Mutex<HashMap<Uuid, Instant>>,
    /// Set once shutdown begins: nothing new is sent after it.
    stop: watch::Receiver<bool>,
    /// Set once the claim loop has ended, so no claim statement can still be running.
    /// Claims are given back for shutdown only after it: a claim already on its way to
    /// the database when shutdown began would otherwise pick up rows given back a moment
    /// before, and each would be given back twice.
    claims_ended: watch::Receiver<bool>,
}

impl Shared {
    pub(crate) fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    fn is_disabled(&self, destination: Uuid) -> bool {
        self.disabled_now().contains(&destination)
    }

    /// Destinations marked gone within the last [`GONE_MARK`].
    fn disabled_now(&self) -> Vec<Uuid> {
        let mut marks = self.disabled.lock().unwrap_or_else(|e| e.into_inner());
        marks.retain(|_, at| at.elapsed() < GONE_MARK);
        marks.keys().copied().collect()
    }

    fn mark_disabled(&self, destination: Uuid) {
        self.disabled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(destination, Instant::now());
    }
}

/// How long a 410 Gone keeps this process off a destination without asking the database.
const GONE_MARK: Duration = Duration::from_secs(30);

/// Runs a dispatcher until `shutdown` resolves (or, with `drain`, until nothing is due).
/// On shutdown it stops claiming, lets sends in flight finish within the deadline, and
/// gives back claims it never acted on.
pub async fn run(
    pool: PgPool,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<RunSummary, DispatchError> {
    let metrics = Arc::new(Metrics::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let stop_on_signal = stop_tx.clone();
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_on_signal.send(true);
    });
    if let Some(addr) = config.metrics_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| DispatchError::Listen { addr, source })?;
        tokio::spawn(server::serve(listener, pool.clone(), metrics.clone()));
    }
    let wake = Arc::new(Notify::new());
    tokio::spawn(listen_for_wake_ups(
        pool.clone(),
        wake.clone(),
        stop_rx.clone(),
    ));

    let (claims_ended_tx, claims_ended_rx) = watch::channel(false);
    let shared = Arc::new(Shared {
        pool: pool.clone(),
        http: http::client(&config.egress, config.connect_timeout),
        config: config.clone(),
        metrics,
        recorder: recorder::Recorder::start(pool.clone()),
        disabled: Mutex::default(),
        stop: stop_rx.clone(),
        claims_ended: claims_ended_rx,
    });
    let capacity = Arc::new(Semaphore::new(config.max_in_flight as usize));
    let destination_limits: Mutex<HashMap<Uuid, Arc<Semaphore>>> = Mutex::new(HashMap::new());
    let mut tasks: JoinSet<Outcome> = JoinSet::new();
    let mut summary = RunSummary::default();
    let mut last_sweep: Option<Instant> = None;
    tracing::info!(worker = %config.worker_id, "dispatcher started");
    if !config.egress.allowed().is_empty() {
        tracing::info!(ranges = %config.egress.allowed().describe(), "egress guard: these ranges are opened although private or reserved");
    }

    loop {
        while let Some(joined) = tasks.try_join_next() {
            summary.add(joined);
        }
        if *stop_rx.borrow() {
            break;
        }
        if last_sweep.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
            last_sweep = Some(Instant::now());
            match dispatch::sweep_expired_leases(&pool, 1000).await {
                Ok(0) => {}
                Ok(n) => tracing::warn!(rows = n, "expired leases: attempts now uncertain"),
                Err(err) => tracing::error!(error = %err, "lease sweep failed"),
            }
        }

        // Checked again after the sweep's round trip: a claim that starts after shutdown
        // began could pick up rows the stopping tasks have just given back.
        if *stop_rx.borrow() {
            break;
        }
        let free = capacity.available_permits().min(config.batch_size as usize);
        let mut claimed = Vec::new();
        if free >= claim_threshold(&config) || tasks.is_empty() {
            let claimed_at = Instant::now();
            let mut saturated = saturated_destinations(&destination_limits);
            saturated.extend(shared.disabled_now());
            match dispatch::claim(
                &pool,
                &config.worker_id,
                free as i64,
                config.lease,
                &saturated,
            )
            .await
            {
                Ok(rows) => claimed = rows.into_iter().map(|row| (row, claimed_at)).collect(),
                Err(err) => {
                    tracing::error!(error = %err, "claim failed; retrying");
                    tokio::time::sleep(config.poll_interval).await;
                    continue;
                }
            }
        }
        let claimed_count = claimed.len();
        summary.claimed += claimed_count as u64;
        for (row, claimed_at) in claimed {
            let permit = capacity
                .clone()
                .try_acquire_owned()
                .expect("claims never exceed the free capacity");
            let limit = destination_limit(&destination_limits, &row);
            let span = tracing::info_span!("alert", alert_id = %row.alert_id, attempt = row.attempts, worker = %config.worker_id);
            tasks.spawn(
                work_one(
                    shared.clone(),
                    row,
                    claimed_at,
                    limit,
                    stop_rx.clone(),
                    permit,
                )
                .instrument(span),
            );
        }

        // Claim again at once only after a full batch with capacity left; otherwise wait
        // for a wake-up, a finished task, the poll interval or the stop signal.
        let full = capacity.available_permits() < claim_threshold(&config);
        let short = claimed_count < free;
        if full || short {
            if claimed_count == 0 && tasks.is_empty() {
                if let Some(horizon) = config.drain {
                    // Work due within the next second counts as due now: a row requeued
                    // "now" by a completion a moment ago must not end the drain.
                    let horizon = horizon.max(Duration::from_secs(1));
                    match dispatch::work_due_within(&pool, horizon).await {
                        Ok(false) => break,
                        Ok(true) => {}
                        Err(err) => tracing::error!(error = %err, "drain check failed"),
                    }
                }
            }
            let mut stop = stop_rx.clone();
            let poll = if config.drain.is_some() {
                config.poll_interval.min(Duration::from_millis(100))
            } else {
                config.poll_interval
            };
            tokio::select! {
                () = wake.notified(), if !full => {}
                Some(joined) = tasks.join_next(), if !tasks.is_empty() => summary.add(joined),
                () = tokio::time::sleep(poll) => {}
                _ = stop.changed() => {}
            }
        }
    }

    // Shutdown: sends under way finish (bounded); claims waiting for their turn are given
    // back by their tasks, which see the stop signal, now that no claim can be under way.
    let _ = claims_ended_tx.send(true);
    tracing::info!(
        in_flight = tasks.len(),
        "stopping: finishing sends in flight"
    );
    let deadline = tokio::time::sleep(config.shutdown_deadline);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                Some(joined) => summary.add(joined),
                None => break,
            },
            () = &mut deadline => {
                tracing::warn!(abandoned = tasks.len(), "shutdown deadline passed; their leases will expire and they become uncertain");
                tasks.abort_all();
                break;
            }
        }
    }
    // A drain ends without the shutdown signal: tell the helpers (the wake-up listener)
    // to stop too.
    let _ = stop_tx.send(true);
    tracing::info!(?summary, "dispatcher stopped");
    Ok(summary)
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
        .entry(row.destination_id)
        .or_insert_with(|| Arc::new(Semaphore::new(row.max_in_flight.max(1) as usize)))
        .clone()
}

/// What became of one claim, for the summary.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Recorded,
    Stale,
    Released,
    Failed,
}

impl RunSummary {
    fn add(&mut self, joined: Result<Outcome, tokio::task::JoinError>) {
        match joined {
            Ok(Outcome::Recorded) => self.recorded += 1,
            Ok(Outcome::Stale) => self.stale += 1,
            Ok(Outcome::Released) => self.released += 1,
            Ok(Outcome::Failed) | Err(_) => {}
        }
    }
}

/// Works one claim: waits for the destination's turn (or gives the claim back on
/// shutdown), works it, records the result, then frees its capacity.
async fn work_one(
    shared: Arc<Shared>,
    row: ClaimedAlert,
    claimed_at: Instant,
    limit: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
    _capacity: tokio::sync::OwnedSemaphorePermit,
) -> Outcome {
    let lease = (row.lease_expires_at - row.db_now)
        .to_std()
        .unwrap_or_default();
    let claim = work::Claim {
        local_claimed_at: claimed_at,
        local_lease_deadline: claimed_at + lease,
        row,
    };
    // Stopping wins over a free slot: once shutdown began, nothing new is sent.
    let permit = tokio::select! {
        biased;
        _ = stop.wait_for(|stopping| *stopping) => None,
        permit = limit.acquire_owned() => permit.ok(),
    };
    let finished = match permit {
        None => work::Finished::Release(format!("{} is shutting down", shared.config.worker_id)),
        Some(_slot) if shared.is_disabled(claim.row.destination_id) => work::Finished::Release(
            "the destination was disabled while this claim waited".to_owned(),
        ),
        // The slot is freed once the exchange is over; what the exchange taught (a 410
        // disables the destination) is marked before, so the next claim waiting for this
        // destination's slot sees it.
        Some(_slot) => {
            let finished = work::work(&shared, &claim).await;
            if let work::Finished::Done(completion) = &finished {
                if completion.disable_destination.is_some() {
                    shared.mark_disabled(claim.row.destination_id);
                }
            }
            finished
        }
    };
    match finished {
        work::Finished::Release(why) => {
            if shared.stopping() {
                let mut claims_ended = shared.claims_ended.clone();
                // An error means the claim loop is gone, which ends claims as well.
                let _ = claims_ended.wait_for(|ended| *ended).await;
            }
            match dispatch::release(&shared.pool, &claim.row, &shared.config.worker_id, &why).await
            {
                Ok(true) => Outcome::Released,
                Ok(false) => Outcome::Stale,
                Err(err) => {
                    tracing::error!(error = %err, "could not give the claim back; its lease will expire");
                    Outcome::Failed
                }
            }
        }
        work::Finished::Done(completion) => match record(&shared, &claim, &completion).await {
            Ok(true) => {
                if matches!(
                    completion.next,
                    dispatch::Next::Settle {
                        outcome: "accepted",
                        ..
                    }
                ) {
                    let waited = chrono::Utc::now() - claim.row.alert_created_at;
                    shared.metrics.delivered_after(
                        &claim.row.destination,
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
        },
    }
}

/// Records a completion, trying again on a database error while the lease lasts: the
/// send already happened, and a lost record would turn a known outcome into an uncertain
/// one. Fencing makes a repeated attempt harmless.
async fn record(
    shared: &Shared,
    claim: &work::Claim,
    completion: &outbox_store::dispatch::Completion,
) -> Result<bool, String> {
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

/// Forwards `NOTIFY outbox_due` to the claim loop until the dispatcher stops. Reconnects
/// on failure; the loop's polling covers any wake-up missed meanwhile.
async fn listen_for_wake_ups(pool: PgPool, wake: Arc<Notify>, mut stop: watch::Receiver<bool>) {
    tokio::select! {
        _ = stop.wait_for(|stopping| *stopping) => {}
        () = forward_wake_ups(pool, wake) => {}
    }
}

async fn forward_wake_ups(pool: PgPool, wake: Arc<Notify>) {
    loop {
        match dispatch::listen(&pool).await {
            Ok(mut listener) => loop {
                match listener.recv().await {
                    Ok(()) => wake.notify_one(),
                    Err(err) => {
                        tracing::warn!(error = %err, "wake-up listener lost its connection");
                        break;
                    }
                }
            },
            Err(err) => tracing::warn!(error = %err, "cannot listen for wake-ups; polling only"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
