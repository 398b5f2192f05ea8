//! `bench run --only sustained`: a long run at a fixed share of capacity, reported
//! interval by interval, to show whether throughput, latency and the tables' dead tuples
//! stay flat from the first minute to the last. The benchmark runs no VACUUM of its own:
//! whatever keeps the dead tuples bounded is autovacuum and the dispatcher's own vacuum
//! of the queue (on by default, as in production).
//!
//! Steps, on a database and sink of its own:
//! 1. the rate: given (`--rate`), or 70 % of a capacity measured first: API clients
//!    approving as fast as they can for a while with a dispatcher delivering, the
//!    capacity being the lower of approvals/s and deliveries/s (both together);
//! 2. the run: open-loop approvals through the API at that rate (arrivals do not wait
//!    for answers or deliveries), while one dispatcher delivers to the sink; at the end of
//!    every interval one line: approvals/s, deliveries/s, approval→acceptance p50/p99 of
//!    the sends accepted in that interval, and live/dead tuples of every table written to;
//! 3. the check: every approval accepted once, and the sink saw no duplicate.

use outbox_dispatcher::Transport;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::api::{Api, ApiClient};
use crate::dispatchers::{self, Dispatchers, DrainSettings, Running};
use crate::drain::SinkCounters;
use crate::own_sink::OwnSink;
use crate::progress;
use crate::scratch::on_own_database;
use crate::workload::Workload;

/// Share of the measured capacity the run offers.
pub const SHARE_OF_CAPACITY: f64 = 0.7;

/// What a sustained run does.
#[derive(Debug, Clone, Serialize)]
pub struct SustainedSettings {
    /// How long the run lasts.
    pub run_secs: u64,
    /// One line per this many seconds.
    pub interval_secs: u64,
    /// Approvals per second; measured first when absent.
    pub rate: Option<f64>,
    /// Seconds of the capacity measurement (when no rate is given).
    pub capacity_secs: u64,
    /// Concurrent API clients of the capacity measurement.
    pub capacity_clients: u64,
    /// Most approval requests outstanding at once during the run.
    pub max_outstanding: usize,
    /// Rows per claim statement.
    pub batch_size: u32,
    /// Rows in `sending` held by the dispatcher.
    pub max_in_flight: u32,
    /// Requests in flight per dispatcher (`--max-concurrent-sends`).
    pub concurrent_sends: u32,
}

/// The capacity measured before the run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Capacity {
    /// Seconds measured.
    pub seconds: f64,
    /// Approvals through the API per second, with a dispatcher delivering meanwhile.
    pub approvals_per_sec: f64,
    /// Deliveries per second meanwhile.
    pub deliveries_per_sec: f64,
}

/// One interval's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Interval {
    /// 1, 2, ...
    pub index: usize,
    /// Seconds since the run started, at the interval's end.
    pub at_secs: f64,
    /// Approvals answered `201` in the interval, per second.
    pub approvals_per_sec: f64,
    /// Keys new to the sink in the interval, per second.
    pub deliveries_per_sec: f64,
    /// Sends accepted in the interval (recorded).
    pub accepted: i64,
    /// Approval to acceptance of those sends, median, ms.
    pub p50_ms: f64,
    /// The same, 99th percentile, ms.
    pub p99_ms: f64,
    /// Live and dead tuples of every table written to.
    pub tables: Vec<crate::db::TableTuples>,
}

impl Interval {
    /// The interval as one line of text.
    pub fn line(&self) -> String {
        let tables: Vec<String> = self
            .tables
            .iter()
            .map(|t| format!("{} {}/{}", t.table, t.dead, t.live))
            .collect();
        format!(
            "{:>3} {:>7.0}s  approvals {:>6.0}/s  deliveries {:>6.0}/s  p50 {:>7.1} ms  p99 {:>7.1} ms  dead/live: {}",
            self.index,
            self.at_secs,
            self.approvals_per_sec,
            self.deliveries_per_sec,
            self.p50_ms,
            self.p99_ms,
            tables.join(", ")
        )
    }
}

