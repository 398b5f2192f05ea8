//! The `decider` program's command line (`decider serve`, `decider run-once`), and what
//! each command runs once the database is reached.

use clap::{Parser, Subcommand};
use outbox_evidence::checkpoint::{self, CheckpointInterval};
use std::net::SocketAddr;
use std::time::Duration;

use crate::serve::{self, ConsoleSettings, ServeConfig};

/// Approves alerts: one alert per identity, written with its outbox row in one transaction.
// `decider --help` opens with the product's description, which the binary sets.
#[derive(Debug, Parser)]
#[command(
    name = "decider",
    version = outbox_store::schema::version_line(),
    after_help = "The approval API: docs/approval-api.md. The monitors: docs/monitors.md. The console: docs/console.md."
)]
pub struct Cli {
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

/// `serve` or `run-once`.
#[derive(Debug, Subcommand)]
// Parsed once at start and never moved around: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
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
        #[command(flatten)]
        listings: ListingArgs,
        /// How often the monitors run.
        #[arg(long, env = "DECIDER_INTERVAL", default_value = "5m", value_parser = outbox_core::duration::parse_positive)]
        interval: Duration,
        #[command(flatten)]
        news: NewsArgs,
        /// How often to make an evidence checkpoint (whichever decider or dispatcher wins
        /// a lock makes it), or `off`. Signed with `OUTBOX_EVIDENCE_SIGNING_KEY` when set.
        #[arg(long, env = "OUTBOX_CHECKPOINT_INTERVAL", default_value_t = CheckpointInterval(Some(checkpoint::DEFAULT_INTERVAL)), value_name = "DURATION|off", value_parser = checkpoint::parse_interval)]
        checkpoint_interval: CheckpointInterval,
        /// Append every checkpoint, as a signed note, to this file (made if missing): a
        /// record outside the database that `outboxctl evidence verify --checkpoints`
        /// holds the database to. Stops, with an ERROR, when the database no longer holds
        /// what it published.
        #[arg(long, env = "OUTBOX_CHECKPOINT_LOG", value_name = "FILE")]
        checkpoint_log: Option<std::path::PathBuf>,
        /// Browser origins whose pages may call `/mcp` (comma-separated, as browsers send
        /// them: `https://agents.example.com`). A request with any other `Origin` header is
        /// refused with 403, against DNS rebinding; clients that are not browsers send no
        /// `Origin` and are served. Default: none.
        #[arg(long, env = "DECIDER_MCP_ALLOWED_ORIGINS", default_value = "", value_name = "ORIGIN,...", value_parser = outbox_api::mcp::AllowedOrigins::parse)]
        mcp_allowed_origins: outbox_api::mcp::AllowedOrigins,
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
    /// A trace viewer's address for one trace, with `{trace_id}` where the trace id goes
    /// (`https://tempo.example/trace/{trace_id}`): the console links each alert's trace
    /// there. Without it, the trace id is shown unlinked.
    #[arg(long, env = "DECIDER_TRACE_URL_TEMPLATE", value_parser = outbox_console::parse_trace_url_template)]
    trace_url_template: Option<String>,
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
    /// Most client connections open at once, per listener. A new one past it takes the
    /// place of the longest-idle connection, or is closed at once when none is idle.
    #[arg(long, env = "DECIDER_MAX_CLIENT_CONNECTIONS", default_value = "512")]
    max_client_connections: std::num::NonZeroUsize,
    /// Most connections open at once from one client address (an IPv6 client's /64), per
    /// listener; past it, the client's own longest-idle connection makes room. Behind a
    /// reverse proxy every connection is the proxy's: set it to --max-client-connections.
    #[arg(
        long,
        env = "DECIDER_MAX_CLIENT_CONNECTIONS_PER_ADDRESS",
        default_value = "64"
    )]
    max_client_connections_per_address: std::num::NonZeroUsize,
}

/// How the approval API's alert listings (`GET /v1/alerts`, MCP `list_alerts`) are
/// bounded, so that they cannot take the database connections approvals need.
#[derive(Debug, clap::Args)]
struct ListingArgs {
    /// Most alert listings of one tenant running at once; one more waits up to a second
    /// for its turn, then is answered 429.
    #[arg(long, env = "DECIDER_MAX_LISTINGS_PER_TENANT", default_value_t = outbox_api::ListingLimits::DEFAULT_PER_TENANT)]
    max_listings_per_tenant: std::num::NonZeroUsize,
    /// Most database connections alert listings of all tenants hold at once, of
    /// --max-connections (the rest stay for approvals); a listing that finds none free
    /// within a second is answered 503. Default: a quarter of --max-connections, at least 1.
    #[arg(long, env = "DECIDER_MAX_LISTING_CONNECTIONS")]
    max_listing_connections: Option<std::num::NonZeroUsize>,
    /// How long an alert listing's query may run before the database stops it and the
    /// listing is answered 503.
    #[arg(long, env = "DECIDER_LISTING_TIMEOUT", default_value = "3s", value_parser = outbox_core::duration::parse_positive)]
    listing_timeout: Duration,
}

