//! `bench run`: every figure in one run, on a database of its own (dropped afterwards)
//! and a sink of its own (our `outbox-sink`, on its own thread and runtime).
//!
//! Phases, in order:
//! 1. bulk approvals of N alerts (the monitors' path), then their drain over HTTP;
//! 2. N more, drained with the HTTP step replaced by a no-op (the pipeline's ceiling);
//! 3. N more for each of 1, 2 and 4 `dispatcher` processes side by side;
//! 4. approvals through the API by 32 concurrent clients (then drained, untimed);
//! 5. latency from approval to the sink's receipt: one alert at a time on an idle
//!    system, then an open-loop stream at half the measured HTTP capacity;
//! 6. on a second database: the claim's cost on an empty history and with H settled
//!    alerts of history, and retention (`prune`) of that history.
//!
//! 7. with `--quick`, a few seconds of the sustained-load mode (`crate::sustained`), so
//!    that it keeps working; `--only sustained` ([`Phases::Sustained`]) runs it alone, for
//!    as long as asked.
//!
//! With `--only approvals` ([`Phases::Approvals`]) the run keeps what the approval path's
//! figures need (phases 1, 4 and 5: the HTTP drain of phase 1 gives the capacity that
//! sets the half-capacity rate) and skips the no-op drain, the processes and phase 6.
//!
//! Every drain is checked, not only timed: each alert accepted once, one attempt row
//! each, and the sink saw no duplicate. A failed check fails the run.

use anyhow::Context;
use chrono::{DateTime, Utc};
use outbox_dispatcher::Transport;
use outbox_store::PgPool;
use serde::Serialize;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::drain::{self, drain, Dispatchers, DrainReport, DrainSettings, Running};
use crate::measure::{ms, quantile};
use crate::peer::{BATCH_SIZE, CONCURRENT_SENDS, DESTINATION_BOUND, MAX_IN_FLIGHT};
use crate::sustained::{SustainedReport, SustainedSettings};
use crate::workload::{DestinationSettings, Workload};

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteSettings {
    /// URL of the PostgreSQL server (any database on it); the run creates its own.
    #[serde(skip)]
    pub server_url: String,
    /// Alerts per drain.
    pub n: u64,
    /// Alerts approved through the API.
    pub api_n: u64,
    /// Concurrent API clients.
    pub api_clients: u64,
    /// Settled alerts of history for the claim-cost comparison.
    pub history: u64,
    /// Dispatcher process counts for the horizontal curve.
    pub processes: Vec<u32>,
    /// Alerts in the idle-latency probe.
    pub idle_samples: u64,
    /// Seconds of the half-capacity latency stream.
    pub loaded_secs: u64,
    /// Rows per claim statement.
    pub batch_size: u32,
    /// Rows in `sending` per dispatcher (crash blast radius).
    pub max_in_flight: u32,
    /// Requests in flight to the destination per dispatcher.
    pub concurrent_sends: u32,
    /// Which phases run.
    pub phases: Phases,
    /// The sustained-load mode (`--only sustained`).
    pub sustained: SustainedSettings,
    /// Whether a run of every phase includes the sustained mode too (the quick run does,
    /// for a few seconds, so that it keeps working).
    pub sustained_in_all: bool,
}

/// Which phases a run goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Phases {
    /// Every phase.
    All,
    /// The approval path: bulk approvals and their HTTP drain, API approvals, latency.
    Approvals,
    /// The sustained-load mode alone (see `crate::sustained`).
    Sustained,
}

