//! The dispatcher: claims due outbox rows with `FOR UPDATE SKIP LOCKED`, sends each with
//! its idempotency key and Standard Webhooks signature, and records what the destination
//! confirmed. Any number run side by side on one database.
//!
//! Layout:
//! - [`Config`] and [`run`]: the claim loop (wake-ups, capacity, lease sweep, shutdown).
//! - `work`: one claimed row to its next state (send, or settle an uncertain attempt):
//!   the doing, I/O only.
//! - `judge`: the deciding, pure: what a send's or a lookup's answer means for the claim
//!   and where it goes next (the outcome table, retries, exhaustion, settling order).
//! - `classify`: what an HTTP or SMTP exchange means (accepted, rejected, not processed, not sent,
//!   uncertain).
//! - `http`: the request every attempt sends, and lookups, through the egress guard
//!   (`outbox_egress`): a destination whose address is not allowed is never connected
//!   to; its alert fails and the destination is disabled, as after a 410.
//! - `smtp`: email destinations: the message rendered once and stored before the first
//!   send, then sent byte for byte on every attempt over an SMTP dialogue driven command
//!   by command (so a lost final reply is told apart from a refusal before the data), to
//!   the relay's address vetted by the egress guard.
//! - `relay`: reaching the relay: TCP to the vetted address, then implicit TLS or
//!   `STARTTLS` as the destination requires (never a fallback to plain text), the
//!   certificate checked against the relay's name and the public roots or the
//!   destination's CA.
//! - [`TenantTemplates`] (`templates`): each tenant's own templates from
//!   `--templates-dir`, compiled at start and reloaded on SIGHUP; the template version
//!   says whose made a message.
//! - `email_api`: webhook destinations with a body template (HTTP email APIs): the
//!   request body rendered once from the alert's email and stored before the first send,
//!   then sent byte for byte by `http` on every attempt.
//! - `recorder`: outcomes written in batches (one statement and one commit for many).
//! - `health`: every send counted per destination in memory and reported every few
//!   seconds; a destination whose every send has failed for its window is disabled by
//!   the report (never on a delivery's own path).
//! - `upkeep`: the live queue's own vacuum, once its dead tuples pass
//!   `--queue-vacuum-after` (autovacuum may visit too rarely, or not at all).
//! - `metrics`, `server`: `/metrics`, `/healthz`, `/readyz`.
//!
//! Bounds: a claim never leaves more than a destination's `max_in_flight` rows in
//! `sending`, counting every dispatcher's (the claim statement enforces it in the database,
//! see `outbox_store::dispatch::claim`), so one crash can leave at most that many alerts
//! uncertain at a destination, whatever the number of processes: the crash blast radius.
//! A dispatcher also holds at most its own `--max-in-flight` rows in `sending` overall
//! (claimed and not yet recorded), and runs at most `--max-concurrent-sends` sends at
//! once when that is set. Since a claim takes no more rows of a destination than it has
//! room for, a claimed row waits only for the process's send cap, if any; the
//! per-destination slots a process keeps are a guard for the rare case where its own rows
//! outnumber the bound (a row taken over after its lease expired while the stalled send
//! still runs). Where uncertainty settles itself (a lookup, or a de-duplication window)
//! a large destination bound with a send cap lets claims stay large: that is the
//! high-throughput setting (the benchmark's).
//!
//! Throughput: claims are taken in batches into local tasks (one statement commits the
//! leases and the "attempt started" lines of a whole batch before anything is sent), sends
//! run concurrently within each destination's limit, and outcomes are written in batches
//! by the recorder. A new batch is claimed once half a batch of capacity is free, so the
//! database sees few, large statements under load and an idle dispatcher still claims a
//! single new row at once.

mod classify;
mod email_api;
mod health;
mod http;
mod judge;
mod metrics;
mod recorder;
mod relay;
mod server;
mod smtp;
mod templates;
mod upkeep;
mod work;

use outbox_core::retry::RetrySchedule;
use outbox_runtime::shutdown::{Shutdown, Trigger};
use outbox_store::dispatch::{self, ClaimedAlert};
use outbox_store::PgPool;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;
use uuid::Uuid;

pub use classify::{classify, Exchange, SmtpPhase, Verdict};
pub use metrics::Metrics;
pub use templates::TenantTemplates;

