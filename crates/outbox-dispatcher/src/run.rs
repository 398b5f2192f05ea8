//! A dispatcher's run ([`run`]): its helpers started, the claim loop run until the stop
//! signal (or the end of a drain), then shut down; and the errors that stop it.

use crate::claim_loop::ClaimLoop;
use crate::prepared::PreparedDestinations;
use crate::summary::RunSummary;
use crate::{
    health, http, recorder, reload, send_tallies, server, upkeep, wake_ups, Config, Metrics, Shared,
};
use outbox_runtime::prometheus::Figures;
use outbox_runtime::shutdown::Shutdown;
use outbox_store::PgPool;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, Semaphore};

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
        let figures = config
            .evidence
            .iter()
            .map(|evidence| evidence.figures.clone() as Arc<dyn Figures>)
            .collect();
        tokio::spawn(server::serve(
            listener,
            pool.clone(),
            metrics.clone(),
            figures,
        ));
    }
    let wake = Arc::new(Notify::new());
    tokio::spawn(wake_ups::listen_for_wake_ups(
        pool.clone(),
        wake.clone(),
        stop.clone(),
    ));
    let (set_claims_ended, claims_ended) = Shutdown::new();
    let (handed_on, handed_on_rx) = tokio::sync::mpsc::unbounded_channel();
    let hand_on = recorder::HandOn {
        lease: config.lease,
        stop: stop.clone(),
    };
    let shared = Arc::new(Shared {
        pool: pool.clone(),
        http: http::client(&config.egress, config.connect_timeout),
        recorder: recorder::Recorder::start(pool, hand_on),
        handed_on,
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
        tallies: send_tallies::Tallies::default(),
        prepared: PreparedDestinations::default(),
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
    tokio::spawn(upkeep::merge_subject_index_while_approvals_arrive(
        shared.clone(),
        stop.clone(),
    ));
    tokio::spawn(upkeep::summarize_attempt_ranges_as_they_fill(
        shared.clone(),
        stop.clone(),
    ));
    if let Some(settings) = shared.config.evidence.clone() {
        tokio::spawn(outbox_evidence::checkpoint::run(
            shared.pool.clone(),
            settings,
            stop.clone(),
        ));
    }
    if let Some(dir) = shared.config.templates_dir.clone() {
        tokio::spawn(reload::reload_templates_on_hangup(
            shared.clone(),
            dir,
            stop,
        ));
    }
    tracing::info!(worker = %shared.config.worker_id, "dispatcher started");
    if !shared.config.egress.allowed().is_empty() {
        tracing::info!(ranges = %shared.config.egress.allowed().describe(), "egress guard: these ranges are opened although private or reserved");
    }

    let mut claims = ClaimLoop::new(shared.clone(), wake, handed_on_rx);
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
