//! Failover without a failover manager: a primary and a synchronous streaming replica, both
//! named in `DATABASE_URL` with `target_session_attrs=read-write`, as libpq users name
//! them. Under a stream of approvals the primary's postmaster is killed and the replica
//! promoted; the decider and the dispatcher follow it without exiting, the API answers
//! `503` in the gap, an agent's retries by identity get every approval acknowledged, and
//! every acknowledged approval is on the new primary and delivered exactly once in effect.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::procs::*;
use outbox_testkit::cluster::{Replication, Server};
use reqwest::StatusCode;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Approvals sent in all; the primary dies after a third of them were acknowledged.
const APPROVALS: usize = 900;
/// Agents approving at once.
const AGENTS: usize = 8;

/// The tenant, its token and a destination at `sink`, written on the primary.
async fn set_up(primary: &Server, sink: &Sink) -> String {
    let pool = outbox_store::connect(&primary.url("postgres"), "failover-test", 2)
        .await
        .unwrap();
    outbox_store::MIGRATOR.run(&pool).await.unwrap();
    let tenant = outbox_store::tenants::create(&pool, "acme", "UTC", None)
        .await
        .unwrap();
    let token = outbox_store::tokens::create(&pool, tenant, Some("agent"))
        .await
        .unwrap();
    outbox_store::destinations::create(
        &pool,
        &outbox_store::destinations::NewDestination {
            tenant_id: tenant,
            name: "ops".to_owned(),
            url: sink.hook_url(),
            signing_secrets: vec![],
            idempotency_header: "Idempotency-Key".to_owned(),
            idempotency_retention: Some(Duration::from_secs(3600)),
            lookup_url_template: None,
            on_uncertain: outbox_core::OnUncertain::Hold,
            timeout: Duration::from_secs(2),
            max_in_flight: 64,
        },
    )
    .await
    .unwrap();
    pool.close().await;
    token.expose().to_owned()
}

