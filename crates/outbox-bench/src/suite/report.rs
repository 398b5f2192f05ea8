//! What a suite run measured ([`SuiteReport`] and the figures it holds), serialised as
//! the `--json` object and rendered as the plain-text table.

use serde::Serialize;
use std::collections::HashMap;
use std::fmt;

use super::host::write_host_line;
use super::lanes::LanesReport;
use super::run_state::Approvals;
use super::settings::SuiteSettings;
use crate::dispatchers::Dispatchers;
use crate::drain::DrainReport;
use crate::sustained::SustainedReport;

/// Approval-to-acceptance latency: the sink's receipt time minus the alert's approval time.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// Arrival rate offered, alerts per second (0: one at a time on an idle system).
    pub offered_per_sec: f64,
    /// Alerts measured.
    pub samples: usize,
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Slowest, ms.
    pub max_ms: f64,
    /// Median of the part before the claim: approval to the start of the first send
    /// (the claim's database clock), ms.
    pub to_claim_p50_ms: f64,
    /// 99th percentile of that part, ms.
    pub to_claim_p99_ms: f64,
}

/// The claim's cost with and without history.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimCost {
    /// Pending rows in the queue while measuring.
    pub queue: u64,
    /// Rows per claim.
    pub batch: i64,
    /// Claims timed per case.
    pub rounds: usize,
    /// Settled alerts of history in the second case.
    pub history: u64,
    /// Median claim, empty history, ms.
    pub empty_history_ms: f64,
    /// Median claim, with history, ms.
    pub with_history_ms: f64,
    /// with / empty.
    pub ratio: f64,
    /// Seconds to write the history (approvals, attempts, evidence).
    pub history_seeding_secs: f64,
    /// Retention of that history: alerts pruned.
    pub pruned_alerts: u64,
    /// Retention: seconds.
    pub prune_secs: f64,
}

/// Everything `bench run` measured.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteReport {
    /// Settings used.
    pub settings: SuiteSettings,
    /// The machine: cores, PostgreSQL version, `synchronous_commit`.
    pub host: HashMap<String, String>,
    /// Bulk approvals (one statement per 5,000).
    pub approvals_bulk: Approvals,
    /// Approvals through the API.
    pub approvals_api: Approvals,
    /// Drain over HTTP, one dispatcher.
    pub deliveries_http: DrainReport,
    /// Drain with a no-op instead of HTTP: the pipeline's ceiling (not with
    /// `--only approvals`).
    pub deliveries_noop: Option<DrainReport>,
    /// Drains by 1, 2, 4 dispatcher processes.
    pub horizontal: Vec<DrainReport>,
    /// One alert at a time, idle system.
    pub latency_idle: Latency,
    /// Open-loop stream at half the HTTP capacity.
    pub latency_half_capacity: Latency,
    /// Claim cost against history, and retention.
    pub claim_cost: Option<ClaimCost>,
    /// The sustained-load mode, when the run includes it.
    pub sustained: Option<SustainedReport>,
    /// The ordered-lanes phase, when the run includes it.
    pub lanes: Option<LanesReport>,
}

impl SuiteReport {
    /// The figures as a plain-text table, with the settings that produced them.
    pub fn render(&self) -> String {
        self.to_string()
    }

    /// The machine and the dispatchers' settings, then a blank line.
    fn write_setup(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.settings;
        write_host_line(out, &self.host)?;
        writeln!(
            out,
            "settings: N={} per drain, claims of {}, at most {} rows in sending per dispatcher, {} requests in flight per dispatcher, signed requests",
            s.n, s.batch_size, s.max_in_flight, s.concurrent_sends
        )?;
        writeln!(out)
    }