/// How a dispatcher runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Names this dispatcher in leases and evidence (default: host and pid).
    pub worker_id: String,
    /// Most rows claimed per statement.
    pub batch_size: u32,
    /// Most rows held in `sending` at once by this process.
    pub max_in_flight: u32,
    /// Most sends (requests, SMTP dialogues, lookups) this process runs at once, over all
    /// destinations; `None` leaves only `max_in_flight` and the destinations' bounds. The
    /// rows claimed beyond it wait in the process for their turn, so claims can stay
    /// large (few statements) while the destinations see a steady number of requests.
    pub max_concurrent_sends: Option<u32>,
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
    /// Each tenant's own email templates, as loaded at start.
    pub templates: Arc<TenantTemplates>,
    /// Where they were loaded from (`--templates-dir`): read again on SIGHUP.
    pub templates_dir: Option<std::path::PathBuf>,
    /// How often this process reports its sends per destination (destination health).
    pub health_report_interval: Duration,
    /// Vacuum `outbox` once it has this many dead tuples (`None`: leave it to
    /// autovacuum).
    pub queue_vacuum_after: Option<u64>,
}

/// `--queue-vacuum-after`'s default: the outbox table is vacuumed once it has this many
/// dead tuples (25,000 deliveries' worth), a few seconds of a busy drain.
pub const DEFAULT_QUEUE_VACUUM_AFTER: u64 = 50_000;

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
    stop: Shutdown,
    /// Set once the claim loop has ended, so no claim statement can still be running.
    /// Claims are given back for shutdown only after it: a claim already on its way to
    /// the database when shutdown began would otherwise pick up rows given back a moment
    /// before, and each would be given back twice.
    claims_ended: Shutdown,
    /// Each tenant's email templates: replaced whole when SIGHUP reloads them.
    templates: std::sync::RwLock<Arc<TenantTemplates>>,
    /// This process's sends at once (`Config::max_concurrent_sends`): a permit is taken
    /// after the destination's slot, in that order everywhere, and held for the exchange.
    sends: Arc<Semaphore>,
    /// Sends counted per destination since the last health report.
    pub(crate) tallies: health::Tallies,
}

