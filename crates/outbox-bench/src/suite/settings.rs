//! What a suite run does: its sizes, the dispatchers' settings and which phases run
//! ([`SuiteSettings`], with the full and the quick run, and the ordered-lanes phase's
//! [`LaneSettings`]), and [`Phases`].

use serde::Serialize;

use crate::peer::{BATCH_SIZE, CONCURRENT_SENDS, MAX_IN_FLIGHT};
use crate::sustained::SustainedSettings;

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteSettings {
    /// URL of the PostgreSQL server (any database on it); the run creates its own.
    #[serde(skip)]
    pub server_url: String,
    /// Alerts per drain.
    pub n: u64,
    /// Alerts approved through the API.
    pub api_n: u64,
    /// Concurrent API clients.
    pub api_clients: u64,
    /// Settled alerts of history for the claim-cost comparison.
    pub history: u64,
    /// Dispatcher process counts for the horizontal curve.
    pub processes: Vec<u32>,
    /// Alerts in the idle-latency probe.
    pub idle_samples: u64,
    /// Seconds of the half-capacity latency stream.
    pub loaded_secs: u64,
    /// Rows per claim statement.
    pub batch_size: u32,
    /// Rows in `sending` per dispatcher (crash blast radius).
    pub max_in_flight: u32,
    /// Requests in flight to the destination per dispatcher.
    pub concurrent_sends: u32,
    /// Which phases run.
    pub phases: Phases,
    /// The sustained-load mode (`--only sustained`).
    pub sustained: SustainedSettings,
    /// Whether a run of every phase includes the sustained mode too (the quick run does,
    /// for a few seconds, so that it keeps working).
    pub sustained_in_all: bool,
    /// The ordered-lanes phase (`--only lanes`).
    pub lanes: LaneSettings,
    /// Whether a run of every phase includes the ordered-lanes phase too (the quick run
    /// does, on a small backlog, so that it keeps working).
    pub lanes_in_all: bool,
}

/// The ordered-lanes phase (`crate::suite::lanes`): N alerts (the run's `n`) over `keys`
/// subjects drained unordered and per key, `rounds` times in alternating order, and a
/// lane of `one_key_n` alerts delivered to a sink that answers after `sink_latency_ms`.
#[derive(Debug, Clone, Serialize)]
pub struct LaneSettings {
    /// Subjects (ordering keys) the backlog is spread over.
    pub keys: u64,
    /// Rounds; each drains an unordered and a per-key backlog (in alternating order) and
    /// the one-key lane.
    pub rounds: u32,
    /// Alerts in the one-key lane.
    pub one_key_n: u64,
    /// The one-key sink's answer delay, ms.
    pub sink_latency_ms: u64,
}

/// Which phases a run goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Phases {
    /// Every phase.
    All,
    /// The approval path: bulk approvals and their HTTP drain, API approvals, latency.
    Approvals,
    /// The sustained-load mode alone (see `crate::sustained`).
    Sustained,
    /// Ordered lanes alone: unordered and per-key drains and approvals side by side, and
    /// one lane against a slow destination (see `crate::suite::lanes`).
    Lanes,
    /// The evidence chain's cost alone: the same backlog approved and drained with the
    /// chain off and on, side by side (see `crate::suite::evidence`).
    Evidence,
}

impl SuiteSettings {
    /// The full run: the figures docs/performance.md reports.
    pub fn full(server_url: String) -> Self {
        SuiteSettings {
            server_url,
            n: 100_000,
            api_n: 20_000,
            api_clients: 32,
            history: 1_000_000,
            processes: vec![1, 2, 4],
            idle_samples: 200,
            loaded_secs: 5,
            batch_size: BATCH_SIZE,
            max_in_flight: MAX_IN_FLIGHT,
            concurrent_sends: CONCURRENT_SENDS,
            phases: Phases::All,
            sustained: SustainedSettings {
                run_secs: 600,
                interval_secs: 60,
                rate: None,
                capacity_secs: 10,
                capacity_clients: 32,
                // Well under the API's 512 connections, with room for the capacity
                // phase's clients and the dispatcher's wake-ups.
                max_outstanding: 256,
                batch_size: BATCH_SIZE,
                max_in_flight: MAX_IN_FLIGHT,
                concurrent_sends: CONCURRENT_SENDS,
            },
            sustained_in_all: false,
            lanes: LaneSettings {
                keys: 10_000,
                rounds: 3,
                one_key_n: 1_000,
                sink_latency_ms: 5,
            },
            lanes_in_all: false,
        }
    }

    /// A tiny run that exercises every phase in seconds: for CI, where only correctness
    /// is checked.
    pub fn quick(server_url: String) -> Self {
        SuiteSettings {
            n: 3_000,
            api_n: 1_000,
            history: 20_000,
            processes: vec![1, 2],
            idle_samples: 20,
            loaded_secs: 1,
            sustained: SustainedSettings {
                run_secs: 3,
                interval_secs: 1,
                capacity_secs: 1,
                ..SuiteSettings::full(String::new()).sustained
            },
            sustained_in_all: true,
            // Ten alerts a lane, as in the full run.
            lanes: LaneSettings {
                keys: 300,
                rounds: 1,
                one_key_n: 100,
                sink_latency_ms: 5,
            },
            lanes_in_all: true,
            ..SuiteSettings::full(server_url)
        }
    }
}