impl ListingArgs {
    /// The bounds for a pool of `max_connections`, which must keep at least one connection
    /// out of the listings' reach.
    fn limits(&self, max_connections: u32) -> anyhow::Result<outbox_api::ListingLimits> {
        let connections = self
            .max_listing_connections
            .unwrap_or_else(|| outbox_api::ListingLimits::default_connections(max_connections));
        if max_connections > 1 && connections.get() >= max_connections as usize {
            anyhow::bail!(
                "--max-listing-connections ({connections}) must be below --max-connections \
                 ({max_connections}): approvals need the connections listings cannot take"
            );
        }
        Ok(outbox_api::ListingLimits {
            per_tenant: self.max_listings_per_tenant,
            connections,
            timeout: self.listing_timeout,
        })
    }
}

impl ClientLimits {
    /// The limits as every listener applies them.
    fn server_limits(&self) -> outbox_runtime::http_server::ServerLimits {
        outbox_runtime::http_server::ServerLimits {
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_client_connections.get(),
            max_connections_per_client: self.max_client_connections_per_address.get(),
        }
    }
}

/// Where the news poller reads articles from: off unless given a URL.
#[derive(Debug, clap::Args)]
struct NewsArgs {
    /// A Webz.io-compatible news endpoint to poll for the watchlists' queries.
    #[arg(long, env = "NEWS_URL")]
    news_url: Option<String>,
    /// Its API token. Given as a flag it is visible to every user of the machine (`ps`):
    /// prefer `WEBZ_TOKEN` or `--webz-token-file`.
    #[arg(
        long,
        env = "WEBZ_TOKEN",
        hide_env_values = true,
        conflicts_with = "webz_token_file"
    )]
    webz_token: Option<String>,
    /// A file whose first line is the API token.
    #[arg(long, env = "WEBZ_TOKEN_FILE", value_name = "PATH")]
    webz_token_file: Option<std::path::PathBuf>,
}

impl NewsArgs {
    /// The news source to poll, if `--news-url` names one, with its token read.
    fn source(
        &self,
        allow: &outbox_egress::AllowList,
    ) -> anyhow::Result<Option<crate::news::NewsSource>> {
        let token = match &self.webz_token_file {
            Some(path) => Some(
                outbox_runtime::read_secret_file(path)
                    .map_err(|why| anyhow::anyhow!("--webz-token-file: {why}"))?,
            ),
            None => self.webz_token.clone(),
        };
        Ok(self.news_url.clone().map(|url| crate::news::NewsSource {
            url,
            token,
            egress: outbox_egress::Guard::new(allow.clone()),
        }))
    }
}

impl ConsoleArgs {
    /// The console's settings, when it is served (`--console-listen`).
    fn settings(&self) -> Option<ConsoleSettings> {
        Some(ConsoleSettings {
            listen: self.console_listen?,
            secure_cookies: self.console_secure_cookies,
            session_lifetime: self.console_session_lifetime,
            max_password_checks: self.console_max_password_checks,
            trace_url_template: self.trace_url_template.clone(),
        })
    }
}

/// Whether the subcommand's `--webz-token` came from the command line (rather than
/// `WEBZ_TOKEN`), where every user of the machine can read it.
pub fn token_on_command_line(matches: &clap::ArgMatches) -> bool {
    matches.subcommand().is_some_and(|(_, sub)| {
        sub.value_source("webz_token") == Some(clap::parser::ValueSource::CommandLine)
    })
}

/// Runs the parsed command: the news source read first, then the database reached (with
/// the schema this build expects), then `serve` until SIGTERM/SIGINT, or `run-once`.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    // Before connecting: a token file that cannot be read is said at once.
    let news = match &cli.command {
        Command::Serve { news, .. } | Command::RunOnce { news, .. } => {
            news.source(&cli.allow_private)?
        }
    };
    // And so are listing bounds that would leave approvals no connection.
    if let Command::Serve { listings, .. } = &cli.command {
        listings.limits(cli.max_connections)?;
    }
    // Each connection error already names the server, the cause and what to do.
    let pool = outbox_store::connect_with_retry(
        &cli.database_url,
        "decider",
        cli.max_connections,
        outbox_store::Plans::Chosen,
        Duration::from_secs(60),
    )
    .await?;
    let ran = run_on(&pool, cli.command, news).await;
    outbox_store::close_at_exit(&pool).await;
    ran
}

/// Runs `command` on `pool`, once the schema is the one this build expects.
async fn run_on(
    pool: &outbox_store::PgPool,
    command: Command,
    news: Option<crate::news::NewsSource>,
) -> anyhow::Result<()> {
    outbox_store::schema::check_current(pool).await?;
    match command {
        Command::Serve {
            listen,
            metrics_listen,
            console,
            limits,
            listings,
            interval,
            news: _,
            checkpoint_interval,
            checkpoint_log,
            mcp_allowed_origins,
        } => {
            // Before serving: a malformed key or a log that cannot be kept is a
            // configuration error to fix first.
            let evidence = checkpoint_interval.settings(checkpoint_log)?;
            let config = ServeConfig {
                listen,
                metrics_listen,
                console: console.settings(),
                limits: limits.server_limits(),
                listings: listings.limits(pool.options().get_max_connections())?,
                interval,
                news,
                evidence,
                mcp_allowed_origins,
            };
            serve::serve(pool.clone(), config, outbox_runtime::shutdown_signal()).await
        }
        Command::RunOnce { now, news: _ } => {
            let now = now.unwrap_or_else(jiff::Timestamp::now);
            let summary = crate::run_once(pool, now, news.as_ref()).await?;
            println!(
                "{} renewal alert(s), {} news alert(s), {} article(s) ingested",
                summary.renewal_alerts, summary.news_alerts, summary.articles_ingested
            );
            Ok(())
        }
    }
}
