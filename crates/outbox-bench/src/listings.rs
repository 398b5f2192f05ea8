//! `bench listings`: what one tenant's alert listings cost another tenant's approvals,
//! for each build given, side by side in one run.
//!
//! For each build (`--build NAME=DIR`, DIR holding its `decider` and `outboxctl`), on a
//! database of its own migrated by that build's `outboxctl migrate`: tenant A holds
//! 100,000 alerts settled `accepted` days ago (written by one statement, as
//! `db::seed_history` writes history), and that build's `decider serve` runs with its
//! default settings. Tenant B then approves one alert at a time over HTTP, first alone,
//! then while 20 clients of tenant A list alerts as fast as they are answered, by default
//! with the filters that once read all of A's alerts: half of them a two-letter subject
//! text (`subject=ab`, which no subject holds), half `state=accepted` (`--queries` names
//! others). The report gives B's approval latency (p50, p99) in both phases, and how A's
//! listings were answered.
//!
//! Builds are measured one after the other, in alternating order over `--rounds`, on the
//! same machine in the same run, so the comparison is of the builds, not of the hour.

use anyhow::Context;
use outbox_store::destinations::NewDestination;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::measure::{ms, quantile};

/// What `bench listings` measures.
#[derive(Debug, Clone, clap::Args)]
pub struct ListingSettings {
    /// A build to measure, as NAME=DIR, DIR holding its `decider` and `outboxctl` (a
    /// `target/debug` or `target/release`); repeat it to compare builds. Default: the
    /// build beside this benchmark, named `this`.
    #[arg(long = "build", value_name = "NAME=DIR", value_parser = parse_build)]
    pub builds: Vec<Build>,
    /// Alerts of the listing tenant.
    #[arg(long, default_value_t = 100_000)]
    pub alerts: i64,
    /// Clients of the listing tenant listing at once.
    #[arg(long, default_value_t = 20)]
    pub listers: usize,
    /// The listings' query strings, comma-separated; the clients take them in turn. By
    /// default the filters that once read all of a tenant's alerts.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "subject=ab,state=accepted"
    )]
    pub queries: Vec<String>,
    /// Seconds of approvals in each phase (alone, then under the listings).
    #[arg(long, default_value_t = 15)]
    pub seconds: u64,
    /// Rounds: each build measured once per round, in alternating order.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
}

/// A build: its name in the report and the directory of its binaries.
#[derive(Debug, Clone, Serialize)]
pub struct Build {
    /// Its name in the report.
    pub name: String,
    /// The directory holding its `decider` and `outboxctl`.
    pub dir: PathBuf,
}

fn parse_build(text: &str) -> Result<Build, String> {
    let (name, dir) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not NAME=DIR"))?;
    let dir = PathBuf::from(dir);
    for binary in ["decider", "outboxctl"] {
        if !dir.join(binary).is_file() {
            return Err(format!("{} has no `{binary}`", dir.display()));
        }
    }
    Ok(Build {
        name: name.to_owned(),
        dir,
    })
}

impl ListingSettings {
    /// The builds to measure: as given, or the one beside this benchmark.
    fn builds(&self) -> anyhow::Result<Vec<Build>> {
        if !self.builds.is_empty() {
            return Ok(self.builds.clone());
        }
        let decider = crate::dispatchers::sibling_binary("decider")?;
        let dir = decider
            .parent()
            .context("the decider has no directory")?
            .to_owned();
        Ok(vec![Build {
            name: "this".to_owned(),
            dir,
        }])
    }
}

/// One phase of one build's measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// The build's name.
    pub build: String,
    /// The round (from 1).
    pub round: u32,
    /// Clients of tenant A listing meanwhile (0: B approves alone).
    pub listers: usize,
    /// Tenant B's approvals answered 201.
    pub approvals: usize,
    /// Tenant B's approvals answered otherwise, or not at all.
    pub approvals_failed: usize,
    /// Their latency, median, in milliseconds.
    pub approval_p50_ms: f64,
    /// Their latency, 99th percentile, in milliseconds.
    pub approval_p99_ms: f64,
    /// Tenant A's listings by answer (`200`, `422`, `429`, `503`, ...; `error`: none).
    pub listings: BTreeMap<String, usize>,
    /// Their latency, median, in milliseconds.
    pub listing_p50_ms: Option<f64>,
}

