//! The dispatcher end to end: real `dispatcher` and `sink` processes over a real database.
//! Every count comes from the sink's own records or from the database.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::add_tenant;
use common::alerts::{approve_many, evidence, evidence_by, reference_of, state_of, states};
use common::destinations::{acme_with_ops_at, add_destination};
use common::procs::*;
use outbox_testkit::TestDb;
use std::time::Duration;

/// Crash after acceptance: the sink accepts the alert and drops its answer; the dispatcher
/// dies before recording anything and is replaced. Returns the alert, with the sink.
async fn crash_after_acceptance(db: &TestDb, sink: &Sink, tenant_id: uuid::Uuid) -> uuid::Uuid {
    let id = approve_many(db, tenant_id, "ops", 1).await[0];
    sink.faults(serde_json::json!({"drop_response_for_keys": [id.to_string()]}))
        .await;

    let first = spawn_dispatcher(
        &dispatcher_args(db, "first", &[]),
        Some("dispatch-after-send=pause"),
    );
    // The destination has it: the sink recorded the key (and dropped the answer).
    sink.wait_for("the first request", |s| s["requests"] == 1)
        .await;
    wait_for_db(
        db,
        "SELECT count(*) FROM outbox WHERE status = 'sending'",
        |n| n == 1,
    )
    .await;
    let mut first = first;
    first.kill().await.unwrap();

    // The replacement finds the same `sending` row; its lease runs out and it is settled.
    drain(db, "second", &["--drain-horizon", "10s"]).await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_acceptance_at_an_idempotent_destination_delivers_once() {
    let db = TestDb::new().await;
    let sink = Sink::start(&["--retention", "1h"]).await;
    let tenant_id = add_tenant(&db, "acme", &[]).await.id;
    add_destination(&db, tenant_id, "ops", &sink.hook_url(), |d| {
        d.idempotency_retention = Some(Duration::from_secs(3600));
    })
    .await;
    let id = crash_after_acceptance(&db, &sink, tenant_id).await;

    let records = sink.records(&id.to_string()).await;
    assert_eq!(records.len(), 2, "the key was sent again: {records:?}");
    assert_eq!(records[1]["outcome"], "wire_duplicate");
    assert_eq!(records[0]["payload_sha256"], records[1]["payload_sha256"]);
    let stats = sink.stats().await;
    assert_eq!(stats["applied"], 1);
    assert_eq!(stats["effective_duplicates"], 0);
    assert_eq!(state_of(&db, id).await, "accepted");
    let reference = reference_of(&db, id).await;
    assert_eq!(reference.as_deref(), records[0]["receipt"].as_str());
    let trail = evidence_by(&db, id).await;
    assert!(
        trail.iter().any(|(actor, line)| actor == "dispatcher:first"
            && line.starts_with("lease expired during attempt 1")),
        "{trail:?}"
    );
    let lines = evidence(&db, id).await;
    assert!(
        lines
            .iter()
            .any(|l| l.contains("resending with the same key")),
        "{lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_acceptance_at_a_lookup_destination_is_confirmed_without_resending() {
    let db = TestDb::new().await;
    let sink = Sink::start(&["--lookup"]).await;
    let tenant_id = add_tenant(&db, "acme", &[]).await.id;
    let template = sink.lookup_template();
    add_destination(&db, tenant_id, "ops", &sink.hook_url(), |d| {
        d.lookup_url_template = Some(template);
    })
    .await;
    let id = crash_after_acceptance(&db, &sink, tenant_id).await;

    assert_eq!(
        sink.records(&id.to_string()).await.len(),
        1,
        "no second POST"
    );
    assert_eq!(state_of(&db, id).await, "accepted");
    let lookups: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM delivery_attempts WHERE alert_id = $1 AND kind = 'lookup' AND outcome = 'found'",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(lookups, 1);
    let lines = evidence(&db, id).await;
    assert!(
        lines.iter().any(|l| l.contains("confirmed by lookup")),
        "{lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_acceptance_at_a_plain_destination_is_held_not_resent() {
    let sink = Sink::start(&[]).await;
    let (db, tenant_id) = acme_with_ops_at(&sink, |_| {}).await;
    let id = crash_after_acceptance(&db, &sink, tenant_id).await;

    assert_eq!(
        sink.records(&id.to_string()).await.len(),
        1,
        "no second POST"
    );
    assert_eq!(state_of(&db, id).await, "held");
    let lines = evidence(&db, id).await;
    assert!(
        lines
            .last()
            .unwrap()
            .contains("retry held for reconciliation"),
        "{lines:?}"
    );
}

async fn racing_dispatchers(count: usize) {
    let sink = Sink::start(&[]).await;
    let (db, tenant_id) = acme_with_ops_at(&sink, |_| {}).await;
    approve_many(&db, tenant_id, "ops", 2000).await;

    let mut children = Vec::new();
    for n in 0..count {
        let mut args = dispatcher_args(&db, &format!("racer-{n}"), &["--batch-size", "50"]);
        args.push("--drain".into());
        children.push(spawn_dispatcher(&args, None));
    }
    for mut child in children {
        let status = tokio::time::timeout(DEADLINE, child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success());
    }

    let stats = sink.stats().await;
    assert_eq!(stats["distinct_keys"], 2000, "{stats}");
    assert_eq!(stats["requests"], 2000, "{stats}");
    assert_eq!(stats["wire_duplicates"], 0, "{stats}");
    assert_eq!(stats["effective_duplicates"], 0, "{stats}");
    assert_eq!(states(&db).await, [("accepted".to_owned(), 2000)].into());
    // Every alert's one attempt names one of the racers.
    let workers: i64 = sqlx::query_scalar("SELECT count(DISTINCT worker) FROM delivery_attempts")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(workers >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_dispatchers_racing_send_each_alert_once() {
    racing_dispatchers(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_dispatchers_racing_send_each_alert_once() {
    racing_dispatchers(4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_wakes_an_idle_dispatcher_and_metrics_show_the_work() {
    let api = common::Api::start().await;
    let sink = Sink::start(&[]).await;
    add_destination(&api.db, api.acme.id, "hooks", &sink.hook_url(), |_| {}).await;
    // Polling once an hour: only the wake-up can bring the alert out in time.
    let args = dispatcher_args(&api.db, "idle", &["--poll-interval", "1h"]);
    let (_dispatcher, metrics) = spawn_dispatcher_with_metrics(&args, &[]).await;
    // Let it subscribe and finish its first (empty) claim, so it is waiting when the
    // approval arrives. The claim is seen in the dispatcher's own count: the connection
    // it ran on goes on to other statements (upkeep), so `pg_stat_activity` may never
    // show it.
    wait_for_db(
        &api.db,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'dispatcher' \
         AND query LIKE 'LISTEN%'",
        |n| n >= 1,
    )
    .await;
    let http = reqwest::Client::new();
    wait_for_series(&http, &metrics, "outbox_claims_total", |claims| {
        claims >= 1.0
    })
    .await;

    let mut approval = common::renewal(1);
    approval["destination"] = serde_json::json!("hooks");
    let (status, alert) = api.approve(&api.acme.token, &approval).await;
    assert_eq!(status, reqwest::StatusCode::CREATED);
    sink.wait_for("the alert", |s| s["applied"] == 1).await;
    let id: uuid::Uuid = alert["id"].as_str().unwrap().parse().unwrap();
    wait_for_db(
        &api.db,
        "SELECT count(*) FROM alert_states WHERE state = 'accepted'",
        |n| n == 1,
    )
    .await;
    assert_eq!(sink.records(&id.to_string()).await.len(), 1);

    let text = metrics_text(&http, &metrics).await;
    assert!(
        text.contains("outbox_attempts_total{destination=\"hooks\",outcome=\"accepted\"} 1"),
        "{text}"
    );
    assert!(text.contains("outbox_depth{state=\"pending\"} 0"), "{text}");
    assert!(
        text.contains("outbox_send_seconds_count{destination=\"hooks\"} 1"),
        "{text}"
    );
    let ready = http.get(format!("{metrics}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), reqwest::StatusCode::OK);
}

/// A routine delivery records its attempt (with its evidence line), its outcome and the
/// end of its queue row; it rewrites neither the wide alert row nor adds an event row, and
/// `outboxctl alert show` tells the same story it always did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routine_delivery_leaves_the_alert_row_alone_and_reads_as_before() {
    let sink = Sink::start(&[]).await;
    let (db, tenant_id) = acme_with_ops_at(&sink, |_| {}).await;
    let id = approve_many(&db, tenant_id, "ops", 1).await[0];
    let row_and_events = || async {
        sqlx::query_as::<_, (String, i64)>(
            "SELECT a.xmin::text, (SELECT count(*) FROM alert_events e WHERE e.alert_id = a.id) \
             FROM alerts a WHERE a.id = $1",
        )
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    let before = row_and_events().await;

    drain(&db, "w1", &[]).await;
    assert_eq!(state_of(&db, id).await, "accepted");
    assert_eq!(
        row_and_events().await,
        before,
        "no write of the alert row, no event row"
    );

    let show = common::outboxctl(&db, &["alert", "show", &id.to_string()]).await;
    assert!(show.ok, "{}", show.stderr);
    let trail: Vec<&str> = show
        .stdout
        .lines()
        .skip_while(|line| *line != "evidence")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .collect();
    assert_eq!(trail.len(), 2, "{}", show.stdout);
    assert!(
        trail[0].contains("pending")
            && trail[0].ends_with("alert approved for destination `ops`; queued for delivery"),
        "{}",
        show.stdout
    );
    let accepted = trail[1].split_whitespace().collect::<Vec<_>>();
    assert_eq!(
        accepted[2..6],
        ["accepted", "dispatcher:w1", "attempt", "1"],
        "{}",
        show.stdout
    );
    assert!(
        trail[1].contains("accepted by the destination (HTTP 200"),
        "{}",
        show.stdout
    );
}

/// A payload changed in the database after approval is never sent. The payload column is
/// outside the evidence chain's hashes and its fingerprint inside, so an edit there would
/// otherwise deliver bytes nobody approved under the approved fingerprint: the dispatcher
/// fingerprints what it is about to send, and refuses. The alert fails with both
/// fingerprints in its evidence, the destination (not at fault) stays enabled, and the
/// sink's own records hold only the untouched alert.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_changed_after_approval_is_never_sent() {
    let sink = Sink::start(&[]).await;
    let (db, tenant_id) = acme_with_ops_at(&sink, |_| {}).await;
    let ids = approve_many(&db, tenant_id, "ops", 2).await;
    sqlx::query("UPDATE alerts SET payload = '{\"alert\": 0, \"amount\": 1000000}' WHERE id = $1")
        .bind(ids[0])
        .execute(&db.pool)
        .await
        .unwrap();

    drain(&db, "w1", &[]).await;
    assert_eq!(state_of(&db, ids[0]).await, "failed");
    assert_eq!(state_of(&db, ids[1]).await, "accepted");
    let records = sink.all_records().await;
    assert_eq!(records.len(), 1, "{records:?}");
    let untouched: String =
        sqlx::query_scalar("SELECT encode(payload_sha256, 'hex') FROM alerts WHERE id = $1")
            .bind(ids[1])
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        records[0]["payload_sha256"],
        untouched.as_str(),
        "{records:?}"
    );
    let lines = evidence(&db, ids[0]).await;
    let last = lines.last().unwrap();
    assert!(
        last.contains("not sent") && last.contains("changed after approval"),
        "{lines:?}"
    );
    let (class, enabled): (Option<String>, bool) = sqlx::query_as(
        "SELECT d.error_class, dest.enabled FROM delivery_attempts d \
         JOIN alerts a ON a.id = d.alert_id JOIN destinations dest ON dest.id = a.destination_id \
         WHERE d.alert_id = $1",
    )
    .bind(ids[0])
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(class.as_deref(), Some("altered"));
    assert!(
        enabled,
        "the destination was disabled for an altered payload"
    );
}
