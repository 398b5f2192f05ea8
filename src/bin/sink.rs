//! `sink`: a notification endpoint we control, for tests and demos. Everything is in the
//! `outbox-sink` crate; this only parses the command line, binds (HTTP, and SMTP with
//! `--smtp-listen`, SMTPS with `--smtps-listen`) and serves until SIGTERM/SIGINT.

use anyhow::Context;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

fn main() -> std::process::ExitCode {
    // `run` returns once its runtime is gone; `finish` exports the spans its tasks ended.
    outbox_runtime::finish(run())
}

#[tokio::main]
async fn run() -> anyhow::Result<()> {
    let matches = outbox_sink::SinkArgs::command().get_matches();
    let mut args = outbox_sink::SinkArgs::from_arg_matches(&matches)?;
    outbox_runtime::init_tracing("sink");
    if matches.value_source("smtp_auth") == Some(ValueSource::CommandLine) {
        tracing::warn!(
            "--smtp-auth puts the SMTP password on the command line, where every user of \
             this machine can read it (ps); use SINK_SMTP_AUTH or --smtp-auth-file instead"
        );
    }
    args.read_secret_files().map_err(anyhow::Error::msg)?;
    let listen = args.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    let mail = outbox_sink::MailListeners {
        smtp: bind(args.smtp_listen, "SMTP").await?,
        smtps: bind(args.smtps_listen, "SMTPS").await?,
    };
    outbox_sink::serve_with_mail(listener, mail, args, outbox_runtime::shutdown_signal()).await?;
    Ok(())
}

async fn bind(
    addr: Option<std::net::SocketAddr>,
    what: &str,
) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    let Some(addr) = addr else { return Ok(None) };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening for {what} on {addr}"))?;
    Ok(Some(listener))
}
