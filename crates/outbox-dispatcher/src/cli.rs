//! The `dispatcher` program's command line, and what it runs once parsed: the tenants'
//! templates compiled, the database reached, then the dispatcher ([`crate::run`]).

use clap::Parser;
use outbox_core::duration::parse_positive;
use outbox_core::retry::RetrySchedule;
use outbox_core::sealing::SealingKeys;
use outbox_evidence::checkpoint::{self, CheckpointInterval};
use std::net::SocketAddr;
use std::time::Duration;

use crate::{
    default_worker_id, Config, TenantTemplates, Transport, DEFAULT_QUEUE_VACUUM_AFTER, POOL_PLANS,
};

/// Claims due alerts, sends them with idempotency keys, records what destinations confirm.
// `dispatcher --help` opens with the product's description, which the binary sets.
#[derive(Debug, Parser)]
#[command(
    name = "dispatcher",
    version = outbox_store::schema::version_line(),
    after_help = "Delivery, outcomes and every flag: docs/delivery.md."
)]
pub struct Cli {
    /// PostgreSQL connection URL.
    #[arg(long, env = "DATABASE_URL", default_value = outbox_runtime::DEFAULT_DATABASE_URL, hide_env_values = true)]
    database_url: String,
    /// Name in leases and evidence lines (default: host:pid).
    #[arg(long, env = "DISPATCHER_WORKER_ID")]
    worker_id: Option<String>,
    /// Most rows claimed per statement.
    #[arg(long, env = "DISPATCHER_BATCH_SIZE", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    batch_size: u32,
    /// Most rows this process holds in `sending` at once (its crash blast radius).
    #[arg(long, env = "DISPATCHER_MAX_IN_FLIGHT", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_in_flight: u32,
    /// Most sends (requests, SMTP dialogues, lookups) this process runs at once, over all
    /// destinations (default: no cap beyond --max-in-flight and the destinations' bounds).
    /// Rows claimed beyond it wait in the process, so claims stay large.
    #[arg(long, env = "DISPATCHER_MAX_CONCURRENT_SENDS", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_concurrent_sends: Option<u32>,
    /// Minimum lease per claim; always at least two request timeouts plus 1s.
    #[arg(long, env = "DISPATCHER_LEASE", default_value = "30s", value_parser = parse_positive)]
    lease: Duration,
    /// How often to look for due work when no wake-up arrives.
    #[arg(long, env = "DISPATCHER_POLL_INTERVAL", default_value = "1s", value_parser = parse_positive)]
    poll_interval: Duration,
    /// Delays before retries 1, 2, ...; the last repeats. Full jitter applies.
    #[arg(long, env = "DISPATCHER_RETRY_DELAYS", default_value = "5s,30s,2m,10m,30m,1h,3h,6h", value_parser = RetrySchedule::parse)]
    retry_delays: RetrySchedule,
    /// Exit once nothing is due (for tests and cron-style runs).
    #[arg(long, env = "DISPATCHER_DRAIN")]
    drain: bool,
    /// With --drain, also wait for work due within this long (retries, lookups, leases).
    #[arg(long, env = "DISPATCHER_DRAIN_HORIZON", default_value = "0s", value_parser = outbox_core::duration::parse)]
    drain_horizon: Duration,
    /// On SIGTERM/SIGINT, how long sends in flight may take to finish.
    #[arg(long, env = "DISPATCHER_SHUTDOWN_DEADLINE", default_value = "20s", value_parser = parse_positive)]
    shutdown_deadline: Duration,
    /// Serve /metrics, /healthz and /readyz on this address.
    #[arg(long, env = "DISPATCHER_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Connect timeout for every destination.
    #[arg(long, env = "DISPATCHER_CONNECT_TIMEOUT", default_value = "5s", value_parser = parse_positive)]
    connect_timeout: Duration,
    /// Keys that open sealed signing secrets: `id:base64,...` (32-byte keys, the first is
    /// current). Needed when `outboxctl` sealed the secrets with them.
    #[arg(long, env = "OUTBOX_SECRET_KEYS", default_value = "", hide_env_values = true, hide_default_value = true, value_parser = parse_secret_keys)]
    secret_keys: SealingKeys,
    /// Most database connections this process opens.
    #[arg(long, env = "DISPATCHER_MAX_CONNECTIONS", default_value_t = 16)]
    max_connections: u32,
    /// Address ranges (CIDR, comma-separated) that sends and lookups may reach although
    /// they are loopback, private, link-local, ...: for development, tests and demos only.
    #[arg(long, env = "OUTBOX_ALLOW_PRIVATE", default_value = "", value_name = "CIDR,...", value_parser = outbox_egress::AllowList::parse)]
    allow_private: outbox_egress::AllowList,
    /// Folder of each tenant's own email templates: `DIR/<tenant name>/<kind>.<locale>.
    /// subject.txt|txt|html`. Compiled at start (a broken one stops the dispatcher) and
    /// read again on SIGHUP.
    #[arg(long, env = "DISPATCHER_TEMPLATES_DIR", value_name = "DIR")]
    templates_dir: Option<std::path::PathBuf>,
    /// How often to report sends per destination to the database, where a destination
    /// whose every send has failed for its window (`outboxctl destination add|update
    /// --disable-after-failing`) is disabled.
    #[arg(long, env = "DISPATCHER_HEALTH_REPORT_INTERVAL", default_value = "5s", value_parser = parse_positive)]
    health_report_interval: Duration,
    /// Vacuum the outbox table once it has this many dead tuples (two per delivery), or
    /// `off` to leave it to autovacuum alone. Needs the table's owner; checked every 2 s.
    #[arg(long, env = "DISPATCHER_QUEUE_VACUUM_AFTER", default_value_t = VacuumAfter(Some(DEFAULT_QUEUE_VACUUM_AFTER)), value_name = "DEAD_TUPLES|off", value_parser = parse_vacuum_after)]
    queue_vacuum_after: VacuumAfter,
    /// How often to make an evidence checkpoint (whichever decider or dispatcher wins a
    /// lock makes it), or `off`. Signed with `OUTBOX_EVIDENCE_SIGNING_KEY` when it is set.
    #[arg(long, env = "OUTBOX_CHECKPOINT_INTERVAL", default_value_t = CheckpointInterval(Some(checkpoint::DEFAULT_INTERVAL)), value_name = "DURATION|off", value_parser = checkpoint::parse_interval)]
    checkpoint_interval: CheckpointInterval,
    /// Append every checkpoint, as a signed note, to this file (made if missing): a
    /// record outside the database that `outboxctl evidence verify --checkpoints`
    /// holds the database to. Stops, with an ERROR, when the database no longer holds
    /// what it published.
    #[arg(long, env = "OUTBOX_CHECKPOINT_LOG", value_name = "FILE")]
    checkpoint_log: Option<std::path::PathBuf>,
}

