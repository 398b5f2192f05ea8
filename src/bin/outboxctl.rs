//! `outboxctl`: the operator's tool. See `outbox_ctl` for the commands.

use clap::Parser;
use outbox_core::untrusted::visible;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let cli = match outbox_ctl::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => err.exit(), // --help, --version
        Err(err) => {
            // One line, like every other refusal: the reason without the usage block.
            let text = err.render().to_string();
            let reason: Vec<&str> = text
                .lines()
                .take_while(|l| !l.starts_with("Usage:"))
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("tip:") && !l.starts_with("For more"))
                .collect();
            eprintln!("{}", visible(&reason.join(" ")));
            return std::process::ExitCode::from(2);
        }
    };
    outbox_runtime::init_tracing_quiet("outboxctl");
    let result = outbox_ctl::run(cli).await;
    outbox_runtime::telemetry::shutdown_tracing();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            // One line: the reason and its causes, for people and for scripts' logs. The
            // reason may echo input (a file's id, a destination's answer): shown escaped.
            eprintln!(
                "error: {}",
                visible(&outbox_runtime::one_line(err.as_ref()))
            );
            std::process::ExitCode::FAILURE
        }
    }
}
