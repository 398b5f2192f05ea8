//! The end-to-end tests, one module per subject, in one test binary (`cargo test --test it`;
//! one subject: `cargo test --test it chaos::`). `common` holds the shared set-up; the crash
//! tests are a binary of their own (`tests/crash.rs`), as they need the `failpoints` feature.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

mod common;

mod approvals;
mod bad_input;
mod chaos;
#[path = "console/main.rs"]
mod console;
mod contract;
mod demo;
mod destination_health;
mod dispatch;
mod dispatch_faults;
mod docs_links;
mod egress;
mod email;
mod email_api;
mod evidence;
mod evidence_format;
mod failover;
mod goodbye;
mod hostile_input;
mod in_flight;
mod kept_outside;
mod lanes;
mod listings;
mod logs;
mod lookup_backoff;
mod mcp;
mod monitors;
mod operators;
mod outboxctl;
mod private_server;
mod product_binaries;
mod queue_upkeep;
mod retention;
mod secrets;
mod sink_smtp;
mod slow_clients;
mod start_up;
mod template_preview;
mod traces;
