//! The dispatcher under faults: SIGKILL mid-batch, a stalled worker past its lease, every
//! class of destination answer, signatures, and a clean SIGTERM. Real processes; counts
//! from the sink's records and the database.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;
use base64::Engine;

use common::add_tenant;
use common::alerts::{approve_many, approve_one, evidence, outbox_rows_in, state_of, states};
use common::destinations::{acme_with_ops_at, add_destination};
use common::procs::*;
use outbox_testkit::process::Process;
use outbox_testkit::TestDb;
use serde_json::json;
use std::time::Duration;

async fn sigkill_mid_batch(
    sink_args: &[&str],
    configure: impl FnOnce(&mut outbox_store::destinations::NewDestination),
) -> (TestDb, Sink) {
    let sink = Sink::start(sink_args).await;
    let (db, tenant) = acme_with_ops_at(&sink, configure).await;
    approve_many(&db, tenant, "ops", 200).await;
    // Slow answers keep a batch in flight when the kill comes.
    sink.faults(json!({"latency_ms": 300})).await;
    let mut victim = spawn_dispatcher(
        &dispatcher_args(
            &db,
            "victim",
            &["--batch-size", "50", "--max-in-flight", "50"],
        ),
        None,
    );
    sink.wait_for("some requests", |s| s["requests"].as_i64().unwrap() >= 20)
        .await;
    victim.kill().await.unwrap();
    let in_sending = outbox_rows_in(&db, "sending").await;
    assert!(
        in_sending > 0 && in_sending <= 50,
        "the blast radius is the in-flight bound: {in_sending}"
    );
    sink.faults(json!({"latency_ms": 0})).await;
    drain(&db, "survivor", &["--drain-horizon", "10s"]).await;
    (db, sink)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_batch_loses_nothing_at_an_idempotent_destination() {
    let (db, sink) = sigkill_mid_batch(&["--retention", "1h"], |d| {
        d.idempotency_retention = Some(Duration::from_secs(3600));
    })
    .await;
    assert_eq!(states(&db).await, [("accepted".to_owned(), 200)].into());
    let stats = sink.stats().await;
    assert_eq!(stats["distinct_keys"], 200, "{stats}");
    assert_eq!(stats["applied"], 200, "{stats}");
    assert_eq!(stats["effective_duplicates"], 0, "{stats}");
    let uncertain_attempts: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM delivery_attempts WHERE error_class = 'lease_expired'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        uncertain_attempts > 0,
        "the killed worker's rows went through uncertain"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_batch_holds_what_a_plain_destination_cannot_confirm() {
    let (db, sink) = sigkill_mid_batch(&[], |_| {}).await;
    let states = states(&db).await;
    let accepted = states.get("accepted").copied().unwrap_or(0);
    let held = states.get("held").copied().unwrap_or(0);
    assert_eq!(accepted + held, 200, "nothing lost: {states:?}");
    assert!(held > 0, "{states:?}");
    let stats = sink.stats().await;
    assert_eq!(
        stats["effective_duplicates"], 0,
        "held alerts are not resent: {stats}"
    );
    assert_eq!(stats["requests"], stats["distinct_keys"], "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stalled_past_its_lease_cannot_move_the_state_backwards() {
    let sink = Sink::start(&["--retention", "1h"]).await;
    let (db, tenant) = acme_with_ops_at(&sink, |d| {
        d.idempotency_retention = Some(Duration::from_secs(3600));
        d.timeout = Duration::from_secs(2);
    })
    .await;
    let id = approve_many(&db, tenant, "ops", 1).await[0];
    sink.faults(json!({"latency_ms": 500})).await;

    let mut stalled = spawn_dispatcher(&dispatcher_args(&db, "stalled", &[]), None);
    sink.wait_for("the first request", |s| s["requests"] == 1)
        .await;
    signal(&stalled, "STOP");
    // Lease = 2 x 2s timeout + 1s; the sweep of another worker makes the row uncertain and
    // it is settled by a resend the idempotent sink recognises.
    drain(&db, "rescuer", &["--drain-horizon", "10s"]).await;
    assert_eq!(state_of(&db, id).await, "accepted");
    let events_before = db.count("alert_evidence").await;
    let attempts_before = db.count("delivery_attempts").await;

    assert_eq!(
        sink.stats().await["wire_duplicates"],
        1,
        "the rescuer resent the key"
    );

    // Resumed and told to stop, it first finishes its send in flight and tries to record
    // it (shutdown waits for that); fencing refuses the stale completion.
    signal(&stalled, "CONT");
    signal(&stalled, "TERM");
    let status = tokio::time::timeout(DEADLINE, stalled.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());

    assert_eq!(state_of(&db, id).await, "accepted");
    let events_after = db.count("alert_evidence").await;
    let attempts_after = db.count("delivery_attempts").await;
    assert_eq!(
        events_after, events_before,
        "the stale worker wrote no evidence"
    );
    assert_eq!(attempts_after, attempts_before, "nor an attempt");
    assert_eq!(sink.stats().await["applied"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_requests_with_retry_after_is_honoured() {
    let sink = Sink::start(&[]).await;
    let (db, tenant) = acme_with_ops_at(&sink, |_| {}).await;
    sink.faults(
        json!({"script": [{"status": 429, "headers": {"Retry-After": "1"}, "body": "slow down"}]}),
    )
    .await;
    let id = approve_many(&db, tenant, "ops", 1).await[0];
    drain(&db, "w", &["--drain-horizon", "5s"]).await;

    assert_eq!(state_of(&db, id).await, "accepted");
    let records = sink.records(&id.to_string()).await;
    assert_eq!(records.len(), 2);
    assert_eq!(records[0]["status"], 429);
    let first = chrono::DateTime::parse_from_rfc3339(records[0]["at"].as_str().unwrap()).unwrap();
    let second = chrono::DateTime::parse_from_rfc3339(records[1]["at"].as_str().unwrap()).unwrap();
    assert!(
        second - first >= chrono::Duration::milliseconds(950),
        "retried after {:?}",
        second - first
    );
    let lines = evidence(&db, id).await;
    assert!(
        lines
            .iter()
            .any(|l| l.contains("not processed (HTTP 429") && l.contains("Retry-After")),
        "{lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_request_fails_with_the_answer_as_evidence() {
    let sink = Sink::start(&[]).await;
    let (db, tenant) = acme_with_ops_at(&sink, |_| {}).await;
    sink.faults(json!({"script": [{"status": 400, "body": "field vendor is required"}]}))
        .await;
    let id = approve_many(&db, tenant, "ops", 1).await[0];
    drain(&db, "w", &[]).await;
    assert_eq!(state_of(&db, id).await, "failed");
    let (status, excerpt): (Option<i16>, Option<String>) = sqlx::query_as(
        "SELECT http_status, response_excerpt FROM delivery_attempts WHERE alert_id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(status, Some(400));
    assert_eq!(excerpt.as_deref(), Some("field vendor is required"));
    let lines = evidence(&db, id).await;
    assert!(
        lines
            .last()
            .unwrap()
            .contains("rejected: HTTP 400: field vendor is required"),
        "{lines:?}"
    );
    assert_eq!(
        sink.records(&id.to_string()).await.len(),
        1,
        "never retried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_disables_the_destination_and_its_other_alerts_wait() {
    let sink = Sink::start(&[]).await;
    let (db, tenant) = acme_with_ops_at(&sink, |d| d.max_in_flight = 1).await;
    sink.faults(json!({"script": [{"status": 410}]})).await;
    let ids = approve_many(&db, tenant, "ops", 3).await;
    drain(&db, "w", &["--batch-size", "1"]).await;
    assert_eq!(state_of(&db, ids[0]).await, "failed");
    let enabled: bool = sqlx::query_scalar("SELECT enabled FROM destinations")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(!enabled);
    // The others were not sent and wait as pending.
    assert_eq!(state_of(&db, ids[1]).await, "pending");
    assert_eq!(state_of(&db, ids[2]).await, "pending");
    assert_eq!(sink.stats().await["requests"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_not_followed() {
    let sink = Sink::start(&[]).await;
    let (db, tenant) = acme_with_ops_at(&sink, |_| {}).await;
    let elsewhere = format!("{}/elsewhere", sink.base);
    sink.faults(json!({"script": [{"status": 302, "headers": {"Location": elsewhere}}]}))
        .await;
    let id = approve_many(&db, tenant, "ops", 1).await[0];
    drain(&db, "w", &[]).await;
    assert_eq!(state_of(&db, id).await, "failed");
    let records = sink.all_records().await;
    assert_eq!(
        records.len(),
        1,
        "nothing went to the redirect target: {records:?}"
    );
    assert_eq!(records[0]["path"], "/hook");
    let lines = evidence(&db, id).await;
    assert!(lines.last().unwrap().contains("not followed"), "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_is_retried_as_not_sent_until_exhausted() {
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &[]).await;
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    add_destination(
        &db,
        tenant.id,
        "ops",
        &format!("http://127.0.0.1:{port}/hook"),
        |_| {},
    )
    .await;
    sqlx::query("UPDATE destinations SET max_attempts = 3")
        .execute(&db.pool)
        .await
        .unwrap();
    let id = approve_many(&db, tenant.id, "ops", 1).await[0];
    drain(&db, "w", &["--drain-horizon", "2s"]).await;

    assert_eq!(state_of(&db, id).await, "failed");
    let attempts: Vec<(i32, String, Option<String>)> = sqlx::query_as(
        "SELECT attempt, outcome, error_class FROM delivery_attempts WHERE alert_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        attempts,
        (1..=3)
            .map(|n| (n, "not_sent".to_owned(), Some("connect".to_owned())))
            .collect::<Vec<_>>()
    );
    let lines = evidence(&db, id).await;
    assert!(
        lines.last().unwrap().contains("exhausted: 3 of 3 attempts"),
        "{lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signatures_verify_at_the_receiver_and_rotation_sends_both() {
    const OLD: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const NEW: &str = "whsec_dGhpcyBpcyB0aGUgbmV3IHNlY3JldCBrZXkgISE=";
    // The sink only knows the new secret: a receiver that already rotated.
    let sink = Sink::start(&["--secret", NEW]).await;
    let (db, tenant) = acme_with_ops_at(&sink, |d| {
        d.signing_secrets = vec![OLD.to_owned(), NEW.to_owned()]
    })
    .await;
    let id = approve_many(&db, tenant, "ops", 1).await[0];
    drain(&db, "w", &[]).await;
    assert_eq!(state_of(&db, id).await, "accepted");
    assert_eq!(sink.records(&id.to_string()).await[0]["signature"], "valid");

    // And a receiver written here, independently of the product's code, checks both.
    let captured = common::capture::Capture::start().await;
    let db2 = TestDb::new().await;
    let tenant2 = add_tenant(&db2, "acme", &[]).await;
    add_destination(&db2, tenant2.id, "ops", &captured.url(), |d| {
        d.signing_secrets = vec![OLD.to_owned(), NEW.to_owned()];
    })
    .await;
    let id2 = approve_many(&db2, tenant2.id, "ops", 1).await[0];
    drain(&db2, "w", &[]).await;
    let request = captured.take_one().await;
    assert_eq!(request.header("webhook-id"), id2.to_string());
    assert_eq!(request.header("idempotency-key"), id2.to_string());
    let header = request.header("webhook-signature");
    let signatures: Vec<&str> = header.split(' ').collect();
    assert_eq!(
        signatures.len(),
        2,
        "one signature per secret while rotating"
    );
    for secret in [OLD, NEW] {
        assert!(
            signatures.contains(&common::capture::expected_signature(secret, &request).as_str()),
            "no valid signature for {secret}"
        );
    }
}

/// A dispatcher prepares a destination's signing keys once, not per attempt: a running one
/// signs with the new secret alone from the first claim after a rotation without overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_dispatcher_signs_with_the_rotated_secret_from_its_next_claim() {
    const OLD: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const NEW: &str = "whsec_dGhpcyBpcyB0aGUgbmV3IHNlY3JldCBrZXkgISE=";
    let captured = common::capture::Capture::start().await;
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &[]).await;
    add_destination(&db, tenant.id, "ops", &captured.url(), |d| {
        d.signing_secrets = vec![OLD.to_owned()];
    })
    .await;
    let destination = outbox_store::destinations::id_by_name(&db.pool, tenant.id, "ops")
        .await
        .unwrap();
    let accepted = "SELECT count(*) FROM delivery_attempts WHERE outcome = 'accepted'";
    let approve = |subject: &'static str| {
        approve_one(
            &db,
            tenant.id,
            "ops",
            subject,
            "2027-01",
            r#"{"text":"renewal due"}"#,
        )
    };
    let _dispatcher = spawn_dispatcher(&dispatcher_args(&db, "w", &[]), None);
    approve("contract:A-1").await;
    wait_for_db(&db, accepted, |n| n == 1).await;

    outbox_store::destinations::rotate_secret(&db.pool, destination, NEW, Duration::ZERO)
        .await
        .unwrap();
    approve("contract:A-2").await;
    wait_for_db(&db, accepted, |n| n == 2).await;

    let requests = captured.all();
    assert_eq!(requests.len(), 2, "one request per alert");
    let signed_with = |secret, request| common::capture::expected_signature(secret, request);
    assert_eq!(
        requests[0].header("webhook-signature"),
        signed_with(OLD, &requests[0])
    );
    assert_eq!(
        requests[1].header("webhook-signature"),
        signed_with(NEW, &requests[1]),
        "the second request is signed with the new secret alone"
    );
}

/// Credentials in a destination's URL are sent as its `Basic` authorization, decoded, and
/// never in the request itself; the request says what sent it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_the_url_travel_as_basic_authorization() {
    let captured = common::capture::Capture::start().await;
    let url = captured
        .url()
        .replacen("http://", "http://ops%20user:p%40ss@", 1);
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &[]).await;
    add_destination(&db, tenant.id, "ops", &url, |_| {}).await;
    let id = approve_many(&db, tenant.id, "ops", 1).await[0];
    drain(&db, "w", &[]).await;
    assert_eq!(state_of(&db, id).await, "accepted");

    let request = captured.take_one().await;
    let expected = base64::engine::general_purpose::STANDARD.encode("ops user:p@ss");
    assert_eq!(request.header("authorization"), format!("Basic {expected}"));
    let host = request.header("host");
    assert!(host.starts_with("127.0.0.1:"), "{host}");
    assert!(
        request.header("user-agent").starts_with("alert-outbox/"),
        "{}",
        request.header("user-agent")
    );
    assert_eq!(request.header("accept"), "*/*");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_send_in_flight_and_leaves_the_rest_pending() {
    let sink = Sink::start(&[]).await;
    let (db, tenant) = acme_with_ops_at(&sink, |d| {
        d.max_in_flight = 1;
        d.timeout = Duration::from_secs(5);
    })
    .await;
    approve_many(&db, tenant, "ops", 20).await;
    sink.faults(json!({"latency_ms": 1000})).await;
    let mut args = dispatcher_args(&db, "graceful", &["--batch-size", "20"]);
    args.extend(["--metrics-listen".to_owned(), "127.0.0.1:0".to_owned()]);
    let dispatcher = spawn_dispatcher(&args, None);
    // The destination allows one at a time, so one is claimed and being sent; the other
    // nineteen wait in `pending`, not in `sending`.
    sink.wait_for("the first request", |s| s["requests"] == 1)
        .await;
    let sending = outbox_rows_in(&db, "sending").await;
    assert_eq!(sending, 1, "only the destination's bound is claimed");
    stop_gracefully_with_one_sent(dispatcher, &db, &sink).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_gives_back_claims_waiting_for_the_process_send_cap() {
    // A destination with room for twenty, a process that sends one at a time: the claim
    // takes all twenty, one is sent and nineteen wait in the process. On SIGTERM the one
    // finishes and the nineteen are given back unsent, with their attempt uncounted.
    let sink = Sink::start(&[]).await;
    let (db, tenant) = acme_with_ops_at(&sink, |d| {
        d.max_in_flight = 20;
        d.timeout = Duration::from_secs(5);
    })
    .await;
    approve_many(&db, tenant, "ops", 20).await;
    sink.faults(json!({"latency_ms": 1000})).await;
    let args = dispatcher_args(
        &db,
        "graceful",
        &["--batch-size", "20", "--max-concurrent-sends", "1"],
    );
    let dispatcher = spawn_dispatcher(&args, None);
    sink.wait_for("the first request", |s| s["requests"] == 1)
        .await;
    let sending = outbox_rows_in(&db, "sending").await;
    assert_eq!(sending, 20, "the whole claim waits in the process");
    stop_gracefully_with_one_sent(dispatcher, &db, &sink).await;
    let given_back: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM alert_events WHERE actor = 'dispatcher:graceful' \
           AND to_state = 'pending' AND line LIKE 'claim given back%'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(given_back, 19, "each give-back is in the evidence");
}

/// SIGTERM while one of twenty is being sent: the dispatcher exits 0 once that send is
/// done; it is accepted, the other nineteen are pending again with no attempt counted, and
/// the sink saw one request.
async fn stop_gracefully_with_one_sent(mut dispatcher: Process, db: &TestDb, sink: &Sink) {
    signal(&dispatcher, "TERM");
    let status = tokio::time::timeout(DEADLINE, dispatcher.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "exit 0 after a graceful stop: {status}");

    let states = states(db).await;
    assert_eq!(states.get("accepted"), Some(&1), "{states:?}");
    assert_eq!(states.get("pending"), Some(&19), "{states:?}");
    let unsent_attempts: i64 = sqlx::query_scalar("SELECT sum(attempts) FROM outbox")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        unsent_attempts, 0,
        "nothing was sent for them, so no attempt counts"
    );
    assert_eq!(sink.stats().await["requests"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resends_of_an_uncertain_alert_stop_at_the_attempt_limit_and_hold_it() {
    // Every answer is a 500: for a destination without de-duplication, each attempt may
    // have been acted on. Policy `retry` resends, but only up to the attempt limit.
    let sink = Sink::start(&["--fail-rate", "1", "--fail-status", "500"]).await;
    let (db, tenant) =
        acme_with_ops_at(&sink, |d| d.on_uncertain = outbox_core::OnUncertain::Retry).await;
    sqlx::query("UPDATE destinations SET max_attempts = 3")
        .execute(&db.pool)
        .await
        .unwrap();
    let id = approve_many(&db, tenant, "ops", 1).await[0];
    drain(&db, "w", &["--drain-horizon", "2s"]).await;

    assert_eq!(state_of(&db, id).await, "held");
    assert_eq!(sink.stats().await["requests"], 3, "three attempts, no more");
    let flagged: bool = sqlx::query_scalar("SELECT possible_duplicate FROM alerts WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        flagged,
        "resent without proof: flagged as a possible duplicate"
    );
    let lines = evidence(&db, id).await;
    assert!(lines.last().unwrap().contains("used up"), "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_resend_stays_uncertain_instead_of_becoming_an_ordinary_retry() {
    let sink = Sink::start(&["--retention", "1h"]).await;
    let (db, tenant) = acme_with_ops_at(&sink, |d| {
        d.idempotency_retention = Some(Duration::from_secs(3600));
    })
    .await;
    let id = approve_many(&db, tenant, "ops", 1).await[0];
    // Attempt 1 is applied and its answer lost; the resend is refused with a 503.
    sink.faults(json!({
        "drop_response_for_keys": [id.to_string()],
    }))
    .await;
    // The first dispatcher's next claim (its resend of the uncertain attempt) ends it
    // before anything is sent: the 503 below must answer a resend, and a resend the first
    // dispatcher made before the test could script it would be answered 200 instead.
    let mut first = spawn_dispatcher(
        &dispatcher_args(&db, "first", &[]),
        Some("dispatch-after-claim=1*off->return"),
    );
    wait_for_db(
        &db,
        "SELECT count(*) FROM alert_evidence WHERE to_state = 'uncertain'",
        |n| n == 1,
    )
    .await;
    let ended = tokio::time::timeout(DEADLINE, first.wait())
        .await
        .expect("the first dispatcher's resend claim ends it")
        .unwrap();
    assert!(!ended.success());
    assert_eq!(
        sink.stats().await["requests"],
        1,
        "only attempt 1 was sent by the first dispatcher"
    );
    sink.faults(json!({"script": [{"status": 503}]})).await;
    drain(&db, "second", &["--drain-horizon", "5s"]).await;

    assert_eq!(state_of(&db, id).await, "accepted");
    let transitions: Vec<(String, String)> = sqlx::query_as(
        "SELECT to_state, line FROM alert_evidence WHERE alert_id = $1 ORDER BY at, source, id",
    )
    .bind(id)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let refused = transitions
        .iter()
        .find(|(_, line)| line.contains("HTTP 503"))
        .expect("the 503 is in the evidence");
    assert_eq!(refused.0, "uncertain", "{transitions:?}");
    let stats = sink.stats().await;
    assert_eq!(stats["applied"], 1, "{stats}");
    assert_eq!(stats["effective_duplicates"], 0, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_is_not_sent_after_its_deduplication_window_closed_during_a_stall() {
    // Found by the chaos run: a dispatcher that decided to resend inside the window, then
    // stalled, sent after the window had closed, and the destination applied it twice.
    let sink = Sink::start(&["--retention", "2s"]).await;
    let (db, tenant) = acme_with_ops_at(&sink, |d| {
        d.idempotency_retention = Some(Duration::from_secs(2));
    })
    .await;
    let id = approve_many(&db, tenant, "ops", 1).await[0];
    sink.faults(json!({"drop_response_for_keys": [id.to_string()]}))
        .await;
    // The first send goes straight out; every later one stalls for 3 s before sending.
    let args = dispatcher_args(
        &db,
        "staller",
        &["--lease", "30s", "--drain", "--drain-horizon", "5s"],
    );
    let mut staller = spawn_dispatcher(&args, Some("dispatch-after-claim=1*off->sleep(3000)"));
    let status = tokio::time::timeout(DEADLINE, staller.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());

    assert_eq!(
        sink.records(&id.to_string()).await.len(),
        1,
        "the late resend never went out"
    );
    assert_eq!(state_of(&db, id).await, "held");
    let lines = evidence(&db, id).await;
    assert!(
        lines
            .iter()
            .any(|l| l.contains("the de-duplication window closed before the resend could go out")),
        "{lines:?}"
    );
}

/// A completion whose statement waits on a row another transaction holds (an operator's
/// statement, the lease sweep) holds up its own batch only: the dispatcher's recorders take
/// turns, and the other one writes beside a recorder held up this way, so later deliveries
/// are still recorded while the lock is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_waiting_on_a_locked_row_holds_up_only_its_own_batch() {
    let sink = Sink::start(&[]).await;
    let (db, tenant) = acme_with_ops_at(&sink, |d| d.timeout = Duration::from_secs(10)).await;
    let held = approve_many(&db, tenant, "ops", 1).await[0];
    sink.faults(json!({"latency_ms": 1500})).await;
    let dispatcher = spawn_dispatcher(&dispatcher_args(&db, "turns", &[]), None);
    sink.wait_for("the first request", |s| s["requests"] == 1)
        .await;
    // The claim has committed; take the row's lock as an operator's statement would.
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM outbox WHERE alert_id = $1 FOR UPDATE")
        .bind(held)
        .execute(&mut *holder)
        .await
        .unwrap();
    sink.faults(json!({"latency_ms": 0})).await;
    // The sink answers after its latency; the completion then waits for the lock.
    wait_for_db(
        &db,
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock' \
           AND query LIKE 'WITH input AS%'",
        |waiting| waiting == 1,
    )
    .await;
    for i in 0..5 {
        approve_one(
            &db,
            tenant,
            "ops",
            &format!("contract:B-{i}"),
            "2027-01-31/30d",
            r#"{"text": "renewal due"}"#,
        )
        .await;
    }
    wait_for_db(
        &db,
        &format!(
            "SELECT count(*) FROM delivery_attempts \
             WHERE alert_id <> '{held}' AND outcome = 'accepted'"
        ),
        |recorded| recorded == 5,
    )
    .await;
    assert_eq!(
        state_of(&db, held).await,
        "sending",
        "the held row's completion still waits for its lock"
    );
    holder.rollback().await.unwrap();
    wait_for_db(
        &db,
        &format!("SELECT count(*) FROM delivery_attempts WHERE alert_id = '{held}'"),
        |recorded| recorded == 1,
    )
    .await;
    assert_eq!(states(&db).await.get("accepted"), Some(&6));
    let stats = sink.stats().await;
    assert_eq!(stats["requests"], 6, "{stats}");
    assert_eq!(stats["distinct_keys"], 6, "{stats}");
    drop(dispatcher);
}
