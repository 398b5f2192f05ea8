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

use base64::Engine;
use outbox_runtime::shutdown::Shutdown;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{timeout_at, Instant};
use tokio_rustls::TlsAcceptor;

use crate::config::{SinkArgs, SmtpCredentials};
use crate::state::inbox::{Envelope, MailAction};
use crate::state::Sink;

/// Longest command line read, CRLF included. RFC 5321 allows 512; a little more room costs
/// nothing and spares clients with long parameters.
const MAX_COMMAND_LINE: usize = 2048;

/// Most recipients of one message (RFC 5321 asks servers to accept at least 100).
const MAX_RECIPIENTS: usize = 100;

/// Syntax errors and unknown commands tolerated on one connection before it is closed.
const MAX_BAD_COMMANDS: u32 = 10;

/// The name the server gives itself in its greeting and EHLO reply.
const SERVER_NAME: &str = "sink";

/// What the SMTP server needs from the sink's configuration.
#[derive(Debug, Clone)]
pub(crate) struct SmtpConfig {
    /// For each command line (and each reply to be read by the client).
    pub command_timeout: Duration,
    /// For a client silent between two messages.
    pub idle_timeout: Duration,
    /// For a message's data, from the `354`.
    pub data_timeout: Duration,
    pub max_connections: usize,
    pub max_message_bytes: usize,
    pub credentials: Option<SmtpCredentials>,
    pub eml_dir: Option<PathBuf>,
    /// The certificate offered over `STARTTLS` and on the implicit-TLS listener.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl SmtpConfig {
    pub(crate) fn from_args(args: &SinkArgs, tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        SmtpConfig {
            tls,
            command_timeout: args.header_timeout,
            idle_timeout: args.idle_timeout,
            data_timeout: args.body_timeout,
            max_connections: args.max_client_connections.get(),
            max_message_bytes: args.smtp_max_message_bytes.get(),
            credentials: args.smtp_auth.clone(),
            eml_dir: args.eml_dir.clone(),
        }
    }

    /// Beyond this much data the connection is closed rather than the rest read and
    /// discarded.
    fn max_drained_bytes(&self) -> usize {
        self.max_message_bytes.saturating_mul(4)
    }
}

/// How a listener's connections start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listener {
    /// In plain text (offering `STARTTLS` when a certificate is configured).
    Plain,
    /// With a TLS handshake, before the greeting.
    ImplicitTls,
}

/// The TLS side of the SMTP listeners, from `--smtp-tls-cert` and `--smtp-tls-key`; `None`
/// without them. A file that cannot be read or used is an error: the sink does not start.
pub(crate) fn tls_config(args: &SinkArgs) -> io::Result<Option<Arc<rustls::ServerConfig>>> {
    let (Some(cert), Some(key)) = (&args.smtp_tls_cert, &args.smtp_tls_key) else {
        return Ok(None);
    };
    let refused = |what: &str, path: &PathBuf, err: String| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {}: {err}", path.display()),
        )
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|err| refused("--smtp-tls-cert", cert, err.to_string()))?;
    if chain.is_empty() {
        return Err(refused(
            "--smtp-tls-cert",
            cert,
            "holds no certificate".into(),
        ));
    }
    let key_der = PrivateKeyDer::from_pem_file(key)
        .map_err(|err| refused("--smtp-tls-key", key, err.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|config| {
            config
                .with_no_client_auth()
                .with_single_cert(chain, key_der)
        })
        .map_err(|err| refused("--smtp-tls-cert", cert, err.to_string()))?;
    Ok(Some(Arc::new(config)))
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
    let mut session = Session {
        stream: BufReader::new(wire),
        tls,
        sink,
        config,
        stop,
        greeted: false,
        authenticated_as: None,
        transaction: None,
        between_messages: false,
        bad_commands: 0,
    };
    let end = session.run().await;
    tracing::debug!(%peer, end = %end, "SMTP connection closed");
}

