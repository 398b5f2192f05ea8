//! The decider's monitors: they read sources, decide which alerts are due, and approve
//! them through the same one-transaction write path as the API (in bulk: one statement
//! approves many, still one alert per identity).
//!
//! Layout:
//! - `contracts`: contract files (CSV, JSON) and the renewal monitor.
//! - `news`: Webz.io-format articles, the watchlist monitor, the news poller (behind the
//!   egress guard, `outbox_egress`: no redirects, no `Referer`, the token only to the
//!   feed's own origin, pages read up to a size cap).
//! - [`run_once`], [`run_every`]: evaluate every monitor once, or on an interval; each
//!   monitor's run is a trace of its own (`MonitorRun`: its root span, and the trace
//!   context its alerts keep).
//! - `serve`: `decider serve`, the approval API (`outbox_api`), the monitors on an interval
//!   and the console (`outbox_console`), stopped by one shutdown.
//! - `cli`: the `decider` program's command line, and what each command runs.
//!
//! Any number of deciders may run at once: the alerts' UNIQUE identity is the only guard,
//! and batches are approved in identity order so they never deadlock. One decider keeps
//! two batches of a run in flight (`outbox_store::approval_plan`), which share no identity
//! and no subject.

pub mod cli;
pub mod contracts;
pub mod news;
pub mod serve;

use jiff::Timestamp;
use outbox_core::trace_context::{TraceContext, TraceParent};
use outbox_runtime::telemetry;
use outbox_store::alerts::MonitorAlert;
use outbox_store::approval_plan::{self, ApprovalPlan};
use outbox_store::PgPool;
use std::collections::HashMap;
use std::time::Duration;
use tracing::{Instrument, Span};
use uuid::Uuid;

/// Errors of the monitors.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// The database failed.
    #[error(transparent)]
    Store(#[from] outbox_store::StoreError),
    /// A contract file has bad rows.
    #[error(transparent)]
    Import(#[from] contracts::ImportError),
    /// An article file or page has bad posts.
    #[error(transparent)]
    Articles(#[from] news::ArticleError),
    /// A source could not be read.
    #[error("{0}")]
    Source(String),
}

impl DecideError {
    /// Whether the run failed because the database could not be reached or took no writes
    /// (a restart, a failover): worth running again soon, not only at the next interval.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, DecideError::Store(err) if err.is_unavailable())
    }
}

/// Most alerts approved per statement: short transactions, so concurrent deciders only
/// ever wait briefly for each other.
const BATCH: usize = 500;

/// Approves the alerts per tenant, sorted by identity, in transactions of at most
/// [`BATCH`] alerts, two in flight at once on two connections
/// ([`ApprovalPlan`]: they share no identity and no lane). Returns how many were created.
pub(crate) async fn approve_in_batches(
    pool: &PgPool,
    due: HashMap<Uuid, Vec<MonitorAlert>>,
    actor: &str,
    run: &MonitorRun,
) -> Result<u64, DecideError> {
    let mut created = 0;
    for (tenant_id, mut alerts) in due {
        approval_plan::sort_by_identity(&mut alerts);
        created += ApprovalPlan::new(&alerts, BATCH)
            .run(|chunk| async move {
                let mut conn = pool
                    .acquire()
                    .await
                    .map_err(outbox_store::StoreError::from)?;
                approve_chunk(&mut conn, tenant_id, chunk, actor, run).await
            })
            .await?;
    }
    if created > 0 {
        outbox_store::wake_ups::notify_due(pool).await?;
    }
    Ok(created)
}

/// Sorts a tenant's alerts by identity, drops repeats, and approves them in chunks one
/// after another inside the caller's transaction `tx` (all of them or none).
pub(crate) async fn approve_sorted(
    tx: &mut outbox_store::PgConnection,
    tenant_id: Uuid,
    mut alerts: Vec<MonitorAlert>,
    actor: &str,
    run: &MonitorRun,
) -> Result<u64, DecideError> {
    approval_plan::sort_by_identity(&mut alerts);
    let mut created = 0;
    for chunk in alerts.chunks(BATCH) {
        created += approve_chunk(&mut *tx, tenant_id, chunk, actor, run).await?;
    }
    Ok(created)
}

/// Approves one chunk of a tenant's alerts in one statement, in a span of the monitor
/// run. Returns how many were created.
async fn approve_chunk(
    conn: &mut outbox_store::PgConnection,
    tenant_id: Uuid,
    chunk: &[MonitorAlert],
    actor: &str,
    run: &MonitorRun,
) -> Result<u64, DecideError> {
    let (span, trace) = run.approval(tenant_id, chunk.len());
    let ids = outbox_store::alerts::approve_batch(conn, tenant_id, chunk, actor, Some(&trace))
        .instrument(span)
        .await?;
    Ok(ids.len() as u64)
}

/// One run of a monitor in the trace it starts: a root span (no approval of a monitor
/// comes with a caller's context), and the context its alerts store.
#[derive(Debug)]
pub(crate) struct MonitorRun {
    /// The run's root span (`Span::none()` when spans are not exported).
    span: Span,
    /// The context stored when spans are not exported: one new trace per run, so the
    /// attempts of one run's alerts still share a trace id downstream.
    fallback_trace: TraceParent,
}

impl MonitorRun {
    /// Starts the run `name` (`contracts monitor`, `news poll`, ...).
    pub(crate) fn start(name: &'static str) -> MonitorRun {
        let span = if telemetry::enabled() {
            tracing::info_span!(parent: None, "monitor run", otel.name = name, otel.kind = "internal")
        } else {
            Span::none()
        };
        MonitorRun {
            span,
            fallback_trace: TraceParent::new_trace(false),
        }
    }

    /// The run's span, to run the monitor in.
    pub(crate) fn span(&self) -> Span {
        self.span.clone()
    }

    /// The producer span of one approval batch of the run (messaging conventions, as the
    /// API's approvals), and the context the batch's alerts store: that span's when spans
    /// are exported, else the run's trace.
    fn approval(&self, tenant: Uuid, count: usize) -> (Span, TraceContext) {
        if !telemetry::enabled() {
            let trace = TraceContext {
                parent: self.fallback_trace,
                state: None,
            };
            return (Span::none(), trace);
        }
        let span = tracing::info_span!(
            parent: &self.span,
            "approval",
            otel.name = "approve outbox",
            otel.kind = "producer",
            messaging.system = "alert-outbox",
            messaging.operation.type = "send",
            messaging.operation.name = "approve",
            messaging.destination.name = "outbox",
            messaging.batch.message_count = count as i64,
            outbox.tenant_id = %tenant,
        );
        let parent = telemetry::current_context(&span).unwrap_or(self.fallback_trace);
        (
            span,
            TraceContext {
                parent,
                state: None,
            },
        )
    }
}

/// What one evaluation did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RunSummary {
    /// Renewal alerts created.
    pub renewal_alerts: u64,
    /// Articles ingested from the news source.
    pub articles_ingested: u64,
    /// News alerts created.
    pub news_alerts: u64,
}

