//! The workspace's binaries as child processes of a test: [`Run`] runs one to its end (a
//! command, or a start-up that must be refused) for its status and what it printed;
//! [`Process::spawn`] starts one with
//! its log (JSON lines, stderr) in a file of its own under a directory per test,
//! [`Process::listening`] waits for a listener's announcement with a [`DEADLINE`], and a
//! process dropped while its test panics prints the end of its log into the test's output,
//! followed by the panic's message again: the logs can run to hundreds of lines, and a
//! report that keeps only the head and the tail of a failure would otherwise lose why it
//! failed. A process is killed when dropped; a test that passes leaves no log file behind.
//!
//! The logs go to files, not to the test's output, so a passing test prints nothing of
//! what its processes log (the faults the tests inject make them log warnings and errors).
//! Log files are under `target/tmp/process-logs/<test name>/`.

use outbox_runtime::process::{spawn_logged, LoggedChild};
use std::cell::RefCell;
use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;
use std::time::Duration;
use tokio::process::{Child, Command};

/// How long a test waits for a process to announce itself or to exit.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// At most this many of a log's last lines are printed when a test fails.
const PRINTED_LINES: usize = 300;

/// At most this many characters of the panic's message are repeated after a log.
const PRINTED_PANIC_CHARS: usize = 1000;

/// Numbers the log files of one test run, so that two processes of the same binary in one
/// test never share a file.
static SPAWNED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The message and place of the panic this thread is unwinding from, if any.
    static PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs, once per test binary, a panic hook that notes each panic's message on its
/// thread before the usual hook prints it. A process dropped during the unwinding runs on
/// the same thread, so it can repeat the message after its log.
fn note_panics() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let usual = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let place = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(a panic without a message)".to_owned());
            PANIC.with(|p| *p.borrow_mut() = Some(format!("{message}{place}")));
            usual(info);
        }));
    });
}

/// A running workspace binary with its log in a file; killed when dropped.
#[derive(Debug)]
pub struct Process {
    logged: LoggedChild,
    /// The binary's file name, for messages.
    name: String,
    log: PathBuf,
}

impl Process {
    /// Starts `binary` with `args` and `envs`, its log going to a file of the test's own.
    /// Crash points and egress openings (`FAILPOINTS`, `OUTBOX_ALLOW_PRIVATE`) come only
    /// from `envs`, never from the environment the tests run in.
    pub fn spawn<A: AsRef<OsStr>>(binary: &str, args: &[A], envs: &[(&str, &str)]) -> Process {
        let name = Path::new(binary)
            .file_name()
            .map_or_else(|| binary.to_owned(), |n| n.to_string_lossy().into_owned());
        note_panics();
        let (log, mut file) = log_file(&name);
        let mut command = Command::new(binary);
        command
            .args(args)
            .env_remove("FAILPOINTS")
            .env_remove("OUTBOX_ALLOW_PRIVATE");
        for (key, value) in envs {
            command.env(key, value);
        }
        // One write per line, so a reader of the file sees whole lines.
        let logged = spawn_logged(command, move |line| {
            let _ = file.write_all(format!("{line}\n").as_bytes());
        })
        .unwrap_or_else(|err| panic!("{err}"));
        Process { logged, name, log }
    }

    /// The address the process announced with `message` (e.g. "sink listening"), waiting
    /// for it up to [`DEADLINE`].
    pub async fn listening(&mut self, message: &str) -> String {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        match self.logged.listening(message, deadline).await {
            Ok(addr) => addr,
            Err(err) => panic!("{err}; its log: {}", self.log.display()),
        }
    }

    /// Every line the process has logged so far.
    pub fn log_lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The file its log goes to.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Waits for the process to exit by itself, up to [`DEADLINE`], and for the last of
    /// its log to reach the file.
    pub async fn exit_status(&mut self) -> ExitStatus {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        let status = match tokio::time::timeout_at(deadline, self.logged.child.wait()).await {
            Ok(status) => status.expect("waiting for a child"),
            Err(_) => panic!("{} did not exit in time", self.name),
        };
        assert!(
            self.logged.log_ended(deadline).await,
            "{}'s log did not end after it exited",
            self.name
        );
        status
    }
}

