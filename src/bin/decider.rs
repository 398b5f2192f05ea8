//! `decider`: approves alerts: `decider serve` (the approval API and the monitors on an
//! interval), `decider run-once` (the monitors once, for cron). Everything is in the
//! `outbox-decider` crate (`outbox_decider::cli`); this only parses the command line, starts
//! logging and the crash points, and runs the command.

use clap::{CommandFactory, FromArgMatches};
use outbox_decider::cli::{self, Cli};

fn main() -> std::process::ExitCode {
    // `run` returns once its runtime is gone; `finish` exports the spans its tasks ended.
    outbox_runtime::finish(run())
}

#[tokio::main]
async fn run() -> anyhow::Result<()> {
    let matches = Cli::command()
        .about(env!("CARGO_PKG_DESCRIPTION"))
        .get_matches();
    let cli = Cli::from_arg_matches(&matches)?;
    outbox_runtime::init_tracing("decider");
    if cli::token_on_command_line(&matches) {
        tracing::warn!(
            "--webz-token puts the news API token on the command line, where every user of \
             this machine can read it (ps); use WEBZ_TOKEN or --webz-token-file instead"
        );
    }
    let _failpoints = outbox_runtime::failpoints();
    cli::run(cli).await
}
