//! `decider`: approves alerts. `decider serve` runs the approval API.

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::time::Duration;

/// Approves alerts: one alert per identity, written with its outbox row in one transaction.
#[derive(Debug, Parser)]
#[command(name = "decider", version, about)]
struct Cli {
    /// PostgreSQL connection URL.
    #[arg(long, env = "DATABASE_URL", default_value = outbox_runtime::DEFAULT_DATABASE_URL, global = true, hide_env_values = true)]
    database_url: String,
    /// Most database connections this process opens.
    #[arg(
        long,
        env = "DECIDER_MAX_CONNECTIONS",
        default_value_t = 16,
        global = true
    )]
    max_connections: u32,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the approval API (`POST /v1/alerts`, ...), `/healthz` and `/readyz`.
    Serve {
        /// Address to listen on.
        #[arg(long, env = "DECIDER_LISTEN", default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    outbox_runtime::init_tracing();
    let _failpoints = outbox_runtime::failpoints();
    let pool = outbox_store::connect_with_retry(
        &cli.database_url,
        "decider",
        cli.max_connections,
        Duration::from_secs(60),
    )
    .await
    .context("connecting to the database")?;
    match cli.command {
        Command::Serve { listen } => {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("listening on {listen}"))?;
            outbox_api::serve(listener, pool, outbox_runtime::shutdown_signal()).await?;
        }
    }
    Ok(())
}
