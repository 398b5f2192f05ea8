//! `decider`: approves alerts: `decider serve` (the approval API and the monitors on an
//! interval), `decider run-once` (the monitors once, for cron).

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::time::Duration;

/// Approves alerts: one alert per identity, written with its outbox row in one transaction.
#[derive(Debug, Parser)]
#[command(name = "decider", version, about)]
struct Cli {
    /// PostgreSQL connection URL.
    #[arg(long, env = "DATABASE_URL", default_value = outbox_runtime::DEFAULT_DATABASE_URL, global = true, hide_env_values = true)]
    database_url: String,
    /// Most database connections this process opens.
    #[arg(
        long,
        env = "DECIDER_MAX_CONNECTIONS",
        default_value_t = 16,
        global = true
    )]
    max_connections: u32,
    /// Address ranges (CIDR, comma-separated) the news poller may reach although they are
    /// loopback, private, link-local, ...: for development, tests and demos only.
    #[arg(long, env = "OUTBOX_ALLOW_PRIVATE", default_value = "", value_name = "CIDR,...", value_parser = outbox_egress::AllowList::parse, global = true)]
    allow_private: outbox_egress::AllowList,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the approval API (`POST /v1/alerts`, ...) and `/healthz`, `/metrics` and
    /// `/readyz` on `--metrics-listen`, and run the monitors every `--interval`.
    Serve {
        /// Address to listen on.
        #[arg(long, env = "DECIDER_LISTEN", default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Address to serve `/metrics`, `/readyz` and `/healthz` on, for operators (the
        /// metrics span every tenant). Not served unless given.
        #[arg(long, env = "DECIDER_METRICS_LISTEN")]
        metrics_listen: Option<SocketAddr>,
        #[command(flatten)]
        console: ConsoleArgs,
        #[command(flatten)]
        limits: ClientLimits,
        /// How often the monitors run.
        #[arg(long, env = "DECIDER_INTERVAL", default_value = "5m", value_parser = outbox_core::duration::parse_positive)]
        interval: Duration,
        #[command(flatten)]
        news: NewsArgs,
    },
    /// Evaluate every monitor once and exit (for cron).
    RunOnce {
        /// The clock, RFC 3339 (for tests and backfills); default: now.
        #[arg(long)]
        now: Option<jiff::Timestamp>,
        #[command(flatten)]
        news: NewsArgs,
    },
}

/// The operator console: off unless given an address.
#[derive(Debug, clap::Args)]
struct ConsoleArgs {
    /// Address to serve the operator console on (`/console`), for operators' network.
    /// Not served unless given. Accounts: `outboxctl operator add`.
    #[arg(long, env = "DECIDER_CONSOLE_LISTEN")]
    console_listen: Option<SocketAddr>,
    /// Mark the console's session cookie Secure: set it when operators reach the console
    /// over TLS (through a proxy that terminates it).
    #[arg(long, env = "DECIDER_CONSOLE_SECURE_COOKIES")]
    console_secure_cookies: bool,
    /// How long a console sign-in lasts.
    #[arg(long, env = "DECIDER_CONSOLE_SESSION_LIFETIME", default_value = "8h", value_parser = outbox_core::duration::parse_positive)]
    console_session_lifetime: Duration,
    /// Most console password checks running at once (each takes 19 MiB and a core for a
    /// moment); a sign-in that finds none free within a few seconds is answered 503.
    /// Default: the number of cores.
    #[arg(long, env = "DECIDER_CONSOLE_MAX_PASSWORD_CHECKS")]
    console_max_password_checks: Option<std::num::NonZeroUsize>,
}

/// How long clients may take, and how many may be connected at once (every listener).
#[derive(Debug, clap::Args)]
struct ClientLimits {
    /// Close a connection whose request head is not complete this long after the
    /// connection (or after the head's first byte).
    #[arg(long, env = "DECIDER_HEADER_TIMEOUT", default_value = "10s", value_parser = outbox_core::duration::parse_positive)]
    header_timeout: Duration,
    /// Close a connection whose request body is not complete this long after its head.
    #[arg(long, env = "DECIDER_BODY_TIMEOUT", default_value = "30s", value_parser = outbox_core::duration::parse_positive)]
    body_timeout: Duration,
    /// Close a keep-alive connection that sends no request for this long.
    #[arg(long, env = "DECIDER_IDLE_TIMEOUT", default_value = "75s", value_parser = outbox_core::duration::parse_positive)]
    idle_timeout: Duration,
    /// Most client connections open at once, per listener; more are closed as soon as they
    /// arrive.
    #[arg(long, env = "DECIDER_MAX_CLIENT_CONNECTIONS", default_value = "512")]
    max_client_connections: std::num::NonZeroUsize,
}