impl SuiteSettings {
    /// The full run: the figures docs/performance.md reports.
    pub fn full(server_url: String) -> Self {
        SuiteSettings {
            server_url,
            n: 100_000,
            api_n: 20_000,
            api_clients: 32,
            history: 1_000_000,
            processes: vec![1, 2, 4],
            idle_samples: 200,
            loaded_secs: 5,
            batch_size: BATCH_SIZE,
            max_in_flight: MAX_IN_FLIGHT,
            concurrent_sends: CONCURRENT_SENDS,
            phases: Phases::All,
            sustained: SustainedSettings {
                run_secs: 600,
                interval_secs: 60,
                rate: None,
                capacity_secs: 10,
                capacity_clients: 32,
                // Well under the API's 512 connections, with room for the capacity
                // phase's clients and the dispatcher's wake-ups.
                max_outstanding: 256,
                batch_size: BATCH_SIZE,
                max_in_flight: MAX_IN_FLIGHT,
                concurrent_sends: CONCURRENT_SENDS,
            },
            sustained_in_all: false,
        }
    }

    /// A tiny run that exercises every phase in seconds: for CI, where only correctness
    /// is checked.
    pub fn quick(server_url: String) -> Self {
        SuiteSettings {
            n: 3_000,
            api_n: 1_000,
            history: 20_000,
            processes: vec![1, 2],
            idle_samples: 20,
            loaded_secs: 1,
            sustained: SustainedSettings {
                run_secs: 3,
                interval_secs: 1,
                capacity_secs: 1,
                ..SuiteSettings::full(String::new()).sustained
            },
            sustained_in_all: true,
            ..SuiteSettings::full(server_url)
        }
    }
}

/// Approvals measured.
#[derive(Debug, Clone, Serialize)]
pub struct Approvals {
    /// Alerts approved.
    pub n: u64,
    /// Concurrent clients (1 for bulk: one statement per chunk).
    pub clients: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Alerts approved per second.
    pub per_sec: f64,
}

/// Approval-to-acceptance latency: the sink's receipt time minus the alert's approval time.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// Arrival rate offered, alerts per second (0: one at a time on an idle system).
    pub offered_per_sec: f64,
    /// Alerts measured.
    pub samples: usize,
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Slowest, ms.
    pub max_ms: f64,
    /// Median of the part before the claim: approval to the start of the first send
    /// (the claim's database clock), ms.
    pub to_claim_p50_ms: f64,
    /// 99th percentile of that part, ms.
    pub to_claim_p99_ms: f64,
}

/// The claim's cost with and without history.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimCost {
    /// Pending rows in the queue while measuring.
    pub queue: u64,
    /// Rows per claim.
    pub batch: i64,
    /// Claims timed per case.
    pub rounds: usize,
    /// Settled alerts of history in the second case.
    pub history: u64,
    /// Median claim, empty history, ms.
    pub empty_history_ms: f64,
    /// Median claim, with history, ms.
    pub with_history_ms: f64,
    /// with / empty.
    pub ratio: f64,
    /// Seconds to write the history (approvals, attempts, evidence).
    pub history_seeding_secs: f64,
    /// Retention of that history: alerts pruned.
    pub pruned_alerts: u64,
    /// Retention: seconds.
    pub prune_secs: f64,
}

/// Everything `bench run` measured.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteReport {
    /// Settings used.
    pub settings: SuiteSettings,
    /// The machine: cores, PostgreSQL version, `synchronous_commit`.
    pub host: HashMap<String, String>,
    /// Bulk approvals (one statement per 5,000).
    pub approvals_bulk: Approvals,
    /// Approvals through the API.
    pub approvals_api: Approvals,
    /// Drain over HTTP, one dispatcher.
    pub deliveries_http: DrainReport,
    /// Drain with a no-op instead of HTTP: the pipeline's ceiling (not with
    /// `--only approvals`).
    pub deliveries_noop: Option<DrainReport>,
    /// Drains by 1, 2, 4 dispatcher processes.
    pub horizontal: Vec<DrainReport>,
    /// One alert at a time, idle system.
    pub latency_idle: Latency,
    /// Open-loop stream at half the HTTP capacity.
    pub latency_half_capacity: Latency,
    /// Claim cost against history, and retention.
    pub claim_cost: Option<ClaimCost>,
    /// The sustained-load mode, when the run includes it.
    pub sustained: Option<SustainedReport>,
}

