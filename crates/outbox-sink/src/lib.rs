//! The sink: a notification endpoint we control, for tests and demos. It records every
//! delivery, de-duplicates by idempotency key when asked, answers receipt lookups, checks
//! Standard Webhooks signatures (refusing bad or stale ones when given a secret), and
//! injects faults (failures, scripted answers, latency, responses dropped after the
//! delivery was applied) reproducibly from a seed. With an SMTP listener it is also an
//! inbox: it accepts mail over SMTP (plain, `STARTTLS`, or implicit TLS with a certificate
//! configured), records every message (never de-duplicated), and injects the same kinds of
//! faults there (refusals of a sender, a recipient or a message, latency, the reply to the
//! final dot lost after the message was recorded, the `STARTTLS` offer stripped).
//!
//! Layout:
//! - [`SinkArgs`] (`config`): the command line, every flag also a `SINK_*` variable.
//! - [`Sink`] (`state`): the memory and the decisions (`state::deliveries` for HTTP,
//!   `state::inbox` for SMTP), under one lock, so that the fault draws follow arrival
//!   order and a seed replays a run.
//! - [`Record`], [`MailRecord`], [`Stats`] (`records`): what the sink shows of its work;
//!   each record also carries the trace context received (a delivery's `traceparent` and
//!   `tracestate` headers, a message's `Traceparent` field), as written when printable
//!   ASCII of at most 512 bytes, else [`INVALID_TRACE_HEADER`], so that tests can check
//!   what reached a destination's headers.
//! - [`SignatureCheck`] (`signature`): Standard Webhooks signatures checked.
//! - [`FaultSettings`] (`faults`): the faults, changed at run time through `/_sink/faults`;
//!   [`SmtpReply`] (`smtp_reply`): an SMTP refusal, as the faults and the command line give
//!   it.
//! - [`serve`] (`server`): the routes and the body limit, on the shared hardened HTTP/1.1
//!   server (deadlines for slow clients, a cap on connections, keep-alive); `json`: the
//!   JSON answers.
//! - [`serve_with_mail`] (`smtp`): the SMTP servers (plain with `STARTTLS`, and implicit
//!   TLS), with the same slow-client limits.
//! - `mail`: the header fields read from a received message (`Message-ID`, `Subject`
//!   decoded from RFC 2047, `To`, `X-Alert-Id`, `Traceparent`) and where its body starts.
//!
//! Routes:
//! - `POST /<any path outside /_sink/>`: a delivery, answered `{"id": "<receipt>"}`.
//! - `GET /requests/{key}` (with `--lookup`): the receipt of an applied key.
//! - `GET /stats`: the counters ([`Stats`]).
//! - `GET /_sink/records[?key=K]`: every delivery in arrival order ([`Record`]; with
//!   `--keep-bodies` each holds its body, an `Authorization` header is kept only as a
//!   fingerprint, and the `traceparent` and `tracestate` received are `trace_parent` and
//!   `trace_state`, absent when not sent).
//! - `GET /_sink/messages[?message_id=ID]`: every message accepted over SMTP, in arrival
//!   order ([`MailRecord`]; its `Traceparent` field is `trace_parent`, absent when not
//!   sent).
//! - `POST /_sink/faults`, `DELETE /_sink/faults`: change or clear the faults.
//! - `POST /_sink/reset`: forget records, messages and counters (faults stay).
//!
//! A delivery is decided in this order: with `--secret`, a missing, wrong or stale
//! signature is refused (401); then a scripted answer if one is queued, then the fail
//! rate, then de-duplication (with `--retention`), else it is applied. Only applied and
//! duplicate deliveries wait the latency and may have their response dropped.
//!
//! A sender is refused only by a scripted `MAIL FROM` reply. A message is decided after
//! its data: a scripted refusal if one is queued, then the
//! SMTP fail rate; else it is recorded (and written as a `.eml` file with `--eml-dir`),
//! waits the SMTP latency and may have its reply dropped. A recipient is refused only by
//! a scripted `RCPT` reply.

