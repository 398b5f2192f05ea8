//! The benchmark: how fast the outbox approves and delivers with every guarantee on, and
//! what that costs the database, measured on real parts (PostgreSQL, HTTP, processes).
//!
//! Layout:
//! - `workload`: the tenant, the destination and the alerts every measurement uses.
//! - `dispatchers`: who delivers (one dispatcher in this process, or `dispatcher`
//!   processes) with which settings, and those dispatchers at work.
//! - `drain`: one timed drain by dispatchers, with the server's counters read around it
//!   and the live queue sampled during it.
//! - `peer`: the external driver of the queue peers' harness (`RESULT {json}`).
//! - `suite`: every figure in one run (`bench run`), on its own database and sink: its
//!   settings, its phases (`suite/drains.rs`, `latency.rs`, `claim_cost.rs`) and its
//!   report (`suite/report.rs`).
//! - `sustained`: a long open-loop run at a share of capacity, reported interval by
//!   interval (`bench run --only sustained`).
//! - `explain_lanes`: the claim's plan over a backlog of a million alerts in ordered lanes
//!   (`bench explain-lanes`).
//! - `hot_claim`: what a claim that is a HOT update would save, on the claim's and the
//!   completion's row work alone (`bench hot-claim`).
//! - `listings`: what one tenant's alert listings cost another tenant's approvals, for
//!   each build given, against that build's own `decider serve` (`bench listings`).
//! - what both runs use: `own_sink` (our sink on a thread of its own), `api` (the approval
//!   API served from this process, and its client), `scratch` (a database of the run's
//!   own) and `progress` (the progress lines on stderr).
//! - `measure`: CPU readings and percentiles.
//! - `db`: the statements the benchmark needs besides the product's (counters, samples,
//!   synthetic history, the schema reset). They live in this crate rather than the store so
//!   that no product binary links them.
//! - `main.rs`: the `bench` binary (`cargo run --release -p outbox-bench -- run`).

pub mod api;
pub mod db;
pub mod dispatchers;
pub mod drain;
pub mod explain_lanes;
pub mod hot_claim;
pub mod listings;
pub mod measure;
pub mod own_sink;
pub mod peer;
pub mod scratch;
pub mod suite;
pub mod sustained;
pub mod workload;

/// One progress line on stderr (`bench: ...`); stdout holds only the report.
pub(crate) fn progress(what: &str) {
    eprintln!("bench: {what}");
}
