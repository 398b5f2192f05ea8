//! One of the workspace's own binaries as a child process, and the wait until it listens.
//!
//! A listening process is started on port 0, so only the process knows its address: with
//! `LOG_FORMAT=json` every listener announces itself once, in a log line whose message
//! names it ("sink listening", "approval API listening") and whose `addr` field holds the
//! address. That line is also the sign that the listener accepts connections (it is logged
//! after the bind). [`spawn_logged`] starts the child with its log on a pipe and reads every
//! line, so the child never blocks on a full pipe; [`LoggedChild::listening`] waits for an
//! announcement (or any other message, such as "dispatcher started") with a deadline.
//!
//! `outboxctl demo` starts its sink with it; the end-to-end tests start every binary through
//! `outbox-testkit`'s `Process`, which adds a log file per process and the dump of that log
//! when a test fails. It lives here, not in the test kit, because the demo is product code.

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Why a child's listener was not announced.
#[derive(Debug)]
pub enum ListenError {
    /// Its log ended (it exited) before the announcement.
    Exited { program: String, message: String },
    /// The deadline passed first.
    Deadline { program: String, message: String },
}

impl std::fmt::Display for ListenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenError::Exited { program, message } => {
                write!(f, "{program} exited before logging \"{message}\"")
            }
            ListenError::Deadline { program, message } => {
                write!(f, "{program} did not log \"{message}\" in time")
            }
        }
    }
}

impl std::error::Error for ListenError {}

/// A child started by [`spawn_logged`]: killed when dropped.
#[derive(Debug)]
pub struct LoggedChild {
    pub child: Child,
    /// The program, for messages.
    program: String,
    /// Each message's first line (message, its `addr` field or ""), in log order.
    announced: mpsc::UnboundedReceiver<(String, String)>,
    /// The announcements received so far, by message.
    addrs: HashMap<String, String>,
}

/// Starts `command` with JSON logs (`LOG_FORMAT=json`) on a pipe and its stdout discarded,
/// and hands every log line to `each_line` (on a task of the current runtime) until the
/// child's stderr closes.
pub fn spawn_logged(
    mut command: Command,
    mut each_line: impl FnMut(&str) + Send + 'static,
) -> std::io::Result<LoggedChild> {
    let program = command
        .as_std()
        .get_program()
        .to_string_lossy()
        .into_owned();
    command
        .env("LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .map_err(|err| std::io::Error::new(err.kind(), format!("starting {program}: {err}")))?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| std::io::Error::other("the child's stderr is not piped"))?;
    let (announce, announced) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        // Only a message's first line is announced: a waiter needs no more, and the
        // messages are few while the lines are many.
        let mut seen = HashSet::new();
        while let Ok(Some(line)) = lines.next_line().await {
            // The line is handed on first: whoever learns of an announcement finds it,
            // and every line before it, where `each_line` put them.
            each_line(&line);
            if let Some((message, addr)) = announcement(&line) {
                if seen.insert(message.clone()) {
                    // Nobody waits once the child is dropped; the log still goes on.
                    let _ = announce.send((message, addr));
                }
            }
        }
    });
    Ok(LoggedChild {
        child,
        program,
        announced,
        addrs: HashMap::new(),
    })
}

impl LoggedChild {
    /// The address announced with `message` (e.g. "sink listening"), waiting for it until
    /// `deadline`; for a message without an `addr` field, "" once it is logged.
    pub async fn listening(
        &mut self,
        message: &str,
        deadline: Instant,
    ) -> Result<String, ListenError> {
        loop {
            if let Some(addr) = self.addrs.get(message) {
                return Ok(addr.clone());
            }
            match tokio::time::timeout_at(deadline, self.announced.recv()).await {
                Ok(Some((announced, addr))) => {
                    self.addrs.insert(announced, addr);
                }
                Ok(None) => {
                    return Err(ListenError::Exited {
                        program: self.program.clone(),
                        message: message.to_owned(),
                    })
                }
                Err(_) => {
                    return Err(ListenError::Deadline {
                        program: self.program.clone(),
                        message: message.to_owned(),
                    })
                }
            }
        }
    }
}

impl LoggedChild {
    /// Waits until the child's log has been read to its end (the child closed its stderr,
    /// as it does when it exits), until `deadline`; whether it ended.
    pub async fn log_ended(&mut self, deadline: Instant) -> bool {
        loop {
            match tokio::time::timeout_at(deadline, self.announced.recv()).await {
                Ok(Some((message, addr))) => {
                    self.addrs.entry(message).or_insert(addr);
                }
                Ok(None) => return true,
                Err(_) => return false,
            }
        }
    }
}

/// The message of a JSON log line, with its `addr` field ("" without one).
fn announcement(line: &str) -> Option<(String, String)> {
    let event: serde_json::Value = serde_json::from_str(line).ok()?;
    let fields = &event["fields"];
    Some((
        fields["message"].as_str()?.to_owned(),
        fields["addr"].as_str().unwrap_or_default().to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announcement_is_a_json_line_with_a_message_and_maybe_an_address() {
        let line =
            r#"{"level":"INFO","fields":{"message":"sink listening","addr":"127.0.0.1:4000"}}"#;
        assert_eq!(
            announcement(line),
            Some(("sink listening".to_owned(), "127.0.0.1:4000".to_owned()))
        );
        assert_eq!(
            announcement(r#"{"fields":{"message":"dispatcher started"}}"#),
            Some(("dispatcher started".to_owned(), String::new()))
        );
        assert_eq!(announcement("sink listening on 127.0.0.1:4000"), None);
    }
}
