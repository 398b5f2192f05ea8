//! Phase 5: latency from approval to the sink's receipt, with one dispatcher running
//! throughout: one alert at a time on an idle system, then an open-loop stream at a given
//! rate (half the measured HTTP capacity).

use anyhow::Context;
use chrono::{DateTime, Utc};
use outbox_dispatcher::Transport;
use outbox_store::PgPool;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use uuid::Uuid;

use super::report::Latency;
use super::run_state::RunState;
use crate::api::Api;
use crate::dispatchers::{Dispatchers, Running};
use crate::drain::SinkCounters;
use crate::measure::{ms, quantile};
use crate::own_sink::OwnSink;
use crate::progress;
use crate::workload::Workload;

/// Both latencies: idle (approvals through `api`), then loaded at `rate` alerts per
/// second (bulk approvals).
pub(super) async fn latencies(
    run: &mut RunState<'_>,
    api: &Api,
    rate: f64,
) -> anyhow::Result<(Latency, Latency)> {
    progress("latency: one alert at a time");
    let running = Running::start(
        run.url,
        run.drain_settings(Dispatchers::InProcess(Transport::Http)),
    )
    .await?;
    let http = reqwest::Client::new();
    let idle = idle(run, api, &http).await?;
    progress(&format!(
        "latency: {rate:.0} alerts/s for {}s",
        run.settings.loaded_secs
    ));
    let (loaded_ids, loaded) = loaded(run, &http, rate, running).await?;
    run.delivered += run.settings.idle_samples + loaded_ids;
    Ok((idle, loaded))
}

/// One alert at a time: each approved through the API once the sink has the one before.
async fn idle(
    run: &mut RunState<'_>,
    api: &Api,
    http: &reqwest::Client,
) -> anyhow::Result<Latency> {
    let stats_url = run.sink.stats_url();
    let mut ids = Vec::new();
    for i in run.next..run.next + run.settings.idle_samples {
        let before = SinkCounters::read(http, &stats_url).await?;
        ids.push(api.client.approve_one(&run.workload, i).await?);
        wait_for_sink(http, &stats_url, before.distinct_keys + 1).await?;
    }
    run.next += run.settings.idle_samples;
    latency(&run.pool, http, run.sink, &ids, 0.0).await
}

/// An open-loop stream at `rate` for the run's `loaded_secs`, until the sink has it all;
/// then stops the dispatcher (`running`). Returns the alerts offered and their latency.
async fn loaded(
    run: &mut RunState<'_>,
    http: &reqwest::Client,
    rate: f64,
    running: Running,
) -> anyhow::Result<(u64, Latency)> {
    let stats_url = run.sink.stats_url();
    let before = SinkCounters::read(http, &stats_url).await?;
    let ids = offer_stream(&run.workload, run.next, rate, run.settings.loaded_secs).await?;
    wait_for_sink(http, &stats_url, before.distinct_keys + ids.len() as u64).await?;
    running.stop().await?;
    let latency = latency(&run.pool, http, run.sink, &ids, rate).await?;
    Ok((ids.len() as u64, latency))
}

/// Waits until the sink has seen `keys` distinct keys (polling, with a deadline).
async fn wait_for_sink(http: &reqwest::Client, stats_url: &str, keys: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if SinkCounters::read(http, stats_url).await?.distinct_keys >= keys {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the sink never saw {keys} keys");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Approves alerts at `rate` per second for `secs` seconds, in a small bulk approval
/// every 10 ms (open loop: arrivals do not wait for deliveries), waking the dispatcher
/// after each. Returns the ids approved.
async fn offer_stream(
    workload: &Workload,
    from: u64,
    rate: f64,
    secs: u64,
) -> anyhow::Result<Vec<Uuid>> {
    let tick = Duration::from_millis(10);
    let per_tick = (rate * tick.as_secs_f64()).max(1.0);
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let mut owed = 0.0;
    let mut next = from;
    let mut ids = Vec::new();
    while started.elapsed() < Duration::from_secs(secs) {
        interval.tick().await;
        owed += per_tick;
        let count = owed.floor() as u64;
        owed -= count as f64;
        let alerts: Vec<_> = (next..next + count).map(|i| workload.alert(i)).collect();
        next += count;
        ids.extend(
            outbox_store::alerts::approve_batch(
                &mut *workload.pool.acquire().await?,
                workload.tenant_id,
                &alerts,
                "benchmark",
                Some(&workload.trace),
            )
            .await?,
        );
        outbox_store::wake_ups::notify_due(&workload.pool).await?;
    }
    Ok(ids)
}

/// Latency of each alert: the sink's receipt time minus the alert's approval time.
async fn latency(
    pool: &PgPool,
    http: &reqwest::Client,
    sink: &OwnSink,
    ids: &[Uuid],
    offered: f64,
) -> anyhow::Result<Latency> {
    // The sink may have answered the last alerts before their attempts are recorded: wait
    // (with a deadline) until every alert has its send attempt.
    let deadline = Instant::now() + Duration::from_secs(60);
    let approved: HashMap<Uuid, (DateTime<Utc>, DateTime<Utc>)> = loop {
        let rows = crate::db::approved_and_claimed_at(pool, ids).await?;
        let recorded: HashMap<_, _> = rows
            .iter()
            .filter_map(|(id, approved, claimed)| claimed.map(|c| (*id, (*approved, c))))
            .collect();
        if recorded.len() == rows.len() {
            break recorded;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} alerts still have no recorded send attempt",
            rows.len() - recorded.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let records: Vec<serde_json::Value> = http
        .get(format!("{}/_sink/records", sink.base))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let mut took = Vec::new();
    let mut to_claim = Vec::new();
    for record in records {
        let Some(id) = record["key"].as_str().and_then(|k| Uuid::parse_str(k).ok()) else {
            continue;
        };
        let Some((approved_at, claimed_at)) = approved.get(&id) else {
            continue;
        };
        to_claim.push((*claimed_at - *approved_at).to_std().unwrap_or_default());
        let received = record["at"]
            .as_str()
            .and_then(|at| DateTime::parse_from_rfc3339(at).ok())
            .context("a sink record without a time")?;
        let waited = received.with_timezone(&Utc) - *approved_at;
        took.push(waited.to_std().unwrap_or_default());
    }
    anyhow::ensure!(
        took.len() == ids.len(),
        "the sink has {} of {} alerts",
        took.len(),
        ids.len()
    );
    Ok(Latency {
        offered_per_sec: offered,
        samples: took.len(),
        p50_ms: quantile(&took, 0.5).map(ms).unwrap_or_default(),
        p99_ms: quantile(&took, 0.99).map(ms).unwrap_or_default(),
        max_ms: quantile(&took, 1.0).map(ms).unwrap_or_default(),
        to_claim_p50_ms: quantile(&to_claim, 0.5).map(ms).unwrap_or_default(),
        to_claim_p99_ms: quantile(&to_claim, 0.99).map(ms).unwrap_or_default(),
    })
}
