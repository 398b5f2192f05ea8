//! The sink's SMTP server (RFC 5321, server side): enough for a real client to deliver
//! mail. It answers `EHLO`/`HELO`, `MAIL FROM`, `RCPT TO`, `DATA` (with dot-unstuffing),
//! `RSET`, `NOOP`, `VRFY` (252) and `QUIT`, and `AUTH PLAIN`/`AUTH LOGIN` when credentials
//! are configured (then required before `MAIL FROM`). An accepted message is answered
//! `250 2.0.0 Ok: queued as <ID>`.
//!
//! TLS (RFC 3207, RFC 8314), with a certificate and key configured: the plain listener
//! offers `STARTTLS`, and the implicit-TLS listener shakes hands before its greeting. After
//! `STARTTLS` everything learnt in plain text is forgotten (the greeting, AUTH, the
//! transaction), and bytes the client sent after the command but before the handshake are
//! thrown away rather than read as commands over TLS (the STARTTLS injection flaw). The
//! `smtp_hide_starttls` fault leaves the offer out, as an attacker on the path who strips
//! it would; each message records whether and how its session was encrypted.
//!
//! Slow clients get the same treatment as on the HTTP side, with the same limits: each
//! command line (the first after the greeting included) must be complete within the
//! header timeout of the time the server starts waiting for it, except between messages
//! where a client may stay silent for the idle timeout; a message's data must be complete
//! within the body timeout of the `354`; replies that the client does not read within the
//! header timeout end the connection too. At most as many connections as the HTTP side
//! allows are open at once; past that a new one is told `421` and closed at once. A
//! message larger than the limit is read to its end (within the deadline) and answered
//! `552`; far beyond the limit the connection is closed.
//!
//! The decisions (scripted refusals, the fail rate, the dropped reply, the latency) are
//! the sink's ([`Sink::decide_mail`]), under its one lock, so a seed replays a run.
//!
//! Layout: the listener here; [`settings`] (what the server takes from the command line,
//! the certificate included), [`session`] (the commands), [`auth`] (the AUTH exchange),
//! [`channel`] (lines, data and replies within their deadlines), [`end`] (why a session
//! ended).

mod auth;
mod channel;
mod end;
mod session;
mod settings;

use outbox_runtime::shutdown::Shutdown;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::state::Sink;
use channel::{Channel, Wire};
use session::Session;
pub(crate) use settings::{tls_config, SmtpConfig};

/// How a listener's connections start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listener {
    /// In plain text (offering `STARTTLS` when a certificate is configured).
    Plain,
    /// With a TLS handshake, before the greeting.
    ImplicitTls,
}

/// Serves SMTP on `listener` until `stop` is set; then
/// accepts no more connections, tells the ones waiting for a command `421` and waits for
/// every connection to end (a message being received is finished first).
pub(crate) async fn run(
    listener: TcpListener,
    kind: Listener,
    sink: Arc<Sink>,
    config: SmtpConfig,
    stop: Shutdown,
) {
    let config = Arc::new(config);
    let permits = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let mut connections = JoinSet::new();
    let mut last_turned_away: Option<Instant> = None;
    let mut stopping = stop.clone();
    loop {
        tokio::select! {
            () = stopping.wait() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match Arc::clone(&permits).try_acquire_owned() {
                    Ok(permit) => {
                        connections.spawn(connection(
                            stream,
                            kind,
                            peer,
                            Arc::clone(&sink),
                            Arc::clone(&config),
                            stop.clone(),
                            permit,
                        ));
                    }
                    Err(_) => {
                        // `try_write` never waits: a client that does not read is not
                        // worth a task.
                        let _ = stream.try_write(b"421 4.3.2 too many connections\r\n");
                        let now = Instant::now();
                        if last_turned_away.is_none_or(|last| now - last >= Duration::from_secs(10)) {
                            tracing::warn!(
                                max_connections = config.max_connections,
                                "SMTP connection limit reached; closing new connections"
                            );
                            last_turned_away = Some(now);
                        }
                    }
                },
                Err(err) => {
                    // Usually out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %err, "cannot accept an SMTP connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    while connections.join_next().await.is_some() {}
    tracing::info!("sink SMTP stopped");
}

async fn connection(
    stream: TcpStream,
    kind: Listener,
    peer: std::net::SocketAddr,
    sink: Arc<Sink>,
    config: Arc<SmtpConfig>,
    stop: Shutdown,
    _permit: OwnedSemaphorePermit,
) {
    // Replies are small and each waits for the client: no waiting for Nagle's algorithm.
    let _ = stream.set_nodelay(true);
    let (wire, tls): (Box<dyn Wire>, _) = match (kind, &config.tls) {
        (Listener::ImplicitTls, Some(tls)) => {
            let handshake = TlsAcceptor::from(Arc::clone(tls)).accept(stream);
            match tokio::time::timeout(config.command_timeout, handshake).await {
                Ok(Ok(tls)) => (Box::new(tls), Some("tls")),
                // A client that does not trust the certificate ends here: not the sink's
                // fault, so not a warning.
                Ok(Err(err)) => {
                    tracing::info!(%peer, error = %err, "SMTP TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::info!(%peer, "SMTP TLS handshake not finished in time");
                    return;
                }
            }
        }
        (Listener::ImplicitTls, None) => return,
        (Listener::Plain, _) => (Box::new(stream), None),
    };
    let channel = Channel::new(wire, Arc::clone(&config), stop);
    let mut session = Session::new(channel, tls, sink, config);
    let end = session.run().await;
    tracing::debug!(%peer, end = %end, "SMTP connection closed");
}
