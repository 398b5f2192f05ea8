//! The external driver of the PostgreSQL queue peers' harness: given the harness's
//! database and sink, it resets its schema, approves N alerts in bulk, drains them with a
//! dispatcher, checks what the tables and the sink show, and prints one `RESULT {json}`
//! line with the fields the harness reads (plus our own, such as the most rows ever in
//! `sending`).
//!
//! Variants: `default` (one dispatcher in this process, HTTP), `noop` (the HTTP step
//! replaced by a no-op: the pipeline's ceiling), `p1`, `p2`, `p4` (that many `dispatcher`
//! processes side by side).

use anyhow::Context;
use outbox_dispatcher::Transport;
use serde_json::json;

use crate::dispatchers::{self, Dispatchers, DrainSettings};
use crate::drain::drain;
use crate::workload::{DestinationSettings, Workload};

/// The harness's arguments (`--n --variant --db --sink`), and the dispatcher's settings.
#[derive(Debug, Clone, clap::Args)]
pub struct PeerRun {
    /// Alerts in the backlog.
    #[arg(long)]
    pub n: u64,
    /// default, noop, p1, p2 or p4.
    #[arg(long, default_value = "default")]
    pub variant: String,
    /// The harness's database URL (its `public` schema is reset).
    #[arg(long)]
    pub db: String,
    /// The harness's sink, e.g. http://127.0.0.1:18080.
    #[arg(long)]
    pub sink: String,
    /// Rows per claim statement.
    #[arg(long, default_value_t = BATCH_SIZE)]
    pub batch_size: u32,
    /// Rows in `sending` per dispatcher (its crash blast radius).
    #[arg(long, default_value_t = MAX_IN_FLIGHT)]
    pub max_in_flight: u32,
    /// Requests in flight to the sink per dispatcher (`--max-concurrent-sends`).
    #[arg(long, default_value_t = CONCURRENT_SENDS)]
    pub concurrent_sends: u32,
    /// The database connection's `sslmode` when `--db` names none. The peers' drivers
    /// (node-postgres) connect without TLS unless told to, so by default this driver does
    /// too, and every system in the harness talks to the database over the same transport;
    /// `prefer` measures with TLS wherever the server offers it, as the product connects
    /// by default.
    #[arg(long, default_value = "disable")]
    pub db_sslmode: String,
}

impl PeerRun {
    /// `--db` with `sslmode` set to `--db-sslmode`, unless the URL sets it itself.
    pub fn database_url(&self) -> String {
        if self.db.contains("sslmode=") {
            return self.db.clone();
        }
        let separator = if self.db.contains('?') { '&' } else { '?' };
        format!("{}{separator}sslmode={}", self.db, self.db_sslmode)
    }
}

/// Default dispatcher settings of the benchmark: claims of 500, at most 1,000 rows in
/// `sending` per dispatcher, 64 requests in flight per dispatcher, and a destination
/// bound ([`DESTINATION_BOUND`]) that leaves the dispatchers' own bounds in charge.
pub const BATCH_SIZE: u32 = 500;
/// See [`BATCH_SIZE`].
pub const MAX_IN_FLIGHT: u32 = 1_000;
/// See [`BATCH_SIZE`].
pub const CONCURRENT_SENDS: u32 = 64;
/// The benchmark destination's `max_in_flight`, its bound on rows in `sending` across
/// processes: room for four dispatchers' 1,000 each, so that the dispatchers' own bounds
/// decide (the destination's figures measure the pipeline, not a small bound).
pub const DESTINATION_BOUND: u32 = 4_000;

/// Runs one drain for the harness and returns its `RESULT` object.
pub async fn run(args: &PeerRun) -> anyhow::Result<serde_json::Value> {
    let dispatchers = match args.variant.as_str() {
        "default" => Dispatchers::InProcess(Transport::Http),
        "noop" => Dispatchers::InProcess(Transport::Discard),
        "p1" => Dispatchers::Processes(1),
        "p2" => Dispatchers::Processes(2),
        "p4" => Dispatchers::Processes(4),
        other => anyhow::bail!("unknown variant `{other}`: use default, noop, p1, p2 or p4"),
    };
    let sink = args.sink.trim_end_matches('/');
    let db = args.database_url();
    let pool = outbox_store::connect(&db, "benchmark", 4)
        .await
        .with_context(|| "connecting to the harness's database".to_owned())?;
    crate::db::reset_public_schema(&pool).await?;
    let workload = Workload::prepare(
        pool.clone(),
        &DestinationSettings {
            url: format!("{sink}/hook"),
            max_in_flight: DESTINATION_BOUND,
        },
    )
    .await?;
    let http = reqwest::Client::new();
    http.post(format!("{sink}/reset"))
        .send()
        .await
        .context("resetting the sink")?
        .error_for_status()?;
    let enqueue = workload.approve_bulk_one_at_a_time(0, args.n).await?;
    crate::db::vacuum_analyze(&pool).await?;

    let discard = dispatchers == Dispatchers::InProcess(Transport::Discard);
    let stats_url = format!("{sink}/stats");
    let report = drain(
        &pool,
        &db,
        args.n,
        DrainSettings {
            dispatchers,
            batch_size: args.batch_size,
            max_in_flight: args.max_in_flight,
            max_concurrent_sends: args.concurrent_sends,
            sink_ip: dispatchers::sink_ip(sink),
        },
        (!discard).then_some(stats_url.as_str()),
    )
    .await?;
    outbox_store::close_at_exit(&pool).await;
    crate::drain::check(&report, args.n, !discard)?;
    let evidence = report.evidence;
    Ok(json!({
        "peer": "alert-outbox",
        "variant": args.variant,
        "n": args.n,
        "seconds": report.seconds,
        "jobs_per_sec": report.deliveries_per_sec,
        "sink_requests": report.sink_requests,
        "sink_duplicates": report.sink_duplicates,
        "commits_per_job": report.commits_per_delivery,
        "wal_bytes_per_job": report.wal_bytes_per_delivery,
        "enqueue_s": enqueue.as_secs_f64(),
        "host_cpu_busy_pct": report.host_cpu_busy_pct,
        "driver_cpu_s": report.driver_cpu_s,
        "batch_size": args.batch_size,
        "concurrent_sends": args.concurrent_sends,
        "db_sslmode": db.split("sslmode=").nth(1).and_then(|rest| rest.split('&').next()),
        "max_in_flight": report.sending_bound,
        "max_sending_seen": report.max_sending,
        "attempt_rows": evidence.attempt_rows,
        "evidence_lines": evidence.evidence_lines,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: PeerRun,
    }

    fn url_of(args: &[&str]) -> String {
        let base = ["bench", "--n", "1", "--sink", "http://127.0.0.1:1"];
        Cli::parse_from(base.iter().chain(args)).run.database_url()
    }

    #[test]
    fn the_driver_connects_as_the_peers_do_unless_the_url_or_the_flag_says_otherwise() {
        assert_eq!(
            url_of(&["--db", "postgresql://u@h/bench_ext"]),
            "postgresql://u@h/bench_ext?sslmode=disable"
        );
        assert_eq!(
            url_of(&[
                "--db",
                "postgresql://u@h/b?application_name=x",
                "--db-sslmode",
                "prefer"
            ]),
            "postgresql://u@h/b?application_name=x&sslmode=prefer"
        );
        assert_eq!(
            url_of(&["--db", "postgresql://u@h/b?sslmode=require"]),
            "postgresql://u@h/b?sslmode=require"
        );
    }
}
