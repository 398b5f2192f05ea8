//! What every binary of the alert outbox shares.
//!
//! Layout: [`init_tracing`] / [`init_tracing_quiet`] (human or JSON logs), [`shutdown_signal`] (SIGTERM/SIGINT),
//! [`failpoints`] (crash points for tests, compiled in only with the `failpoints` feature),
//! [`prometheus`] (histograms and queue figures in the Prometheus text format),
//! [`http_server`] (the HTTP/1.1 server of every listening process, with deadlines for slow
//! clients and a cap on connections), [`process`] (one of the workspace's binaries as a
//! child process, waited for until it announces its listener), [`one_line`] and
//! [`exit_status`] (an error as one line, each cause once), [`DEFAULT_DATABASE_URL`].

pub mod http_server;
pub mod process;
pub mod prometheus;

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
pub fn exit_status(
    result: Result<(), Box<dyn std::error::Error + Send + Sync>>,
) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", one_line(err.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The database every binary uses unless told otherwise: the local server, no password.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Installs the global log subscriber: human-readable lines by default, one JSON object per
/// line with `LOG_FORMAT=json`. Verbosity comes from `RUST_LOG` (default `info`). Logs go
/// to stderr, so stdout stays clean for commands whose output is captured by scripts.
pub fn init_tracing() {
    init_tracing_with_default("info");
}

/// Like [`init_tracing`], but only warnings and errors unless `RUST_LOG` says otherwise:
/// for command-line tools, whose output is the answer.
pub fn init_tracing_quiet() {
    init_tracing_with_default("warn");
}

fn init_tracing_with_default(default_filter: &str) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second initialisation (tests calling this twice) is harmless and ignored.
    let _ = if json {
        builder.json().with_current_span(true).try_init()
    } else {
        builder.try_init()
    };
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
}