/// Why a session ended.
#[derive(Debug)]
enum End {
    /// The client said `QUIT`.
    Quit,
    /// The client closed the connection.
    ClientClosed,
    /// A deadline passed (which phase).
    Overdue(&'static str),
    /// The dropped-reply fault.
    ReplyDropped,
    /// The sink is stopping.
    Stopping,
    /// Too many bad commands, a line too long, or a message far too large.
    Refused(&'static str),
    /// Reading or writing failed.
    Io(io::Error),
    /// The TLS handshake after `STARTTLS` failed.
    Tls(String),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Quit => f.write_str("the client quit"),
            End::ClientClosed => f.write_str("the client closed the connection"),
            End::Overdue(phase) => write!(f, "past the deadline of the {phase}"),
            End::ReplyDropped => f.write_str("reply dropped on purpose"),
            End::Stopping => f.write_str("the sink is stopping"),
            End::Refused(why) => write!(f, "closed by the server: {why}"),
            End::Io(err) => write!(f, "I/O error: {err}"),
            End::Tls(err) => write!(f, "TLS handshake failed: {err}"),
        }
    }
}

/// A mail transaction in progress: from `MAIL FROM` to the end of `DATA` or `RSET`.
#[derive(Debug)]
struct Transaction {
    mail_from: String,
    rcpt_to: Vec<String>,
}

/// The message data as read, or the fact that it was too large.
enum Data {
    Complete(Vec<u8>),
    TooLarge,
}

/// A connection's bytes: plain TCP, or TLS over it.
trait Wire: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Wire for T {}

struct Session {
    /// Reads are buffered; writes pass straight through.
    stream: BufReader<Box<dyn Wire>>,
    /// `starttls` or `tls` once the session is encrypted.
    tls: Option<&'static str>,
    sink: Arc<Sink>,
    config: Arc<SmtpConfig>,
    stop: Shutdown,
    greeted: bool,
    authenticated_as: Option<String>,
    transaction: Option<Transaction>,
    /// A message was answered and no transaction started since: the idle timeout applies.
    between_messages: bool,
    bad_commands: u32,
}

impl Session {
    async fn run(&mut self) -> End {
        let greeting = format!("220 {SERVER_NAME} ESMTP ready");
        if let Err(end) = self.reply(&greeting).await {
            return end;
        }
        loop {
            if let Err(end) = self.next_command().await {
                return end;
            }
        }
    }

    /// Reads one command and answers it.
    async fn next_command(&mut self) -> Result<(), End> {
        let line = self.read_line().await?;
        let (verb, args) = match line.split_once(' ') {
            Some((verb, args)) => (verb.to_ascii_uppercase(), args.trim()),
            None => (line.to_ascii_uppercase(), ""),
        };
        match verb.as_str() {
            "EHLO" | "HELO" if args.is_empty() => self.bad("501 5.5.4 a domain is required").await,
            "EHLO" => {
                self.greeted = true;
                self.transaction = None;
                let mut lines = vec![
                    format!("{SERVER_NAME} greets {args}"),
                    format!("SIZE {}", self.config.max_message_bytes),
                    "8BITMIME".to_owned(),
                    "ENHANCEDSTATUSCODES".to_owned(),
                    "SMTPUTF8".to_owned(),
                ];
                if self.starttls_offer().is_some() {
                    lines.push("STARTTLS".to_owned());
                }
                if self.config.credentials.is_some() {
                    lines.push("AUTH PLAIN LOGIN".to_owned());
                }
                self.reply_lines(250, &lines).await
            }
            "HELO" => {
                self.greeted = true;
                self.transaction = None;
                self.reply(&format!("250 {SERVER_NAME}")).await
            }
            "MAIL" => self.mail(args).await,
            "RCPT" => self.recipient(args).await,
            "DATA" => self.data().await,
            "RSET" => {
                self.transaction = None;
                self.reply("250 2.0.0 Ok").await
            }
            "NOOP" => self.reply("250 2.0.0 Ok").await,
            "VRFY" => self.reply("252 2.5.0 cannot verify, send some mail").await,
            "QUIT" => {
                self.reply("221 2.0.0 Bye").await?;
                Err(End::Quit)
            }
            "AUTH" => self.auth(args).await,
            "STARTTLS" => self.starttls(args).await,
            _ => self.bad("500 5.5.2 command not recognized").await,
        }
    }