/// `--queue-vacuum-after`: a number of dead tuples, or `off`.
#[derive(Debug, Clone, Copy)]
struct VacuumAfter(Option<u64>);

impl std::fmt::Display for VacuumAfter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(n) => write!(f, "{n}"),
            None => f.write_str("off"),
        }
    }
}

fn parse_vacuum_after(text: &str) -> Result<VacuumAfter, String> {
    if text == "off" {
        return Ok(VacuumAfter(None));
    }
    match text.parse::<u64>() {
        Ok(n) if n > 0 => Ok(VacuumAfter(Some(n))),
        _ => Err(format!(
            "`{text}` is neither a positive number of dead tuples nor `off`"
        )),
    }
}

/// Runs the parsed command line: the tenants' templates compiled, the database reached
/// (with the schema this build expects), then the dispatcher until SIGTERM/SIGINT, or
/// with `--drain` until nothing is due.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    // Before anything else: a broken template is a configuration error to fix first.
    let templates = match &cli.templates_dir {
        Some(dir) => {
            TenantTemplates::load(dir).map_err(|err| anyhow::anyhow!("--templates-dir: {err}"))?
        }
        None => TenantTemplates::default(),
    };
    // Each connection error already names the server, the cause and what to do.
    let pool = outbox_store::connect_with_retry(
        &cli.database_url,
        "dispatcher",
        cli.max_connections,
        POOL_PLANS,
        Duration::from_secs(60),
    )
    .await?;
    let ran = deliver(cli, templates, pool.clone()).await;
    outbox_store::close_at_exit(&pool).await;
    ran
}

/// Everything from the schema check to the end of the dispatcher's run, on `pool`.
async fn deliver(
    cli: Cli,
    templates: TenantTemplates,
    pool: outbox_store::PgPool,
) -> anyhow::Result<()> {
    outbox_store::schema::check_current(&pool).await?;
    let config = Config {
        worker_id: cli.worker_id.unwrap_or_else(default_worker_id),
        batch_size: cli.batch_size,
        max_in_flight: cli.max_in_flight,
        max_concurrent_sends: cli.max_concurrent_sends,
        lease: cli.lease,
        poll_interval: cli.poll_interval,
        retry_schedule: cli.retry_delays,
        drain: cli.drain.then_some(cli.drain_horizon),
        shutdown_deadline: cli.shutdown_deadline,
        metrics_listen: cli.metrics_listen,
        connect_timeout: cli.connect_timeout,
        transport: Transport::Http,
        secret_keys: cli.secret_keys,
        egress: outbox_egress::Guard::new(cli.allow_private),
        templates: std::sync::Arc::new(templates),
        templates_dir: cli.templates_dir,
        health_report_interval: cli.health_report_interval,
        queue_vacuum_after: cli.queue_vacuum_after.0,
        evidence: cli.checkpoint_interval.settings(cli.checkpoint_log)?,
    };
    crate::run(pool, config, outbox_runtime::shutdown_signal()).await?;
    Ok(())
}

fn parse_secret_keys(spec: &str) -> Result<SealingKeys, String> {
    SealingKeys::parse(spec).map_err(|err| err.to_string())
}
