//! One timed drain: a backlog of approved alerts delivered by dispatchers (in this
//! process, or as separate `dispatcher` processes), with the server's own counters read
//! around it and the live queue sampled during it.
//!
//! The clock starts just before the dispatchers start (their start-up is included) and
//! stops when the sink has seen every key and the outbox is empty: every outcome recorded.

use crate::db::{self, DrainEvidence};
use anyhow::Context;
use outbox_dispatcher::Transport;
use outbox_runtime::shutdown::{Shutdown, Trigger};
use outbox_store::PgPool;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::measure::{process_cpu_secs, HostCpu};

/// Who delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dispatchers {
    /// One dispatcher inside this process, with this transport.
    InProcess(#[serde(skip)] Transport),
    /// This many `dispatcher` processes side by side, each with `--drain`.
    Processes(u32),
}

/// Dispatcher settings for a drain.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DrainSettings {
    /// Who delivers.
    pub dispatchers: Dispatchers,
    /// Rows per claim statement.
    pub batch_size: u32,
    /// Rows a dispatcher holds in `sending` at once (its crash blast radius).
    pub max_in_flight: u32,
    /// Sends a dispatcher runs at once (`--max-concurrent-sends`).
    pub max_concurrent_sends: u32,
    /// The sink's address: the one address the dispatchers' egress guard opens (the
    /// bench's sinks listen on loopback, which is otherwise refused).
    #[serde(skip)]
    pub sink_ip: Option<std::net::IpAddr>,
}

/// The address of a sink's URL when its host is an IP literal (as the bench's are).
pub fn sink_ip(url: &str) -> Option<std::net::IpAddr> {
    let url = reqwest::Url::parse(url).ok()?;
    let host = url.host_str()?;
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

impl DrainSettings {
    /// The allow-list opening exactly the sink's address.
    fn allow_private(&self) -> String {
        self.sink_ip.map(|ip| ip.to_string()).unwrap_or_default()
    }
}

/// Counters of a sink, read over HTTP (`GET <stats_url>`): the peers' sink and ours
/// both answer `distinct_keys` and `requests`; duplicates are named differently.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct SinkCounters {
    /// Requests to the delivery path.
    #[serde(default)]
    pub requests: u64,
    /// Distinct idempotency keys seen (applied).
    #[serde(default)]
    pub distinct_keys: u64,
    /// The peers' sink: requests with a key seen before.
    #[serde(default)]
    pub duplicates: u64,
    /// Our sink: applied deliveries of a key applied before.
    #[serde(default)]
    pub effective_duplicates: u64,
    /// Our sink: deliveries answered with an earlier receipt.
    #[serde(default)]
    pub wire_duplicates: u64,
}

impl SinkCounters {
    /// Reads the counters.
    pub async fn read(http: &reqwest::Client, stats_url: &str) -> anyhow::Result<Self> {
        Ok(http
            .get(stats_url)
            .send()
            .await
            .with_context(|| format!("reading {stats_url}"))?
            .error_for_status()?
            .json()
            .await?)
    }

    fn duplicates(&self) -> u64 {
        self.duplicates + self.effective_duplicates + self.wire_duplicates
    }
}

