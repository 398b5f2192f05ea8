//! The sink: a notification endpoint we control, for tests and demos. It records every
//! delivery, de-duplicates by idempotency key when asked, answers receipt lookups, checks
//! Standard Webhooks signatures (refusing bad or stale ones when given a secret), and
//! injects faults (failures, scripted answers, latency, responses dropped after the
//! delivery was applied) reproducibly from a seed.
//!
//! Layout:
//! - [`SinkArgs`] (`config`): the command line, every flag also a `SINK_*` variable.
//! - [`Sink`] (`state`): the memory and the decisions, under one lock, so that the fault
//!   draws follow arrival order and a seed replays a run.
//! - [`FaultSettings`] (`faults`): the faults, changed at run time through `/_sink/faults`.
//! - [`serve`] (`server`): the routes and the body limit, on the shared hardened HTTP/1.1
//!   server (deadlines for slow clients, a cap on connections, keep-alive).
//!
//! Routes:
//! - `POST /<any path outside /_sink/>`: a delivery, answered `{"id": "<receipt>"}`.
//! - `GET /requests/{key}` (with `--lookup`): the receipt of an applied key.
//! - `GET /stats`: the counters ([`Stats`]).
//! - `GET /_sink/records[?key=K]`: every delivery in arrival order ([`Record`]).
//! - `POST /_sink/faults`, `DELETE /_sink/faults`: change or clear the faults.
//! - `POST /_sink/reset`: forget records and counters (faults stay).
//!
//! A delivery is decided in this order: with `--secret`, a missing, wrong or stale
//! signature is refused (401); then a scripted answer if one is queued, then the fail
//! rate, then de-duplication (with `--retention`), else it is applied. Only applied and
//! duplicate deliveries wait the latency and may have their response dropped.

mod config;
mod faults;
mod server;
mod state;

use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

pub use config::{SigningSecret, SinkArgs};
pub use faults::{FaultSettings, ScriptedResponse};
pub use server::MAX_BODY_BYTES;
pub use state::{Outcome, Record, SignatureCheck, Sink, Stats};

/// Serves the sink configured by `args` on `listener` until `shutdown` resolves, then
/// finishes the requests in progress. `args.listen` is not used: the caller binds.
pub async fn serve(
    listener: TcpListener,
    args: SinkArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // First line of the log: tests wait for it to learn the address.
    tracing::info!(addr = %listener.local_addr()?, "sink listening");
    let sink = Arc::new(Sink::new(&args));
    tracing::info!(
        seed = sink.seed(),
        retention = ?args.retention,
        lookup = args.lookup,
        secrets = args.secrets.len(),
        faults = ?sink.faults(),
        "sink configured"
    );
    server::run(listener, sink, args.server_limits(), shutdown).await;
    Ok(())
}
