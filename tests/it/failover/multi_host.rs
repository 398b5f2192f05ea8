//! Failover without a failover manager: a primary and a streaming replica, both named in
//! `DATABASE_URL` with `target_session_attrs=read-write`, as libpq users name them. Under a
//! stream of approvals the whole primary is killed and the replica promoted; the decider
//! and the dispatcher follow it without exiting, the API answers `503` in the gap, the
//! agents' retries by identity get every approval acknowledged, and (with synchronous
//! replication) every acknowledged approval is on the new primary and delivered exactly
//! once in effect. With asynchronous replication the last acknowledged approvals can be
//! lost: here the replica is cut off from the primary a while before the crash, as on a
//! broken or slow link, so they surely are; the agents' rerun recreates them, one alert per
//! identity, and the run reports how many, and what the destination received twice.

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

/// The schema, tenant `acme` and its de-duplicating destination `ops` at `sink`, on
/// `primary`: the tenant's token.
async fn set_up_ops(primary: &Server, sink: &Sink) -> String {
    let ops = Target {
        name: "ops",
        sink,
        deduplicates: true,
    };
    set_up(&primary.url("postgres"), &[ops]).await
}

/// A primary and a replica in `replication` mode, the decider and a dispatcher following
/// them through a multi-host URL, agents approving [`APPROVALS`] alerts; a third of the way
/// in the whole primary is killed and the replica promoted.
async fn fail_over_under_load(replication: Replication) -> Failover {
    let primary = Server::primary(replication);
    let replica = primary.replica();
    let sink = Sink::start(&["--retention", "1h"]).await;
    let token = set_up_ops(&primary, &sink).await;
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port, replica.port
    );
    let decider = DeciderServe::on(&url).start().await;
    let dispatcher = dispatcher(&url, "failover");
    // Asynchronous: the replica is cut off a sixth of the run before the crash, as on a
    // broken or slow link, so what was acknowledged meanwhile is surely not on it.
    let lag = (replication == Replication::Asynchronous).then_some(|| replica.cut_off());
    let approved = approve_through_a_lag_and_a_crash(
        &decider.api,
        &token,
        (0..APPROVALS).map(common::renewal).collect(),
        lag,
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
        api: decider.api.clone(),
        decider: decider.process,
        dispatcher,
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
    let lost_ids: Vec<uuid::Uuid> = run
        .approved
        .acknowledged
        .difference(&stored(&run.new_primary).await)
        .copied()
        .collect();
    let lost = lost_ids.len();
    assert!(
        lost > 0,
        "the replica was cut off before the crash, yet nothing acknowledged was lost"
    );

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
    // of those the destination had already received under their lost id (the sink's own
    // records by key): each of these it received again under the recreated alert's new id,
    // a key it cannot recognise.
    let mut received_twice = 0;
    for id in &lost_ids {
        if !run.sink.records(&id.to_string()).await.is_empty() {
            received_twice += 1;
        }
    }
    let stats = run.sink.stats().await;
    println!(
        "failover (multi-host URL), asynchronous, replica cut off before the crash: first \
         approval acknowledged {:?} after the kill; {lost} of {} acknowledged approvals lost \
         and recreated; {received_twice} of them had reached the destination before the \
         crash and reached it again under a new key; {} requests reached the sink for \
         {APPROVALS} alerts",
        run.approved.back_after,
        run.approved.acknowledged.len(),
        stats["requests"]
    );
}

/// `/readyz`'s status and body, and the `outbox_database_up` sample of `/metrics`.
async fn readiness(metrics: &str) -> (StatusCode, String, String) {
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let ready = http.get(format!("{metrics}/readyz")).send().await.unwrap();
    let status = ready.status();
    let body = ready.text().await.unwrap();
    let figures = metrics_text(&http, metrics).await;
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
    set_up_ops(&primary, &sink).await;

    let on_primary = DeciderServe::on(&primary.url("postgres"))
        .with_metrics()
        .start()
        .await;
    let (status, _, up) = readiness(on_primary.metrics()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(up, "outbox_database_up 1");

    // A process pointed at the standby alone (no target_session_attrs) is up, and says it
    // is not ready, and why.
    let on_standby = DeciderServe::on(&replica.url("postgres"))
        .with_metrics()
        .start()
        .await;
    let (status, body, up) = readiness(on_standby.metrics()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("read-only"), "{body}");
    assert_eq!(up, "outbox_database_up 0");

    // The dispatcher's listener says the same.
    let args = ["--database-url".to_owned(), replica.url("postgres")];
    let (_dispatcher, metrics) =
        spawn_dispatcher_with_metrics(&args, &[("RUST_LOG", "info")]).await;
    let (status, body, up) = readiness(&metrics).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("read-only"), "{body}");
    assert_eq!(up, "outbox_database_up 0");
}

#[tokio::test]
async fn a_bad_server_list_is_one_line_naming_the_problem_and_writes_nothing() {
    let db = outbox_testkit::TestDb::new().await;
    // The test database's own server and database, named in several hosts' URLs; the
    // password (trust ignores it) must never be repeated back.
    let after_user = db.url.split_once('@').unwrap().1;
    let (server, database) = after_user.split_once('/').unwrap();
    let database = database.split('?').next().unwrap();
    let unreachable = {
        // A port bound and closed again: nothing listens there now.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let cases = [
        (
            format!("postgres://postgres:hunter2@{server},127.0.0.1:x/{database}"),
            "host `127.0.0.1:x`: invalid port number",
        ),
        (
            format!(
                "postgres://postgres:hunter2@{server}/{database}?target_session_attrs=writable"
            ),
            "unknown target_session_attrs `writable`",
        ),
        (
            format!(
                "postgres://postgres:hunter2@{unreachable},{server}/{database}\
                 ?target_session_attrs=standby"
            ),
            "no server is a standby",
        ),
    ];
    for (bad_url, expected) in cases {
        let run = common::outboxctl(
            &db,
            &["tenant", "create", "acme", "--database-url", &bad_url],
        )
        .await;
        assert!(!run.ok, "{bad_url} was accepted");
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {}", run.stderr);
        assert!(lines[0].starts_with("error: "), "{}", run.stderr);
        assert!(
            lines[0].contains(expected),
            "{} lacks {expected}",
            run.stderr
        );
        assert!(!run.stderr.contains("hunter2"), "{}", run.stderr);
        // The cause is said once, not once per layer.
        if let Some(cause) = expected.split(": ").last() {
            assert_eq!(run.stderr.matches(cause).count(), 1, "{}", run.stderr);
        }
    }
    // The unreachable host and the primary are each named with why they do not qualify.
    let run = common::outboxctl(
        &db,
        &[
            "tenant",
            "create",
            "acme",
            "--database-url",
            &format!(
                "postgres://postgres@{unreachable},{server}/{database}?target_session_attrs=standby"
            ),
        ],
    )
    .await;
    assert!(
        run.stderr
            .contains(&format!("{unreachable} cannot be reached"))
            && run.stderr.contains(&format!("{server} is a primary")),
        "{}",
        run.stderr
    );
    assert_eq!(db.count("tenants").await, 0, "nothing was written");
}
