//! `decider serve`: the approval API, the monitors on an interval and, when given an
//! address, the operator console, all stopped by one shutdown.

use anyhow::Context;
use outbox_runtime::http_server::ServerLimits;
use outbox_runtime::prometheus::Figures;
use outbox_runtime::shutdown::Shutdown;
use outbox_store::PgPool;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

use crate::news::NewsSource;

/// What `decider serve` serves, where, and how often the monitors run.
#[derive(Debug)]
pub struct ServeConfig {
    /// The approval API's address.
    pub listen: SocketAddr,
    /// Where `/metrics`, `/readyz` and `/healthz` are served, if anywhere.
    pub metrics_listen: Option<SocketAddr>,
    /// The console, when it is served.
    pub console: Option<ConsoleSettings>,
    /// How long clients may take and how many may connect, on every listener.
    pub limits: ServerLimits,
    /// How many of the API's alert listings may run at once, and for how long.
    pub listings: outbox_api::ListingLimits,
    /// How often the monitors run.
    pub interval: Duration,
    /// The news source the poller reads, if any.
    pub news: Option<NewsSource>,
    /// Evidence checkpoints made by this process when it wins their lock (`None`: never).
    pub evidence: Option<outbox_evidence::checkpoint::Settings>,
    /// The browser origins `/mcp` serves.
    pub mcp_allowed_origins: outbox_api::mcp::AllowedOrigins,
}

/// The operator console's address and sign-in settings.
#[derive(Debug)]
pub struct ConsoleSettings {
    /// Its address.
    pub listen: SocketAddr,
    /// Mark the session cookie `Secure`.
    pub secure_cookies: bool,
    /// How long a sign-in lasts.
    pub session_lifetime: Duration,
    /// Most password checks at once; default: one per core.
    pub max_password_checks: Option<NonZeroUsize>,
    /// A trace viewer's address with `{trace_id}`, to link an alert's trace from its page.
    pub trace_url_template: Option<String>,
}

/// Serves until `shutdown` resolves, then waits for the API, the monitors and the console
/// to finish. Every address is bound before anything is served, so a taken port is said
/// at once.
pub async fn serve(
    pool: PgPool,
    config: ServeConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let api = bind(config.listen).await?;
    let operations = match config.metrics_listen {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let console_listener = match &config.console {
        Some(console) => Some(bind(console.listen).await?),
        None => None,
    };
    // One shutdown for the API, the monitors and the console.
    let stopped = Shutdown::on(shutdown);
    let mut figures: Vec<Arc<dyn Figures>> = Vec::new();
    if let Some(settings) = &config.evidence {
        figures.push(settings.figures.clone());
    }
    let console_server = match (console_listener, config.console) {
        (Some(listener), Some(settings)) => {
            let password_checks = password_checks(&settings);
            figures.push(password_checks.clone());
            let console = outbox_console::ConsoleConfig {
                secure_cookies: settings.secure_cookies,
                session_lifetime: settings.session_lifetime,
                password_checks,
                trace_url_template: settings.trace_url_template,
                ..outbox_console::ConsoleConfig::default()
            };
            Some(tokio::spawn(outbox_console::serve(
                listener,
                pool.clone(),
                config.limits,
                console,
                stopped.clone().until_set(),
            )))
        }
        _ => None,
    };
    if let Some(settings) = config.evidence {
        tokio::spawn(outbox_evidence::checkpoint::run(
            pool.clone(),
            settings,
            stopped.clone(),
        ));
    }
    let monitors = tokio::spawn(crate::run_every(
        pool.clone(),
        config.interval,
        config.news,
        stopped.clone().until_set(),
    ));
    let settings = outbox_api::ApiSettings {
        limits: config.limits,
        listings: Some(config.listings),
        figures,
        mcp_allowed_origins: config.mcp_allowed_origins,
    };
    outbox_api::serve_with_settings(
        outbox_api::Listeners { api, operations },
        pool,
        settings,
        stopped.until_set(),
    )
    .await?;
    let _ = monitors.await;
    if let Some(console_server) = console_server {
        console_server.await??;
    }
    Ok(())
}

/// A listener on `addr`, or an error naming it.
async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr}"))
}

/// The bound on the console's password checks: as configured, or one per core.
fn password_checks(settings: &ConsoleSettings) -> Arc<outbox_console::PasswordChecks> {
    match settings.max_password_checks {
        Some(max) => {
            outbox_console::PasswordChecks::new(max, outbox_console::password_checks::DEFAULT_WAIT)
        }
        None => outbox_console::PasswordChecks::per_core(),
    }
}