/// What a sustained run measured.
#[derive(Debug, Clone, Serialize)]
pub struct SustainedReport {
    /// Settings used.
    pub settings: SustainedSettings,
    /// The capacity measured first, when no rate was given.
    pub capacity: Option<Capacity>,
    /// Approvals per second offered.
    pub rate_per_sec: f64,
    /// Where the rate came from.
    pub rate_source: String,
    /// One entry per interval.
    pub intervals: Vec<Interval>,
    /// Alerts approved during the run.
    pub approved: u64,
    /// Approvals refused or failed during the run (each fails the run).
    pub failed_approvals: u64,
    /// Deliveries of a key the sink had already applied.
    pub sink_duplicates: u64,
}

impl SustainedReport {
    /// The report as text: the header, every interval's line, the summary.
    pub fn render(&self) -> String {
        let mut out = self.header();
        for interval in &self.intervals {
            out.push_str(&interval.line());
            out.push('\n');
        }
        out.push_str(&self.summary());
        out
    }

    /// What was offered, on one line.
    pub fn header(&self) -> String {
        format!(
            "sustained: {:.0} approvals/s offered ({}) for {}s, one line per {}s\n",
            self.rate_per_sec,
            self.rate_source,
            self.settings.run_secs,
            self.settings.interval_secs
        )
    }

    /// What the final check found, on one line.
    pub fn summary(&self) -> String {
        format!(
            "approved {}, every one accepted once; sink duplicates {}\n",
            self.approved, self.sink_duplicates
        )
    }
}

/// Runs the sustained load on a database of its own on `server_url`. `on_interval` sees
/// each interval as it ends.
pub async fn run(
    server_url: &str,
    settings: SustainedSettings,
    on_interval: impl Fn(&Interval),
) -> anyhow::Result<SustainedReport> {
    let sink = OwnSink::start()?;
    let sink = &sink;
    on_own_database(server_url, |url| async move {
        run_on(&url, sink, settings, on_interval).await
    })
    .await
}

/// The rate the run offers, and where it came from.
struct Rate {
    /// The capacity measured first, when no rate was given.
    capacity: Option<Capacity>,
    /// Approvals per second.
    per_sec: f64,
    /// Where the rate came from, for the report's header.
    source: String,
}

/// Counts shared with the tasks that approve.
#[derive(Clone, Default)]
struct Tallies {
    /// The next alert's index (every approval takes its own).
    next: Arc<AtomicU64>,
    /// Approvals answered `201` during the run.
    approved: Arc<AtomicU64>,
    /// Approvals refused or failed during the run.
    failed: Arc<AtomicU64>,
}

async fn run_on(
    url: &str,
    sink: &OwnSink,
    settings: SustainedSettings,
    on_interval: impl Fn(&Interval),
) -> anyhow::Result<SustainedReport> {
    let pool = outbox_store::connect(url, "benchmark", 4).await?;
    let workload = Workload::prepare(pool.clone(), &sink.destination()).await?;
    let api_pool = outbox_store::connect(url, "decider", 32).await?;
    let api = Api::start(api_pool, &workload).await?;
    let running = Running::start(url, drain_settings(&settings, sink)).await?;
    let http = reqwest::Client::new();
    let tallies = Tallies::default();

    let rate = choose_rate(&api, &workload, &tallies.next, sink, &settings).await?;
    anyhow::ensure!(rate.per_sec > 0.0, "the rate must be above 0 approvals/s");
    // The capacity measurement's backlog is delivered before the run starts.
    wait_until_settled(&pool, &http, sink, tallies.next.load(Ordering::Relaxed)).await?;

    progress(&format!(
        "sustained: {:.0} approvals/s ({}) for {}s",
        rate.per_sec, rate.source, settings.run_secs
    ));
    let offered_from = tallies.next.load(Ordering::Relaxed);
    let offer = tokio::spawn(offer_open_loop(
        api.client.clone(),
        workload.clone(),
        tallies.clone(),
        rate.per_sec,
        Duration::from_secs(settings.run_secs),
        settings.max_outstanding,
    ));
    let intervals = report_intervals(&pool, &http, sink, &settings, &tallies, on_interval).await?;
    offer.await??;
    let approved = tallies.approved.load(Ordering::Relaxed);
    let failed_approvals = tallies.failed.load(Ordering::Relaxed);
    let total = tallies.next.load(Ordering::Relaxed);
    if let Err(err) = all_answered(failed_approvals, approved, total - offered_from) {
        // Stopped before the verdict, so that the database is never dropped under them.
        running.stop().await?;
        api.stop().await;
        return Err(err);
    }
    wait_until_settled(&pool, &http, sink, total).await?;
    running.stop().await?;
    api.stop().await;
    let sink_duplicates = delivered_once(&pool, &http, sink, total).await?;
    pool.close().await;
    Ok(SustainedReport {
        settings,
        capacity: rate.capacity,
        rate_per_sec: rate.per_sec,
        rate_source: rate.source,
        intervals,
        approved,
        failed_approvals,
        sink_duplicates,
    })
}

