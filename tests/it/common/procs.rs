//! Real processes for end-to-end tests: the sink, dispatchers, and polling with deadlines.
//! Every process is an `outbox_testkit::process::Process`: its log in a file, printed when
//! the test fails.

use outbox_testkit::TestDb;
use serde_json::Value;
use std::time::{Duration, Instant};

pub use outbox_testkit::process::{Process, DEADLINE};

/// The range the tests open in the egress guard: their sinks and fake feeds listen on
/// 127.0.0.1, which the dispatcher, the decider and outboxctl otherwise refuse.
pub const TEST_ALLOW_PRIVATE: &str = "127.0.0.0/8";

/// Spawns a binary and returns it with the base URL (`http://addr`) of the listener it
/// announced with `listening_message`.
pub async fn spawn_listening<A: AsRef<std::ffi::OsStr>>(
    binary: &str,
    args: &[A],
    envs: &[(&str, &str)],
    listening_message: &str,
) -> (Process, String) {
    let mut process = Process::spawn(binary, args, envs);
    let addr = process.listening(listening_message).await;
    (process, format!("http://{addr}"))
}

/// A running `sink`.
pub struct Sink {
    pub child: Process,
    pub base: String,
    http: reqwest::Client,
}

impl Sink {
    pub async fn start(args: &[&str]) -> Sink {
        let mut all = vec!["--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let (child, base) =
            spawn_listening(env!("CARGO_BIN_EXE_sink"), &all, &[], "sink listening").await;
        Sink {
            child,
            base,
            http: reqwest::Client::new(),
        }
    }

    pub fn hook_url(&self) -> String {
        format!("{}/hook", self.base)
    }

    pub fn lookup_template(&self) -> String {
        format!("{}/requests/{{key}}", self.base)
    }

    pub async fn stats(&self) -> Value {
        self.get("/stats").await
    }

    pub async fn records(&self, key: &str) -> Vec<Value> {
        self.get(&format!("/_sink/records?key={key}"))
            .await
            .as_array()
            .unwrap()
            .clone()
    }

    pub async fn all_records(&self) -> Vec<Value> {
        self.get("/_sink/records").await.as_array().unwrap().clone()
    }

    pub async fn faults(&self, faults: Value) {
        let response = self
            .http
            .post(format!("{}/_sink/faults", self.base))
            .json(&faults)
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "fault control refused {faults}"
        );
    }

