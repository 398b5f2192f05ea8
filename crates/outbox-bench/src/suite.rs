//! `bench run`: every figure in one run, on a database of its own (dropped afterwards)
//! and a sink of its own (our `outbox-sink`, on its own thread and runtime).
//!
//! Phases, in order:
//! 1. bulk approvals of N alerts (the monitors' path), then their drain over HTTP;
//! 2. N more, drained with the HTTP step replaced by a no-op (the pipeline's ceiling);
//! 3. N more for each of 1, 2 and 4 `dispatcher` processes side by side;
//! 4. approvals through the API by 32 concurrent clients (then drained, untimed);
//! 5. latency from approval to the sink's receipt: one alert at a time on an idle
//!    system, then an open-loop stream at half the measured HTTP capacity;
//! 6. on a second database: the claim's cost on an empty history and with H settled
//!    alerts of history, and retention (`prune`) of that history.
//!
//! 7. with `--quick`, a few seconds of the sustained-load mode (`crate::sustained`), so
//!    that it keeps working; `--only sustained` ([`Phases::Sustained`]) runs it alone, for
//!    as long as asked.
//! 8. with `--quick`, the ordered-lanes phase on a small backlog (`lanes`), so that it
//!    keeps working; `--only lanes` ([`Phases::Lanes`]) runs it alone: N alerts over
//!    10,000 keys approved and drained to a destination that does not order and to one
//!    that orders per key, side by side in alternating rounds, and a lane of one key
//!    against a destination that answers after 5 ms.
//!
//! With `--only approvals` ([`Phases::Approvals`]) the run keeps what the approval path's
//! figures need (phases 1, 4 and 5: the HTTP drain of phase 1 gives the capacity that
//! sets the half-capacity rate) and skips the no-op drain, the processes and phase 6.
//!
//! Every drain is checked, not only timed: each alert accepted once, one attempt row
//! each, and the sink saw no duplicate. A failed check fails the run.
//!
//! Layout: `settings` (what to run), `run_state` (what a run carries from phase to
//! phase), the phases (`drains`: 1 to 4, `latency`: 5, `claim_cost`: 6, `lanes`: 8,
//! and `evidence`, which runs only alone: the evidence chain's cost, off and on),
//! `report` (what was measured, and its table), `host` (the machine a run measured, and
//! the line every report opens with); here, the run's steps in order.

mod claim_cost;
mod drains;
mod evidence;
mod host;
mod lanes;
mod latency;
mod report;
mod run_state;
mod settings;

pub use evidence::{run_evidence, EvidenceReport, EvidenceRound};
pub use lanes::{LaneDrain, LanesReport, LanesRound, OneKey};
pub use report::{ClaimCost, Latency, SuiteReport};
pub use run_state::Approvals;
pub use settings::{LaneSettings, Phases, SuiteSettings};

use crate::api::Api;
use crate::own_sink::OwnSink;
use crate::progress;
use crate::scratch::on_own_database;
use run_state::RunState;

/// Runs the suite. Progress goes to stderr.
pub async fn run(settings: SuiteSettings) -> anyhow::Result<SuiteReport> {
    let sink = OwnSink::start()?;
    let (settings, sink) = (&settings, &sink);
    let mut report = on_own_database(&settings.server_url, |url| async move {
        run_on(settings, sink, &url).await
    })
    .await?;
    if settings.phases == Phases::All {
        report.claim_cost = Some(claim_cost::claim_cost(settings).await?);
        if settings.lanes_in_all {
            report.lanes = Some(lanes::lanes(settings, sink).await?);
        }
        if settings.sustained_in_all {
            report.sustained = Some(
                crate::sustained::run(&settings.server_url, settings.sustained.clone(), |i| {
                    progress(&i.line())
                })
                .await?,
            );
        }
    }
    Ok(report)
}

/// The ordered-lanes phase alone (`--only lanes`), on a database and sinks of its own.
/// Progress goes to stderr.
pub async fn run_lanes(settings: SuiteSettings) -> anyhow::Result<LanesReport> {
    let sink = OwnSink::start()?;
    lanes::lanes(&settings, &sink).await
}

/// Phases 1 to 5, on the run's database at `url`.
async fn run_on(
    settings: &SuiteSettings,
    sink: &OwnSink,
    url: &str,
) -> anyhow::Result<SuiteReport> {
    let mut run = RunState::prepare(settings, sink, url).await?;
    let host = host::host_facts(&run.pool).await?;
    let (approvals_bulk, deliveries_http) = drains::bulk_then_http(&mut run).await?;
    let (deliveries_noop, horizontal) = if settings.phases == Phases::All {
        let noop = drains::noop(&mut run).await?;
        (Some(noop), drains::processes(&mut run).await?)
    } else {
        (None, Vec::new())
    };
    // As `decider serve --max-connections 32` would: a connection per client.
    let api_pool = outbox_store::connect(url, "decider", settings.api_clients as u32).await?;
    let api = Api::start(api_pool, &run.workload).await?;
    let approvals_api = drains::through_api(&mut run, &api).await?;
    let half_capacity = deliveries_http.deliveries_per_sec / 2.0;
    let (latency_idle, latency_half_capacity) =
        latency::latencies(&mut run, &api, half_capacity).await?;
    api.stop().await;
    run.finish().await?;
    Ok(SuiteReport {
        settings: settings.clone(),
        host,
        approvals_bulk,
        approvals_api,
        deliveries_http,
        deliveries_noop,
        horizontal,
        latency_idle,
        latency_half_capacity,
        claim_cost: None,
        sustained: None,
        lanes: None,
    })
}
