//! `bench`: measures the outbox. See `outbox_bench` for what and how. The benchmark's
//! binary is in its own crate so that no product binary depends on the benchmark.

/// Many small allocations per delivery (requests, rows, evidence lines) on several
/// threads: mimalloc keeps them off the C allocator's contended arenas.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

/// Measures the alert outbox: deliveries per second, approvals, latency, history, scaling.
#[derive(Debug, Parser)]
#[command(name = "bench", version = outbox_store::schema::version_line(), about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every figure in one run, on a database and a sink of its own.
    Run {
        /// A tiny run (a few thousand alerts) that checks every phase works.
        #[arg(long)]
        quick: bool,
        /// Alerts per drain.
        #[arg(long)]
        n: Option<u64>,
        /// Settled alerts of history for the claim-cost comparison.
        #[arg(long)]
        history: Option<u64>,
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// Only these phases (`approvals`: bulk approvals with their HTTP drain, API
        /// approvals, latency; `sustained`: open-loop approvals at a fixed rate with a
        /// dispatcher delivering, one line per interval; `lanes`: N alerts over 10,000
        /// keys approved and drained unordered and ordered per key, side by side, and one
        /// key against a destination answering after 5 ms; `evidence`: N alerts approved
        /// and drained with the evidence chain off and on, side by side, and a checkpoint
        /// over each chained backlog).
        #[arg(long, value_enum, default_value = "all")]
        only: outbox_bench::suite::Phases,
        /// With `--only lanes` or `evidence`: rounds (each drains an unordered and a
        /// per-key backlog, or one without and one with the chain, in alternating order).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        rounds: Option<u32>,
        /// With `--only sustained`: how long the run lasts, in minutes.
        #[arg(long, value_parser = positive_f64)]
        minutes: Option<f64>,
        /// With `--only sustained`: approvals per second. Default: 70 % of a capacity
        /// measured first.
        #[arg(long, value_parser = positive_f64)]
        rate: Option<f64>,
        /// With `--only sustained`: seconds per reported interval.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        report_every: Option<u64>,
        /// The PostgreSQL server (the run creates and drops its own database there).
        #[arg(long, env = "DATABASE_URL", default_value = outbox_runtime::DEFAULT_DATABASE_URL, hide_env_values = true)]
        server_url: String,
    },
    /// One drain for the queue peers' harness: prints `RESULT {json}`.
    PeerDriver(outbox_bench::peer::PeerRun),
    /// The claim's plan (`EXPLAIN (ANALYZE, BUFFERS)`, rolled back) over a backlog of
    /// 1,000,000 alerts in ordered lanes over 100,000 keys and over 10 keys, and unordered,
    /// each written by SQL on a database of its own.
    ExplainLanes {
        #[command(flatten)]
        settings: outbox_bench::explain_lanes::ExplainSettings,
        /// One JSON array instead of the plans and their summary.
        #[arg(long)]
        json: bool,
        /// The PostgreSQL server (each case creates and drops its own database there).
        #[arg(long, env = "DATABASE_URL", default_value = outbox_runtime::DEFAULT_DATABASE_URL, hide_env_values = true)]
        server_url: String,
    },
    /// What one tenant's alert listings cost another tenant's approvals, for each build
    /// given side by side: tenant A with 100,000 settled alerts, 20 clients of A listing
    /// with the filters that once read all of them, and tenant B's approval latency alone
    /// and under those listings, against each build's own `decider serve`.
    Listings {
        #[command(flatten)]
        settings: outbox_bench::listings::ListingSettings,
        /// One JSON array of the phases instead of the table.
        #[arg(long)]
        json: bool,
        /// The PostgreSQL server (each build's run creates and drops its own database there).
        #[arg(long, env = "DATABASE_URL", default_value = outbox_runtime::DEFAULT_DATABASE_URL, hide_env_values = true)]
        server_url: String,
    },
    /// What a claim that is a HOT update would save: the claim's and the completion's row
    /// work over a copy of the queue table with today's indexes and with none on what a
    /// claim sets, in rotating order, per row (time, WAL, HOT share).
    HotClaim {
        #[command(flatten)]
        settings: outbox_bench::hot_claim::HotClaimSettings,
        /// One JSON array of the drains instead of the tables.
        #[arg(long)]
        json: bool,
        /// The PostgreSQL server (the run creates and drops its own database there).
        #[arg(long, env = "DATABASE_URL", default_value = outbox_runtime::DEFAULT_DATABASE_URL, hide_env_values = true)]
        server_url: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    outbox_runtime::init_tracing_for_benchmarks("bench");
    match cli.command {
        Command::Run {
            quick,
            n,
            history,
            json,
            only,
            rounds,
            minutes,
            rate,
            report_every,
            server_url,
        } => {
            let mut settings = if quick {
                outbox_bench::suite::SuiteSettings::quick(server_url)
            } else {
                outbox_bench::suite::SuiteSettings::full(server_url)
            };
            if let Some(n) = n {
                settings.n = n;
            }
            if let Some(history) = history {
                settings.history = history;
            }
            settings.phases = only;
            if let Some(minutes) = minutes {
                settings.sustained.run_secs = (minutes * 60.0).ceil() as u64;
            }
            if let Some(secs) = report_every {
                settings.sustained.interval_secs = secs;
            }
            settings.sustained.rate = rate;
            if let Some(rounds) = rounds {
                settings.lanes.rounds = rounds;
            }
            if only == outbox_bench::suite::Phases::Evidence {
                let report = outbox_bench::suite::run_evidence(settings).await?;
                if json {
                    println!("{}", serde_json::to_string(&report)?);
                } else {
                    print!("{}", report.render());
                }
                return Ok(());
            }
            if only == outbox_bench::suite::Phases::Lanes {
                let report = outbox_bench::suite::run_lanes(settings).await?;
                if json {
                    println!("{}", serde_json::to_string(&report)?);
                } else {
                    print!("{}", report.render());
                }
                return Ok(());
            }
            if only == outbox_bench::suite::Phases::Sustained {
                let report = outbox_bench::sustained::run(
                    &settings.server_url,
                    settings.sustained.clone(),
                    |interval| {
                        if json {
                            eprintln!("bench: {}", interval.line());
                        } else {
                            println!("{}", interval.line());
                        }
                    },
                )
                .await?;
                if json {
                    println!("{}", serde_json::to_string(&report)?);
                } else {
                    // The intervals were printed as they ended.
                    print!("{}{}", report.header(), report.summary());
                }
                return Ok(());
            }
            let report = outbox_bench::suite::run(settings).await?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", report.render());
            }
        }
        Command::ExplainLanes {
            settings,
            json,
            server_url,
        } => {
            let cases = outbox_bench::explain_lanes::run(&server_url, &settings, |case| {
                eprintln!("bench: explained {}", case.name());
            })
            .await?;
            if json {
                println!("{}", serde_json::to_string(&cases)?);
            } else {
                print!(
                    "{}",
                    outbox_bench::explain_lanes::render(&cases, settings.limit)
                );
            }
        }
        Command::HotClaim {
            settings,
            json,
            server_url,
        } => {
            let drains = outbox_bench::hot_claim::run(&server_url, &settings).await?;
            if json {
                println!("{}", serde_json::to_string(&drains)?);
            } else {
                print!("{}", outbox_bench::hot_claim::render(&drains));
            }
        }
        Command::Listings {
            settings,
            json,
            server_url,
        } => {
            let phases = outbox_bench::listings::run(&server_url, &settings, |what| {
                eprintln!("bench: {what}")
            })
            .await?;
            if json {
                println!("{}", serde_json::to_string(&phases)?);
            } else {
                print!("{}", outbox_bench::listings::render(&phases, &settings));
            }
        }
        Command::PeerDriver(run) => {
            let result = outbox_bench::peer::run(&run).await?;
            println!("RESULT {result}");
        }
    }
    Ok(())
}

/// A number above zero (minutes, a rate).
fn positive_f64(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value > 0.0 && value.is_finite() => Ok(value),
        _ => Err(format!("`{text}` is not a number above 0")),
    }
}