/// What a drain measured.
#[derive(Debug, Clone, Serialize)]
pub struct DrainReport {
    /// Alerts in the backlog.
    pub n: u64,
    /// Settings used.
    pub settings: DrainSettings,
    /// Wall-clock seconds, dispatcher start-up included.
    pub seconds: f64,
    /// Deliveries per second.
    pub deliveries_per_sec: f64,
    /// Requests the sink received during the drain (0 without HTTP).
    pub sink_requests: u64,
    /// Requests for a key the sink had seen before.
    pub sink_duplicates: u64,
    /// Committed transactions per delivery (the benchmark's own reads subtracted).
    pub commits_per_delivery: f64,
    /// WAL bytes per delivery (cluster-wide: other databases' writes count too).
    pub wal_bytes_per_delivery: f64,
    /// WAL bytes per delivery of this database's own records (`pg_walinspect`), when the
    /// server has it.
    pub database_wal_bytes_per_delivery: Option<f64>,
    /// Row writes per delivery, by table, from the server's own row counters.
    pub row_writes: RowWrites,
    /// Busy share of all cores during the drain, percent.
    pub host_cpu_busy_pct: f64,
    /// CPU seconds of this process and the dispatcher processes during the drain.
    pub driver_cpu_s: f64,
    /// Most rows seen in `sending` at once (sampled every 20 ms).
    pub max_sending: i64,
    /// The configured bound on rows in `sending`: max in flight × processes.
    pub sending_bound: i64,
    /// Dead tuples in `outbox` over the drain: (seconds since start, `n_dead_tup`).
    pub outbox_dead_tuples: Vec<(f64, i64)>,
    /// What the tables show afterwards.
    pub evidence: DrainEvidence,
}

