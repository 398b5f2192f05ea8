//! `outboxctl demo`: the whole system on the sample data, in a database of its own.
//!
//! It starts a sink with faults (answers lost after acceptance, 503s), runs two deciders
//! at once over the sample contracts and articles (the second one finding nothing left to
//! decide), then two dispatchers, and ends with what happened to every alert, next to the
//! sink's own counts. It exits 0 only when the invariants hold: nothing left in flight,
//! every alert accepted, held or failed, and no alert applied twice by the sink.

use anyhow::{bail, Context};
use outbox_core::OnUncertain;
use outbox_store::destinations::NewDestination;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::table::Table;

/// The instant the deciders evaluate at: the sample contracts' tiers fall due around it.
const DEMO_NOW: &str = "2027-03-01T09:00:00Z";
/// The whole run may take this long before it is called a failure.
const DEADLINE: Duration = Duration::from_secs(90);

/// `demo` flags.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Where the sample data is.
    #[arg(long, default_value = "examples")]
    examples: PathBuf,
    /// Drop the demo's database at the end instead of keeping it for a look around.
    #[arg(long)]
    drop: bool,
}

pub(crate) async fn run(database_url: &str, args: DemoArgs) -> anyhow::Result<bool> {
    let started = Instant::now();
    let binaries = std::env::current_exe()?
        .parent()
        .map(Path::to_path_buf)
        .context("locating the other binaries")?;
    for name in ["sink", "decider", "dispatcher"] {
        if !binaries.join(name).exists() {
            bail!(
                "`{name}` is not next to outboxctl in {}; build all binaries first (cargo build --release --bins)",
                binaries.display()
            );
        }
    }
    let contracts = std::fs::read_to_string(args.examples.join("contracts.csv"))
        .with_context(|| format!("reading {}", args.examples.join("contracts.csv").display()))?;
    let articles = std::fs::read_to_string(args.examples.join("articles.json"))
        .with_context(|| format!("reading {}", args.examples.join("articles.json").display()))?;

    // A database of its own, so the demo never touches real data.
    let (demo_url, demo_name) =
        outbox_store::connect::create_database(database_url, "outbox_demo").await?;
    eprintln!("demo database: {demo_name}");
    let pool = outbox_store::connect(&demo_url, "outboxctl-demo", 4).await?;
    outbox_store::MIGRATOR.run(&pool).await?;

    let (mut sink, sink_url) = spawn_listening(
        &binaries.join("sink"),
        &[
            "--listen",
            "127.0.0.1:0",
            "--retention",
            "24h",
            "--lookup",
            "--drop-response-rate",
            "0.15",
            "--fail-rate",
            "0.1",
            "--fail-status",
            "503",
            "--seed",
            "7",
        ],
        "sink listening",
    )
    .await?;
    eprintln!("sink with faults at {sink_url}: 15% of answers lost after acceptance, 10% 503s");

    let tenant = outbox_store::tenants::create(&pool, "demo", "UTC", None).await?;
    let destination = |name: &str, configure: &dyn Fn(&mut NewDestination)| {
        let mut d = NewDestination {
            tenant_id: tenant,
            name: name.to_owned(),
            url: format!("{sink_url}/{name}"),
            signing_secrets: vec!["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned()],
            idempotency_header: "Idempotency-Key".to_owned(),
            idempotency_retention: None,
            lookup_url_template: None,
            on_uncertain: OnUncertain::Hold,
            timeout: Duration::from_secs(1),
            max_in_flight: 16,
        };
        configure(&mut d);
        d
    };
    let lookup = format!("{sink_url}/requests/{{key}}");
    for d in [
        destination("ops", &|d| {
            d.idempotency_retention = Some(Duration::from_secs(86_400))
        }),
        destination("finance", &|d| d.lookup_url_template = Some(lookup.clone())),
        destination("legal", &|_| {}),
    ] {
        outbox_store::destinations::create(&pool, &d).await?;
    }
    eprintln!(
        "destinations: ops (de-duplicates by key), finance (lookup by key), legal (neither: hold)"
    );
    outbox_decider::contracts::import(
        &pool,
        tenant,
        &contracts,
        outbox_decider::contracts::Format::Csv,
    )
    .await?;
    outbox_store::monitors::add_watchlist_entry(
        &pool,
        &outbox_store::monitors::NewWatchlistEntry {
            tenant_id: tenant,
            name: "northwind".to_owned(),
            query: "\"northwind hosting\" outage -rumour".to_owned(),
            destinations: vec!["ops".to_owned()],
            group_events: true,
            group_window_secs: 48 * 3600,
        },
    )
    .await?;
    outbox_decider::news::ingest(&pool, &articles).await?;

    // Two deciders at once, as an overlapping scheduler would run them.
    let deciders: Vec<Child> = (0..2)
        .map(|_| {
            Command::new(binaries.join("decider"))
                .args(["run-once", "--now", DEMO_NOW, "--database-url", &demo_url])
                .env("RUST_LOG", "warn")
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut decided = Vec::new();
    for decider in deciders {
        let output = decider.wait_with_output().await?;
        if !output.status.success() {
            bail!(
                "a decider failed: {}",
                String::from_utf8_lossy(&output.stdout)
            );
        }
        decided.push(String::from_utf8_lossy(&output.stdout).trim().to_owned());
    }
    let approved = outbox_store::demo::progress(&pool).await?.total;
    eprintln!("decider A: {}", decided[0]);
    eprintln!("decider B: {}", decided[1]);
    eprintln!("{approved} alerts approved in all: one per identity, whichever run decided it");

    // Make sure there is one alert to reconcile by hand afterwards: the first one for
    // `legal` (no lookup, no de-duplication) has its answer lost, so it ends held.
    if let Some(held) = outbox_store::demo::first_alert_for(&pool, "legal").await? {
        let faults = serde_json::json!({"drop_response_for_keys": [held.to_string()]});
        let answer = reqwest::Client::new()
            .post(format!("{sink_url}/_sink/faults"))
            .json(&faults)
            .send()
            .await?;
        if !answer.status().is_success() {
            bail!("the sink refused its fault settings: {}", answer.status());
        }
    }

    let sink_ip = url::Url::parse(&sink_url)?
        .host_str()
        .context("the sink's address")?
        .to_owned();
    let dispatchers: Vec<Child> = (1..=2)
        .map(|n| {
            Command::new(binaries.join("dispatcher"))
                .args([
                    "--database-url",
                    &demo_url,
                    "--worker-id",
                    &format!("demo-{n}"),
                    "--drain",
                    "--drain-horizon",
                    "5s",
                    "--lease",
                    "2s",
                    "--retry-delays",
                    "200ms,500ms,1s",
                    "--poll-interval",
                    "100ms",
                    // The demo's sink listens on loopback, which the egress guard refuses
                    // unless opened: exactly that address is.
                    "--allow-private",
                    &sink_ip,
                ])
                .env("RUST_LOG", "error")
                .kill_on_drop(true)
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let progress = indicatif::ProgressBar::new(approved.unsigned_abs());
    progress.set_style(
        indicatif::ProgressStyle::with_template("delivering {bar:30} {pos}/{len} settled {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut dispatchers = dispatchers;
    loop {
        let now = outbox_store::demo::progress(&pool).await?;
        progress.set_position(now.settled.unsigned_abs());
        progress.set_message(format!("({} uncertain)", now.uncertain));
        let mut running = false;
        for d in &mut dispatchers {
            match d.try_wait()? {
                None => running = true,
                Some(status) if !status.success() => {
                    progress.abandon();
                    bail!("a dispatcher failed ({status})");
                }
                Some(_) => {}
            }
        }
        if !running {
            break;
        }
        if started.elapsed() > DEADLINE {
            progress.abandon();
            bail!("the demo did not finish within {}s", DEADLINE.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    progress.finish_and_clear();
    let sink_stats: serde_json::Value = reqwest::get(format!("{sink_url}/stats"))
        .await?
        .json()
        .await?;

    let report = outbox_store::demo::report(&pool).await?;
    let mut table = Table::new(["", "ALERTS"]);
    table.row(["approved".to_owned(), approved.to_string()]);
    table.row([
        "accepted on the first try".to_owned(),
        report.first_try.to_string(),
    ]);
    table.row([
        "accepted after a retry".to_owned(),
        report.after_retry.to_string(),
    ]);
    table.row([
        "accepted by a resend the destination de-duplicated".to_owned(),
        report.by_dedup_resend.to_string(),
    ]);
    table.row([
        "accepted, confirmed by lookup".to_owned(),
        report.by_lookup.to_string(),
    ]);
    table.row(["held for an operator".to_owned(), report.held.to_string()]);
    table.row(["failed".to_owned(), report.failed.to_string()]);
    table.row(["still in flight".to_owned(), report.live.to_string()]);
    println!();
    print!("{table}");
    let mut sink_table = Table::new(["THE SINK'S OWN COUNTS", ""]);
    for key in [
        "requests",
        "distinct_keys",
        "applied",
        "wire_duplicates",
        "effective_duplicates",
        "dropped",
        "failed",
        "bad_signatures",
    ] {
        sink_table.row([key.replace('_', " "), sink_stats[key].to_string()]);
    }
    println!();
    print!("{sink_table}");
    if !report.held_lines.is_empty() {
        println!();
        println!("held, and why:");
        for (id, line) in &report.held_lines {
            println!("  {id}  {}", outbox_core::untrusted::visible(line));
        }
    }

    let accepted =
        report.first_try + report.after_retry + report.by_dedup_resend + report.by_lookup;
    let mut broken = Vec::new();
    if report.live != 0 {
        broken.push(format!("{} alerts still in flight", report.live));
    }
    if accepted + report.held + report.failed != approved {
        broken.push("some alerts are in no final state".to_owned());
    }
    if sink_stats["effective_duplicates"] != 0 {
        broken.push("the sink applied an alert twice".to_owned());
    }
    if sink_stats["bad_signatures"] != 0 {
        broken.push("the sink saw a bad signature".to_owned());
    }
    // Key by key, from the sink's own records, by the same referee as the fault suite:
    // every accepted alert applied, nothing applied twice, wire duplicates only where the
    // destination de-duplicates or answers lookups, no stray keys, one alert per identity.
    let records: Vec<serde_json::Value> = reqwest::get(format!("{sink_url}/_sink/records"))
        .await?
        .json()
        .await?;
    let sinks: Vec<outbox_checker::Sink> = [
        ("ops", outbox_checker::Capability::Idempotent),
        ("finance", outbox_checker::Capability::Lookup),
        ("legal", outbox_checker::Capability::PlainHold),
    ]
    .into_iter()
    .map(|(name, capability)| outbox_checker::Sink {
        destination: name.to_owned(),
        capability,
        records: records
            .iter()
            .filter(|r| r["path"].as_str() == Some(&format!("/{name}")))
            .map(|r| outbox_checker::SinkRecord {
                key: r["key"].as_str().map(str::to_owned),
                payload_sha256: r["payload_sha256"].as_str().map(str::to_owned),
                outcome: r["outcome"].as_str().unwrap_or("").to_owned(),
            })
            .collect(),
    })
    .collect();
    let verdict = outbox_checker::check(&pool, 7, &sinks).await?;
    for offence in &verdict.offences {
        broken.push(format!("{}: {}", offence.kind, offence.detail));
    }
    let _ = sink.kill().await;
    println!();
    if broken.is_empty() {
        println!(
            "invariants hold: every alert settled, none applied twice ({:.1}s)",
            started.elapsed().as_secs_f64()
        );
    } else {
        println!("INVARIANTS BROKEN: {}", broken.join("; "));
    }
    pool.close().await;
    if args.drop {
        outbox_store::connect::drop_database(database_url, &demo_name).await?;
    } else {
        println!(
            "the demo's database is kept; look around with DATABASE_URL='{demo_url}' outboxctl outbox list --status held"
        );
    }
    Ok(broken.is_empty())
}

/// Spawns a binary with JSON logs and returns it with the address it logged.
async fn spawn_listening(
    binary: &Path,
    args: &[&str],
    message: &str,
) -> anyhow::Result<(Child, String)> {
    let mut child = Command::new(binary)
        .args(args)
        .env("LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = BufReader::new(child.stderr.take().context("stderr")?).lines();
    let addr = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(line) = lines.next_line().await? {
            if let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) {
                if event["fields"]["message"] == message {
                    return Ok::<_, anyhow::Error>(
                        event["fields"]["addr"].as_str().unwrap_or("").to_owned(),
                    );
                }
            }
        }
        bail!("{} exited before listening", binary.display())
    })
    .await
    .context("waiting for the sink")??;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, format!("http://{addr}")))
}