    async fn mail(&mut self, args: &str) -> Result<(), End> {
        if !self.greeted {
            return self.reply("503 5.5.1 send EHLO or HELO first").await;
        }
        if self.config.credentials.is_some() && self.authenticated_as.is_none() {
            return self.reply("530 5.7.0 authentication required").await;
        }
        if self.transaction.is_some() {
            return self.reply("503 5.5.1 a transaction is already open").await;
        }
        let Some((address, params)) = path_argument(args, "FROM:") else {
            return self.bad("501 5.5.4 expected MAIL FROM:<address>").await;
        };
        let declared_size = params.split_ascii_whitespace().find_map(|param| {
            let (name, value) = param.split_once('=')?;
            name.eq_ignore_ascii_case("SIZE")
                .then(|| value.parse::<u64>().ok())
                .flatten()
        });
        if declared_size.is_some_and(|size| size > self.config.max_message_bytes as u64) {
            return self
                .reply("552 5.3.4 message size exceeds the fixed limit")
                .await;
        }
        if let Some(refusal) = self.sink.decide_sender() {
            tracing::info!(sender = %address, reply = %refusal.line(), "SMTP sender refused");
            return self.reply(&refusal.line()).await;
        }
        self.transaction = Some(Transaction {
            mail_from: address,
            rcpt_to: Vec::new(),
        });
        self.between_messages = false;
        self.reply("250 2.1.0 Ok").await
    }

    async fn recipient(&mut self, args: &str) -> Result<(), End> {
        let Some(recipients) = self.transaction.as_ref().map(|t| t.rcpt_to.len()) else {
            return self.reply("503 5.5.1 send MAIL FROM first").await;
        };
        let Some((address, _)) = path_argument(args, "TO:").filter(|(a, _)| !a.is_empty()) else {
            return self.bad("501 5.1.3 expected RCPT TO:<address>").await;
        };
        if recipients >= MAX_RECIPIENTS {
            return self.reply("452 4.5.3 too many recipients").await;
        }
        if let Some(refusal) = self.sink.decide_recipient() {
            tracing::info!(recipient = %address, reply = %refusal.line(), "SMTP recipient refused");
            return self.reply(&refusal.line()).await;
        }
        if let Some(transaction) = &mut self.transaction {
            transaction.rcpt_to.push(address);
        }
        self.reply("250 2.1.5 Ok").await
    }

    async fn data(&mut self) -> Result<(), End> {
        match &self.transaction {
            None => return self.reply("503 5.5.1 send MAIL FROM first").await,
            Some(t) if t.rcpt_to.is_empty() => {
                return self.reply("554 5.5.1 no valid recipients").await
            }
            Some(_) => {}
        }
        self.reply("354 End data with <CR><LF>.<CR><LF>").await?;
        let data = self.read_data().await?;
        // Whatever happens next, the transaction is over.
        let Some(transaction) = self.transaction.take() else {
            return Ok(());
        };
        let data = match data {
            Data::Complete(data) => data,
            Data::TooLarge => {
                self.sink.record_mail_too_large();
                tracing::info!(
                    limit = self.config.max_message_bytes,
                    "SMTP message too large"
                );
                let refusal = format!(
                    "552 5.3.4 the message exceeds {} bytes",
                    self.config.max_message_bytes
                );
                return self.reply(&refusal).await;
            }
        };
        let envelope = Envelope {
            mail_from: transaction.mail_from,
            rcpt_to: transaction.rcpt_to,
            authenticated_as: self.authenticated_as.clone(),
            tls: self.tls,
        };
        match self.sink.decide_mail(envelope, &data) {
            MailAction::Refuse(refusal) => {
                tracing::info!(reply = %refusal.line(), "SMTP message refused");
                self.reply(&refusal.line()).await
            }
            MailAction::Accept {
                record,
                delay,
                drop,
            } => {
                if let (Some(dir), Some(name)) = (&self.config.eml_dir, &record.eml_file) {
                    let path = dir.join(name);
                    if let Err(err) = write_file(path.clone(), data).await {
                        tracing::error!(file = %path.display(), error = %err, "cannot write a .eml file");
                        self.sink.eml_not_written(&record.queue_id);
                    }
                }
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                tracing::info!(
                    queue_id = record.queue_id,
                    message_id = record.message_id,
                    recipients = record.rcpt_to.len(),
                    size = record.size,
                    dropped = drop,
                    "SMTP message accepted"
                );
                if drop {
                    return Err(End::ReplyDropped);
                }
                self.between_messages = true;
                self.reply(&format!("250 2.0.0 Ok: queued as {}", record.queue_id))
                    .await
            }
        }
    }