mod config;
mod faults;
mod json;
mod mail;
mod records;
mod server;
mod signature;
mod smtp;
mod smtp_reply;
mod state;

use outbox_runtime::shutdown::Shutdown;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

pub use config::{SigningSecret, SinkArgs, SmtpCredentials};
pub use faults::{FaultSettings, ScriptedResponse};
pub use records::{
    MailRecord, Outcome, Record, SmtpStats, Stats, INVALID_TRACE_HEADER, MAX_TRACE_HEADER_BYTES,
};
pub use server::MAX_BODY_BYTES;
pub use signature::SignatureCheck;
pub use smtp_reply::SmtpReply;
pub use state::Sink;

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

/// Serves the sink's HTTP side on `listener` and, when given, plain SMTP on `smtp` (see
/// [`serve_with_mail`]).
pub async fn serve_with_smtp(
    listener: TcpListener,
    smtp: Option<TcpListener>,
    args: SinkArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mail = MailListeners { smtp, smtps: None };
    serve_with_mail(listener, mail, args, shutdown).await
}

/// The SMTP listeners of a sink, bound by the caller.
#[derive(Debug, Default)]
pub struct MailListeners {
    /// SMTP (`--smtp-listen`), offering `STARTTLS` when a certificate is configured.
    pub smtp: Option<TcpListener>,
    /// SMTP over implicit TLS (`--smtps-listen`); needs a certificate.
    pub smtps: Option<TcpListener>,
}

/// Serves the sink's HTTP side on `listener` and the SMTP listeners of `mail`, until
/// `shutdown` resolves; then finishes the requests and messages in progress. The caller
/// binds them all (`args.listen`, `args.smtp_listen` and `args.smtps_listen` are not
/// used). The certificate and key are loaded and the folder of `--eml-dir` is created
/// here; failing either, nothing is served.
pub async fn serve_with_mail(
    listener: TcpListener,
    mail: MailListeners,
    args: SinkArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let tls = smtp::tls_config(&args)?;
    if mail.smtps.is_some() && tls.is_none() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "--smtps-listen needs --smtp-tls-cert and --smtp-tls-key",
        ));
    }
    // First line of the log: tests wait for it to learn the address.
    tracing::info!(addr = %listener.local_addr()?, "sink listening");
    if let Some(smtp) = &mail.smtp {
        tracing::info!(addr = %smtp.local_addr()?, starttls = tls.is_some(), "sink SMTP listening");
    }
    if let Some(smtps) = &mail.smtps {
        tracing::info!(addr = %smtps.local_addr()?, "sink SMTPS listening");
    }
    if let Some(dir) = &args.eml_dir {
        std::fs::create_dir_all(dir).map_err(|err| {
            std::io::Error::new(
                err.kind(),
                format!("creating the .eml folder {}: {err}", dir.display()),
            )
        })?;
    }
    let sink = Arc::new(Sink::with_smtp(
        &args,
        mail.smtp.is_some() || mail.smtps.is_some(),
    ));
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
    // One shutdown for every server.
    let stopped = Shutdown::on(shutdown);
    let http = server::run(
        listener,
        Arc::clone(&sink),
        args.server_limits(),
        stopped.clone().until_set(),
    );
    let config = smtp::SmtpConfig::from_args(&args, tls);
    let serve_mail = |listener: Option<TcpListener>, kind| {
        let (sink, config, stopped) = (Arc::clone(&sink), config.clone(), stopped.clone());
        async move {
            if let Some(listener) = listener {
                smtp::run(listener, kind, sink, config, stopped).await;
            }
        }
    };
    let plain = serve_mail(mail.smtp, smtp::Listener::Plain);
    let implicit = serve_mail(mail.smtps, smtp::Listener::ImplicitTls);
    tokio::join!(http, plain, implicit);
    Ok(())
}
