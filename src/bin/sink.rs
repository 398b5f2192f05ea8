//! `sink`: a notification endpoint we control, for tests and demos. Everything is in the
//! `outbox-sink` crate; this only parses the command line, binds (HTTP, and SMTP with
//! `--smtp-listen`) and serves until SIGTERM/SIGINT.

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
    let smtp = match args.smtp_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("listening for SMTP on {addr}"))?,
        ),
        None => None,
    };
    outbox_sink::serve_with_smtp(listener, smtp, args, outbox_runtime::shutdown_signal()).await?;
    Ok(())
}