/// One dispatcher in this process, delivering over HTTP to `sink`.
fn drain_settings(settings: &SustainedSettings, sink: &OwnSink) -> DrainSettings {
    DrainSettings {
        dispatchers: Dispatchers::InProcess(Transport::Http),
        batch_size: settings.batch_size,
        max_in_flight: settings.max_in_flight,
        max_concurrent_sends: settings.concurrent_sends,
        sink_ip: dispatchers::sink_ip(&sink.base),
    }
}

/// The rate given, or [`SHARE_OF_CAPACITY`] of a capacity measured now: the lower of
/// approvals/s and deliveries/s, measured together.
async fn choose_rate(
    api: &Api,
    workload: &Workload,
    next: &Arc<AtomicU64>,
    sink: &OwnSink,
    settings: &SustainedSettings,
) -> anyhow::Result<Rate> {
    if let Some(rate) = settings.rate {
        return Ok(Rate {
            capacity: None,
            per_sec: rate,
            source: "given".to_owned(),
        });
    }
    let capacity = measure_capacity(api, workload, next, sink, settings).await?;
    let both = capacity.approvals_per_sec.min(capacity.deliveries_per_sec);
    let source = format!(
        "{:.0} % of a measured capacity of {:.0}/s: {:.0} approvals/s and {:.0} deliveries/s together",
        SHARE_OF_CAPACITY * 100.0,
        both,
        capacity.approvals_per_sec,
        capacity.deliveries_per_sec
    );
    Ok(Rate {
        capacity: Some(capacity),
        per_sec: SHARE_OF_CAPACITY * both,
        source,
    })
}

/// Every `interval_secs` until the run's end (the last interval may be shorter), one
/// [`Interval`]: approvals (`tallies`) and new sink keys per second, the sends accepted
/// meanwhile with their latency, and the tables' tuples. `on_interval` sees each as it
/// ends.
async fn report_intervals(
    pool: &outbox_store::PgPool,
    http: &reqwest::Client,
    sink: &OwnSink,
    settings: &SustainedSettings,
    tallies: &Tallies,
    on_interval: impl Fn(&Interval),
) -> anyhow::Result<Vec<Interval>> {
    let started = Instant::now();
    let run_for = Duration::from_secs(settings.run_secs);
    let period = Duration::from_secs(settings.interval_secs.max(1));
    let mut intervals = Vec::new();
    let mut last_attempt = crate::db::accepted_since(pool, 0).await?.last_id;
    let mut sink_before = SinkCounters::read(http, &sink.stats_url()).await?;
    let mut approved_before = 0;
    let mut interval_started = Instant::now();
    while started.elapsed() < run_for {
        let end = (interval_started + period).min(started + run_for);
        tokio::time::sleep_until(end.into()).await;
        let seconds = interval_started.elapsed().as_secs_f64();
        interval_started = Instant::now();
        let sink_now = SinkCounters::read(http, &sink.stats_url()).await?;
        let approved_now = tallies.approved.load(Ordering::Relaxed);
        let accepted = crate::db::accepted_since(pool, last_attempt).await?;
        last_attempt = accepted.last_id;
        let interval = Interval {
            index: intervals.len() + 1,
            at_secs: started.elapsed().as_secs_f64(),
            approvals_per_sec: (approved_now - approved_before) as f64 / seconds,
            deliveries_per_sec: (sink_now.distinct_keys - sink_before.distinct_keys) as f64
                / seconds,
            accepted: accepted.accepted,
            p50_ms: accepted.p50_ms,
            p99_ms: accepted.p99_ms,
            tables: crate::db::written_tables(pool).await?,
        };
        on_interval(&interval);
        intervals.push(interval);
        sink_before = sink_now;
        approved_before = approved_now;
    }
    Ok(intervals)
}

/// Whether every one of the `offered` approvals was answered `201`.
fn all_answered(failed: u64, approved: u64, offered: u64) -> anyhow::Result<()> {
    anyhow::ensure!(failed == 0, "{failed} approvals failed during the run");
    anyhow::ensure!(
        offered == approved,
        "{approved} of {offered} approvals answered"
    );
    Ok(())
}