/// Evaluates every monitor once at `now`: polls the news source (if any), then the
/// renewal and watchlist monitors. Each runs even when another failed (a news feed that is
/// down must not stop renewal alerts); the first error is returned after all have run.
pub async fn run_once(
    pool: &PgPool,
    now: Timestamp,
    news_source: Option<&news::NewsSource>,
) -> Result<RunSummary, DecideError> {
    let mut summary = RunSummary::default();
    let mut first_error = None;
    let mut note = |what: &str, err: DecideError| {
        tracing::error!(monitor = what, error = %err, "monitor failed");
        first_error.get_or_insert(err);
    };
    if let Some(source) = news_source {
        let poll = MonitorRun::start("news poll");
        let polled = match source.client() {
            Ok(http) => {
                news::poll(pool, &http, source)
                    .instrument(poll.span())
                    .await
            }
            Err(err) => Err(err),
        };
        // Each run's span ends with it, not with the whole evaluation.
        drop(poll);
        match polled {
            Ok(n) => summary.articles_ingested = n,
            Err(err) => note("news poller", err),
        }
    }
    let renewals = MonitorRun::start("contracts monitor");
    let evaluated = contracts::evaluate(pool, now, "monitor:contracts", &renewals)
        .instrument(renewals.span())
        .await;
    drop(renewals);
    match evaluated {
        Ok(n) => summary.renewal_alerts = n,
        Err(err) => note("contracts", err),
    }
    let watchlists = MonitorRun::start("watchlists monitor");
    let evaluated = news::evaluate(pool, "monitor:news", &watchlists)
        .instrument(watchlists.span())
        .await;
    drop(watchlists);
    match evaluated {
        Ok(n) => summary.news_alerts = n,
        Err(err) => note("watchlists", err),
    }
    tracing::info!(?summary, "monitors evaluated");
    match first_error {
        Some(err) => Err(err),
        None => Ok(summary),
    }
}

/// Runs the monitors every `interval` until `stop` resolves. An evaluation that fails
/// because the database is unavailable (a restart, a failover) runs again after 1 s, then
/// 2 s, 4 s and so on up to `interval`, so a renewal due today is not put off by a whole
/// interval for a gap of seconds; any other failure is logged and retried at the next tick.
pub async fn run_every(
    pool: PgPool,
    interval: Duration,
    news_source: Option<news::NewsSource>,
    stop: impl std::future::Future<Output = ()>,
) {
    const FIRST_RETRY: Duration = Duration::from_secs(1);
    tokio::pin!(stop);
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut retry = FIRST_RETRY;
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = ticks.tick() => {
                match run_once(&pool, Timestamp::now(), news_source.as_ref()).await {
                    Ok(_) => retry = FIRST_RETRY,
                    Err(err) if err.is_unavailable() && retry < interval => {
                        tracing::warn!(
                            error = %err,
                            retry_in = ?retry,
                            "monitor evaluation failed: the database is unavailable"
                        );
                        ticks.reset_after(retry);
                        retry = (retry * 2).min(interval);
                    }
                    Err(err) => tracing::error!(error = %err, "monitor evaluation failed"),
                }
            }
        }
    }
}
