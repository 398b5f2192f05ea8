//! How a dispatcher runs: its settings ([`Config`], [`Transport`]) and their defaults.

use crate::TenantTemplates;
use outbox_core::retry::RetrySchedule;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How a dispatcher runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Names this dispatcher in leases and evidence (default: host and pid).
    pub worker_id: String,
    /// Most rows claimed per statement.
    pub batch_size: u32,
    /// Most rows held in `sending` at once by this process.
    pub max_in_flight: u32,
    /// Most sends (requests, SMTP dialogues, lookups) this process runs at once, over all
    /// destinations; `None` leaves only `max_in_flight` and the destinations' bounds. The
    /// rows claimed beyond it wait in the process for their turn, so claims can stay
    /// large (few statements) while the destinations see a steady number of requests.
    pub max_concurrent_sends: Option<u32>,
    /// Minimum lease; a destination's lease is always longer than two of its timeouts.
    pub lease: Duration,
    /// Poll when no wake-up arrives.
    pub poll_interval: Duration,
    /// Delays between retries.
    pub retry_schedule: RetrySchedule,
    /// Exit once nothing is due now or within this long (`--drain`).
    pub drain: Option<Duration>,
    /// On shutdown, how long in-flight sends may take to finish.
    pub shutdown_deadline: Duration,
    /// Serve `/metrics`, `/healthz`, `/readyz` here.
    pub metrics_listen: Option<SocketAddr>,
    /// Connect timeout for every destination.
    pub connect_timeout: Duration,
    /// How sends reach destinations.
    pub transport: Transport,
    /// Keys that open sealed signing secrets (`OUTBOX_SECRET_KEYS`); empty when secrets
    /// are stored in plain text.
    pub secret_keys: outbox_core::sealing::SealingKeys,
    /// Which addresses sends and lookups may connect to.
    pub egress: outbox_egress::Guard,
    /// Each tenant's own email templates, as loaded at start.
    pub templates: Arc<TenantTemplates>,
    /// Where they were loaded from (`--templates-dir`): read again on SIGHUP.
    pub templates_dir: Option<std::path::PathBuf>,
    /// How often this process reports its sends per destination (destination health).
    pub health_report_interval: Duration,
    /// Vacuum `outbox` once it has this many dead tuples (`None`: leave it to
    /// autovacuum).
    pub queue_vacuum_after: Option<u64>,
    /// Evidence checkpoints made by this process when it wins their lock (`None`: never).
    pub evidence: Option<outbox_evidence::checkpoint::Settings>,
}

/// `--queue-vacuum-after`'s default: the outbox table is vacuumed once it has this many
/// dead tuples (25,000 deliveries' worth), a few seconds of a busy drain.
pub const DEFAULT_QUEUE_VACUUM_AFTER: u64 = 50_000;

/// How a dispatcher's pool plans its statements: once per connection.
///
/// Left to PostgreSQL, the claim and the completion were planned again for every
/// execution: their generic plans' estimates (which cannot see the claim's limit or the
/// length of a completion's arrays) came out higher than the plans made for the values,
/// so PostgreSQL never switched. Planning took longer than running them on a quiet
/// system (about 0.8 ms for the claim, 1.1 to 1.6 ms for a one-row completion, against
/// 0.2 to 0.3 ms of execution each), and an idle approval waits for a claim: from
/// approval to the destination's receipt, the p50 went from 3.6–4.1 ms to 2.2–2.7 ms
/// with the generic plans (`bench run --only approvals`, the two builds alternated). Every statement a dispatcher runs is written for them: the states that
/// select partial indexes are literals, and the rest are ids, arrays and limits, whose
/// values do not change the best plan (`bench explain-lanes` compares both plans of the
/// claim over a million waiting rows).
pub const POOL_PLANS: outbox_store::Plans = outbox_store::Plans::Generic;

/// How sends reach destinations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// HTTP, the real thing.
    #[default]
    Http,
    /// No request at all: every send is taken as accepted at once. For benchmarks only,
    /// to measure the pipeline's own ceiling (claims, evidence, recording) without the
    /// network; it records evidence of deliveries that never happened.
    Discard,
}

/// The dispatcher's default name: host and process id.
pub fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}