    /// `AUTH PLAIN [initial-response]` or `AUTH LOGIN [initial-response]`.
    async fn auth(&mut self, args: &str) -> Result<(), End> {
        let Some(credentials) = self.config.credentials.clone() else {
            return self.bad("502 5.5.1 AUTH is not offered").await;
        };
        if !self.greeted {
            return self.reply("503 5.5.1 send EHLO first").await;
        }
        if self.authenticated_as.is_some() {
            return self.reply("503 5.5.1 already authenticated").await;
        }
        if self.transaction.is_some() {
            return self.reply("503 5.5.1 not during a transaction").await;
        }
        let (mechanism, initial) = match args.split_once(' ') {
            Some((mechanism, initial)) => (mechanism.to_ascii_uppercase(), Some(initial.trim())),
            None => (args.to_ascii_uppercase(), None),
        };
        let given = match mechanism.as_str() {
            "PLAIN" => {
                let response = match initial {
                    Some(initial) => initial.to_owned(),
                    None => match self.challenge("").await? {
                        Some(response) => response,
                        None => return Ok(()),
                    },
                };
                // authorization identity NUL user NUL password
                decode_base64(&response).and_then(|plain| {
                    let mut parts = plain.splitn(3, '\0');
                    let _authorization = parts.next()?;
                    Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
                })
            }
            "LOGIN" => {
                let user = match initial {
                    Some(initial) => Some(initial.to_owned()),
                    // "Username:" and "Password:", in base64.
                    None => self.challenge("VXNlcm5hbWU6").await?,
                };
                let Some(user) = user else {
                    return Ok(());
                };
                let Some(password) = self.challenge("UGFzc3dvcmQ6").await? else {
                    return Ok(());
                };
                decode_base64(&user).zip(decode_base64(&password))
            }
            _ => return self.bad("504 5.5.4 unrecognized authentication type").await,
        };
        match given {
            Some((user, password)) if credentials.accepts(&user, &password) => {
                tracing::info!(user, "SMTP client authenticated");
                self.authenticated_as = Some(user);
                self.reply("235 2.7.0 Authentication successful").await
            }
            // The password is never logged, not even a wrong one: it may be a near miss.
            Some((user, _)) => {
                tracing::info!(user, "SMTP authentication failed");
                self.bad("535 5.7.8 authentication credentials invalid")
                    .await
            }
            None => self.bad("501 5.5.2 cannot decode the response").await,
        }
    }

    /// The certificate to offer over `STARTTLS`, if it is offered on this session now: a
    /// certificate is configured, the session is not encrypted yet, and the offer is not
    /// hidden by a fault.
    fn starttls_offer(&self) -> Option<TlsAcceptor> {
        if self.tls.is_some() || self.sink.starttls_hidden() {
            return None;
        }
        self.config.tls.clone().map(TlsAcceptor::from)
    }

