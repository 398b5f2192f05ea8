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
    /// One drain for the queue peers' harness: prints `RESULT {json}`.
    PeerDriver {
        /// Alerts in the backlog.
        #[arg(long)]
        n: u64,
        /// default, noop, p1, p2 or p4.
        #[arg(long, default_value = "default")]
        variant: String,
        /// The harness's database URL (its `public` schema is reset).
        #[arg(long)]
        db: String,
        /// The harness's sink, e.g. http://127.0.0.1:18080.
        #[arg(long)]
        sink: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    outbox_runtime::init_tracing();
    match cli.command {
        Command::PeerDriver {
            n,
            variant,
            db,
            sink,
        } => {
            let result = outbox_bench::peer::run(&outbox_bench::peer::PeerRun {
                n,
                variant,
                db,
                sink,
            })
            .await?;
            println!("RESULT {result}");
        }
    }
    Ok(())
}