/// The child itself: its id, `kill`, `wait`.
impl std::ops::Deref for Process {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.logged.child
    }
}

impl std::ops::DerefMut for Process {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.logged.child
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.logged.child.start_kill();
        if std::thread::panicking() {
            let lines = self.log_lines();
            let skipped = lines.len().saturating_sub(PRINTED_LINES);
            eprintln!(
                "---- {} log ({}{}) ----\n{}\n---- end of {} log ----",
                self.name,
                self.log.display(),
                if skipped > 0 {
                    format!(", its last {PRINTED_LINES} lines")
                } else {
                    String::new()
                },
                lines[skipped..].join("\n"),
                self.name
            );
            if let Some(panic) = PANIC.with(|p| p.borrow().clone()) {
                // Its start says what failed; a page source quoted in full is in the
                // message printed where the panic happened.
                let shown: String = panic.chars().take(PRINTED_PANIC_CHARS).collect();
                let cut = if shown.len() < panic.len() {
                    " [...]"
                } else {
                    ""
                };
                eprintln!("---- the test failed: {shown}{cut} ----");
            }
        } else {
            let _ = std::fs::remove_file(&self.log);
            // The test's directory goes too once its last process is gone.
            if let Some(dir) = self.log.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
}

/// A workspace binary run to its end, for its exit status and what it printed: a command
/// (`outboxctl ...`, `decider run-once`) or a start-up that must be refused. Like
/// [`Process::spawn`], crash points and egress openings (`FAILPOINTS`,
/// `OUTBOX_ALLOW_PRIVATE`) come only from what the test sets, never from the environment
/// the tests run in. Standard input is empty unless given; the run is killed if it has not
/// ended within [`DEADLINE`].
#[derive(Debug)]
pub struct Run {
    command: Command,
    name: String,
    stdin: Option<Vec<u8>>,
}

impl Run {
    /// `binary` (a `CARGO_BIN_EXE_...` path), not started yet.
    pub fn new(binary: &str) -> Run {
        let name = Path::new(binary)
            .file_name()
            .map_or_else(|| binary.to_owned(), |n| n.to_string_lossy().into_owned());
        let mut command = Command::new(binary);
        command
            .env_remove("FAILPOINTS")
            .env_remove("OUTBOX_ALLOW_PRIVATE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        Run {
            command,
            name,
            stdin: None,
        }
    }

    /// Adds arguments.
    pub fn args<A: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = A>) -> Run {
        self.command.args(args);
        self
    }

    /// Sets an environment variable.
    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Run {
        self.command.env(key, value);
        self
    }

    /// Runs it in `dir` instead of the test's own directory.
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Run {
        self.command.current_dir(dir);
        self
    }

    /// Removes an environment variable the tests may run with.
    pub fn env_remove(mut self, key: &str) -> Run {
        self.command.env_remove(key);
        self
    }

    /// Gives `input` on standard input.
    pub fn stdin(mut self, input: impl Into<Vec<u8>>) -> Run {
        self.command.stdin(Stdio::piped());
        self.stdin = Some(input.into());
        self
    }

    /// Runs it to its end and returns its status and what it printed.
    pub async fn output(mut self) -> Output {
        let name = self.name;
        let mut child = self
            .command
            .spawn()
            .unwrap_or_else(|err| panic!("starting {name}: {err}"));
        if let (Some(input), Some(mut pipe)) = (self.stdin, child.stdin.take()) {
            // A command that refuses its arguments exits without reading its input: the
            // pipe may then close before everything is written, which is not the test's
            // concern.
            match tokio::io::AsyncWriteExt::write_all(&mut pipe, &input).await {
                Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {}
                other => other.unwrap_or_else(|err| panic!("writing to {name}: {err}")),
            }
        }
        match tokio::time::timeout(DEADLINE, child.wait_with_output()).await {
            Ok(output) => output.unwrap_or_else(|err| panic!("waiting for {name}: {err}")),
            Err(_) => panic!("{name} did not end in time"),
        }
    }
}