    /// `STARTTLS`: the `220`, then the handshake; the session starts again over TLS.
    async fn starttls(&mut self, args: &str) -> Result<(), End> {
        let Some(acceptor) = self.starttls_offer() else {
            return self.bad("502 5.5.1 STARTTLS is not offered").await;
        };
        if !args.is_empty() {
            return self.bad("501 5.5.4 STARTTLS takes no parameters").await;
        }
        if self.transaction.is_some() {
            return self.reply("503 5.5.1 not during a transaction").await;
        }
        self.reply("220 2.0.0 ready to start TLS").await?;
        // What the client sent after the command and before the handshake came in plain
        // text, where anyone on the path could have written it: it goes with the buffer.
        let plain = std::mem::replace(
            &mut self.stream,
            BufReader::new(Box::new(tokio::io::empty())),
        );
        let handshake = acceptor.accept(plain.into_inner());
        let tls = match tokio::time::timeout(self.config.command_timeout, handshake).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(err)) => return Err(End::Tls(err.to_string())),
            Err(_) => return Err(End::Overdue("TLS handshake")),
        };
        self.stream = BufReader::new(Box::new(tls));
        self.tls = Some("starttls");
        // RFC 3207: everything learnt before the handshake is forgotten.
        self.greeted = false;
        self.authenticated_as = None;
        self.transaction = None;
        self.between_messages = false;
        Ok(())
    }

    /// Sends a `334` challenge and reads the client's answer; `None` when the client
    /// cancels the exchange with `*` (answered `501`, counted as a bad command so that a
    /// client cannot loop on AUTH forever).
    async fn challenge(&mut self, challenge: &str) -> Result<Option<String>, End> {
        self.reply(&format!("334 {challenge}")).await?;
        let answer = self.read_line().await?;
        if answer.trim() == "*" {
            self.bad("501 5.7.0 authentication cancelled").await?;
            return Ok(None);
        }
        Ok(Some(answer))
    }

    /// A reply to a command the client got wrong; too many of them close the connection.
    async fn bad(&mut self, reply: &str) -> Result<(), End> {
        self.bad_commands += 1;
        if self.bad_commands > MAX_BAD_COMMANDS {
            self.reply("421 4.7.0 too many errors, closing").await?;
            return Err(End::Refused("too many bad commands"));
        }
        self.reply(reply).await
    }

    /// Reads one command line (without its line end), within the command deadline (the
    /// idle deadline between messages). Stopping the sink interrupts the wait with a `421`.
    async fn read_line(&mut self) -> Result<String, End> {
        let (phase, limit) = if self.between_messages && self.transaction.is_none() {
            ("between messages", self.config.idle_timeout)
        } else {
            ("command line", self.config.command_timeout)
        };
        let deadline = Instant::now() + limit;
        let mut line = Vec::new();
        let read = {
            let mut reader = (&mut self.stream).take(MAX_COMMAND_LINE as u64);
            let stop = &mut self.stop;
            tokio::select! {
                read = timeout_at(deadline, reader.read_until(b'\n', &mut line)) => Some(read),
                () = stop.wait() => None,
            }
        };
        let read = match read {
            None => {
                let _ = self.reply("421 4.3.2 shutting down").await;
                return Err(End::Stopping);
            }
            Some(Err(_)) => return Err(End::Overdue(phase)),
            Some(Ok(read)) => read.map_err(End::Io)?,
        };
        if read == 0 {
            return Err(End::ClientClosed);
        }
        if line.last() != Some(&b'\n') {
            if line.len() < MAX_COMMAND_LINE {
                return Err(End::ClientClosed);
            }
            let _ = self.reply("500 5.5.2 line too long").await;
            return Err(End::Refused("command line too long"));
        }
        let line = line.strip_suffix(b"\n").unwrap_or(&line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        Ok(String::from_utf8_lossy(line).into_owned())
    }

    /// Reads a message's data up to the line holding a single dot, within the data
    /// deadline, undoing the dot-stuffing. Past the size limit the rest is read and
    /// discarded; far past it the connection is closed.
    async fn read_data(&mut self) -> Result<Data, End> {
        let deadline = Instant::now() + self.config.data_timeout;
        let limit = self.config.max_message_bytes;
        let drained_limit = self.config.max_drained_bytes();
        let reader = &mut self.stream;
        let read_all = async move {
            let mut data = Vec::new();
            let mut seen = 0usize;
            let mut at_line_start = true;
            let mut chunk = Vec::new();
            loop {
                chunk.clear();
                // Long lines come in pieces, so a line never needs more memory than this.
                let read = (&mut *reader)
                    .take(64 * 1024)
                    .read_until(b'\n', &mut chunk)
                    .await
                    .map_err(End::Io)?;
                if read == 0 {
                    return Err(End::ClientClosed);
                }
                let line_start = at_line_start;
                at_line_start = chunk.last() == Some(&b'\n');
                let mut piece: &[u8] = &chunk;
                if line_start {
                    if piece == b".\r\n" || piece == b".\n" {
                        return Ok(if seen > limit {
                            Data::TooLarge
                        } else {
                            Data::Complete(data)
                        });
                    }
                    if piece.first() == Some(&b'.') {
                        piece = &piece[1..];
                    }
                }
                seen = seen.saturating_add(piece.len());
                if seen > drained_limit {
                    return Err(End::Refused("message far over the size limit"));
                }
                if seen <= limit {
                    data.extend_from_slice(piece);
                }
            }
        };
        match timeout_at(deadline, read_all).await {
            Ok(result) => result,
            Err(_) => Err(End::Overdue("message data")),
        }
    }

    async fn reply(&mut self, line: &str) -> Result<(), End> {
        self.write(format!("{line}\r\n").as_bytes()).await
    }

    /// A multi-line reply: `250-first`, ..., `250 last`.
    async fn reply_lines(&mut self, code: u16, lines: &[String]) -> Result<(), End> {
        let mut text = String::new();
        for (i, line) in lines.iter().enumerate() {
            let separator = if i + 1 == lines.len() { ' ' } else { '-' };
            text.push_str(&format!("{code}{separator}{line}\r\n"));
        }
        self.write(text.as_bytes()).await
    }

    /// Writes within the command deadline: a client that does not read its replies does
    /// not hold the connection forever.
    async fn write(&mut self, bytes: &[u8]) -> Result<(), End> {
        let deadline = Instant::now() + self.config.command_timeout;
        // Flushed: a TLS session may hold written bytes until then.
        let written = async {
            self.stream.write_all(bytes).await?;
            self.stream.flush().await
        };
        match timeout_at(deadline, written).await {
            Ok(written) => written.map_err(End::Io),
            Err(_) => Err(End::Overdue("reply")),
        }
    }
}

