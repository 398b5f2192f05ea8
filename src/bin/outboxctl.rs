//! `outboxctl`: the operator's tool. See `outbox_ctl` for the commands.

use clap::Parser;
use outbox_core::untrusted::visible;

fn main() -> std::process::ExitCode {
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
    // `run` returns once its runtime is gone; `finish` exports the spans its tasks ended
    // and says an error in one line.
    outbox_runtime::finish(run(cli))
}

#[tokio::main(flavor = "current_thread")]
async fn run(cli: outbox_ctl::Cli) -> anyhow::Result<()> {
    outbox_runtime::init_tracing_quiet("outboxctl");
    outbox_ctl::run(cli).await
}
