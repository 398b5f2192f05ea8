//! The sink: a notification endpoint we control, for tests and demos. It records every
//! delivery, de-duplicates by idempotency key when asked, answers receipt lookups, checks
//! Standard Webhooks signatures (refusing bad or stale ones when given a secret), and
//! injects faults (failures, scripted answers, latency, responses dropped after the
//! delivery was applied) reproducibly from a seed. With an SMTP listener it is also an
//! inbox: it accepts mail over plain SMTP, records every message (never de-duplicated),
//! and injects the same kinds of faults there (refusals of a recipient or of a message,
//! latency, the reply to the final dot lost after the message was recorded).
//!
//! Layout:
//! - [`SinkArgs`] (`config`): the command line, every flag also a `SINK_*` variable.
//! - [`Sink`] (`state`): the memory and the decisions, under one lock, so that the fault
//!   draws follow arrival order and a seed replays a run.
//! - [`FaultSettings`] (`faults`): the faults, changed at run time through `/_sink/faults`.
//! - [`serve`] (`server`): the routes and the body limit, on the shared hardened HTTP/1.1
//!   server (deadlines for slow clients, a cap on connections, keep-alive).
//! - [`serve_with_smtp`] (`smtp`): the SMTP server, with the same slow-client limits.
//! - `mail`: the header fields read from a received message (`Message-ID`, `Subject`
//!   decoded from RFC 2047, `X-Alert-Id`) and where its body starts.
//!
//! Routes:
//! - `POST /<any path outside /_sink/>`: a delivery, answered `{"id": "<receipt>"}`.
//! - `GET /requests/{key}` (with `--lookup`): the receipt of an applied key.
//! - `GET /stats`: the counters ([`Stats`]).
//! - `GET /_sink/records[?key=K]`: every delivery in arrival order ([`Record`]; with
//!   `--keep-bodies` each holds its body, and an `Authorization` header is kept only as a
//!   fingerprint).
//! - `GET /_sink/messages[?message_id=ID]`: every message accepted over SMTP, in arrival
//!   order ([`MailRecord`]).
//! - `POST /_sink/faults`, `DELETE /_sink/faults`: change or clear the faults.
//! - `POST /_sink/reset`: forget records, messages and counters (faults stay).
//!
//! A delivery is decided in this order: with `--secret`, a missing, wrong or stale
//! signature is refused (401); then a scripted answer if one is queued, then the fail
//! rate, then de-duplication (with `--retention`), else it is applied. Only applied and
//! duplicate deliveries wait the latency and may have their response dropped.
//!
//! A message is decided after its data: a scripted refusal if one is queued, then the
//! SMTP fail rate; else it is recorded (and written as a `.eml` file with `--eml-dir`),
//! waits the SMTP latency and may have its reply dropped. A recipient is refused only by
//! a scripted `RCPT` reply.

mod config;
mod faults;
mod mail;
mod server;
mod smtp;
mod state;

use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

pub use config::{SigningSecret, SinkArgs, SmtpCredentials};
pub use faults::{FaultSettings, ScriptedResponse, SmtpReply};
pub use server::MAX_BODY_BYTES;
pub use state::{MailRecord, Outcome, Record, SignatureCheck, Sink, SmtpStats, Stats};

/// Serves the sink configured by `args` on `listener` until `shutdown` resolves, then
/// finishes the requests in progress. `args.listen` is not used: the caller binds. No SMTP
/// is served (see [`serve_with_smtp`]).
pub async fn serve(
    listener: TcpListener,
    args: SinkArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with_smtp(listener, None, args, shutdown).await
}

/// Serves the sink's HTTP side on `listener` and, when given, SMTP on `smtp`, until
/// `shutdown` resolves; then finishes the requests and messages in progress. The caller
/// binds both (`args.listen` and `args.smtp_listen` are not used). The folder of
/// `--eml-dir` is created here; failing that, nothing is served.
pub async fn serve_with_smtp(
    listener: TcpListener,
    smtp: Option<TcpListener>,
    args: SinkArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // First line of the log: tests wait for it to learn the address.
    tracing::info!(addr = %listener.local_addr()?, "sink listening");
    if let Some(smtp) = &smtp {
        tracing::info!(addr = %smtp.local_addr()?, "sink SMTP listening");
    }
    if let Some(dir) = &args.eml_dir {
        std::fs::create_dir_all(dir).map_err(|err| {
            std::io::Error::new(
                err.kind(),
                format!("creating the .eml folder {}: {err}", dir.display()),
            )
        })?;
    }
    let sink = Arc::new(Sink::with_smtp(&args, smtp.is_some()));
    tracing::info!(
        seed = sink.seed(),
        retention = ?args.retention,
        lookup = args.lookup,
        secrets = args.secrets.len(),
        smtp_auth = ?args.smtp_auth,
        eml_dir = ?args.eml_dir,
        faults = ?sink.faults(),
        "sink configured"
    );
    // One shutdown for both servers.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let trigger = async move {
        shutdown.await;
        let _ = stop.send(true);
    };
    let http = server::run(
        listener,
        Arc::clone(&sink),
        args.server_limits(),
        smtp::stopped(stopped.clone()),
    );
    let smtp = async {
        if let Some(smtp_listener) = smtp {
            smtp::run(
                smtp_listener,
                sink,
                smtp::SmtpConfig::from_args(&args),
                stopped,
            )
            .await;
        }
    };
    tokio::join!(trigger, http, smtp);
    Ok(())
}
