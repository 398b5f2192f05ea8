//! What every binary of the alert outbox shares.
//!
//! Layout: [`init_tracing`] / [`init_tracing_quiet`] / [`init_tracing_for_benchmarks`]
//! (human or JSON logs, and span export when the `OTEL_*` variables ask for it;
//! `log_fields` and `log_json`: every value of every line, whichever crate logs it, shown
//! as text and bounded, and human lines leave out spans' OpenTelemetry attributes),
//! [`telemetry`] (that export, its figures for `/metrics`, and the W3C trace context of
//! spans),
//! [`shutdown_signal`] (SIGTERM/SIGINT),
//! [`shutdown`] (the one stop signal every listener and loop of a process is given),
//! [`failpoints`] (crash points for tests, compiled in only with the `failpoints` feature),
//! [`prometheus`] (histograms and queue figures in the Prometheus text format),
//! [`http_server`] (the HTTP/1.1 server of every listening process, with deadlines for slow
//! clients and a cap on connections), [`process`] (one of the workspace's binaries as a
//! child process, waited for until it announces its listener), [`one_line`] and
//! [`exit_status`] (an error as one line, each cause once), [`read_secret_file`] (a secret
//! kept off the command line), [`DEFAULT_DATABASE_URL`], [`private_postgres`] (a
//! throwaway PostgreSQL for the demo and the tests when none answers at the default
//! address).

pub mod http_server;
mod log_fields;
mod log_json;
pub mod private_postgres;
pub mod process;
pub mod prometheus;
pub mod shutdown;
pub mod telemetry;

/// An error and its causes on one line, each cause said once: libraries often repeat their
/// source's text in their own message ("error with configuration: invalid port number",
/// caused by "invalid port number"), so a cause already in the line is left out.
pub fn one_line(err: &(dyn std::error::Error + 'static)) -> String {
    let mut line = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

/// Ends a binary's `main`: success, or `error: <one line>` on stderr and a failure status.
/// The reason may echo input (a file's id, a destination's answer, a setting): it is shown
/// escaped (`outbox_core::untrusted::visible`), so that it stays one line and cannot act
/// on the terminal.
pub fn exit_status(
    result: Result<(), Box<dyn std::error::Error + Send + Sync>>,
) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!(
                "error: {}",
                outbox_core::untrusted::visible(&one_line(err.as_ref()))
            );
            std::process::ExitCode::FAILURE
        }
    }
}

/// Ends a binary's `main` once its runtime is gone (`run` is its `#[tokio::main]`): the
/// spans its tasks ended are exported first ([`telemetry::shutdown_tracing`]), then
/// [`exit_status`]. Every product binary's `main` ends with this one line:
/// `outbox_runtime::finish(run())`.
pub fn finish(
    result: Result<(), impl Into<Box<dyn std::error::Error + Send + Sync>>>,
) -> std::process::ExitCode {
    telemetry::shutdown_tracing();
    exit_status(result.map_err(Into::into))
}

/// The database every binary uses unless told otherwise: the local server, no password.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Installs the global log subscriber: human-readable lines by default, one JSON object per
/// line with `LOG_FORMAT=json` (with the `trace_id` and `span_id` of the current span when
/// spans are exported). Verbosity comes from `RUST_LOG` (default `info`), except for the
/// MCP library's debug and trace events, which are never logged (see [`never_logged`]).
/// Every value is shown as text and cut at 512 bytes (`log_fields`, `log_json`). Logs go
/// to stderr, so stdout stays clean for commands whose output is captured by scripts.
///
/// Spans are exported over OTLP when the standard `OTEL_*` variables ask for it (see
/// [`telemetry`]): those at info and above, whatever `RUST_LOG` says. `service` is the
/// service name unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` gives one. Call
/// [`telemetry::shutdown_tracing`] once the command has returned.
pub fn init_tracing(service: &str) {
    // The MCP library logs each request's start and end at info; served statelessly, that
    // is three lines for every tool call, which would bury the decider's own.
    init_tracing_with_default("info,rmcp=warn", service);
}

/// Like [`init_tracing`], but only warnings and errors unless `RUST_LOG` says otherwise:
/// for command-line tools, whose output is the answer.
pub fn init_tracing_quiet(service: &str) {
    init_tracing_with_default("warn", service);
}

/// Like [`init_tracing_quiet`], without sqlx's slow-statement warnings unless `RUST_LOG`
/// asks for them: for the benchmark, whose own statements (bulk loads of 100,000 alerts,
/// reading a drain's WAL records, dropping its databases) take seconds by design, and
/// whose figures are the report on speed.
pub fn init_tracing_for_benchmarks(service: &str) {
    init_tracing_with_default("warn,sqlx::query=error", service);
}