/// Measures every build, `rounds` times, alternating their order.
pub async fn run(
    server_url: &str,
    settings: &ListingSettings,
    mut progress: impl FnMut(&str),
) -> anyhow::Result<Vec<Phase>> {
    anyhow::ensure!(!settings.queries.is_empty(), "--queries names no listing");
    let builds = settings.builds()?;
    let mut phases = Vec::new();
    for round in 1..=settings.rounds {
        let mut order: Vec<&Build> = builds.iter().collect();
        if round % 2 == 0 {
            order.reverse();
        }
        for build in order {
            progress(&format!("round {round}: {}", build.name));
            let measured = crate::scratch::on_own_database(server_url, |url| async move {
                measure_build(&url, build, settings, round).await
            })
            .await
            .with_context(|| format!("measuring {}", build.name))?;
            phases.extend(measured);
        }
    }
    Ok(phases)
}

/// Both phases of one build, on the database at `url`.
async fn measure_build(
    url: &str,
    build: &Build,
    settings: &ListingSettings,
    round: u32,
) -> anyhow::Result<Vec<Phase>> {
    migrate(url, build).await?;
    let pool = outbox_store::connect(url, "bench", 4).await?;
    let lister = tenant_with_token(&pool, "lister").await?;
    let approver = tenant_with_token(&pool, "approver").await?;
    crate::db::seed_history(&pool, lister.id, lister.destination, 0, settings.alerts).await?;
    crate::db::vacuum_analyze(&pool).await?;
    pool.close().await;

    let decider = Decider::start(url, build).await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let seconds = Duration::from_secs(settings.seconds);
    let phase = |listers: usize, approvals: Approvals, listings: Listings| Phase {
        build: build.name.clone(),
        round,
        listers,
        approvals: approvals.took.len(),
        approvals_failed: approvals.failed,
        approval_p50_ms: quantile(&approvals.took, 0.5).map_or(f64::NAN, ms),
        approval_p99_ms: quantile(&approvals.took, 0.99).map_or(f64::NAN, ms),
        listing_p50_ms: quantile(&listings.took, 0.5).map(ms),
        listings: listings.answers,
    };

    let alone = approve_for(&http, &decider.base, &approver, "alone", seconds).await;
    let quiet = phase(0, alone, Listings::default());

    let stop = Arc::new(AtomicBool::new(false));
    let listed = Arc::new(Mutex::new(Listings::default()));
    let clients: Vec<_> = (0..settings.listers)
        .map(|i| {
            let query = &settings.queries[i % settings.queries.len()];
            tokio::spawn(list_until(
                http.clone(),
                format!("{}/v1/alerts?{query}", decider.base),
                lister.token.clone(),
                Arc::clone(&stop),
                Arc::clone(&listed),
            ))
        })
        .collect();
    // The listings under way before the approvals are timed.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let under_load = approve_for(&http, &decider.base, &approver, "loaded", seconds).await;
    stop.store(true, Relaxed);
    for client in clients {
        client.await?;
    }
    let listings = std::mem::take(&mut *listed.lock().unwrap_or_else(PoisonError::into_inner));
    let loaded = phase(settings.listers, under_load, listings);
    decider.stop().await;
    Ok(vec![quiet, loaded])
}

/// Migrates the database as `build` does (`outboxctl migrate`).
async fn migrate(url: &str, build: &Build) -> anyhow::Result<()> {
    let outboxctl = build.dir.join("outboxctl");
    let out = tokio::process::Command::new(&outboxctl)
        .args(["migrate", "--database-url", url])
        .output()
        .await
        .with_context(|| format!("running {}", outboxctl.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "{} migrate: {}",
        outboxctl.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A tenant with one destination and a token.
struct TenantToken {
    id: Uuid,
    destination: Uuid,
    token: String,
}

async fn tenant_with_token(pool: &outbox_store::PgPool, name: &str) -> anyhow::Result<TenantToken> {
    let id = outbox_store::tenants::create(pool, name, "UTC", None).await?;
    let destination = outbox_store::destinations::create(
        pool,
        // Nothing delivers during the run: approvals wait in the outbox.
        &NewDestination::webhook(id, "ops", "http://127.0.0.1:9/hook"),
    )
    .await?;
    let token = outbox_store::tokens::create(pool, id, Some("benchmark"))
        .await?
        .expose()
        .to_owned();
    Ok(TenantToken {
        id,
        destination,
        token,
    })
}

/// A build's `decider serve`, with its default settings, on a free loopback port.
struct Decider {
    child: outbox_runtime::process::LoggedChild,
    base: String,
}

impl Decider {
    async fn start(url: &str, build: &Build) -> anyhow::Result<Decider> {
        let mut command = tokio::process::Command::new(build.dir.join("decider"));
        command.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            url,
            "--interval",
            "1h",
            "--checkpoint-interval",
            "off",
        ]);
        // Its last lines, to show when it does not start.
        let log = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&log);
        let mut child = outbox_runtime::process::spawn_logged(command, move |line| {
            let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
            if kept.len() == 50 {
                kept.remove(0);
            }
            kept.push(line.to_owned());
        })?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let addr = match child.listening("approval API listening", deadline).await {
            Ok(addr) => addr,
            Err(err) => {
                let lines = log
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .join("\n");
                anyhow::bail!("{err}; its log:\n{lines}");
            }
        };
        Ok(Decider {
            child,
            base: format!("http://{addr}"),
        })
    }

    async fn stop(mut self) {
        let _ = self.child.child.kill().await;
    }
}