/// A new log file for `binary` in the current test's directory. libtest names each test's
/// thread after the test (`module::name`); a process started elsewhere goes under the
/// thread's name or `other`.
fn log_file(binary: &str) -> (PathBuf, std::fs::File) {
    let thread = std::thread::current();
    let test: String = thread
        .name()
        .unwrap_or("other")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let dir = logs_root().join(test);
    let n = SPAWNED.fetch_add(1, Ordering::Relaxed);
    let log = dir.join(format!("{binary}-{}-{n}.log", std::process::id()));
    // Twice: the test's last other process may remove the directory in between.
    let mut created = Err(std::io::ErrorKind::NotFound.into());
    for _ in 0..2 {
        created = std::fs::create_dir_all(&dir).and_then(|()| std::fs::File::create(&log));
        if created.is_ok() {
            break;
        }
    }
    match created {
        Ok(file) => (log, file),
        Err(err) => panic!("creating {}: {err}", log.display()),
    }
}

/// `target/tmp/process-logs`: a test binary runs from `target/<profile>/deps/`, and cargo
/// gives integration tests `target/tmp` for their files; elsewhere, the system's temporary
/// directory.
fn logs_root() -> PathBuf {
    let target = std::env::current_exe().ok().and_then(|exe| {
        let deps = exe.parent()?;
        (deps.file_name()? == "deps").then(|| deps.parent()?.parent().map(Path::to_path_buf))?
    });
    target
        .map_or_else(std::env::temp_dir, |target| target.join("tmp"))
        .join("process-logs")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a test fails loudly at the first surprise
mod tests {
    use super::*;

    /// A stand-in for a workspace binary: `sh` logging `lines` as the binaries do, then
    /// staying up (or exiting, with `exit`).
    fn shell(lines: &[&str], exit: bool) -> Process {
        let mut script: String = lines.iter().map(|l| format!("echo '{l}' >&2; ")).collect();
        script.push_str(if exit { "exit 3" } else { "exec sleep 60" });
        Process::spawn("sh", &["-c", &script], &[])
    }

    #[tokio::test]
    async fn a_listener_is_found_by_its_announcement_and_the_log_kept_while_it_runs() {
        let mut process = shell(
            &[
                "not json",
                r#"{"fields":{"message":"metrics listening","addr":"127.0.0.1:9001"}}"#,
                r#"{"fields":{"message":"api listening","addr":"127.0.0.1:9002"}}"#,
            ],
            false,
        );
        assert_eq!(process.listening("api listening").await, "127.0.0.1:9002");
        assert_eq!(
            process.listening("metrics listening").await,
            "127.0.0.1:9001"
        );
        let lines = process.log_lines();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[0], "not json");
        let log = process.log_path().to_owned();
        assert!(log.starts_with(logs_root()), "{}", log.display());
        drop(process);
        assert!(!log.exists(), "a passing test's log stays behind");
    }

    #[tokio::test]
    async fn a_process_that_exits_without_its_announcement_fails_the_wait() {
        let mut process = shell(&[r#"{"fields":{"message":"starting"}}"#], true);
        let waited = tokio::spawn(async move { process.listening("api listening").await });
        let panic = waited.await.unwrap_err().into_panic();
        let message = panic.downcast_ref::<String>().unwrap();
        assert!(
            message.contains("exited before logging \"api listening\""),
            "{message}"
        );
    }

    #[tokio::test]
    async fn exit_status_waits_for_the_end_of_the_log() {
        let mut process = shell(&["first", "last"], true);
        assert_eq!(process.exit_status().await.code(), Some(3));
        assert_eq!(process.log_lines(), ["first", "last"]);
    }
}