/// The final check, once settled: each of the `total` alerts accepted, none left
/// otherwise. Returns the deliveries of a key the sink had already applied.
async fn delivered_once(
    pool: &outbox_store::PgPool,
    http: &reqwest::Client,
    sink: &OwnSink,
    total: u64,
) -> anyhow::Result<u64> {
    let evidence = crate::db::drain_evidence(pool).await?;
    anyhow::ensure!(
        evidence.accepted == total as i64 && evidence.not_accepted == 0,
        "after the run: {evidence:?} for {total} alerts"
    );
    let sink_after = SinkCounters::read(http, &sink.stats_url()).await?;
    Ok(sink_after.effective_duplicates)
}

/// Closed loop for a while: API clients approving as fast as they get answers, the
/// dispatcher delivering meanwhile. Approvals are counted by the clients, deliveries by
/// the sink.
async fn measure_capacity(
    api: &Api,
    workload: &Workload,
    next: &Arc<AtomicU64>,
    sink: &OwnSink,
    settings: &SustainedSettings,
) -> anyhow::Result<Capacity> {
    progress(&format!(
        "sustained: measuring capacity for {}s with {} API clients",
        settings.capacity_secs, settings.capacity_clients
    ));
    let http = reqwest::Client::new();
    let sink_before = SinkCounters::read(&http, &sink.stats_url()).await?;
    let started = Instant::now();
    let until = started + Duration::from_secs(settings.capacity_secs);
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..settings.capacity_clients {
        let (client, workload, next) = (api.client.clone(), workload.clone(), next.clone());
        clients.spawn(async move {
            let mut approved = 0u64;
            while Instant::now() < until {
                let i = next.fetch_add(1, Ordering::Relaxed);
                client.approve_one(&workload, i).await?;
                approved += 1;
            }
            anyhow::Ok(approved)
        });
    }
    let mut approved = 0;
    while let Some(done) = clients.join_next().await {
        approved += done??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let sink_after = SinkCounters::read(&http, &sink.stats_url()).await?;
    Ok(Capacity {
        seconds,
        approvals_per_sec: approved as f64 / seconds,
        deliveries_per_sec: (sink_after.distinct_keys - sink_before.distinct_keys) as f64 / seconds,
    })
}

/// Approves at `rate` per second for `run_for` through the API, open loop: every 10 ms the
/// approvals due are started without waiting for earlier answers (at most
/// `max_outstanding` at once; beyond that, arrivals queue in this process and the
/// interval's approvals/s shows the shortfall).
async fn offer_open_loop(
    client: ApiClient,
    workload: Workload,
    tallies: Tallies,
    rate: f64,
    run_for: Duration,
    max_outstanding: usize,
) -> anyhow::Result<()> {
    let tick = Duration::from_millis(10);
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let outstanding = Arc::new(tokio::sync::Semaphore::new(max_outstanding.max(1)));
    let started = Instant::now();
    let mut owed = 0.0;
    let mut requests = tokio::task::JoinSet::new();
    while started.elapsed() < run_for {
        interval.tick().await;
        owed += rate * tick.as_secs_f64();
        let count = owed.floor() as u64;
        owed -= count as f64;
        for _ in 0..count {
            let i = tallies.next.fetch_add(1, Ordering::Relaxed);
            let (client, workload) = (client.clone(), workload.clone());
            let (tallies, outstanding) = (tallies.clone(), outstanding.clone());
            requests.spawn(async move {
                let _permit = outstanding.acquire_owned().await;
                match client.approve_one(&workload, i).await {
                    Ok(_) => tallies.approved.fetch_add(1, Ordering::Relaxed),
                    Err(err) => {
                        tracing::warn!(error = %err, "approval failed");
                        tallies.failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            });
        }
        while requests.try_join_next().is_some() {}
    }
    while requests.join_next().await.is_some() {}
    Ok(())
}

/// Waits until the sink has seen `total` keys and the outbox is empty.
async fn wait_until_settled(
    pool: &outbox_store::PgPool,
    http: &reqwest::Client,
    sink: &OwnSink,
    total: u64,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let keys = SinkCounters::read(http, &sink.stats_url())
            .await?
            .distinct_keys;
        if keys >= total && crate::db::queue_empty(pool).await? {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the sink has {keys} of {total} keys after 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
