//! A session's connection: command lines and message data read, and replies written, each
//! within its deadline, over plain TCP or TLS (and upgraded by `STARTTLS`).

use outbox_runtime::shutdown::Shutdown;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::time::{timeout_at, Instant};
use tokio_rustls::TlsAcceptor;

use super::end::End;
use super::settings::SmtpConfig;

/// Longest command line read, CRLF included. RFC 5321 allows 512; a little more room costs
/// nothing and spares clients with long parameters.
const MAX_COMMAND_LINE: usize = 2048;

/// Syntax errors and unknown commands tolerated on one connection before it is closed.
const MAX_BAD_COMMANDS: u32 = 10;

/// A connection's bytes: plain TCP, or TLS over it.
pub(super) trait Wire: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Wire for T {}

/// The message data as read, or the fact that it was too large.
pub(super) enum Data {
    Complete(Vec<u8>),
    TooLarge,
}

/// One client's connection, with the deadlines of the configuration.
pub(super) struct Channel {
    /// Reads are buffered; writes pass straight through.
    stream: BufReader<Box<dyn Wire>>,
    config: Arc<SmtpConfig>,
    stop: Shutdown,
    bad_commands: u32,
    /// A message was answered and no transaction started since: the client may stay
    /// silent for the idle deadline before its next line.
    pub(super) between_messages: bool,
}

impl Channel {
    pub(super) fn new(wire: Box<dyn Wire>, config: Arc<SmtpConfig>, stop: Shutdown) -> Self {
        Channel {
            stream: BufReader::new(wire),
            config,
            stop,
            bad_commands: 0,
            between_messages: false,
        }
    }

    /// Shakes hands over TLS with `acceptor`, within the command deadline; the connection
    /// goes on encrypted. What the client sent after the command and before the handshake
    /// came in plain text, where anyone on the path could have written it: it goes with
    /// the buffer, never read as commands over TLS.
    pub(super) async fn start_tls(&mut self, acceptor: TlsAcceptor) -> Result<(), End> {
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
        Ok(())
    }

    /// A reply to a command the client got wrong; too many of them close the connection.
    pub(super) async fn bad(&mut self, reply: &str) -> Result<(), End> {
        self.bad_commands += 1;
        if self.bad_commands > MAX_BAD_COMMANDS {
            self.reply("421 4.7.0 too many errors, closing").await?;
            return Err(End::Refused("too many bad commands"));
        }
        self.reply(reply).await
    }

    /// Reads one command line (without its line end), within the command deadline (the
    /// idle deadline between messages). Stopping the sink interrupts the wait with a `421`.
    pub(super) async fn read_line(&mut self) -> Result<String, End> {
        let (phase, limit) = if self.between_messages {
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
    pub(super) async fn read_data(&mut self) -> Result<Data, End> {
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

    pub(super) async fn reply(&mut self, line: &str) -> Result<(), End> {
        self.write(format!("{line}\r\n").as_bytes()).await
    }

    /// A multi-line reply: `250-first`, ..., `250 last`.
    pub(super) async fn reply_lines(&mut self, code: u16, lines: &[String]) -> Result<(), End> {
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
