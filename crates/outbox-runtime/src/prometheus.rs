//! The Prometheus text format, for the few figures the binaries expose: counters are
//! written by their owners; histograms and the outbox's queue figures are shared here.

use outbox_core::{AlertState, LiveStatus};
use std::fmt::Write as _;

/// Buckets for request latencies, in seconds.
pub const REQUEST_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];
/// Buckets for approval-to-acceptance latencies, in seconds (retries can take hours).
pub const DELIVERY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0, 3600.0, 21_600.0,
];

/// A cumulative histogram.
#[derive(Debug, Clone)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    count: u64,
    sum: f64,
}

impl Histogram {
    /// An empty histogram over `bounds`.
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            count: 0,
            sum: 0.0,
        }
    }

    /// Records one value.
    pub fn observe(&mut self, value: f64) {
        for (bound, count) in self.bounds.iter().zip(self.counts.iter_mut()) {
            if value <= *bound {
                *count += 1;
            }
        }
        self.count += 1;
        self.sum += value;
    }

    /// Writes the `_bucket`, `_sum` and `_count` lines of `name` with `labels`
    /// (`key="value"` pairs, already escaped, may be empty).
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let _ = writeln!(out, "{name}_sum{{{labels}}} {:.6}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

/// Figures a part of a process keeps for itself (the console's password checks, ...),
/// written into the `/metrics` of the listener that reports for the whole process.
pub trait Figures: std::fmt::Debug + Send + Sync {
    /// Appends its lines (`# HELP`, `# TYPE` and samples) to `out`.
    fn render(&self, out: &mut String);
}

/// Whether the database took writes when last asked (by a readiness check or a scrape),
/// and since when it has not: `outbox_database_up` and
/// `outbox_database_unwritable_seconds`, so that an orchestrator and an operator see a
/// failover's gap.
#[derive(Debug)]
pub struct DatabaseWritable {
    started: std::time::Instant,
    seen: std::sync::Mutex<Seen>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    writable_now: bool,
    last_writable: Option<std::time::Instant>,
}

impl Default for DatabaseWritable {
    fn default() -> Self {
        DatabaseWritable {
            started: std::time::Instant::now(),
            seen: std::sync::Mutex::new(Seen {
                writable_now: false,
                last_writable: None,
            }),
        }
    }
}

impl DatabaseWritable {
    /// Records what a check found: `true` when the database answered and takes writes.
    pub fn record(&self, writable: bool) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.writable_now = writable;
        if writable {
            seen.last_writable = Some(std::time::Instant::now());
        }
    }

    /// Runs `probe` (does the database take writes?) for at most two seconds, records what
    /// it found, and says why the database is not ready when it is not.
    pub async fn check<E>(
        &self,
        probe: impl std::future::Future<Output = Result<bool, E>>,
    ) -> Result<(), NotReady> {
        let found = match tokio::time::timeout(std::time::Duration::from_secs(2), probe).await {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => Err(NotReady::ReadOnly),
            Ok(Err(_)) | Err(_) => Err(NotReady::NotAnswering),
        };
        self.record(found.is_ok());
        found
    }

    /// Seconds since the database was last seen taking writes (since the process started
    /// when never); 0 while it does.
    pub fn unwritable_secs(&self) -> f64 {
        let seen = *self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.writable_now {
            0.0
        } else {
            seen.last_writable
                .unwrap_or(self.started)
                .elapsed()
                .as_secs_f64()
        }
    }
}

/// Why the database is not ready for writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReady {
    /// It did not answer within two seconds.
    NotAnswering,
    /// It answered as a standby or read-only: a failover in progress, or the wrong server.
    ReadOnly,
}

impl NotReady {
    /// One line for a readiness answer.
    pub fn reason(self) -> &'static str {
        match self {
            NotReady::NotAnswering => "the database did not answer within 2s",
            NotReady::ReadOnly => {
                "the database answered read-only (a standby, or a failover in progress)"
            }
        }
    }
}