impl ClientLimits {
    fn server_limits(&self) -> outbox_runtime::http_server::ServerLimits {
        outbox_runtime::http_server::ServerLimits {
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_client_connections.get(),
        }
    }
}

#[derive(Debug, clap::Args)]
struct NewsArgs {
    /// A Webz.io-compatible news endpoint to poll for the watchlists' queries.
    #[arg(long, env = "NEWS_URL")]
    news_url: Option<String>,
    /// Its API token.
    #[arg(long, env = "WEBZ_TOKEN", hide_env_values = true)]
    webz_token: Option<String>,
}

impl NewsArgs {
    fn source(self, allow: &outbox_egress::AllowList) -> Option<outbox_decider::news::NewsSource> {
        self.news_url.map(|url| outbox_decider::news::NewsSource {
            url,
            token: self.webz_token,
            egress: outbox_egress::Guard::new(allow.clone()),
        })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    outbox_runtime::init_tracing();
    let _failpoints = outbox_runtime::failpoints();
    let pool = outbox_store::connect_with_retry(
        &cli.database_url,
        "decider",
        cli.max_connections,
        Duration::from_secs(60),
    )
    .await
    .context("connecting to the database")?;
    match cli.command {
        Command::Serve {
            listen,
            metrics_listen,
            console,
            limits,
            interval,
            news,
        } => {
            let api = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("listening on {listen}"))?;
            let operations = match metrics_listen {
                Some(addr) => Some(
                    tokio::net::TcpListener::bind(addr)
                        .await
                        .with_context(|| format!("listening on {addr}"))?,
                ),
                None => None,
            };
            let console_listener = match console.console_listen {
                Some(addr) => Some(
                    tokio::net::TcpListener::bind(addr)
                        .await
                        .with_context(|| format!("listening on {addr}"))?,
                ),
                None => None,
            };
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let mut monitors_stopped = stopped.clone();
            let mut console_stopped = stopped.clone();
            let password_checks = match console.console_max_password_checks {
                Some(max) => outbox_console::PasswordChecks::new(
                    max,
                    outbox_console::password_checks::DEFAULT_WAIT,
                ),
                None => outbox_console::PasswordChecks::per_core(),
            };
            let mut figures: Vec<std::sync::Arc<dyn outbox_runtime::prometheus::Figures>> =
                Vec::new();
            if console_listener.is_some() {
                figures.push(password_checks.clone());
            }
            let console_server = console_listener.map(|listener| {
                tokio::spawn(outbox_console::serve(
                    listener,
                    pool.clone(),
                    limits.server_limits(),
                    outbox_console::ConsoleConfig {
                        secure_cookies: console.console_secure_cookies,
                        session_lifetime: console.console_session_lifetime,
                        password_checks,
                        ..outbox_console::ConsoleConfig::default()
                    },
                    async move {
                        let _ = console_stopped.wait_for(|s| *s).await;
                    },
                ))
            });
            let monitors = tokio::spawn(outbox_decider::run_every(
                pool.clone(),
                interval,
                news.source(&cli.allow_private),
                async move {
                    let _ = monitors_stopped.wait_for(|s| *s).await;
                },
            ));
            outbox_api::serve_with_figures(
                outbox_api::Listeners { api, operations },
                pool,
                limits.server_limits(),
                figures,
                async move {
                    outbox_runtime::shutdown_signal().await;
                    let _ = stop.send(true);
                },
            )
            .await?;
            let _ = monitors.await;
            if let Some(console_server) = console_server {
                console_server.await??;
            }
        }
        Command::RunOnce { now, news } => {
            let now = now.unwrap_or_else(jiff::Timestamp::now);
            let summary =
                outbox_decider::run_once(&pool, now, news.source(&cli.allow_private).as_ref())
                    .await?;
            println!(
                "{} renewal alert(s), {} news alert(s), {} article(s) ingested",
                summary.renewal_alerts, summary.news_alerts, summary.articles_ingested
            );
        }
    }
    Ok(())
}