    async fn get(&self, path: &str) -> Value {
        self.http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Waits until the sink's own stats satisfy `done`.
    pub async fn wait_for(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let stats = self.stats().await;
            if done(&stats) {
                return stats;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "sink never got to: {what}; stats {stats}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A running `sink` that is also an SMTP inbox (`--smtp-listen`, and `--smtps-listen`
/// when given).
pub struct SmtpSink {
    pub sink: Sink,
    /// The SMTP listener's address (`127.0.0.1:port`).
    pub smtp_addr: String,
    /// The implicit-TLS listener's address, when it has one.
    pub smtps_addr: Option<String>,
}

impl SmtpSink {
    pub async fn start(args: &[&str]) -> SmtpSink {
        SmtpSink::start_with(args, &[]).await
    }

    /// Started with `envs` too.
    pub async fn start_with(args: &[&str], envs: &[(&str, &str)]) -> SmtpSink {
        let mut all = vec!["--listen", "127.0.0.1:0", "--smtp-listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let (mut child, base) =
            spawn_listening(env!("CARGO_BIN_EXE_sink"), &all, envs, "sink listening").await;
        let smtp_addr = child.listening("sink SMTP listening").await;
        let smtps_addr = match args.contains(&"--smtps-listen") {
            true => Some(child.listening("sink SMTPS listening").await),
            false => None,
        };
        SmtpSink {
            sink: Sink {
                child,
                base,
                http: reqwest::Client::new(),
            },
            smtp_addr,
            smtps_addr,
        }
    }

    /// Every message the inbox received, in arrival order.
    pub async fn messages(&self) -> Vec<Value> {
        self.sink
            .get("/_sink/messages")
            .await
            .as_array()
            .unwrap()
            .clone()
    }

    /// Whether the sink logged a line containing `text`.
    pub fn logged(&self, text: &str) -> bool {
        self.sink
            .child
            .log_lines()
            .iter()
            .any(|line| line.contains(text))
    }
}

/// What a process's metrics listener at `base` serves on `/metrics`.
pub async fn metrics_text(http: &reqwest::Client, base: &str) -> String {
    let response = http.get(format!("{base}/metrics")).send().await.unwrap();
    response.text().await.unwrap()
}

/// Polls `/metrics` at `base` until `series` (its name and labels, as the text writes
/// them) is there with a value that satisfies `done`, and returns that value.
pub async fn wait_for_series(
    http: &reqwest::Client,
    base: &str,
    series: &str,
    done: impl Fn(f64) -> bool,
) -> f64 {
    let started = Instant::now();
    loop {
        let text = metrics_text(http, base).await;
        let value = text.lines().find_map(|line| {
            let value = line.strip_prefix(series)?.strip_prefix(' ')?;
            value.trim().parse::<f64>().ok()
        });
        if let Some(value) = value.filter(|value| done(*value)) {
            return value;
        }
        assert!(started.elapsed() < DEADLINE, "`{series}` stuck in {text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Dispatcher arguments for tests: quick retries and polls, and loopback opened in the
/// egress guard ([`TEST_ALLOW_PRIVATE`]), unless `extra` sets them.
pub fn dispatcher_args<'a>(db: &'a TestDb, worker: &'a str, extra: &[&'a str]) -> Vec<String> {
    let defaults = [
        ("--database-url", db.url.as_str()),
        ("--worker-id", worker),
        ("--retry-delays", "50ms,100ms"),
        ("--poll-interval", "100ms"),
        ("--lease", "1s"),
        ("--allow-private", TEST_ALLOW_PRIVATE),
    ];
    let mut args = Vec::new();
    for (flag, value) in defaults {
        if !extra.contains(&flag) {
            args.extend([flag.to_owned(), value.to_owned()]);
        }
    }
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

/// Starts a dispatcher that keeps running.
pub fn spawn_dispatcher(args: &[String], failpoints: Option<&str>) -> Process {
    let mut envs = vec![("RUST_LOG", "warn")];
    if let Some(failpoints) = failpoints {
        envs.push(("FAILPOINTS", failpoints));
    }
    Process::spawn(env!("CARGO_BIN_EXE_dispatcher"), args, &envs)
}

/// Starts a dispatcher with `args` and a metrics listener on an ephemeral port: the process
/// and that listener's base URL.
pub async fn spawn_dispatcher_with_metrics(
    args: &[String],
    envs: &[(&str, &str)],
) -> (Process, String) {
    let mut args = args.to_vec();
    args.extend(["--metrics-listen".to_owned(), "127.0.0.1:0".to_owned()]);
    let binary = env!("CARGO_BIN_EXE_dispatcher");
    spawn_listening(binary, &args, envs, "dispatcher metrics listening").await
}

/// Runs a dispatcher with `--drain` until it exits by itself; asserts it exits 0.
pub async fn drain(db: &TestDb, worker: &str, extra: &[&str]) {
    let mut args = dispatcher_args(db, worker, extra);
    args.push("--drain".into());
    let status = spawn_dispatcher(&args, None).exit_status().await;
    assert!(status.success(), "dispatcher exited with {status}");
}

/// Sends a signal to a child process.
pub fn signal(child: &tokio::process::Child, signal: &str) {
    let pid = child.id().expect("child is running").to_string();
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Polls a count query on the test database until it satisfies `done`.
pub async fn wait_for_db(db: &TestDb, sql: &str, done: impl Fn(i64) -> bool) -> i64 {
    let started = Instant::now();
    loop {
        let got: i64 = sqlx::query_scalar(sql).fetch_one(&db.pool).await.unwrap();
        if done(got) {
            return got;
        }
        assert!(started.elapsed() < DEADLINE, "`{sql}` stuck at {got}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