fn init_tracing_with_default(default_filter: &str, service: &str) {
    use tracing_subscriber::filter::FilterExt;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{fmt, EnvFilter, Layer};
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    // `RUST_LOG` filters what is logged, not what is exported: an operator who quiets the
    // logs still gets the traces (the export layer has its own filter).
    let (human, json) = if json {
        let layer = fmt::layer()
            .json()
            .with_current_span(true)
            .map_event_format(|json| telemetry::json::WithTraceIds(log_json::Bounded(json)))
            .with_writer(std::io::stderr);
        (None, Some(layer.with_filter(filter.and(never_logged()))))
    } else {
        let layer = fmt::layer()
            .fmt_fields(log_fields::HumanFields)
            .with_writer(std::io::stderr);
        (Some(layer.with_filter(filter.and(never_logged()))), None)
    };
    let (export, warnings) = telemetry::from_env(service);
    let (otel, pipeline) = export.unzip();
    // A second initialisation (tests calling this twice) is harmless and ignored; its
    // export pipeline, unused, stops when dropped.
    let installed = tracing_subscriber::registry()
        .with(human)
        .with(json)
        .with(otel)
        .try_init()
        .is_ok();
    if installed {
        if let Some(pipeline) = pipeline {
            pipeline.install();
        }
    }
    for warning in warnings {
        tracing::warn!(target: "outbox_runtime::telemetry", "{warning}");
    }
}

/// What no `RUST_LOG` turns on: the MCP library's (rmcp's) debug and trace events. They
/// hold every request and result whole (`received request` with a tool call's arguments,
/// `response message` with its result: an alert's payload, its evidence), and the
/// transport's messages as read and written. Its info, warning and error lines stay under
/// `RUST_LOG` (`rmcp=info` shows each request's start and end).
fn never_logged() -> tracing_subscriber::filter::Targets {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    Targets::new()
        .with_default(LevelFilter::TRACE)
        .with_target("rmcp", LevelFilter::INFO)
}

/// Largest secret file read, in bytes: a secret is one line.
const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// The secret in the file at `path`: its first line, without the line end. A secret given
/// as a flag's value is visible to every user of the machine (`ps`, `/proc/PID/cmdline`);
/// a file readable by its owner alone is not. The error says why in one line, never the
/// secret.
pub fn read_secret_file(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_SECRET_FILE_BYTES).read_to_string(&mut text))
        .map_err(|err| format!("reading {}: {err}", path.display()))?;
    let line = text.lines().next().unwrap_or("");
    if line.trim().is_empty() {
        return Err(format!(
            "{} holds no secret on its first line",
            path.display()
        ));
    }
    Ok(line.to_owned())
}

/// Resolves when the process is asked to stop (SIGTERM or SIGINT).
pub async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => tracing::info!("interrupt received; shutting down"),
        () = terminate => tracing::info!("terminate received; shutting down"),
    }
}

/// Guard that keeps crash points configured from the `FAILPOINTS` environment variable
/// (e.g. `FAILPOINTS=approve-after-write=pause`) for the life of the process.
#[derive(Debug)]
pub struct Failpoints {
    #[cfg(feature = "failpoints")]
    _scenario: fail::FailScenario<'static>,
}

/// Activates the crash points named in `FAILPOINTS`. Without the `failpoints` feature the
/// crash points are not compiled in at all and this does nothing.
pub fn failpoints() -> Failpoints {
    Failpoints {
        #[cfg(feature = "failpoints")]
        _scenario: fail::FailScenario::setup(),
    }
}

#[cfg(test)]
mod tests {
    use super::read_secret_file;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn each_cause_is_said_once() {
        let err = Layer(
            "database error: error with configuration: invalid port number",
            Some(Box::new(Layer(
                "error with configuration: invalid port number",
                Some(Box::new(Layer("invalid port number", None))),
            ))),
        );
        assert_eq!(
            super::one_line(&err),
            "database error: error with configuration: invalid port number"
        );
        let err = Layer(
            "reading contracts.csv",
            Some(Box::new(Layer("No such file", None))),
        );
        assert_eq!(super::one_line(&err), "reading contracts.csv: No such file");
    }

    #[test]
    fn a_secret_file_gives_its_first_line() {
        let dir = std::env::temp_dir().join(format!("outbox-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("secret");
        std::fs::write(&file, "relay:pass word\r\nignored\n").expect("written");
        assert_eq!(read_secret_file(&file).as_deref(), Ok("relay:pass word"));
        std::fs::write(&file, "\nsecond").expect("written");
        let err = read_secret_file(&file).expect_err("blank first line");
        assert!(err.contains("holds no secret"), "{err}");
        assert!(read_secret_file(&dir.join("absent")).is_err());
        std::fs::remove_dir_all(&dir).expect("removed");
    }
}
