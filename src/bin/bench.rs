//! `bench`: measures the outbox. See `outbox_bench` for what and how.

/// Many small allocations per delivery (requests, rows, evidence lines) on several
/// threads: mimalloc keeps them off the C allocator's contended arenas.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

/// Measures the alert outbox: deliveries per second, approvals, latency, history, scaling.
#[derive(Debug, Parser)]
#[command(name = "bench", version, about)]
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
        /// approvals, latency).
        #[arg(long, value_enum, default_value = "all")]
        only: outbox_bench::suite::Phases,
        /// The PostgreSQL server (the run creates and drops its own database there).
        #[arg(long, env = "DATABASE_URL", default_value = outbox_runtime::DEFAULT_DATABASE_URL, hide_env_values = true)]
        server_url: String,
    },
    /// One drain for the queue peers' harness: prints `RESULT {json}`.
    PeerDriver(outbox_bench::peer::PeerRun),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    outbox_runtime::init_tracing_quiet();
    match cli.command {
        Command::Run {
            quick,
            n,
            history,
            json,
            only,
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
            let report = outbox_bench::suite::run(settings).await?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", report.render());
            }
        }
        Command::PeerDriver(run) => {
            let result = outbox_bench::peer::run(&run).await?;
            println!("RESULT {result}");
        }
    }
    Ok(())
}
