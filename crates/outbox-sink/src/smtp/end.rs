//! Why an SMTP session ended, as the connection's last log line says.

use std::io;

/// Why a session ended.
#[derive(Debug)]
pub(super) enum End {
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