/// Runs the suite. Progress goes to stderr.
pub async fn run(settings: SuiteSettings) -> anyhow::Result<SuiteReport> {
    let sink = OwnSink::start()?;
    let (url, name) = outbox_store::connect::create_database(&settings.server_url, "outbox_bench")
        .await
        .context("creating the benchmark database")?;
    let result = run_on(&settings, &sink, &url).await;
    outbox_store::connect::drop_database(&settings.server_url, &name).await?;
    let mut report = result?;
    if settings.phases == Phases::All {
        report.claim_cost = Some(claim_cost(&settings).await?);
        if settings.sustained_in_all {
            report.sustained = Some(
                crate::sustained::run(&settings.server_url, settings.sustained.clone(), |i| {
                    progress(&i.line())
                })
                .await?,
            );
        }
    }
    Ok(report)
}

async fn run_on(
    settings: &SuiteSettings,
    sink: &OwnSink,
    url: &str,
) -> anyhow::Result<SuiteReport> {
    let pool = outbox_store::connect(url, "benchmark", 8).await?;
    let workload = Workload::prepare(
        pool.clone(),
        &DestinationSettings {
            url: format!("{}/hook", sink.base),
            max_in_flight: DESTINATION_BOUND,
        },
    )
    .await?;
    let host = host_facts(&pool).await?;
    let n = settings.n;
    let mut next = 0u64;
    let mut delivered = 0u64;
    let drain_settings = |dispatchers| DrainSettings {
        dispatchers,
        batch_size: settings.batch_size,
        max_in_flight: settings.max_in_flight,
        max_concurrent_sends: settings.concurrent_sends,
        sink_ip: drain::sink_ip(&sink.base),
    };

    progress(&format!("approving {n} alerts in bulk"));
    let took = workload.approve_bulk(next, n).await?;
    next += n;
    let approvals_bulk = Approvals {
        n,
        clients: 1,
        seconds: took.as_secs_f64(),
        per_sec: n as f64 / took.as_secs_f64(),
    };
    crate::db::vacuum_analyze(&pool).await?;
    progress("draining over HTTP");
    let deliveries_http = drain(
        &pool,
        url,
        n,
        drain_settings(Dispatchers::InProcess(Transport::Http)),
        Some(&sink.stats_url()),
    )
    .await?;
    delivered += n;
    drain::check(&deliveries_http, delivered, true)?;

    let mut deliveries_noop = None;
    let mut horizontal = Vec::new();
    if settings.phases == Phases::All {
        workload.approve_bulk(next, n).await?;
        next += n;
        crate::db::vacuum_analyze(&pool).await?;
        progress("draining with a no-op instead of HTTP");
        let noop = drain(
            &pool,
            url,
            n,
            drain_settings(Dispatchers::InProcess(Transport::Discard)),
            None,
        )
        .await?;
        delivered += n;
        drain::check(&noop, delivered, false)?;
        deliveries_noop = Some(noop);

        for &k in &settings.processes {
            workload.approve_bulk(next, n).await?;
            next += n;
            crate::db::vacuum_analyze(&pool).await?;
            progress(&format!("draining with {k} dispatcher processes"));
            let report = drain(
                &pool,
                url,
                n,
                drain_settings(Dispatchers::Processes(k)),
                Some(&sink.stats_url()),
            )
            .await?;
            delivered += n;
            drain::check(&report, delivered, true)?;
            horizontal.push(report);
        }
    }

    progress(&format!(
        "approving {} alerts through the API with {} clients",
        settings.api_n, settings.api_clients
    ));
    // As `decider serve --max-connections 32` would: a connection per client.
    let api_pool = outbox_store::connect(url, "decider", settings.api_clients as u32).await?;
    let api = Api::start(api_pool, &workload).await?;
    let approvals_api = api
        .approve_concurrently(&workload, next, settings.api_n, settings.api_clients)
        .await?;
    next += settings.api_n;
    let report = drain(
        &pool,
        url,
        settings.api_n,
        drain_settings(Dispatchers::InProcess(Transport::Http)),
        Some(&sink.stats_url()),
    )
    .await?;
    delivered += settings.api_n;
    drain::check(&report, delivered, true)?;

    progress("latency: one alert at a time");
    let running =
        Running::start(url, drain_settings(Dispatchers::InProcess(Transport::Http))).await?;
    let http = reqwest::Client::new();
    let mut idle_ids = Vec::new();
    for i in next..next + settings.idle_samples {
        let before = crate::drain::SinkCounters::read(&http, &sink.stats_url()).await?;
        idle_ids.push(api.approve_one(&workload, i).await?);
        wait_for_sink(&http, &sink.stats_url(), before.distinct_keys + 1).await?;
    }
    next += settings.idle_samples;
    let latency_idle = latency(&pool, &http, sink, &idle_ids, 0.0).await?;

    let rate = deliveries_http.deliveries_per_sec / 2.0;
    progress(&format!(
        "latency: {rate:.0} alerts/s for {}s",
        settings.loaded_secs
    ));
    let before = crate::drain::SinkCounters::read(&http, &sink.stats_url()).await?;
    let loaded_ids = offer_stream(&workload, next, rate, settings.loaded_secs).await?;
    wait_for_sink(
        &http,
        &sink.stats_url(),
        before.distinct_keys + loaded_ids.len() as u64,
    )
    .await?;
    running.stop().await?;
    let latency_half_capacity = latency(&pool, &http, sink, &loaded_ids, rate).await?;
    api.stop().await;
    delivered += settings.idle_samples + loaded_ids.len() as u64;
    let evidence = crate::db::drain_evidence(&pool).await?;
    anyhow::ensure!(
        evidence.accepted == delivered as i64 && evidence.attempt_rows == delivered as i64,
        "after the latency phases: {evidence:?} for {delivered} alerts"
    );
    pool.close().await;

    Ok(SuiteReport {
        settings: settings.clone(),
        host,
        approvals_bulk,
        approvals_api,
        deliveries_http,
        deliveries_noop,
        horizontal,
        latency_idle,
        latency_half_capacity,
        claim_cost: None,
        sustained: None,
    })
}

