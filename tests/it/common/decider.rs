//! `decider` as the tests start it: [`DeciderServe`] builds one `decider serve` (its URL,
//! the listeners it opens, extra flags and environment) and [`Decider`] is the running
//! process with the base URL of each listener; [`run_once`] is one `decider run-once`.

use super::procs::{Process, TEST_ALLOW_PRIVATE};
use outbox_testkit::process::Run;

/// A `decider serve` to start: the approval API on an ephemeral port, monitors every hour
/// unless told otherwise, and the metrics and console listeners only when asked for.
pub struct DeciderServe<'a> {
    database_url: &'a str,
    interval: Option<&'a str>,
    metrics: bool,
    console: bool,
    flags: Vec<&'a str>,
    env: Vec<(&'a str, &'a str)>,
}

impl<'a> DeciderServe<'a> {
    pub fn on(database_url: &'a str) -> Self {
        DeciderServe {
            database_url,
            interval: Some("1h"),
            metrics: false,
            console: false,
            flags: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Also serves `/metrics`, `/readyz` and `/healthz` on an ephemeral port.
    pub fn with_metrics(mut self) -> Self {
        self.metrics = true;
        self
    }

    /// Also serves the operator console on an ephemeral port.
    pub fn with_console(mut self) -> Self {
        self.console = true;
        self
    }

    /// Runs the monitors at the decider's own default interval.
    pub fn default_interval(mut self) -> Self {
        self.interval = None;
        self
    }

    pub fn flags(mut self, flags: &[&'a str]) -> Self {
        self.flags.extend_from_slice(flags);
        self
    }

    pub fn env(mut self, key: &'a str, value: &'a str) -> Self {
        self.env.push((key, value));
        self
    }

    /// Starts it and waits until every listener it was given has been announced.
    pub async fn start(self) -> Decider {
        let mut args = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            self.database_url,
        ];
        if let Some(interval) = self.interval {
            args.extend(["--interval", interval]);
        }
        if self.metrics {
            args.extend(["--metrics-listen", "127.0.0.1:0"]);
        }
        if self.console {
            args.extend(["--console-listen", "127.0.0.1:0"]);
        }
        args.extend_from_slice(&self.flags);
        let mut process = Process::spawn(env!("CARGO_BIN_EXE_decider"), &args, &self.env);
        let base = |addr: String| format!("http://{addr}");
        let api = base(process.listening("approval API listening").await);
        let metrics = match self.metrics {
            true => Some(base(process.listening("decider metrics listening").await)),
            false => None,
        };
        let console = match self.console {
            true => Some(base(process.listening("console listening").await)),
            false => None,
        };
        Decider {
            process,
            api,
            metrics,
            console,
        }
    }
}

/// A running `decider serve`; killed when dropped.
pub struct Decider {
    pub process: Process,
    /// The approval API's base URL (`http://addr`).
    pub api: String,
    metrics: Option<String>,
    console: Option<String>,
}

impl Decider {
    /// The metrics listener's base URL.
    pub fn metrics(&self) -> &str {
        self.metrics
            .as_deref()
            .expect("the decider was started with_metrics")
    }

    /// The console's base URL.
    pub fn console(&self) -> &str {
        self.console
            .as_deref()
            .expect("the decider was started with_console")
    }
}

impl std::ops::Deref for Decider {
    type Target = Process;
    fn deref(&self) -> &Process {
        &self.process
    }
}

impl std::ops::DerefMut for Decider {
    fn deref_mut(&mut self) -> &mut Process {
        &mut self.process
    }
}

/// `decider run-once` on `database_url`, logging warnings only; the caller adds flags and
/// environment and runs it.
pub fn run_once(database_url: &str) -> Run {
    Run::new(env!("CARGO_BIN_EXE_decider"))
        .args(["run-once", "--database-url", database_url])
        .env("RUST_LOG", "warn")
}

/// `decider run-once` polling the news feed at `news_url`, with loopback opened in the
/// egress guard for the test's fake feed.
pub fn poll_news_once(database_url: &str, news_url: &str) -> Run {
    run_once(database_url).args([
        "--news-url",
        news_url,
        "--allow-private",
        TEST_ALLOW_PRIVATE,
    ])
}
