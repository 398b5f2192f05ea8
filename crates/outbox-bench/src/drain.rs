//! One timed drain: a backlog of approved alerts delivered by dispatchers (in this
//! process, or as separate `dispatcher` processes), with the server's own counters read
//! around it and the live queue sampled during it.
//!
//! The clock starts just before the dispatchers start (their start-up is included) and
//! stops when the sink has seen every key and the outbox is empty: every outcome recorded.

use anyhow::Context;
use outbox_runtime::shutdown::{Shutdown, Trigger};
use outbox_store::PgPool;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::db::{self, DrainEvidence};
use crate::dispatchers::{Dispatchers, DrainSettings, Running};
use crate::measure::{process_cpu_secs, HostCpu};

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
    /// Those records by kind and relation, most bytes first (bytes over the whole drain;
    /// empty without `pg_walinspect`).
    pub database_wal_by_record: Vec<db::WalShare>,
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
    let own_queries = Arc::new(AtomicU64::new(0));
    let mut before = Before::read(pool, &http, sink_stats).await?;
    let sampler = Sampler::start(pool.clone(), own_queries.clone(), before.started);
    let mut running = Running::start(database_url, settings).await?;

    // Phase 1: the sink has every key. Phase 2: every outcome is recorded.
    let deadline = before.started + Duration::from_secs(1800);
    if let Some(url) = sink_stats {
        wait_for_sink_keys(&http, url, before.sink.distinct_keys + n, deadline).await?;
    } else {
        // Nothing to watch at a sink (the no-op send): wait for the dispatcher to end by
        // itself once nothing is due, as the peers wait for their in-process counter,
        // rather than poll the queue throughout, which costs the database CPU the drain
        // would be charged for (about 15 % of it in the peers' harness).
        running.wait_until_ended(deadline).await?;
    }
    wait_for_empty_queue(pool, &own_queries, deadline).await?;
    let seconds = before.started.elapsed().as_secs_f64();
    let host_cpu_busy_pct = before.host_cpu.busy_pct_since();
    running.stop().await?;
    let driver_cpu_s = process_cpu_secs() - before.cpu_secs;
    let (max_sending, outbox_dead_tuples) = sampler.stop().await;
    let sink_after = match sink_stats {
        Some(url) => SinkCounters::read(&http, url).await?,
        None => before.sink,
    };
    let counters_after = db::server_counters(pool).await?;
    // The counters' own read counts as one commit.
    let own = own_queries.load(Ordering::Relaxed) as i64 + 1;
    let commits = (counters_after.commits - before.counters.commits - own).max(0);
    let evidence = db::drain_evidence(pool).await?;
    let row_writes = RowWrites::between(pool, &before.rows, n).await?;
    let database_wal_by_record = before.database_wal(pool, &counters_after).await?;
    let database_wal_bytes_per_delivery = database_wal_by_record
        .as_ref()
        .map(|shares| shares.iter().map(|s| s.bytes).sum::<i64>() as f64 / n as f64);
    let processes = match settings.dispatchers {
        Dispatchers::InProcess(_) => 1,
        Dispatchers::Processes(k) => i64::from(k),
    };
    Ok(DrainReport {
        n,
        settings,
        seconds,
        deliveries_per_sec: n as f64 / seconds,
        sink_requests: sink_after.requests - before.sink.requests,
        sink_duplicates: sink_after.duplicates() - before.sink.duplicates(),
        commits_per_delivery: commits as f64 / n as f64,
        wal_bytes_per_delivery: (counters_after.wal_lsn - before.counters.wal_lsn) as f64
            / n as f64,
        row_writes,
        database_wal_bytes_per_delivery,
        database_wal_by_record: database_wal_by_record.unwrap_or_default(),
        host_cpu_busy_pct,
        driver_cpu_s,
        max_sending,
        sending_bound: i64::from(settings.max_in_flight) * processes,
        outbox_dead_tuples,
        evidence,
    })
}

/// What is read just before a drain starts, to be subtracted afterwards.
struct Before {
    /// The sink's counters (zero without a sink to read).
    sink: SinkCounters,
    /// Holds the WAL of the drain (a slot on this connection) while `wal_inspection`.
    wal_keeper: sqlx::pool::PoolConnection<sqlx::Postgres>,
    /// Whether the drain's own WAL can be read back (`pg_walinspect`).
    wal_inspection: bool,
    rows: Vec<db::RowCounters>,
    counters: db::ServerCounters,
    host_cpu: HostCpu,
    cpu_secs: f64,
    /// The drain's clock starts here, just before the dispatchers start.
    started: Instant,
}

impl Before {
    async fn read(
        pool: &PgPool,
        http: &reqwest::Client,
        sink_stats: Option<&str>,
    ) -> anyhow::Result<Before> {
        let sink = match sink_stats {
            Some(url) => SinkCounters::read(http, url).await?,
            None => SinkCounters::default(),
        };
        // The WAL of the drain is read back afterwards: a slot (held by this connection)
        // keeps checkpoints from recycling it meanwhile.
        let mut wal_keeper = pool.acquire().await?;
        let wal_inspection =
            db::enable_wal_inspection(pool).await && db::reserve_wal(&mut wal_keeper).await;
        let rows = settled_row_counters(pool, None).await?;
        let counters = db::server_counters(pool).await?;
        Ok(Before {
            sink,
            wal_keeper,
            wal_inspection,
            rows,
            counters,
            host_cpu: HostCpu::now(),
            cpu_secs: process_cpu_secs(),
            started: Instant::now(),
        })
    }

    /// This database's own WAL records between these counters and `after`, by kind,
    /// when the server can tell; releases the WAL held meanwhile.
    async fn database_wal(
        &mut self,
        pool: &PgPool,
        after: &db::ServerCounters,
    ) -> anyhow::Result<Option<Vec<db::WalShare>>> {
        if !self.wal_inspection {
            return Ok(None);
        }
        let shares = db::database_wal(pool, self.counters.wal_lsn, after.wal_lsn).await;
        db::release_wal(&mut self.wal_keeper).await?;
        Ok(Some(shares?))
    }
}

/// Waits (until `deadline`) for the sink at `stats_url` to have seen `keys` distinct keys.
async fn wait_for_sink_keys(
    http: &reqwest::Client,
    stats_url: &str,
    keys: u64,
    deadline: Instant,
) -> anyhow::Result<()> {
    loop {
        if SinkCounters::read(http, stats_url).await?.distinct_keys >= keys {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the drain did not finish in 30 minutes"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (until `deadline`) for the outbox to be empty: every outcome recorded. Each
/// poll counts as one of the benchmark's own queries.
async fn wait_for_empty_queue(
    pool: &PgPool,
    own_queries: &AtomicU64,
    deadline: Instant,
) -> anyhow::Result<()> {
    loop {
        own_queries.fetch_add(1, Ordering::Relaxed);
        if db::queue_empty(pool).await? {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the drain did not finish in 30 minutes"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
