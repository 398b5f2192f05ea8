//! Failover without a failover manager: a primary and a streaming replica, both named in
//! `DATABASE_URL` with `target_session_attrs=read-write`, as libpq users name them. Under a
//! stream of approvals the whole primary is killed and the replica promoted; the decider
//! and the dispatcher follow it without exiting, the API answers `503` in the gap, the
//! agents' retries by identity get every approval acknowledged, and (with synchronous
//! replication) every acknowledged approval is on the new primary and delivered exactly
//! once in effect. With asynchronous replication the last acknowledged approvals can be
//! lost: the agents' rerun recreates them, one alert per identity, and the run reports how
//! many.

use super::*;
use outbox_testkit::cluster::{Replication, Server};

/// Approvals sent in all; the primary dies after a third of them were acknowledged.
const APPROVALS: usize = 900;

/// A failover under load, as it ended.
struct Failover {
    approved: Approved,
    /// A pool on the promoted replica alone.
    new_primary: outbox_store::PgPool,
    sink: Sink,
    decider: Process,
    dispatcher: Process,
    api: String,
    token: String,
    _servers: (Server, Server),
}

/// A primary and a replica in `replication` mode, the decider and a dispatcher following
/// them through a multi-host URL, agents approving [`APPROVALS`] alerts; a third of the way
/// in the whole primary is killed and the replica promoted.
async fn fail_over_under_load(replication: Replication) -> Failover {
    let primary = Server::primary(replication);
    let replica = primary.replica();
    let sink = Sink::start(&["--retention", "1h"]).await;
    let token = set_up(
        &primary.url("postgres"),
        &[Target {
            name: "ops",
            sink: &sink,
            deduplicates: true,
        }],
    )
    .await;
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port, replica.port
    );
    let (decider, api) = decider(&url).await;
    let dispatcher = dispatcher(&url, "failover");
    let approved = approve_through_a_crash(
        &api,
        &token,
        (0..APPROVALS).map(common::renewal).collect(),
        || {
            primary.kill();
            let dead_at = Instant::now();
            replica.promote();
            dead_at
        },
    )
    .await;
    let new_primary = outbox_store::connect(&replica.url("postgres"), "failover-check", 2)
        .await
        .unwrap();
    Failover {
        approved,
        new_primary,
        sink,
        decider,
        dispatcher,
        api,
        token,
        _servers: (primary, replica),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_processes_follow_a_promoted_replica_and_no_acknowledged_approval_is_lost() {
    let mut run = fail_over_under_load(Replication::Synchronous).await;
    // Read from the new primary alone: every acknowledged approval is there, one alert
    // per identity, and each ends accepted.
    all_settled(&run.new_primary, APPROVALS).await;
    assert_eq!(in_state(&run.new_primary, "accepted").await, APPROVALS);
    let stored = stored(&run.new_primary).await;
    let lost: Vec<_> = run.approved.acknowledged.difference(&stored).collect();
    assert!(lost.is_empty(), "acknowledged approvals lost: {lost:?}");
    assert_eq!(stored.len(), APPROVALS, "one alert per identity");

    // The sink's own records: each alert applied once (a resend after the failover is a
    // wire duplicate, recorded and not applied).
    let stats = run.sink.stats().await;
    assert_eq!(stats["applied"], APPROVALS, "{stats}");
    assert_eq!(stats["effective_duplicates"], 0, "{stats}");
    nobody_exited(&mut [&mut run.decider, &mut run.dispatcher]);
    println!(
        "failover (multi-host URL), synchronous: first approval acknowledged {:?} after the \
         kill; 0 of {} acknowledged approvals lost; {} requests reached the sink for \
         {APPROVALS} alerts",
        run.approved.back_after,
        run.approved.acknowledged.len(),
        stats["requests"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_asynchronous_replication_a_lost_approval_is_recreated_by_the_agents_retry() {
    let mut run = fail_over_under_load(Replication::Asynchronous).await;
    let lost = run
        .approved
        .acknowledged
        .difference(&stored(&run.new_primary).await)
        .count();

    // The agents run again, as a scheduler reruns them: every identity is approved once
    // more. A lost approval comes back as a new alert; every other is found.
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut recreated = 0;
    for n in 0..APPROVALS {
        let response = http
            .post(format!("{}/v1/alerts", run.api))
            .bearer_auth(&run.token)
            .json(&common::renewal(n))
            .send()
            .await
            .unwrap();
        match response.status() {
            StatusCode::CREATED => recreated += 1,
            StatusCode::OK => {}
            other => panic!("approval {n} answered {other}"),
        }
    }
    assert_eq!(
        recreated, lost,
        "each lost approval recreated, nothing else"
    );
    all_settled(&run.new_primary, APPROVALS).await;
    assert_eq!(in_state(&run.new_primary, "accepted").await, APPROVALS);
    assert_eq!(
        stored(&run.new_primary).await.len(),
        APPROVALS,
        "one alert per identity"
    );
    nobody_exited(&mut [&mut run.decider, &mut run.dispatcher]);

    // Reported, not asserted: how many acknowledged approvals the crash took, and how many
    // alerts the destination applied twice (a lost alert delivered before the crash, then
    // recreated under a new id and so a new idempotency key).
    let stats = run.sink.stats().await;
    let applied = stats["applied"].as_u64().unwrap() as usize;
    println!(
        "failover (multi-host URL), asynchronous: first approval acknowledged {:?} after \
         the kill; {lost} of {} acknowledged approvals lost and recreated; {} applied twice \
         at the destination; {} requests reached the sink for {APPROVALS} alerts",
        run.approved.back_after,
        run.approved.acknowledged.len(),
        applied.saturating_sub(APPROVALS),
        stats["requests"]
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
    set_up(
        &primary.url("postgres"),
        &[Target {
            name: "ops",
            sink: &sink,
            deduplicates: true,
        }],
    )
    .await;

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