/// The address and the parameters of `FROM:<address> PARAMS` (or `TO:`), the keyword
/// matched without regard to case and blanks allowed after the colon. An address without
/// angle brackets is accepted too, as many servers do.
fn path_argument(args: &str, keyword: &str) -> Option<(String, String)> {
    let head = args.get(..keyword.len())?;
    if !head.eq_ignore_ascii_case(keyword) {
        return None;
    }
    let rest = args[keyword.len()..].trim_start();
    let (address, params) = match rest.strip_prefix('<') {
        Some(inside) => {
            let end = inside.find('>')?;
            (&inside[..end], &inside[end + 1..])
        }
        None => rest.split_once(' ').unwrap_or((rest, "")),
    };
    if address.contains(char::is_whitespace) {
        return None;
    }
    Some((address.to_owned(), params.trim().to_owned()))
}

/// Writes a file off the runtime's threads.
async fn write_file(path: PathBuf, contents: Vec<u8>) -> io::Result<()> {
    tokio::task::spawn_blocking(move || std::fs::write(path, contents))
        .await
        .map_err(io::Error::other)?
}

fn decode_base64(text: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .ok()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_paths_and_parameters() {
        assert_eq!(
            path_argument("FROM:<a@x> SIZE=10 BODY=8BITMIME", "FROM:"),
            Some(("a@x".to_owned(), "SIZE=10 BODY=8BITMIME".to_owned()))
        );
        assert_eq!(
            path_argument("from: <>", "FROM:"),
            Some((String::new(), String::new()))
        );
        assert_eq!(
            path_argument("To:b@y", "TO:"),
            Some(("b@y".to_owned(), String::new()))
        );
        assert_eq!(path_argument("TO:<b@y", "TO:"), None);
        assert_eq!(path_argument("FROM:<a@x>", "TO:"), None);
        assert_eq!(path_argument("T", "TO:"), None);
    }
}