    /// The drains' table, one row a drain, then the HTTP drain's row writes and WAL and a
    /// blank line.
    fn write_drains(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            out,
            "{:<34} {:>12} {:>9} {:>11} {:>11} {:>9} {:>9} {:>12} {:>14}",
            "drain",
            "deliveries/s",
            "seconds",
            "commits/dlv",
            "WAL B/dlv",
            "rows/dlv",
            "host CPU%",
            "max sending",
            "sink dup"
        )?;
        write_drain_row(
            out,
            "HTTP, 1 dispatcher (in process)",
            &self.deliveries_http,
        )?;
        if let Some(noop) = &self.deliveries_noop {
            write_drain_row(out, "no-op instead of HTTP (ceiling)", noop)?;
        }
        for r in &self.horizontal {
            let k = match r.settings.dispatchers {
                Dispatchers::Processes(k) => k,
                Dispatchers::InProcess(_) => 1,
            };
            write_drain_row(out, &format!("HTTP, {k} dispatcher process(es)"), r)?;
        }
        writeln!(
            out,
            "row writes per delivery, HTTP drain: {}",
            self.deliveries_http.row_writes.summary()
        )?;
        if let Some(own) = self.deliveries_http.database_wal_bytes_per_delivery {
            writeln!(
                out,
                "WAL per delivery of the benchmark's own database, HTTP drain: {own:.0} B (cluster-wide {:.0} B)",
                self.deliveries_http.wal_bytes_per_delivery
            )?;
        }
        writeln!(out)
    }

    /// The approvals (bulk and through the API) and the two latencies, a line each.
    fn write_approvals_and_latency(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = &self.approvals_bulk;
        writeln!(
            out,
            "approvals, bulk (monitor path, 5,000 per statement, two in flight): {:.0}/s ({} in {:.2}s)",
            a.per_sec, a.n, a.seconds
        )?;
        let a = &self.approvals_api;
        writeln!(
            out,
            "approvals, API with {} clients: {:.0}/s ({} in {:.2}s)",
            a.clients, a.per_sec, a.n, a.seconds
        )?;
        for (name, l) in [
            ("latency, idle (one at a time)", &self.latency_idle),
            ("latency, at half capacity", &self.latency_half_capacity),
        ] {
            let offered = if l.offered_per_sec > 0.0 {
                format!(", {:.0} alerts/s offered", l.offered_per_sec)
            } else {
                String::new()
            };
            writeln!(
                out,
                "{name}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} alerts{offered}); \
                 approval to claim p50 {:.1} ms, p99 {:.1} ms",
                l.p50_ms, l.p99_ms, l.max_ms, l.samples, l.to_claim_p50_ms, l.to_claim_p99_ms
            )?;
        }
        Ok(())
    }

    /// The claim's cost against history and retention, when the run measured them.
    fn write_claim_cost(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(c) = &self.claim_cost else {
            return Ok(());
        };
        writeln!(
            out,
            "claim of {} from {} pending: {:.2} ms with no history, {:.2} ms with {} settled alerts ({:.2}x)",
            c.batch, c.queue, c.empty_history_ms, c.with_history_ms, c.history, c.ratio
        )?;
        writeln!(
            out,
            "retention: pruned {} alerts in {:.1}s ({:.0}/s)",
            c.pruned_alerts,
            c.prune_secs,
            c.pruned_alerts as f64 / c.prune_secs.max(f64::MIN_POSITIVE)
        )
    }

    /// The outbox's dead tuples sampled during the HTTP drain, on one line.
    fn write_dead_tuples(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dead: Vec<String> = self
            .deliveries_http
            .outbox_dead_tuples
            .iter()
            .map(|(at, dead)| format!("{at:.1}s:{dead}"))
            .collect();
        writeln!(
            out,
            "outbox dead tuples during the HTTP drain: {}",
            dead.join(" ")
        )
    }
}

/// One row of the drains' table.
fn write_drain_row(out: &mut fmt::Formatter<'_>, name: &str, r: &DrainReport) -> fmt::Result {
    writeln!(
        out,
        "{:<34} {:>12.0} {:>9.2} {:>11.4} {:>11.0} {:>9.2} {:>9.0} {:>7} / {:<4} {:>14}",
        name,
        r.deliveries_per_sec,
        r.seconds,
        r.commits_per_delivery,
        r.wal_bytes_per_delivery,
        r.row_writes.total,
        r.host_cpu_busy_pct,
        r.max_sending,
        r.sending_bound,
        r.sink_duplicates
    )
}

/// The table [`SuiteReport::render`] prints: the set-up, the drains, the approvals and
/// latencies, the claim's cost, the dead tuples, then the ordered-lanes phase and the
/// sustained run when there were.
impl fmt::Display for SuiteReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_setup(f)?;
        self.write_drains(f)?;
        self.write_approvals_and_latency(f)?;
        self.write_claim_cost(f)?;
        self.write_dead_tuples(f)?;
        if let Some(lanes) = &self.lanes {
            f.write_str(&lanes.render())?;
        }
        if let Some(sustained) = &self.sustained {
            f.write_str(&sustained.render())?;
        }
        Ok(())
    }
}