async fn host_facts(pool: &PgPool) -> anyhow::Result<HashMap<String, String>> {
    let mut host = HashMap::new();
    host.insert(
        "cpus".to_owned(),
        std::thread::available_parallelism()
            .map(|n| n.get().to_string())
            .unwrap_or_default(),
    );
    for (name, value) in crate::db::server_settings(pool).await? {
        host.insert(name, value);
    }
    Ok(host)
}

pub(crate) fn progress(what: &str) {
    eprintln!("bench: {what}");
}

/// Waits until the sink has seen `keys` distinct keys (polling, with a deadline).
async fn wait_for_sink(http: &reqwest::Client, stats_url: &str, keys: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if crate::drain::SinkCounters::read(http, stats_url)
            .await?
            .distinct_keys
            >= keys
        {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the sink never saw {keys} keys");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Approves alerts at `rate` per second for `secs` seconds, in a small bulk approval
/// every 10 ms (open loop: arrivals do not wait for deliveries), waking the dispatcher
/// after each. Returns the ids approved.
async fn offer_stream(
    workload: &Workload,
    from: u64,
    rate: f64,
    secs: u64,
) -> anyhow::Result<Vec<Uuid>> {
    let tick = Duration::from_millis(10);
    let per_tick = (rate * tick.as_secs_f64()).max(1.0);
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let mut owed = 0.0;
    let mut next = from;
    let mut ids = Vec::new();
    while started.elapsed() < Duration::from_secs(secs) {
        interval.tick().await;
        owed += per_tick;
        let count = owed.floor() as u64;
        owed -= count as f64;
        let alerts: Vec<_> = (next..next + count).map(|i| workload.alert(i)).collect();
        next += count;
        ids.extend(
            outbox_store::monitors::approve_batch(
                &workload.pool,
                workload.tenant_id,
                &alerts,
                "benchmark",
            )
            .await?,
        );
        outbox_store::wake_ups::notify_due(&workload.pool).await?;
    }
    Ok(ids)
}

/// Latency of each alert: the sink's receipt time minus the alert's approval time.
async fn latency(
    pool: &PgPool,
    http: &reqwest::Client,
    sink: &OwnSink,
    ids: &[Uuid],
    offered: f64,
) -> anyhow::Result<Latency> {
    // The sink may have answered the last alerts before their attempts are recorded: wait
    // (with a deadline) until every alert has its send attempt.
    let deadline = Instant::now() + Duration::from_secs(60);
    let approved: HashMap<Uuid, (DateTime<Utc>, DateTime<Utc>)> = loop {
        let rows = crate::db::approved_and_claimed_at(pool, ids).await?;
        let recorded: HashMap<_, _> = rows
            .iter()
            .filter_map(|(id, approved, claimed)| claimed.map(|c| (*id, (*approved, c))))
            .collect();
        if recorded.len() == rows.len() {
            break recorded;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} alerts still have no recorded send attempt",
            rows.len() - recorded.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let records: Vec<serde_json::Value> = http
        .get(format!("{}/_sink/records", sink.base))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let mut took = Vec::new();
    let mut to_claim = Vec::new();
    for record in records {
        let Some(id) = record["key"].as_str().and_then(|k| Uuid::parse_str(k).ok()) else {
            continue;
        };
        let Some((approved_at, claimed_at)) = approved.get(&id) else {
            continue;
        };
        to_claim.push((*claimed_at - *approved_at).to_std().unwrap_or_default());
        let received = record["at"]
            .as_str()
            .and_then(|at| DateTime::parse_from_rfc3339(at).ok())
            .context("a sink record without a time")?;
        let waited = received.with_timezone(&Utc) - *approved_at;
        took.push(waited.to_std().unwrap_or_default());
    }
    anyhow::ensure!(
        took.len() == ids.len(),
        "the sink has {} of {} alerts",
        took.len(),
        ids.len()
    );
    Ok(Latency {
        offered_per_sec: offered,
        samples: took.len(),
        p50_ms: quantile(&took, 0.5).map(ms).unwrap_or_default(),
        p99_ms: quantile(&took, 0.99).map(ms).unwrap_or_default(),
        max_ms: quantile(&took, 1.0).map(ms).unwrap_or_default(),
        to_claim_p50_ms: quantile(&to_claim, 0.5).map(ms).unwrap_or_default(),
        to_claim_p99_ms: quantile(&to_claim, 0.99).map(ms).unwrap_or_default(),
    })
}

/// The claim's cost on an empty history, then with `history` settled alerts; then
/// retention of that history. On a database of its own.
async fn claim_cost(settings: &SuiteSettings) -> anyhow::Result<ClaimCost> {
    let (url, name) =
        outbox_store::connect::create_database(&settings.server_url, "outbox_bench").await?;
    let result = claim_cost_on(settings, &url).await;
    outbox_store::connect::drop_database(&settings.server_url, &name).await?;
    result
}

async fn claim_cost_on(settings: &SuiteSettings, url: &str) -> anyhow::Result<ClaimCost> {
    let pool = outbox_store::connect(url, "benchmark", 4).await?;
    let workload = Workload::prepare(
        pool.clone(),
        &DestinationSettings {
            // Never contacted: claims are rolled back.
            url: "http://127.0.0.1:9/unused".to_owned(),
            // Room for a whole claim: the claim's cost is measured, not the bound.
            max_in_flight: 1_000,
        },
    )
    .await?;
    let queue = (settings.n / 5).max(2_000);
    let (batch, rounds) = (100, 100);
    workload.approve_bulk(0, queue).await?;
    crate::db::vacuum_analyze(&pool).await?;
    progress(&format!("claim cost: {queue} pending, empty history"));
    let empty = crate::db::time_claims(&pool, batch, rounds).await?;

    progress(&format!(
        "claim cost: writing {} alerts of history",
        settings.history
    ));
    let started = Instant::now();
    let chunk = 250_000u64;
    let mut from = 0u64;
    while from < settings.history {
        let count = chunk.min(settings.history - from);
        crate::db::seed_history(
            &pool,
            workload.tenant_id,
            workload.destination_id,
            from as i64,
            count as i64,
        )
        .await?;
        from += count;
        if settings.history > chunk {
            progress(&format!("  {from} of {}", settings.history));
        }
    }
    let history_seeding_secs = started.elapsed().as_secs_f64();
    crate::db::vacuum_analyze(&pool).await?;
    progress("claim cost: with history");
    let with_history = crate::db::time_claims(&pool, batch, rounds).await?;

    progress("retention: pruning the history");
    let started = Instant::now();
    let cutoff = Utc::now() - chrono::Duration::days(30);
    let outcomes = outbox_store::operator::prunable_outcomes(false);
    let mut pruned_alerts = 0;
    let mut cursor = Uuid::nil();
    loop {
        let (step, next) =
            outbox_store::operator::prune_step(&pool, cutoff, &outcomes, cursor, 5_000).await?;
        pruned_alerts += step.alerts;
        match next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    let prune_secs = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        pruned_alerts == settings.history,
        "pruned {pruned_alerts} of {} alerts of history",
        settings.history
    );
    pool.close().await;

    let empty_history_ms = quantile(&empty, 0.5).map(ms).unwrap_or_default();
    let with_history_ms = quantile(&with_history, 0.5).map(ms).unwrap_or_default();
    Ok(ClaimCost {
        queue,
        batch,
        rounds,
        history: settings.history,
        empty_history_ms,
        with_history_ms,
        ratio: with_history_ms / empty_history_ms.max(f64::MIN_POSITIVE),
        history_seeding_secs,
        pruned_alerts,
        prune_secs,
    })
}

/// How long the benchmark's API clients keep an idle connection: under the API's idle
/// timeout (75 s, outbox-runtime's `ServerLimits::DEFAULT_IDLE_TIMEOUT`).
const API_CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The approval API, served from this process.
pub(crate) struct Api {
    pub(crate) client: ApiClient,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// A client of the approval API with the benchmark tenant's token.
#[derive(Clone)]
pub(crate) struct ApiClient {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Api {
    pub(crate) async fn start(pool: PgPool, workload: &Workload) -> anyhow::Result<Api> {
        let token = outbox_store::tokens::create(&pool, workload.tenant_id, Some("benchmark"))
            .await?
            .expose()
            .to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // The benchmark is one client address opening as many connections as its open-loop
        // rate needs, as a reverse proxy in front of the API would: the per-address share
        // that protects the API from one crowding client is lifted to the whole cap, as the
        // approval API's page (docs/approval-api.md) advises behind a proxy.
        let mut limits = outbox_runtime::http_server::ServerLimits::default();
        limits.max_connections_per_client = limits.max_connections;
        let task = tokio::spawn(outbox_api::serve_with(
            outbox_api::Listeners {
                api: listener,
                operations: None,
            },
            pool,
            limits,
            async {
                let _ = stopped.await;
            },
        ));
        Ok(Api {
            client: ApiClient {
                base,
                token,
                // Idle connections are dropped before the API's own idle timeout closes
                // them, as any well-behaved client does: with reqwest's default (90 s) a
                // request now and then raced the server's close and failed to send,
                // which a long open-loop run counts as a failed approval.
                http: reqwest::Client::builder()
                    .pool_idle_timeout(API_CLIENT_IDLE_TIMEOUT)
                    .build()?,
            },
            stop,
            task,
        })
    }

    async fn approve_one(&self, workload: &Workload, i: u64) -> anyhow::Result<Uuid> {
        self.client.approve_one(workload, i).await
    }

    async fn approve_concurrently(
        &self,
        workload: &Workload,
        from: u64,
        n: u64,
        clients: u64,
    ) -> anyhow::Result<Approvals> {
        let started = Instant::now();
        let per_client = n.div_ceil(clients);
        let mut tasks = tokio::task::JoinSet::new();
        for c in 0..clients {
            let (start, end) = (
                from + c * per_client,
                (from + (c + 1) * per_client).min(from + n),
            );
            let client = self.client.clone();
            let workload = workload.clone();
            tasks.spawn(async move {
                for i in start..end {
                    client.approve_one(&workload, i).await?;
                }
                anyhow::Ok(())
            });
        }
        while let Some(done) = tasks.join_next().await {
            done??;
        }
        let seconds = started.elapsed().as_secs_f64();
        Ok(Approvals {
            n,
            clients,
            seconds,
            per_sec: n as f64 / seconds,
        })
    }

    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

impl ApiClient {
    pub(crate) async fn approve_one(&self, workload: &Workload, i: u64) -> anyhow::Result<Uuid> {
        let body = format!(
            r#"{{"destination":{},"subject":{},"occurrence":"firing","payload":{}}}"#,
            serde_json::Value::String(workload.destination_name.clone()),
            serde_json::Value::String(workload.subject(i)),
            workload.payload(i)
        );
        let response = self
            .http
            .post(format!("{}/v1/alerts", self.base))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        let status = response.status();
        let answer: serde_json::Value = response.json().await?;
        anyhow::ensure!(
            status.as_u16() == 201,
            "approval answered {status}: {answer}"
        );
        answer["id"]
            .as_str()
            .and_then(|id| Uuid::parse_str(id).ok())
            .context("an approval answer without an id")
    }
}

/// Our sink, on a thread and runtime of its own so that its work is not scheduled
/// behind the dispatcher's.
pub(crate) struct OwnSink {
    pub(crate) base: String,
}

impl OwnSink {
    pub(crate) fn start() -> anyhow::Result<OwnSink> {
        use clap::Parser;
        let args = outbox_sink::SinkArgs::try_parse_from(["sink", "--listen", "127.0.0.1:0"])?;
        let (address_tx, address_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("bench-sink".to_owned())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        let _ = address_tx.send(Err(err));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
                        Ok(listener) => listener,
                        Err(err) => {
                            let _ = address_tx.send(Err(err));
                            return;
                        }
                    };
                    let _ = address_tx.send(listener.local_addr());
                    let _ = outbox_sink::serve(listener, args, std::future::pending()).await;
                });
            })?;
        let address = address_rx.recv().context("the sink thread died")??;
        Ok(OwnSink {
            base: format!("http://{address}"),
        })
    }

    pub(crate) fn stats_url(&self) -> String {
        format!("{}/stats", self.base)
    }
}

impl SuiteReport {
    /// The figures as a plain-text table, with the settings that produced them.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let s = &self.settings;
        let mut out = String::new();
        let host = |k: &str| self.host.get(k).cloned().unwrap_or_default();
        let _ = writeln!(
            out,
            "host: {} cpus, PostgreSQL {}, synchronous_commit={}, shared_buffers={} (8kB pages)",
            host("cpus"),
            host("server_version"),
            host("synchronous_commit"),
            host("shared_buffers")
        );
        let _ = writeln!(
            out,
            "settings: N={} per drain, claims of {}, at most {} rows in sending per dispatcher, {} requests in flight per dispatcher, signed requests",
            s.n, s.batch_size, s.max_in_flight, s.concurrent_sends
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<34} {:>12} {:>9} {:>11} {:>11} {:>9} {:>9} {:>12} {:>14}",
            "drain",
            "deliveries/s",
            "seconds",
            "commits/dlv",
            "WAL B/dlv",
            "rows/dlv",
            "host CPU%",
            "max sending",
            "sink dup"
        );
        let mut drain_row = |name: String, r: &DrainReport| {
            let _ = writeln!(
                out,
                "{:<34} {:>12.0} {:>9.2} {:>11.4} {:>11.0} {:>9.2} {:>9.0} {:>7} / {:<4} {:>14}",
                name,
                r.deliveries_per_sec,
                r.seconds,
                r.commits_per_delivery,
                r.wal_bytes_per_delivery,
                r.row_writes.total,
                r.host_cpu_busy_pct,
                r.max_sending,
                r.sending_bound,
                r.sink_duplicates
            );
        };
        drain_row(
            "HTTP, 1 dispatcher (in process)".to_owned(),
            &self.deliveries_http,
        );
        if let Some(noop) = &self.deliveries_noop {
            drain_row("no-op instead of HTTP (ceiling)".to_owned(), noop);
        }
        for r in &self.horizontal {
            let k = match r.settings.dispatchers {
                Dispatchers::Processes(k) => k,
                Dispatchers::InProcess(_) => 1,
            };
            drain_row(format!("HTTP, {k} dispatcher process(es)"), r);
        }
        let _ = writeln!(
            out,
            "row writes per delivery, HTTP drain: {}",
            self.deliveries_http.row_writes.summary()
        );
        if let Some(own) = self.deliveries_http.database_wal_bytes_per_delivery {
            let _ = writeln!(
                out,
                "WAL per delivery of the benchmark's own database, HTTP drain: {own:.0} B (cluster-wide {:.0} B)",
                self.deliveries_http.wal_bytes_per_delivery
            );
        }
        let _ = writeln!(out);
        let a = &self.approvals_bulk;
        let _ = writeln!(
            out,
            "approvals, bulk (monitor path, 5,000 per statement): {:.0}/s ({} in {:.2}s)",
            a.per_sec, a.n, a.seconds
        );
        let a = &self.approvals_api;
        let _ = writeln!(
            out,
            "approvals, API with {} clients: {:.0}/s ({} in {:.2}s)",
            a.clients, a.per_sec, a.n, a.seconds
        );
        for (name, l) in [
            ("latency, idle (one at a time)", &self.latency_idle),
            ("latency, at half capacity", &self.latency_half_capacity),
        ] {
            let offered = if l.offered_per_sec > 0.0 {
                format!(", {:.0} alerts/s offered", l.offered_per_sec)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "{name}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} alerts{offered}); \
                 approval to claim p50 {:.1} ms, p99 {:.1} ms",
                l.p50_ms, l.p99_ms, l.max_ms, l.samples, l.to_claim_p50_ms, l.to_claim_p99_ms
            );
        }
        if let Some(c) = &self.claim_cost {
            let _ = writeln!(
                out,
                "claim of {} from {} pending: {:.2} ms with no history, {:.2} ms with {} settled alerts ({:.2}x)",
                c.batch, c.queue, c.empty_history_ms, c.with_history_ms, c.history, c.ratio
            );
            let _ = writeln!(
                out,
                "retention: pruned {} alerts in {:.1}s ({:.0}/s)",
                c.pruned_alerts,
                c.prune_secs,
                c.pruned_alerts as f64 / c.prune_secs.max(f64::MIN_POSITIVE)
            );
        }
        let dead: Vec<String> = self
            .deliveries_http
            .outbox_dead_tuples
            .iter()
            .map(|(at, dead)| format!("{at:.1}s:{dead}"))
            .collect();
        let _ = writeln!(
            out,
            "outbox dead tuples during the HTTP drain: {}",
            dead.join(" ")
        );
        if let Some(sustained) = &self.sustained {
            out.push_str(&sustained.render());
        }
        out
    }
}
