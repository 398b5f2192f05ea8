//! Phases 1 to 4: alerts approved (in bulk, or through the API by concurrent clients) and
//! drained, every drain timed and checked.

use outbox_dispatcher::Transport;
use std::time::Instant;

use super::run_state::{Approvals, RunState};
use crate::api::{Api, ApiClient};
use crate::dispatchers::Dispatchers;
use crate::drain::DrainReport;
use crate::progress;
use crate::workload::Workload;

/// Phase 1: bulk approvals of N alerts (the monitors' path), then their drain over HTTP
/// by one dispatcher in this process.
pub(super) async fn bulk_then_http(
    run: &mut RunState<'_>,
) -> anyhow::Result<(Approvals, DrainReport)> {
    let n = run.settings.n;
    progress(&format!("approving {n} alerts in bulk"));
    let approvals = run.approve_in_bulk(n).await?;
    progress("draining over HTTP");
    let drained = run
        .drain_checked(n, Dispatchers::InProcess(Transport::Http))
        .await?;
    Ok((approvals, drained))
}

/// Phase 2: N more, drained with the HTTP step replaced by a no-op (the pipeline's
/// ceiling).
pub(super) async fn noop(run: &mut RunState<'_>) -> anyhow::Result<DrainReport> {
    let n = run.settings.n;
    run.approve_in_bulk(n).await?;
    progress("draining with a no-op instead of HTTP");
    run.drain_checked(n, Dispatchers::InProcess(Transport::Discard))
        .await
}

/// Phase 3: N more for each count of `dispatcher` processes side by side.
pub(super) async fn processes(run: &mut RunState<'_>) -> anyhow::Result<Vec<DrainReport>> {
    let n = run.settings.n;
    let mut horizontal = Vec::new();
    for &k in &run.settings.processes {
        run.approve_in_bulk(n).await?;
        progress(&format!("draining with {k} dispatcher processes"));
        horizontal.push(run.drain_checked(n, Dispatchers::Processes(k)).await?);
    }
    Ok(horizontal)
}

/// Phase 4: approvals through `api` by concurrent clients (timed), then their drain over
/// HTTP (untimed, but checked).
pub(super) async fn through_api(run: &mut RunState<'_>, api: &Api) -> anyhow::Result<Approvals> {
    let (n, clients) = (run.settings.api_n, run.settings.api_clients);
    progress(&format!(
        "approving {n} alerts through the API with {clients} clients"
    ));
    let approvals = approve_concurrently(&api.client, &run.workload, run.next, n, clients).await?;
    run.next += n;
    run.drain_checked(n, Dispatchers::InProcess(Transport::Http))
        .await?;
    Ok(approvals)
}

/// Approves alerts `from..from + n` through the API, `clients` at once, each client its
/// own share one request after another.
async fn approve_concurrently(
    client: &ApiClient,
    workload: &Workload,
    from: u64,
    n: u64,
    clients: u64,
) -> anyhow::Result<Approvals> {
    let started = Instant::now();
    let per_client = n.div_ceil(clients);
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let (start, end) = (
            from + c * per_client,
            (from + (c + 1) * per_client).min(from + n),
        );
        let client = client.clone();
        let workload = workload.clone();
        tasks.spawn(async move {
            for i in start..end {
                client.approve_one(&workload, i).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(Approvals {
        n,
        clients,
        seconds,
        per_sec: n as f64 / seconds,
    })
}