/// Drains the backlog of `n` alerts already approved in `pool`'s database. With
/// `sink_stats`, waits for the sink to have seen `n` new keys as well.
pub async fn drain(
    pool: &PgPool,
    database_url: &str,
    n: u64,
    settings: DrainSettings,
    sink_stats: Option<&str>,
) -> anyhow::Result<DrainReport> {
    let http = reqwest::Client::new();
    let sink_before = match sink_stats {
        Some(url) => SinkCounters::read(&http, url).await?,
        None => SinkCounters::default(),
    };
    let own_queries = Arc::new(AtomicU64::new(0));
    // The WAL of the drain is read back afterwards: a slot (held by this connection)
    // keeps checkpoints from recycling it meanwhile.
    let mut wal_keeper = pool.acquire().await?;
    let wal_inspection =
        db::enable_wal_inspection(pool).await && db::reserve_wal(&mut wal_keeper).await;
    let rows_before = settled_row_counters(pool, None).await?;
    let counters_before = db::server_counters(pool).await?;
    let host_before = HostCpu::now();
    let cpu_before = process_cpu_secs();
    let started = Instant::now();

    let sampler = Sampler::start(pool.clone(), own_queries.clone(), started);
    let mut running = Running::start(database_url, settings).await?;

    // Phase 1: the sink has every key. Phase 2: every outcome is recorded.
    let deadline = started + Duration::from_secs(1800);
    let mut sink_after = sink_before;
    if let Some(url) = sink_stats {
        loop {
            sink_after = SinkCounters::read(&http, url).await?;
            if sink_after.distinct_keys - sink_before.distinct_keys >= n {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the drain did not finish in 30 minutes"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    if sink_stats.is_none() {
        // Nothing to watch at a sink (the no-op send): wait for the dispatcher to end by
        // itself once nothing is due, as the peers wait for their in-process counter,
        // rather than poll the queue throughout, which costs the database CPU the drain
        // would be charged for (about 15 % of it in the peers' harness).
        running.wait_until_ended(deadline).await?;
    }
    loop {
        own_queries.fetch_add(1, Ordering::Relaxed);
        if db::queue_empty(pool).await? {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the drain did not finish in 30 minutes"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let host_cpu_busy_pct = host_before.busy_pct_since();
    running.stop().await?;
    let driver_cpu_s = process_cpu_secs() - cpu_before;
    let (max_sending, outbox_dead_tuples) = sampler.stop().await;
    if let Some(url) = sink_stats {
        sink_after = SinkCounters::read(&http, url).await?;
    }
    let counters_after = db::server_counters(pool).await?;
    // The counters' own read counts as one commit.
    let own = own_queries.load(Ordering::Relaxed) as i64 + 1;
    let commits = (counters_after.commits - counters_before.commits - own).max(0);
    let evidence = db::drain_evidence(pool).await?;
    let row_writes = RowWrites::between(pool, &rows_before, n).await?;
    let database_wal_bytes_per_delivery = if wal_inspection {
        let bytes =
            db::database_wal_bytes(pool, counters_before.wal_lsn, counters_after.wal_lsn).await;
        db::release_wal(&mut wal_keeper).await?;
        Some(bytes? as f64 / n as f64)
    } else {
        None
    };
    drop(wal_keeper);
    let processes = match settings.dispatchers {
        Dispatchers::InProcess(_) => 1,
        Dispatchers::Processes(k) => i64::from(k),
    };
    Ok(DrainReport {
        n,
        settings,
        seconds,
        deliveries_per_sec: n as f64 / seconds,
        sink_requests: sink_after.requests - sink_before.requests,
        sink_duplicates: sink_after.duplicates() - sink_before.duplicates(),
        commits_per_delivery: commits as f64 / n as f64,
        wal_bytes_per_delivery: (counters_after.wal_lsn - counters_before.wal_lsn) as f64
            / n as f64,
        row_writes,
        database_wal_bytes_per_delivery,
        host_cpu_busy_pct,
        driver_cpu_s,
        max_sending,
        sending_bound: i64::from(settings.max_in_flight) * processes,
        outbox_dead_tuples,
        evidence,
    })
}

/// Row writes of one table per delivery over a drain.
#[derive(Debug, Clone, Serialize)]
pub struct TableWrites {
    /// The table.
    pub table: &'static str,
    /// Rows inserted per delivery.
    pub inserted: f64,
    /// Rows updated per delivery (HOT updates included).
    pub updated: f64,
    /// Of those, HOT updates (no new index entries) per delivery.
    pub hot_updated: f64,
    /// Rows deleted per delivery.
    pub deleted: f64,
}

/// Row writes per delivery over a drain: the tables a delivery touches, and the total
/// of inserts, updates and deletes.
#[derive(Debug, Clone, Serialize)]
pub struct RowWrites {
    /// Inserts, updates and deletes per delivery, all tables together.
    pub total: f64,
    /// By table, in [`db::DELIVERY_TABLES`] order.
    pub tables: Vec<TableWrites>,
}

impl RowWrites {
    /// The writes since `before` (read with [`settled_row_counters`] before the drain),
    /// per delivery of `n`, once every backend has published its counters.
    async fn between(pool: &PgPool, before: &[db::RowCounters], n: u64) -> anyhow::Result<Self> {
        let after = settled_row_counters(pool, Some((before, n))).await?;
        let per = |d: i64| d as f64 / n as f64;
        let tables: Vec<TableWrites> = db::DELIVERY_TABLES
            .iter()
            .zip(before.iter().zip(&after))
            .map(|(table, (b, a))| TableWrites {
                table,
                inserted: per(a.inserted - b.inserted),
                updated: per(a.updated - b.updated),
                hot_updated: per(a.hot_updated - b.hot_updated),
                deleted: per(a.deleted - b.deleted),
            })
            .collect();
        let total = tables
            .iter()
            .map(|t| t.inserted + t.updated + t.deleted)
            .sum();
        Ok(RowWrites { total, tables })
    }

    /// One line: `total (table ins/upd(hot)/del, ...)`, tables with no writes left out.
    pub fn summary(&self) -> String {
        let tables: Vec<String> = self
            .tables
            .iter()
            .filter(|t| t.inserted + t.updated + t.deleted > 0.0)
            .map(|t| {
                format!(
                    "{} ins {:.2} upd {:.2} (HOT {:.2}) del {:.2}",
                    t.table, t.inserted, t.updated, t.hot_updated, t.deleted
                )
            })
            .collect();
        format!("{:.2} ({})", self.total, tables.join("; "))
    }
}

/// The row counters of [`db::DELIVERY_TABLES`] once they have stopped moving: the
/// server publishes a backend's counters lazily (at the latest a second after it goes
/// idle, and when it exits), so they are read every 250 ms until unchanged for 1.5 s.
/// After a drain (`drained`: the counters before it and its size), they must also show
/// an attempt row per delivery, which every delivery writes.
async fn settled_row_counters(
    pool: &PgPool,
    drained: Option<(&[db::RowCounters], u64)>,
) -> anyhow::Result<Vec<db::RowCounters>> {
    let attempts = db::DELIVERY_TABLES
        .iter()
        .position(|t| *t == "delivery_attempts")
        .unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = db::row_counters(pool, &db::DELIVERY_TABLES).await?;
    let mut unchanged_since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = db::row_counters(pool, &db::DELIVERY_TABLES).await?;
        if now != last {
            last = now;
            unchanged_since = Instant::now();
            continue;
        }
        let complete = drained.is_none_or(|(before, n)| {
            last[attempts].inserted - before[attempts].inserted >= n as i64
        });
        if complete && unchanged_since.elapsed() >= Duration::from_millis(1500) {
            return Ok(last);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the server's row counters did not settle in a minute"
        );
    }
}

/// What every drain must show: each alert accepted once (counting `delivered_so_far`
/// alerts in the database so far), one attempt row each, no duplicate at the sink (over
/// HTTP), and never more rows in `sending` than the bound.
pub(crate) fn check(
    report: &DrainReport,
    delivered_so_far: u64,
    over_http: bool,
) -> anyhow::Result<()> {
    let evidence = report.evidence;
    anyhow::ensure!(
        evidence.accepted == delivered_so_far as i64 && evidence.not_accepted == 0,
        "{} alerts accepted and {} not, expected {delivered_so_far} accepted",
        evidence.accepted,
        evidence.not_accepted
    );
    anyhow::ensure!(
        evidence.attempt_rows == delivered_so_far as i64,
        "{} attempt rows for {delivered_so_far} deliveries",
        evidence.attempt_rows
    );
    if over_http {
        anyhow::ensure!(
            report.sink_requests == report.n && report.sink_duplicates == 0,
            "the sink saw {} requests ({} duplicates) for {} alerts",
            report.sink_requests,
            report.sink_duplicates,
            report.n
        );
    }
    anyhow::ensure!(
        report.max_sending <= report.sending_bound,
        "{} rows in sending, above the bound {}",
        report.max_sending,
        report.sending_bound
    );
    Ok(())
}

/// Samples the live queue every 20 ms until stopped.
struct Sampler {
    stop: Trigger,
    task: tokio::task::JoinHandle<Vec<(f64, i64)>>,
    max_sending: Arc<AtomicI64>,
}

impl Sampler {
    fn start(pool: PgPool, own_queries: Arc<AtomicU64>, started: Instant) -> Sampler {
        let (stop, mut stopped) = Shutdown::new();
        let max_sending = Arc::new(AtomicI64::new(0));
        let max = max_sending.clone();
        let task = tokio::spawn(async move {
            let mut dead = Vec::new();
            let mut last_dead_at = None::<Instant>;
            while !stopped.is_set() {
                own_queries.fetch_add(1, Ordering::Relaxed);
                if let Ok(sample) = db::queue_sample(&pool).await {
                    max.fetch_max(sample.sending, Ordering::Relaxed);
                    if last_dead_at.is_none_or(|at| at.elapsed() >= Duration::from_millis(500)) {
                        last_dead_at = Some(Instant::now());
                        dead.push((started.elapsed().as_secs_f64(), sample.outbox_dead_tuples));
                    }
                }
                tokio::select! {
                    () = stopped.wait() => {}
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            }
            dead
        });
        Sampler {
            stop,
            task,
            max_sending,
        }
    }

    async fn stop(self) -> (i64, Vec<(f64, i64)>) {
        self.stop.set();
        let dead = self.task.await.unwrap_or_default();
        (self.max_sending.load(Ordering::Relaxed), dead)
    }
}

/// Dispatchers at work.
pub(crate) enum Running {
    InProcess {
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<
            Result<outbox_dispatcher::RunSummary, outbox_dispatcher::DispatchError>,
        >,
    },
    Processes(Vec<tokio::process::Child>),
}

impl Running {
    pub(crate) async fn start(
        database_url: &str,
        settings: DrainSettings,
    ) -> anyhow::Result<Running> {
        match settings.dispatchers {
            Dispatchers::InProcess(transport) => {
                let dispatcher_pool = outbox_store::connect(database_url, "dispatcher", 16).await?;
                let config = outbox_dispatcher::Config {
                    worker_id: outbox_dispatcher::default_worker_id(),
                    batch_size: settings.batch_size,
                    max_in_flight: settings.max_in_flight,
                    max_concurrent_sends: Some(settings.max_concurrent_sends),
                    lease: Duration::from_secs(30),
                    poll_interval: Duration::from_secs(1),
                    retry_schedule: outbox_core::retry::RetrySchedule::parse("5s,30s,2m")
                        .map_err(anyhow::Error::msg)?,
                    // The no-op send has no sink to watch: the dispatcher ends by itself once
                    // nothing is due, and the drain waits for that (`Running::wait_until_ended`).
                    drain: matches!(transport, outbox_dispatcher::Transport::Discard)
                        .then_some(Duration::ZERO),
                    shutdown_deadline: Duration::from_secs(20),
                    metrics_listen: None,
                    connect_timeout: Duration::from_secs(5),
                    transport,
                    // The workload stores its secrets in plain text.
                    secret_keys: Default::default(),
                    egress: outbox_egress::Guard::new(
                        outbox_egress::AllowList::parse(&settings.allow_private())
                            .map_err(anyhow::Error::msg)?,
                    ),
                    templates: Default::default(),
                    templates_dir: None,
                    health_report_interval: Duration::from_secs(5),
                    queue_vacuum_after: Some(outbox_dispatcher::DEFAULT_QUEUE_VACUUM_AFTER),
                };
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let task = tokio::spawn(outbox_dispatcher::run(dispatcher_pool, config, async {
                    let _ = stopped.await;
                }));
                Ok(Running::InProcess { stop, task })
            }
            Dispatchers::Processes(k) => {
                let program = sibling_binary("dispatcher")?;
                let mut children = Vec::new();
                for i in 0..k {
                    let child = tokio::process::Command::new(&program)
                        .arg("--database-url")
                        .arg(database_url)
                        .arg("--worker-id")
                        .arg(format!("bench-{i}"))
                        .arg("--batch-size")
                        .arg(settings.batch_size.to_string())
                        .arg("--max-in-flight")
                        .arg(settings.max_in_flight.to_string())
                        .arg("--max-concurrent-sends")
                        .arg(settings.max_concurrent_sends.to_string())
                        .arg("--drain")
                        .arg("--allow-private")
                        .arg(settings.allow_private())
                        .env("RUST_LOG", "warn")
                        .kill_on_drop(true)
                        .spawn()
                        .with_context(|| format!("starting {}", program.display()))?;
                    children.push(child);
                }
                Ok(Running::Processes(children))
            }
        }
    }

    /// Waits (until `deadline`) for the dispatchers to end by themselves, as they do once
    /// nothing is due when they drain: the in-process no-op dispatcher, or processes.
    pub(crate) async fn wait_until_ended(&mut self, deadline: Instant) -> anyhow::Result<()> {
        loop {
            let ended = match self {
                Running::InProcess { task, .. } => task.is_finished(),
                Running::Processes(children) => {
                    let mut all = true;
                    for child in children.iter_mut() {
                        all &= child.try_wait()?.is_some();
                    }
                    all
                }
            };
            if ended {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the dispatchers did not end in 30 minutes"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        match self {
            Running::InProcess { stop, task } => {
                let _ = stop.send(());
                task.await??;
            }
            Running::Processes(children) => {
                for mut child in children {
                    let status = child.wait().await?;
                    anyhow::ensure!(status.success(), "a dispatcher process ended with {status}");
                }
            }
        }
        Ok(())
    }
}

/// A binary built beside the running one (`target/<profile>/<name>`).
pub fn sibling_binary(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating this program")?;
    let dir = exe.parent().context("this program has no directory")?;
    // Test binaries live one level down, in `deps/`.
    for candidate in [dir.join(name), dir.join("..").join(name)] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    anyhow::bail!(
        "`{name}` is not built beside {}; build the workspace's binaries first",
        exe.display()
    )
}
