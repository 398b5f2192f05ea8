//! Prometheus figures of one dispatcher: attempts by destination and outcome, send
//! latency, approval-to-acceptance latency, kept in memory; queue figures are read from
//! the database per scrape.

use outbox_runtime::prometheus::{self, Histogram, DELIVERY_BUCKETS, REQUEST_BUCKETS};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// The dispatcher's in-process figures. Keyed by destination name first, so that
/// counting a delivery looks its destination up by the borrowed name and copies the name
/// only the first time it is seen (three copies a delivery otherwise).
#[derive(Debug, Default)]
pub struct Metrics {
    attempts: Mutex<BTreeMap<String, BTreeMap<&'static str, u64>>>,
    send: Mutex<BTreeMap<String, Histogram>>,
    delivery: Mutex<BTreeMap<String, Histogram>>,
    disabled: Mutex<BTreeMap<(String, &'static str), u64>>,
    queue_vacuums: std::sync::atomic::AtomicU64,
    claims: std::sync::atomic::AtomicU64,
}

impl Metrics {
    /// Counts one finished attempt or lookup.
    pub fn attempt(&self, destination: &str, outcome: &'static str) {
        let mut attempts = self.attempts.lock().unwrap_or_else(|e| e.into_inner());
        *of_destination(&mut attempts, destination, BTreeMap::new)
            .entry(outcome)
            .or_default() += 1;
    }

    /// Records how long a send took.
    pub fn send_latency(&self, destination: &str, took: Duration) {
        let mut send = self.send.lock().unwrap_or_else(|e| e.into_inner());
        of_destination(&mut send, destination, || Histogram::new(REQUEST_BUCKETS))
            .observe(took.as_secs_f64());
    }

    /// Records how long an alert took from approval to the destination's acceptance.
    pub fn delivered_after(&self, destination: &str, secs: f64) {
        let mut delivery = self.delivery.lock().unwrap_or_else(|e| e.into_inner());
        of_destination(&mut delivery, destination, || {
            Histogram::new(DELIVERY_BUCKETS)
        })
        .observe(secs.max(0.0));
    }

    /// Counts a destination this process disabled, and why: `gone` (it answered 410) or
    /// `failing` (every send failed for its window).
    pub fn destination_disabled(&self, destination: &str, reason: &'static str) {
        let mut disabled = self.disabled.lock().unwrap_or_else(|e| e.into_inner());
        *disabled
            .entry((destination.to_owned(), reason))
            .or_default() += 1;
    }

    /// Counts a claim statement this process ran, whether it found work or not.
    pub fn claim_ran(&self) {
        self.claims
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Counts a vacuum of the outbox table run by this process.
    pub fn queue_vacuumed(&self) {
        self.queue_vacuums
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Renders everything, with the queue figures, in Prometheus text format.
    pub fn render(&self, queue: &outbox_store::dispatch::QueueFigures) -> String {
        let mut out = String::new();
        prometheus::render_queue(&mut out, &queue.live, queue.held, queue.oldest_due_age_secs);
        prometheus::render_lanes(&mut out, &queue.lane_rows());
        let _ = writeln!(
            out,
            "# HELP outbox_attempts_total Finished attempts and lookups by outcome."
        );
        let _ = writeln!(out, "# TYPE outbox_attempts_total counter");
        for (destination, outcomes) in self
            .attempts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            for (outcome, n) in outcomes {
                let _ = writeln!(
                    out,
                    "outbox_attempts_total{{destination=\"{}\",outcome=\"{outcome}\"}} {n}",
                    prometheus::escape(destination)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP outbox_destinations_disabled_total Destinations this dispatcher disabled, by reason (gone: a 410; failing: every send failed for its window)."
        );
        let _ = writeln!(out, "# TYPE outbox_destinations_disabled_total counter");
        for ((destination, reason), n) in self
            .disabled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "outbox_destinations_disabled_total{{destination=\"{}\",reason=\"{reason}\"}} {n}",
                prometheus::escape(destination)
            );
        }
        prometheus::render_one(
            &mut out,
            "outbox_claims_total",
            "counter",
            "Claim statements this dispatcher ran, whether they found work or not (a count that stops while the process runs: its claim loop is stuck).",
            self.claims.load(std::sync::atomic::Ordering::Relaxed),
        );
        prometheus::render_one(
            &mut out,
            "outbox_queue_vacuums_total",
            "counter",
            "Vacuums of the outbox table this dispatcher ran (its dead tuples had passed --queue-vacuum-after).",
            self.queue_vacuums
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP outbox_send_seconds Time from request to answer (or failure)."
        );
        let _ = writeln!(out, "# TYPE outbox_send_seconds histogram");
        for (destination, h) in self.send.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            h.render(
                &mut out,
                "outbox_send_seconds",
                &format!("destination=\"{}\"", prometheus::escape(destination)),
            );
        }
        let _ = writeln!(out, "# HELP outbox_approval_to_acceptance_seconds Time from approval to the destination's acceptance.");
        let _ = writeln!(
            out,
            "# TYPE outbox_approval_to_acceptance_seconds histogram"
        );
        for (destination, h) in self
            .delivery
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            h.render(
                &mut out,
                "outbox_approval_to_acceptance_seconds",
                &format!("destination=\"{}\"", prometheus::escape(destination)),
            );
        }
        out
    }
}

/// The figure kept for `destination` in `figures`, made by `new` the first time.
fn of_destination<'a, T>(
    figures: &'a mut BTreeMap<String, T>,
    destination: &str,
    new: impl FnOnce() -> T,
) -> &'a mut T {
    if !figures.contains_key(destination) {
        figures.insert(destination.to_owned(), new());
    }
    figures.get_mut(destination).expect("inserted above")
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
        m.delivered_after("ops", 0.02);
        m.destination_disabled("ops", "failing");
        let text = m.render(&outbox_store::dispatch::QueueFigures {
            live: vec![(outbox_core::LiveStatus::Pending, 4)],
            oldest_due_age_secs: 1.5,
            held: 2,
            lanes: vec![outbox_store::lanes::LaneCounts {
                tenant: "acme".to_owned(),
                destination: "tickets".to_owned(),
                open: 7,
                blocked: 1,
            }],
        });
        assert!(text.contains("outbox_depth{state=\"pending\"} 4"));
        assert!(text.contains("outbox_depth{state=\"held\"} 2"));
        assert!(text.contains("outbox_lanes_blocked{tenant=\"acme\",destination=\"tickets\"} 1"));
        assert!(text.contains("outbox_lanes_open{tenant=\"acme\",destination=\"tickets\"} 7"));
        assert!(text.contains("outbox_attempts_total{destination=\"ops\",outcome=\"accepted\"} 2"));
        assert!(text.contains("outbox_send_seconds_bucket{destination=\"ops\",le=\"0.005\"} 1"));
        assert!(text.contains("outbox_send_seconds_count{destination=\"ops\"} 2"));
        assert!(text.contains("outbox_approval_to_acceptance_seconds_count{destination=\"ops\"} 1"));
        assert!(text.contains(
            "outbox_destinations_disabled_total{destination=\"ops\",reason=\"failing\"} 1"
        ));
    }
}
