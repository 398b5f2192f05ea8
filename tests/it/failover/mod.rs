//! Failover: the PostgreSQL primary dies under a stream of approvals and another server
//! takes over. [`multi_host`]: a primary and a streaming replica named together in a
//! libpq multi-host URL, the replica promoted by hand. [`patroni`]: the project's own
//! `deploy/patroni/` files (etcd, two Patroni nodes, HAProxy), the leader's machine
//! crashed and Patroni electing the other node.
//!
//! Here: what both share. Agents approve as an agent should, retrying the same identity on
//! `503` or a lost connection until the approval is acknowledged; the tests then read the
//! new primary and the sinks' own records, never the processes' account of themselves.

mod multi_host;
mod patroni;

use crate::common;

use common::decider::DeciderServe;
use common::procs::*;
use reqwest::StatusCode;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Agents approving at once.
const AGENTS: usize = 8;

/// A destination the tests make: its name, the sink it reaches, and whether that sink
/// de-duplicates by idempotency key (if not, it is a plain `hold` destination: no key
/// window, no lookup, an uncertain send held for an operator).
pub struct Target<'a> {
    pub name: &'a str,
    pub sink: &'a Sink,
    pub deduplicates: bool,
}

/// Migrates the database at `url` and writes a tenant, its token and `targets`; returns
/// the token.
pub async fn set_up(url: &str, targets: &[Target<'_>]) -> String {
    let pool = outbox_store::connect(url, "failover-test", 2)
        .await
        .unwrap();
    outbox_store::MIGRATOR.run(&pool).await.unwrap();
    let tenant = outbox_store::tenants::create(&pool, "acme", "UTC", None)
        .await
        .unwrap();
    let token = outbox_store::tokens::create(&pool, tenant, Some("agent"))
        .await
        .unwrap();
    for target in targets {
        outbox_store::destinations::create(
            &pool,
            &outbox_store::destinations::NewDestination {
                idempotency_retention: target.deduplicates.then_some(Duration::from_secs(3600)),
                timeout: Duration::from_secs(2),
                max_in_flight: 64,
                ..outbox_store::destinations::NewDestination::webhook(
                    tenant,
                    target.name,
                    &target.sink.hook_url(),
                )
            },
        )
        .await
        .unwrap();
    }
    pool.close().await;
    token.expose().to_owned()
}

/// Approves `body` as an agent does: on `503` or a lost connection it sends the same
/// identity again, until it gets `201` or `200`. Returns the alert's id and when the request
/// that got it was sent.
pub async fn approve_until_acknowledged(
    http: &reqwest::Client,
    api: &str,
    token: &str,
    body: &Value,
) -> (uuid::Uuid, Instant) {
    let started = Instant::now();
    loop {
        let sent_at = Instant::now();
        let sent = http
            .post(format!("{api}/v1/alerts"))
            .bearer_auth(token)
            .json(body)
            .send()
            .await;
        if let Ok(response) = sent {
            let status = response.status();
            if status == StatusCode::CREATED || status == StatusCode::OK {
                let answer: Value = response.json().await.unwrap();
                return (answer["id"].as_str().unwrap().parse().unwrap(), sent_at);
            }
            assert_eq!(
                status,
                StatusCode::SERVICE_UNAVAILABLE,
                "{}",
                response.text().await.unwrap_or_default()
            );
            assert!(response.headers().contains_key("retry-after"));
        }
        assert!(
            started.elapsed() < DEADLINE,
            "an approval was never acknowledged"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the agents were told across a crash.
pub struct Approved {
    /// Alerts whose approval was answered `201` or `200`.
    pub acknowledged: BTreeSet<uuid::Uuid>,
    /// From the crash to the first acknowledgement of a request sent after it: a request
    /// sent before may have been committed before the crash.
    pub back_after: Duration,
}

/// [`AGENTS`] agents approve `bodies` through the API at `api`; once a third are
/// acknowledged, `crash` runs: it kills the primary, notes when the kill was complete, may
/// promote another server, and returns that moment. Returns once every approval was
/// acknowledged.
pub async fn approve_through_a_crash(
    api: &str,
    token: &str,
    bodies: Vec<Value>,
    crash: impl FnOnce() -> Instant,
) -> Approved {
    approve_through_a_lag_and_a_crash(api, token, bodies, None::<fn()>, crash).await
}

/// [`approve_through_a_crash`], and when `lag` is given: it runs once a third of the
/// approvals are acknowledged (it cuts the replica off, so that it falls behind), and the
/// crash waits until half of them are.
pub async fn approve_through_a_lag_and_a_crash(
    api: &str,
    token: &str,
    bodies: Vec<Value>,
    lag: Option<impl FnOnce()>,
    crash: impl FnOnce() -> Instant,
) -> Approved {
    let total = bodies.len();
    let bodies = Arc::new(bodies);
    let acknowledged_so_far = Arc::new(AtomicUsize::new(0));
    let mut agents = Vec::new();
    for agent in 0..AGENTS {
        let (api, token) = (api.to_owned(), token.to_owned());
        let (bodies, counter) = (Arc::clone(&bodies), Arc::clone(&acknowledged_so_far));
        agents.push(tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap();
            let mut acknowledged = Vec::new();
            for body in bodies.iter().skip(agent).step_by(AGENTS) {
                let (id, sent_at) = approve_until_acknowledged(&http, &api, &token, body).await;
                acknowledged.push((id, sent_at, Instant::now()));
                counter.fetch_add(1, Ordering::Relaxed);
            }
            acknowledged
        }));
    }
    let until = |share: usize| {
        let counter = Arc::clone(&acknowledged_so_far);
        async move {
            let started = Instant::now();
            while counter.load(Ordering::Relaxed) < share {
                assert!(
                    started.elapsed() < DEADLINE,
                    "approvals stalled before the crash"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    until(total / 3).await;
    if let Some(lag) = lag {
        lag();
        until(total / 2).await;
    }
    // Requests sent while the kill is under way may still be committed: unavailability is
    // counted from the moment the primary is dead.
    let crashed_at = crash();
    let mut acknowledged = BTreeSet::new();
    let mut back_after = None::<Duration>;
    for agent in agents {
        for (id, sent_at, acknowledged_at) in agent.await.unwrap() {
            acknowledged.insert(id);
            if sent_at > crashed_at {
                let after = acknowledged_at - crashed_at;
                back_after = Some(back_after.map_or(after, |first| first.min(after)));
            }
        }
    }
    assert_eq!(acknowledged.len(), total, "one alert per identity");
    Approved {
        acknowledged,
        back_after: back_after.expect("no approval was sent after the crash"),
    }
}

/// A dispatcher named `worker` on `url`.
pub fn dispatcher(url: &str, worker: &str) -> Process {
    spawn_dispatcher(
        &[
            "--database-url",
            url,
            "--worker-id",
            worker,
            "--retry-delays",
            "50ms,100ms",
            "--poll-interval",
            "100ms",
            "--allow-private",
            TEST_ALLOW_PRIVATE,
        ]
        .map(str::to_owned),
        None,
    )
}

/// Waits until `expected` alerts have settled (accepted, held or failed) in `pool`.
pub async fn all_settled(pool: &outbox_store::PgPool, expected: usize) {
    let started = Instant::now();
    loop {
        let settled: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM alert_states WHERE state IN ('accepted', 'held', 'failed')",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        if settled == expected as i64 {
            return;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{settled} of {expected} alerts settled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The ids of the alerts in `pool`.
pub async fn stored(pool: &outbox_store::PgPool) -> BTreeSet<uuid::Uuid> {
    let stored: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT id FROM alerts")
        .fetch_all(pool)
        .await
        .unwrap();
    stored.into_iter().collect()
}

/// How many alerts in `pool` are in `state`.
pub async fn in_state(pool: &outbox_store::PgPool, state: &str) -> usize {
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM alert_states WHERE state = $1")
        .bind(state)
        .fetch_one(pool)
        .await
        .unwrap();
    count as usize
}

/// Asserts that none of `processes` exited.
pub fn nobody_exited(processes: &mut [&mut Process]) {
    for process in processes {
        assert!(
            process.try_wait().unwrap().is_none(),
            "a process exited: {:?}",
            process.log_path()
        );
    }
}
