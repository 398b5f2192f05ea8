//! `sink`: a notification endpoint we control, for tests and demos. Everything is in the
//! `outbox-sink` crate; this only parses the command line, binds and serves until
//! SIGTERM/SIGINT.

use anyhow::Context;
use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = outbox_sink::SinkArgs::parse();
    outbox_runtime::init_tracing();
    let listen = args.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    outbox_sink::serve(listener, args, outbox_runtime::shutdown_signal()).await?;
    Ok(())
}