impl Shared {
    /// The templates now (a reload does not change a rendering already under way).
    pub(crate) fn templates(&self) -> Arc<TenantTemplates> {
        self.templates
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.is_set()
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

/// How long a disabled destination (410 Gone, or failing for its window) keeps this
/// process off it without asking the database.
const GONE_MARK: Duration = Duration::from_secs(30);

/// Runs a dispatcher until `shutdown` resolves (or, with `drain`, until nothing is due).
/// On shutdown it stops claiming, lets sends in flight finish within the deadline, and
/// gives back claims it never acted on.
pub async fn run(
    pool: PgPool,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<RunSummary, DispatchError> {
    let (set_stop, stop) = Shutdown::new();
    let set_stop = Arc::new(set_stop);
    let stop_on_signal = set_stop.clone();
    tokio::spawn(async move {
        shutdown.await;
        stop_on_signal.set();
    });
    let metrics = Arc::new(Metrics::default());
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
        stop.clone(),
    ));
    let (set_claims_ended, claims_ended) = Shutdown::new();
    let shared = Arc::new(Shared {
        pool: pool.clone(),
        http: http::client(&config.egress, config.connect_timeout),
        recorder: recorder::Recorder::start(pool),
        metrics,
        disabled: Mutex::default(),
        templates: std::sync::RwLock::new(config.templates.clone()),
        sends: Arc::new(Semaphore::new(
            config
                .max_concurrent_sends
                .unwrap_or(config.max_in_flight)
                .max(1) as usize,
        )),
        config,
        stop: stop.clone(),
        claims_ended,
        tallies: health::Tallies::default(),
    });
    tokio::spawn(health::report_every(
        shared.clone(),
        shared.config.health_report_interval,
        stop.clone(),
    ));
    if let Some(after) = shared.config.queue_vacuum_after {
        tokio::spawn(upkeep::vacuum_queue_when_due(
            shared.clone(),
            after,
            stop.clone(),
        ));
    }
    if let Some(dir) = shared.config.templates_dir.clone() {
        tokio::spawn(reload_templates_on_hangup(shared.clone(), dir, stop));
    }
    tracing::info!(worker = %shared.config.worker_id, "dispatcher started");
    if !shared.config.egress.allowed().is_empty() {
        tracing::info!(ranges = %shared.config.egress.allowed().describe(), "egress guard: these ranges are opened although private or reserved");
    }

    let mut claims = ClaimLoop::new(shared.clone(), wake);
    claims.run_until_stopped().await;
    let summary = claims.shut_down(&set_claims_ended).await;
    // What was counted since the last report is not lost with the process.
    health::report(&shared).await;
    // A drain ends without the shutdown signal: tell the helpers (the wake-up listener)
    // to stop too.
    set_stop.set();
    tracing::info!(?summary, "dispatcher stopped");
    Ok(summary)
}

/// The claim loop and what it keeps between rounds: claims are worked by tasks in
/// `tasks`, each holding a permit of `capacity` (this process's in-flight bound) and,
/// while it sends, one of its destination's slots.
struct ClaimLoop {
    shared: Arc<Shared>,
    /// Wake-ups forwarded from `NOTIFY outbox_due`.
    wake: Arc<Notify>,
    capacity: Arc<Semaphore>,
    destination_limits: Mutex<HashMap<Uuid, Arc<Semaphore>>>,
    tasks: JoinSet<Outcome>,
    summary: RunSummary,
    last_sweep: Option<Instant>,
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
    fn new(shared: Arc<Shared>, wake: Arc<Notify>) -> Self {
        ClaimLoop {
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
    async fn run_until_stopped(&mut self) {
        loop {
            self.count_finished();
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
            if round.claimed == 0 && self.tasks.is_empty() && self.drained().await {
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
                Ok(rows) => claimed = rows,
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
        for row in claimed {
            self.spawn(row, claimed_at);
        }
        Some(round)
    }

    /// Starts the task that works one claim.
    fn spawn(&mut self, row: ClaimedAlert, claimed_at: Instant) {
        let permit = self
            .capacity
            .clone()
            .try_acquire_owned()
            .expect("claims never exceed the free capacity");
        let limit = destination_limit(&self.destination_limits, &row);
        let span = tracing::info_span!("alert", alert_id = %row.alert_id, attempt = row.attempts, worker = %self.shared.config.worker_id);
        self.tasks
            .spawn(work_one(self.shared.clone(), row, claimed_at, limit, permit).instrument(span));
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
            () = tokio::time::sleep(poll) => {}
            () = stop.wait() => {}
        }
    }

    /// Shutdown: sends under way finish (bounded by the deadline); claims waiting for
    /// their turn are given back by their tasks, which see the stop signal, once
    /// `claims_ended` says no claim can be under way.
    async fn shut_down(mut self, claims_ended: &Trigger) -> RunSummary {
        claims_ended.set();
        tracing::info!(
            in_flight = self.tasks.len(),
            "stopping: finishing sends in flight"
        );
        let deadline = tokio::time::sleep(self.shared.config.shutdown_deadline);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
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
        .entry(row.destination_id)
        .or_insert_with(|| Arc::new(Semaphore::new(row.max_in_flight.max(1) as usize)))
        .clone()
}

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
    let mut stop = shared.stop.clone();
    let permit = tokio::select! {
        biased;
        () = stop.wait() => None,
        permit = take_turn(&limit, &shared.sends) => permit,
    };
    let finished = match permit {
        None => work::Finished::Release(work::SHUTTING_DOWN.to_owned()),
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
                    shared
                        .metrics
                        .destination_disabled(&claim.row.destination, "gone");
                }
            }
            finished
        }
    };
    match finished {
        work::Finished::Release(why) => {
            if shared.stopping() {
                shared.claims_ended.clone().wait().await;
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
                        outcome: outbox_core::Outcome::Accepted,
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

/// Reads the templates folder again at every SIGHUP until the dispatcher stops. A folder
/// that no longer loads (a broken file) keeps the templates already loaded.
async fn reload_templates_on_hangup(
    shared: Arc<Shared>,
    dir: std::path::PathBuf,
    mut stop: Shutdown,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(hangups) => hangups,
        Err(err) => {
            tracing::error!(error = %err, "cannot listen for SIGHUP; templates reload only at a restart");
            return;
        }
    };
    loop {
        tokio::select! {
            () = stop.wait() => return,
            got = hangups.recv() => if got.is_none() { return },
        }
        match TenantTemplates::load(&dir) {
            Ok(templates) => {
                let tenants: Vec<&str> = templates.tenants().collect();
                tracing::info!(tenants = ?tenants, "templates reloaded");
                drop(tenants);
                *shared.templates.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(templates);
            }
            Err(err) => {
                tracing::error!(error = %err, "templates not reloaded; the ones loaded before stay");
            }
        }
    }
}

/// Forwards `NOTIFY outbox_due` to the claim loop until the dispatcher stops. Reconnects
/// on failure; the loop's polling covers any wake-up missed meanwhile.
async fn listen_for_wake_ups(pool: PgPool, wake: Arc<Notify>, mut stop: Shutdown) {
    tokio::select! {
        () = stop.wait() => {}
        () = forward_wake_ups(pool, wake) => {}
    }
}

async fn forward_wake_ups(pool: PgPool, wake: Arc<Notify>) {
    loop {
        match outbox_store::wake_ups::listen(&pool).await {
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
