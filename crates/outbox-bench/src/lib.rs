//! The benchmark: how fast the outbox approves and delivers with every guarantee on, and
//! what that costs the database, measured on real parts (PostgreSQL, HTTP, processes).
//!
//! Layout:
//! - `workload`: the tenant, the destination and the alerts every measurement uses.
//! - `drain`: one timed drain by dispatchers (in this process or as processes), with the
//!   server's counters read around it and the live queue sampled during it.
//! - `peer`: the external driver of the queue peers' harness (`RESULT {json}`).
//! - `suite`: every figure in one run (`bench run`), on its own database and sink.
//! - `sustained`: a long open-loop run at a share of capacity, reported interval by
//!   interval (`bench run --only sustained`).
//! - `measure`: CPU readings and percentiles.
//! - `db`: the statements the benchmark needs besides the product's (counters, samples,
//!   synthetic history, the schema reset). They live in this crate rather than the store so
//!   that no product binary links them.
//! - `main.rs`: the `bench` binary (`cargo run --release -p outbox-bench -- run`).

pub mod db;
pub mod drain;
pub mod measure;
pub mod peer;
pub mod suite;
pub mod sustained;
pub mod workload;
