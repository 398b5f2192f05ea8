//! Prometheus figures of one dispatcher: attempts by destination and outcome, and a send
//! latency histogram, kept in memory; queue figures are read from the database per scrape.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Debug, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// The dispatcher's in-process figures.
#[derive(Debug, Default)]
pub struct Metrics {
    attempts: Mutex<BTreeMap<(String, &'static str), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
}

impl Metrics {
    /// Counts one finished attempt or lookup.
    pub fn attempt(&self, destination: &str, outcome: &'static str) {
        let mut attempts = self.attempts.lock().unwrap_or_else(|e| e.into_inner());
        *attempts
            .entry((destination.to_owned(), outcome))
            .or_default() += 1;
    }

    /// Records how long a send took.
    pub fn send_latency(&self, destination: &str, took: Duration) {
        let secs = took.as_secs_f64();
        let mut latency = self.latency.lock().unwrap_or_else(|e| e.into_inner());
        let h = latency.entry(destination.to_owned()).or_default();
        for (bound, count) in BUCKETS.iter().zip(h.counts.iter_mut()) {
            if secs <= *bound {
                *count += 1;
            }
        }
        h.count += 1;
        h.sum += secs;
    }

    /// Renders everything, with the queue figures, in Prometheus text format.
    pub fn render(&self, queue: &outbox_store::dispatch::QueueFigures) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# HELP outbox_depth Live outbox rows by state.");
        let _ = writeln!(out, "# TYPE outbox_depth gauge");
        for state in ["pending", "sending", "uncertain"] {
            let n = queue
                .live
                .iter()
                .find(|(s, _)| s == state)
                .map_or(0, |(_, n)| *n);
            let _ = writeln!(out, "outbox_depth{{state=\"{state}\"}} {n}");
        }
        let _ = writeln!(out, "outbox_depth{{state=\"held\"}} {}", queue.held);
        let _ = writeln!(
            out,
            "# HELP outbox_oldest_due_age_seconds Age of the oldest due row nobody works on."
        );
        let _ = writeln!(out, "# TYPE outbox_oldest_due_age_seconds gauge");
        let _ = writeln!(
            out,
            "outbox_oldest_due_age_seconds {:.3}",
            queue.oldest_due_age_secs
        );

        let _ = writeln!(
            out,
            "# HELP outbox_attempts_total Finished attempts and lookups by outcome."
        );
        let _ = writeln!(out, "# TYPE outbox_attempts_total counter");
        for ((destination, outcome), n) in self
            .attempts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "outbox_attempts_total{{destination=\"{}\",outcome=\"{outcome}\"}} {n}",
                escape(destination)
            );
        }
        let _ = writeln!(
            out,
            "# HELP outbox_send_seconds Time from request to answer (or failure)."
        );
        let _ = writeln!(out, "# TYPE outbox_send_seconds histogram");
        for (destination, h) in self
            .latency
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let d = escape(destination);
            for (bound, count) in BUCKETS.iter().zip(h.counts.iter()) {
                let _ = writeln!(
                    out,
                    "outbox_send_seconds_bucket{{destination=\"{d}\",le=\"{bound}\"}} {count}"
                );
            }
            let _ = writeln!(
                out,
                "outbox_send_seconds_bucket{{destination=\"{d}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "outbox_send_seconds_sum{{destination=\"{d}\"}} {:.6}",
                h.sum
            );
            let _ = writeln!(
                out,
                "outbox_send_seconds_count{{destination=\"{d}\"}} {}",
                h.count
            );
        }
        out
    }
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_and_cumulative_buckets() {
        let m = Metrics::default();
        m.attempt("ops", "accepted");
        m.attempt("ops", "accepted");
        m.attempt("ops", "uncertain");
        m.send_latency("ops", Duration::from_millis(3));
        m.send_latency("ops", Duration::from_millis(300));
        let text = m.render(&outbox_store::dispatch::QueueFigures {
            live: vec![("pending".into(), 4)],
            oldest_due_age_secs: 1.5,
            held: 2,
        });
        assert!(text.contains("outbox_depth{state=\"pending\"} 4"));
        assert!(text.contains("outbox_depth{state=\"sending\"} 0"));
        assert!(text.contains("outbox_depth{state=\"held\"} 2"));
        assert!(text.contains("outbox_attempts_total{destination=\"ops\",outcome=\"accepted\"} 2"));
        assert!(text.contains("outbox_send_seconds_bucket{destination=\"ops\",le=\"0.005\"} 1"));
        assert!(text.contains("outbox_send_seconds_bucket{destination=\"ops\",le=\"0.5\"} 2"));
        assert!(text.contains("outbox_send_seconds_count{destination=\"ops\"} 2"));
    }
}