/// Tenant B's approvals over one phase.
#[derive(Debug, Default)]
struct Approvals {
    took: Vec<Duration>,
    failed: usize,
}

/// Approves one alert after another for `length`, each timed.
async fn approve_for(
    http: &reqwest::Client,
    base: &str,
    approver: &TenantToken,
    phase: &str,
    length: Duration,
) -> Approvals {
    let mut approvals = Approvals::default();
    let started = Instant::now();
    let mut i = 0u64;
    while started.elapsed() < length {
        i += 1;
        let body = serde_json::json!({
            "destination": "ops",
            "subject": format!("bench:{phase}:{i}"),
            "occurrence": "due",
            "payload": {"alert": i, "note": "x".repeat(400)},
        });
        let sent = Instant::now();
        let answered = http
            .post(format!("{base}/v1/alerts"))
            .bearer_auth(&approver.token)
            .json(&body)
            .send()
            .await;
        match answered {
            Ok(response) if response.status() == 201 => {
                // The answer read to its end is part of the approval's time.
                let read = response.bytes().await;
                match read {
                    Ok(_) => approvals.took.push(sent.elapsed()),
                    Err(_) => approvals.failed += 1,
                }
            }
            _ => approvals.failed += 1,
        }
    }
    approvals
}

/// Tenant A's listings: answers by status, and their latency.
#[derive(Debug, Default)]
struct Listings {
    answers: BTreeMap<String, usize>,
    took: Vec<Duration>,
}

/// Lists `url` as fast as it is answered until `stop`, noting each answer in `listed`.
async fn list_until(
    http: reqwest::Client,
    url: String,
    token: String,
    stop: Arc<AtomicBool>,
    listed: Arc<Mutex<Listings>>,
) {
    while !stop.load(Relaxed) {
        let sent = Instant::now();
        let answer = match http.get(&url).bearer_auth(&token).send().await {
            Ok(response) => {
                let status = response.status().as_u16().to_string();
                match response.bytes().await {
                    Ok(_) => status,
                    Err(_) => "error".to_owned(),
                }
            }
            Err(_) => "error".to_owned(),
        };
        let took = sent.elapsed();
        let mut listed = listed.lock().unwrap_or_else(PoisonError::into_inner);
        *listed.answers.entry(answer).or_default() += 1;
        listed.took.push(took);
    }
}

/// The report: one line per build, round and phase.
pub fn render(phases: &[Phase], settings: &ListingSettings) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "tenant A: {} alerts settled accepted; tenant B approves one alert at a time for {} s \
         alone, then for {} s while {} clients of A list as fast as they are answered ({})\n",
        settings.alerts,
        settings.seconds,
        settings.seconds,
        settings.listers,
        settings
            .queries
            .iter()
            .map(|query| format!("`{query}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        out,
        "{:<10} {:>5} {:>8} {:>10} {:>7} {:>8} {:>8}  {:>9} {:>10}  A's listings by answer",
        "build",
        "round",
        "listers",
        "approvals",
        "failed",
        "p50 ms",
        "p99 ms",
        "listings",
        "p50 ms"
    );
    for phase in phases {
        let answered: usize = phase.listings.values().sum();
        let by_answer = phase
            .listings
            .iter()
            .map(|(status, count)| format!("{status}: {count}"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "{:<10} {:>5} {:>8} {:>10} {:>7} {:>8.1} {:>8.1}  {:>9} {:>10}  {}",
            phase.build,
            phase.round,
            phase.listers,
            phase.approvals,
            phase.approvals_failed,
            phase.approval_p50_ms,
            phase.approval_p99_ms,
            answered,
            phase
                .listing_p50_ms
                .map_or_else(|| "-".to_owned(), |p50| format!("{p50:.1}")),
            by_answer
        );
    }
    out
}
