//! Phase 6, on a database of its own: the claim's cost on an empty history and with H
//! settled alerts of history, then retention (`prune`) of that history.

use chrono::Utc;
use outbox_store::PgPool;
use std::time::Instant;
use uuid::Uuid;

use super::report::ClaimCost;
use super::settings::SuiteSettings;
use crate::measure::{ms, quantile};
use crate::progress;
use crate::scratch::on_own_database;
use crate::workload::{DestinationSettings, Workload};

/// Rows per timed claim, and claims timed per case.
const BATCH: i64 = 100;
/// See [`BATCH`].
const ROUNDS: usize = 100;

/// Alerts of history written per statement.
const HISTORY_CHUNK: u64 = 250_000;

/// The claim's cost on an empty history, then with `history` settled alerts; then
/// retention of that history. On a database of its own.
pub(super) async fn claim_cost(settings: &SuiteSettings) -> anyhow::Result<ClaimCost> {
    on_own_database(&settings.server_url, |url| async move {
        claim_cost_on(settings, &url).await
    })
    .await
}

async fn claim_cost_on(settings: &SuiteSettings, url: &str) -> anyhow::Result<ClaimCost> {
    let pool = outbox_store::connect(url, "benchmark", 4).await?;
    let workload = Workload::prepare(
        pool.clone(),
        &DestinationSettings {
            // Never contacted: claims are rolled back.
            url: "http://127.0.0.1:9/unused".to_owned(),
            // Room for a whole claim: the claim's cost is measured, not the bound.
            max_in_flight: 1_000,
        },
    )
    .await?;
    let queue = (settings.n / 5).max(2_000);
    workload.approve_bulk(0, queue).await?;
    crate::db::vacuum_analyze(&pool).await?;
    progress(&format!("claim cost: {queue} pending, empty history"));
    let empty = crate::db::time_claims(&pool, BATCH, ROUNDS).await?;

    let history_seeding_secs = seed_history(&workload, settings.history).await?;
    crate::db::vacuum_analyze(&pool).await?;
    progress("claim cost: with history");
    let with_history = crate::db::time_claims(&pool, BATCH, ROUNDS).await?;

    let (pruned_alerts, prune_secs) = prune_history(&pool).await?;
    anyhow::ensure!(
        pruned_alerts == settings.history,
        "pruned {pruned_alerts} of {} alerts of history",
        settings.history
    );
    pool.close().await;

    let empty_history_ms = quantile(&empty, 0.5).map(ms).unwrap_or_default();
    let with_history_ms = quantile(&with_history, 0.5).map(ms).unwrap_or_default();
    Ok(ClaimCost {
        queue,
        batch: BATCH,
        rounds: ROUNDS,
        history: settings.history,
        empty_history_ms,
        with_history_ms,
        ratio: with_history_ms / empty_history_ms.max(f64::MIN_POSITIVE),
        history_seeding_secs,
        pruned_alerts,
        prune_secs,
    })
}

/// Writes `history` settled alerts (approvals, attempts, evidence) for the workload's
/// destination, [`HISTORY_CHUNK`] per statement. Returns the seconds it took.
async fn seed_history(workload: &Workload, history: u64) -> anyhow::Result<f64> {
    progress(&format!("claim cost: writing {history} alerts of history"));
    let started = Instant::now();
    let mut from = 0u64;
    while from < history {
        let count = HISTORY_CHUNK.min(history - from);
        crate::db::seed_history(
            &workload.pool,
            workload.tenant_id,
            workload.destination_id,
            from as i64,
            count as i64,
        )
        .await?;
        from += count;
        if history > HISTORY_CHUNK {
            progress(&format!("  {from} of {history}"));
        }
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Retention of the history: every accepted or superseded alert settled over 30 days ago
/// pruned, 5,000 a step. Returns the alerts pruned and the seconds it took.
async fn prune_history(pool: &PgPool) -> anyhow::Result<(u64, f64)> {
    progress("retention: pruning the history");
    let started = Instant::now();
    let cutoff = Utc::now() - chrono::Duration::days(30);
    let outcomes = outbox_store::retention::prunable_outcomes(false);
    let mut pruned_alerts = 0;
    let mut cursor = Uuid::nil();
    loop {
        let (step, next) =
            outbox_store::retention::prune_step(pool, cutoff, &outcomes, cursor, 5_000).await?;
        pruned_alerts += step.alerts;
        match next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    Ok((pruned_alerts, started.elapsed().as_secs_f64()))
}
