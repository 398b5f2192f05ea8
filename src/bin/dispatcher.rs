//! `dispatcher`: delivers approved alerts. Everything is in the `outbox-dispatcher` crate
//! (`outbox_dispatcher::cli`); this only parses the command line, starts logging and the
//! crash points, and runs the command.

/// Many small allocations per delivery (requests, rows, evidence lines) on several
/// threads: mimalloc keeps them off the C allocator's contended arenas.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{CommandFactory, FromArgMatches};
use outbox_dispatcher::cli::{self, Cli};

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
    outbox_runtime::init_tracing("dispatcher");
    let _failpoints = outbox_runtime::failpoints();
    cli::run(cli).await
}
