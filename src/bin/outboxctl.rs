//! `outboxctl`: the operator's tool. See `outbox_ctl` for the commands.

use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let cli = outbox_ctl::Cli::parse();
    outbox_runtime::init_tracing_quiet();
    match outbox_ctl::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            // One line: the reason and its causes, for people and for scripts' logs.
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