/// Approves `body` as an agent does: on `503` or a lost connection it sends the same
/// identity again, until it gets `201` or `200`. Returns the alert's id.
async fn approve_until_acknowledged(
    http: &reqwest::Client,
    api: &str,
    token: &str,
    body: &Value,
) -> uuid::Uuid {
    let started = Instant::now();
    loop {
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
                return answer["id"].as_str().unwrap().parse().unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_processes_follow_a_promoted_replica_and_no_acknowledged_approval_is_lost() {
    let primary = Server::primary(Replication::Synchronous);
    let replica = primary.replica();
    let sink = Sink::start(&["--retention", "1h"]).await;
    let token = set_up(&primary, &sink).await;
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port, replica.port
    );

    let (decider, api) = spawn_listening(
        env!("CARGO_BIN_EXE_decider"),
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--interval",
            "1h",
            "--database-url",
            &url,
        ],
        &[],
        "approval API listening",
    )
    .await;
    let dispatcher = spawn_dispatcher(
        &[
            "--database-url",
            &url,
            "--worker-id",
            "failover",
            "--retry-delays",
            "50ms,100ms",
            "--poll-interval",
            "100ms",
            "--lease",
            "2s",
            "--allow-private",
            TEST_ALLOW_PRIVATE,
        ]
        .map(str::to_owned),
        None,
    );

    // Eight agents approve at once, so approvals (and deliveries) are in flight when the
    // primary dies.
    let acknowledged_so_far = Arc::new(AtomicUsize::new(0));
    let mut agents = Vec::new();
    for agent in 0..AGENTS {
        let (api, token, counter) = (api.clone(), token.clone(), Arc::clone(&acknowledged_so_far));
        agents.push(tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap();
            let mut acknowledged = Vec::new();
            for n in (agent..APPROVALS).step_by(AGENTS) {
                let body = common::renewal(n);
                acknowledged.push((
                    approve_until_acknowledged(&http, &api, &token, &body).await,
                    Instant::now(),
                ));
                counter.fetch_add(1, Ordering::Relaxed);
            }
            acknowledged
        }));
    }
    let started = Instant::now();
    while acknowledged_so_far.load(Ordering::Relaxed) < APPROVALS / 3 {
        assert!(
            started.elapsed() < DEADLINE,
            "approvals stalled before the kill"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    primary.kill();
    let killed_at = Instant::now();
    replica.promote();
    let mut acknowledged = BTreeSet::new();
    let mut after_kill = Vec::new();
    for agent in agents {
        for (id, at) in agent.await.unwrap() {
            acknowledged.insert(id);
            if at > killed_at {
                after_kill.push(at - killed_at);
            }
        }
    }
    after_kill.sort();
    let back_after = after_kill[0];
    assert_eq!(acknowledged.len(), APPROVALS);

    // Read from the new primary alone: every acknowledged approval is there, and each
    // alert ends accepted.
    let new_primary = outbox_store::connect(&replica.url("postgres"), "failover-check", 2)
        .await
        .unwrap();
    let started = Instant::now();
    loop {
        let accepted: i64 =
            sqlx::query_scalar("SELECT count(*) FROM alert_states WHERE state = 'accepted'")
                .fetch_one(&new_primary)
                .await
                .unwrap();
        if accepted == APPROVALS as i64 {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{accepted} of {APPROVALS} alerts accepted on the new primary"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stored: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT id FROM alerts")
        .fetch_all(&new_primary)
        .await
        .unwrap();
    let stored: BTreeSet<uuid::Uuid> = stored.into_iter().collect();
    let lost: Vec<_> = acknowledged.difference(&stored).collect();
    assert!(lost.is_empty(), "acknowledged approvals lost: {lost:?}");
    assert_eq!(stored.len(), APPROVALS, "one alert per identity");

    // The sink's own records: each alert applied once (a resend after the failover is a
    // wire duplicate, recorded and not applied).
    let stats = sink.stats().await;
    assert_eq!(stats["applied"], APPROVALS, "{stats}");

    // Nobody exited.
    let mut decider = decider;
    let mut dispatcher = dispatcher;
    assert!(decider.try_wait().unwrap().is_none(), "the decider exited");
    assert!(
        dispatcher.try_wait().unwrap().is_none(),
        "the dispatcher exited"
    );
    println!(
        "failover (multi-host URL, promotion by hand): first approval acknowledged {:?} after \
         the kill; {} requests reached the sink for {APPROVALS} alerts",
        back_after, stats["requests"]
    );
}

/// `decider serve` on `url` with its metrics listener: the process and that listener's base.
async fn decider_with_metrics(url: &str) -> (Process, String) {
    let (mut decider, _api) = spawn_listening(
        env!("CARGO_BIN_EXE_decider"),
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--interval",
            "1h",
            "--database-url",
            url,
        ],
        &[],
        "approval API listening",
    )
    .await;
    let metrics = format!(
        "http://{}",
        decider.listening("decider metrics listening").await
    );
    (decider, metrics)
}

/// `/readyz`'s status and body, and the `outbox_database_up` sample of `/metrics`.
async fn readiness(metrics: &str) -> (StatusCode, String, String) {
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let ready = http.get(format!("{metrics}/readyz")).send().await.unwrap();
    let status = ready.status();
    let body = ready.text().await.unwrap();
    let figures = http
        .get(format!("{metrics}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let up = figures
        .lines()
        .find(|line| line.starts_with("outbox_database_up "))
        .unwrap_or_else(|| panic!("no outbox_database_up in {figures}"))
        .to_owned();
    (status, body, up)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_says_when_the_database_answers_but_does_not_take_writes() {
    let primary = Server::primary(Replication::Asynchronous);
    let replica = primary.replica();
    let sink = Sink::start(&[]).await;
    set_up(&primary, &sink).await;

    let (_on_primary, metrics) = decider_with_metrics(&primary.url("postgres")).await;
    let (status, _, up) = readiness(&metrics).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(up, "outbox_database_up 1");

    // A process pointed at the standby alone (no target_session_attrs) is up, and says it
    // is not ready, and why.
    let (_on_standby, metrics) = decider_with_metrics(&replica.url("postgres")).await;
    let (status, body, up) = readiness(&metrics).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("read-only"), "{body}");
    assert_eq!(up, "outbox_database_up 0");

    // The dispatcher's listener says the same.
    let mut dispatcher = Process::spawn(
        env!("CARGO_BIN_EXE_dispatcher"),
        &[
            "--database-url",
            &replica.url("postgres"),
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        &[("RUST_LOG", "info")],
    );
    let metrics = format!(
        "http://{}",
        dispatcher.listening("dispatcher metrics listening").await
    );
    let (status, body, up) = readiness(&metrics).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("read-only"), "{body}");
    assert_eq!(up, "outbox_database_up 0");
}