impl Figures for DatabaseWritable {
    fn render(&self, out: &mut String) {
        let up = self
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .writable_now;
        let _ = writeln!(
            out,
            "# HELP outbox_database_up 1 when the database answered and took writes at the last check."
        );
        let _ = writeln!(out, "# TYPE outbox_database_up gauge");
        let _ = writeln!(out, "outbox_database_up {}", u8::from(up));
        let _ = writeln!(
            out,
            "# HELP outbox_database_unwritable_seconds Seconds since the database last took \
             writes (0 while it does)."
        );
        let _ = writeln!(out, "# TYPE outbox_database_unwritable_seconds gauge");
        let _ = writeln!(
            out,
            "outbox_database_unwritable_seconds {:.3}",
            self.unwritable_secs()
        );
    }
}

/// Escapes a label value.
pub fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Writes the outbox's queue figures: depth by state (live states and held), and the age
/// of the oldest due row nobody works on.
pub fn render_queue(
    out: &mut String,
    live: &[(LiveStatus, i64)],
    held: i64,
    oldest_due_age_secs: f64,
) {
    let _ = writeln!(
        out,
        "# HELP outbox_depth Alerts by state: live ones, and held ones waiting for an operator."
    );
    let _ = writeln!(out, "# TYPE outbox_depth gauge");
    for &state in LiveStatus::ALL {
        let n = live
            .iter()
            .find(|(s, _)| *s == state)
            .map_or(0, |(_, n)| *n);
        let _ = writeln!(out, "outbox_depth{{state=\"{state}\"}} {n}");
    }
    let _ = writeln!(out, "outbox_depth{{state=\"{}\"}} {held}", AlertState::Held);
    render_one(
        out,
        "outbox_oldest_due_age_seconds",
        "gauge",
        "Age of the oldest due row nobody works on.",
        format_args!("{oldest_due_age_secs:.3}"),
    );
}

/// One series without labels, with its `HELP` and `TYPE` lines.
pub fn render_one(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    value: impl std::fmt::Display,
) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name} {value}");
}

/// Ordered lanes per destination (`tenant`, `destination`, open lanes, blocked lanes):
/// `outbox_lanes_open` (lanes with an alert not yet released) and `outbox_lanes_blocked`
/// (lanes whose head is held or failed, which wait for an operator). Every ordered
/// destination has both series, zero included, so an alert on them has data.
pub fn render_lanes(out: &mut String, lanes: &[(&str, &str, i64, i64)]) {
    // (name, help, which of the two counts)
    let gauges = [
        (
            "outbox_lanes_open",
            "Ordered lanes with an alert not yet released, per destination.",
            0,
        ),
        (
            "outbox_lanes_blocked",
            "Ordered lanes whose head is held or failed: they wait for an operator.",
            1,
        ),
    ];
    for (name, help, which) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for lane in lanes {
            let _ = writeln!(
                out,
                "{name}{{tenant=\"{}\",destination=\"{}\"}} {}",
                escape(lane.0),
                escape(lane.1),
                if which == 0 { lane.2 } else { lane.3 }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        h.observe(0.05);
        h.observe(0.5);
        h.observe(5.0);
        let mut out = String::new();
        h.render(&mut out, "x", "d=\"a\"");
        assert!(out.contains("x_bucket{d=\"a\",le=\"0.1\"} 1"));
        assert!(out.contains("x_bucket{d=\"a\",le=\"1\"} 2"));
        assert!(out.contains("x_bucket{d=\"a\",le=\"+Inf\"} 3"));
        assert!(out.contains("x_count{d=\"a\"} 3"));
    }

    #[test]
    fn queue_figures_name_every_state() {
        let mut out = String::new();
        render_queue(&mut out, &[(LiveStatus::Pending, 4)], 2, 1.5);
        assert!(out.contains("outbox_depth{state=\"pending\"} 4"));
        assert!(out.contains("outbox_depth{state=\"uncertain\"} 0"));
        assert!(out.contains("outbox_depth{state=\"held\"} 2"));
        assert!(out.contains("outbox_oldest_due_age_seconds 1.500"));
    }
}
