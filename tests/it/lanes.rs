//! Ordered lanes against real processes: a per-key destination receives each key's
//! alerts in approval order with two dispatchers and refused sends, a held head blocks
//! only its own lane until an operator resolves it, and a head that failed for good
//! blocks its lane or is skipped, as the destination says. Order and counts are read
//! from the sink's own records and the database.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::alerts::RENEWAL;
use common::destinations::acme_with_ops_at;
use common::procs::*;
use common::{add_tenant, outboxctl, outboxctl_ok};
use outbox_core::{OnHeadFailed, Ordering};
use outbox_store::lanes::OrderingSettings;
use outbox_testkit::TestDb;
use std::collections::HashMap;
use uuid::Uuid;

/// Makes `destination` of tenant `tenant` order per key, with `on_head_failed`.
pub(crate) async fn order_per_key(
    db: &TestDb,
    tenant: Uuid,
    destination: &str,
    on_head_failed: OnHeadFailed,
) {
    let id = outbox_store::destinations::id_by_name(&db.pool, tenant, destination)
        .await
        .unwrap();
    let settings = OrderingSettings {
        ordering: Ordering::PerKey,
        on_head_failed,
    };
    outbox_store::lanes::set_ordering(&db.pool, id, settings, false, "test")
        .await
        .unwrap();
}

/// Approves alert `subject` for `destination` in the lane `key`, through the store.
async fn approve_in_lane(
    db: &TestDb,
    tenant: Uuid,
    destination: &str,
    subject: &str,
    key: &str,
) -> Uuid {
    let approval = outbox_store::alerts::Approval {
        tenant_id: tenant,
        destination,
        subject,
        occurrence: "2027-01-15/30d",
        payload_json: RENEWAL,
        actor: "test",
        ordering_key: Some(key),
    };
    match outbox_store::alerts::approve(&db.pool, approval)
        .await
        .unwrap()
    {
        outbox_store::alerts::ApproveOutcome::Created(id) => id,
        other => panic!("expected a new alert, got {other:?}"),
    }
}

/// Alert ids in the order the sink first applied them (its own arrival order).
async fn first_applied(sink: &Sink) -> Vec<Uuid> {
    let mut seen = Vec::new();
    for record in sink.all_records().await {
        if record["outcome"] == "applied" {
            let id: Uuid = record["key"].as_str().unwrap().parse().unwrap();
            if !seen.contains(&id) {
                seen.push(id);
            }
        }
    }
    seen
}

async fn state(db: &TestDb, id: Uuid) -> String {
    sqlx::query_scalar("SELECT state FROM alert_states WHERE alert_id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn each_key_arrives_in_approval_order_with_two_dispatchers_and_refusals() {
    // One send in four is refused with a 503 and retried, so a lane whose head is
    // retrying must hold back the alerts behind it.
    let sink = Sink::start(&["--fail-rate", "0.25", "--seed", "26"]).await;
    let (db, tenant) = acme_with_ops_at(&sink, |_| {}).await;
    order_per_key(&db, tenant, "ops", OnHeadFailed::Block).await;
    let mut lanes: HashMap<String, Vec<Uuid>> = HashMap::new();
    for i in 0..40 {
        let key = format!("customer:{}", i % 5);
        let id = approve_in_lane(&db, tenant, "ops", &format!("ticket:{i}"), &key).await;
        lanes.entry(key).or_default().push(id);
    }

    let mut args = vec!["--retry-delays", "20ms,40ms"];
    args.extend(["--max-in-flight", "16"]);
    let first = spawn_dispatcher(&dispatcher_args(&db, "w1", &args), None);
    let second = spawn_dispatcher(&dispatcher_args(&db, "w2", &args), None);
    wait_for_db(
        &db,
        "SELECT count(*) FROM alert_states WHERE state = 'accepted'",
        |n| n == 40,
    )
    .await;
    drop((first, second));

    let applied = first_applied(&sink).await;
    assert_eq!(applied.len(), 40, "each alert applied once");
    for (key, approved) in &lanes {
        let arrived: Vec<Uuid> = applied
            .iter()
            .copied()
            .filter(|id| approved.contains(id))
            .collect();
        assert_eq!(
            &arrived, approved,
            "lane {key} arrived out of approval order"
        );
    }
    // The positions handed out are the approval order, one lane each.
    let positions: Vec<(String, i64)> =
        sqlx::query_as("SELECT ordering_key, lane_seq FROM alerts ORDER BY ordering_key, lane_seq")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    for (key, approved) in &lanes {
        let seqs: Vec<i64> = positions
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(seqs, (1..=approved.len() as i64).collect::<Vec<_>>());
    }
    // Every lane is released: no tail, nothing waiting.
    let open: i64 =
        sqlx::query_scalar("SELECT count(*) FROM alert_lanes WHERE tail_alert IS NOT NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(open, 0);
}

#[tokio::test]
async fn a_held_head_blocks_only_its_lane_until_an_operator_resolves_it() {
    let sink = Sink::start(&[]).await;
    let (db, tenant) = acme_with_ops_at(&sink, |_| {}).await;
    order_per_key(&db, tenant, "ops", OnHeadFailed::Block).await;
    let a: Vec<Uuid> = approve_lane(&db, tenant, "lane-a", 3).await;
    let b: Vec<Uuid> = approve_lane(&db, tenant, "lane-b", 2).await;
    // The head of lane A is applied but its answer is lost: nothing can settle it (no
    // lookup, no de-duplication), so the destination's `hold` policy holds it.
    sink.faults(serde_json::json!({"drop_response_for_keys": [a[0].to_string()]}))
        .await;
    drain(&db, "w1", &[]).await;

    assert_eq!(state(&db, a[0]).await, "held");
    for id in &a[1..] {
        assert_eq!(state(&db, *id).await, "pending", "behind the held head");
    }
    for id in &b {
        assert_eq!(
            state(&db, *id).await,
            "accepted",
            "lane B does not wait for lane A"
        );
    }
    let applied = first_applied(&sink).await;
    assert!(
        !applied.contains(&a[1]) && !applied.contains(&a[2]),
        "nothing behind the head was sent"
    );

    // Operators see the blocked lane, its head and what waits behind it.
    let listed = outboxctl_ok(
        &db,
        &[
            "lanes",
            "list",
            "--destination",
            "ops",
            "--tenant",
            "acme",
            "--blocked",
            "--json",
        ],
    )
    .await;
    let lanes: Vec<serde_json::Value> = listed
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lanes.len(), 1, "{}", listed.stdout);
    assert_eq!(lanes[0]["key"], "lane-a");
    assert_eq!(lanes[0]["head"], a[0].to_string());
    assert_eq!(lanes[0]["head_state"], "held");
    assert_eq!(lanes[0]["behind"], 2);

    // Turning ordering off now would release them: refused without --force, nothing changed.
    let refused = outboxctl(
        &db,
        &[
            "destination",
            "update",
            "ops",
            "--tenant",
            "acme",
            "--ordering",
            "none",
        ],
    )
    .await;
    common::assert_refused(&refused, "releases 2 waiting alert(s)");
    assert_eq!(state(&db, a[1]).await, "pending");

    // The operator found it at the destination: the lane goes on at once, in order.
    outboxctl_ok(
        &db,
        &[
            "resolve",
            &a[0].to_string(),
            "--accepted",
            "--reference",
            "T-1",
            "--note",
            "seen in the vendor's portal",
        ],
    )
    .await;
    drain(&db, "w2", &[]).await;
    for id in &a {
        assert_eq!(state(&db, *id).await, "accepted");
    }
    let applied = first_applied(&sink).await;
    let position = |id: &Uuid| applied.iter().position(|x| x == id).unwrap();
    assert!(position(&a[1]) < position(&a[2]));
}

/// Approves `n` alerts in lane `key`, in order.
async fn approve_lane(db: &TestDb, tenant: Uuid, key: &str, n: usize) -> Vec<Uuid> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(approve_in_lane(db, tenant, "ops", &format!("{key}:{i}"), key).await);
    }
    ids
}

#[tokio::test]
async fn a_failed_head_blocks_its_lane_or_is_skipped_as_the_destination_says() {
    // Every send is refused for good (400).
    let sink = Sink::start(&["--fail-rate", "1", "--fail-status", "400"]).await;
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &[]).await.id;
    for (name, policy) in [
        ("blocking", OnHeadFailed::Block),
        ("skipping", OnHeadFailed::Skip),
    ] {
        common::destinations::add_destination(&db, tenant, name, &sink.hook_url(), |_| {}).await;
        order_per_key(&db, tenant, name, policy).await;
    }
    let mut blocking = Vec::new();
    let mut skipping = Vec::new();
    for i in 0..3 {
        blocking.push(approve_in_lane(&db, tenant, "blocking", &format!("b:{i}"), "k").await);
        skipping.push(approve_in_lane(&db, tenant, "skipping", &format!("s:{i}"), "k").await);
    }
    drain(&db, "w1", &[]).await;

    assert_eq!(state(&db, blocking[0]).await, "failed");
    assert_eq!(state(&db, blocking[1]).await, "pending");
    assert_eq!(state(&db, blocking[2]).await, "pending");
    for id in &skipping {
        assert_eq!(
            state(&db, *id).await,
            "failed",
            "each skipped head lets the next go"
        );
    }
    // Both alerts' evidence says the lane moved on past the failed head.
    let head_line: String = sqlx::query_scalar(
        "SELECT line FROM alert_evidence WHERE alert_id = $1 AND to_state = 'failed'",
    )
    .bind(skipping[0])
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(head_line.contains("moves on without it"), "{head_line}");
    let next_line: String = sqlx::query_scalar(
        "SELECT line FROM alert_evidence WHERE alert_id = $1 AND line LIKE '%failed for good%' AND to_state = 'pending'",
    )
    .bind(skipping[1])
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(next_line.contains(&skipping[0].to_string()), "{next_line}");
    // Its lane moved on without it: sending it now would break the order.
    let refused = outboxctl(
        &db,
        &["replay", &skipping[0].to_string(), "--note", "retry"],
    )
    .await;
    common::assert_refused(&refused, "moved on without it");
    let blocked_line: String = sqlx::query_scalar(
        "SELECT line FROM alert_evidence WHERE alert_id = $1 AND to_state = 'failed'",
    )
    .bind(blocking[0])
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(blocked_line.contains("waits behind it"), "{blocked_line}");

    // The blocked lane shows in /metrics-backed counts, and a failed head may be
    // abandoned by an operator, which releases the lane.
    let counts = outbox_store::lanes::counts(&db.pool).await.unwrap();
    let blocked: HashMap<&str, i64> = counts
        .iter()
        .map(|c| (c.destination.as_str(), c.blocked))
        .collect();
    assert_eq!(blocked["blocking"], 1);
    assert_eq!(blocked["skipping"], 0);
    outboxctl_ok(
        &db,
        &[
            "resolve",
            &blocking[0].to_string(),
            "--abandon",
            "--note",
            "vendor rejects it",
        ],
    )
    .await;
    let waiting: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox WHERE lane_after IS NOT NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        waiting, 1,
        "the second now heads the lane; the third waits behind it"
    );

    // The second fails too and blocks the third, until the destination is switched to
    // skip failed heads: the lane moves on at once, and both alerts say why.
    drain(&db, "w1", &[]).await;
    assert_eq!(state(&db, blocking[1]).await, "failed");
    assert_eq!(state(&db, blocking[2]).await, "pending");
    let switched = outboxctl_ok(
        &db,
        &[
            "destination",
            "update",
            "blocking",
            "--tenant",
            "acme",
            "--on-head-failed",
            "skip",
        ],
    )
    .await;
    assert!(
        switched
            .stderr
            .contains("1 lane(s) blocked by a failed head move on"),
        "{}",
        switched.stderr
    );
    let lines: Vec<String> = sqlx::query_scalar(
        "SELECT line FROM alert_evidence WHERE alert_id = ANY($1) AND line LIKE '%now skips%' \
         ORDER BY alert_id = $2 DESC",
    )
    .bind([blocking[1], blocking[2]])
    .bind(blocking[1])
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].contains("moves on without it"), "{lines:?}");
    assert!(lines[1].contains(&blocking[1].to_string()), "{lines:?}");
    drain(&db, "w1", &[]).await;
    assert_eq!(
        state(&db, blocking[2]).await,
        "failed",
        "the third was sent once the lane moved on"
    );
}

#[tokio::test]
async fn the_api_takes_an_ordering_key_and_refuses_an_empty_or_oversized_one() {
    let api = common::Api::start().await;
    let body = |subject: &str, key: serde_json::Value| {
        serde_json::json!({"destination": "ops", "subject": subject, "occurrence": "2027-01-15/30d",
                           "payload": {"text": "renewal due"}, "ordering_key": key})
    };
    // Refused, and nothing written.
    for (key, problem) in [
        (serde_json::json!(""), "missing-field"),
        (serde_json::json!("k".repeat(201)), "field-too-long"),
        (serde_json::json!("a\u{202e}b"), "invalid-field"),
        (serde_json::Value::Null, "invalid-field"),
    ] {
        let (status, answer) = api.approve(&api.acme.token, &body("contract:1", key)).await;
        assert_eq!(status, 422, "{answer}");
        assert!(
            answer["type"].as_str().unwrap().ends_with(problem),
            "{answer}"
        );
    }
    let alerts: i64 = sqlx::query_scalar("SELECT count(*) FROM alerts")
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(alerts, 0);

    // Without ordering at the destination the key is kept, and places nothing in a lane.
    let (status, answer) = api
        .approve(
            &api.acme.token,
            &body("contract:1", serde_json::json!("customer:7")),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let (key, seq): (Option<String>, Option<i64>) =
        sqlx::query_as("SELECT ordering_key, lane_seq FROM alerts")
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!((key.as_deref(), seq), (Some("customer:7"), None));

    // Once the destination orders, a second alert of the key waits behind the first; a
    // repeated approval takes no place in the lane.
    order_per_key(&api.db, api.acme.id, "ops", OnHeadFailed::Block).await;
    for _ in 0..2 {
        let (status, answer) = api
            .approve(
                &api.acme.token,
                &body("contract:2", serde_json::json!("customer:7")),
            )
            .await;
        assert!(status == 201 || status == 200, "{answer}");
    }
    let (status, _) = api
        .approve(
            &api.acme.token,
            &body("contract:3", serde_json::json!("customer:7")),
        )
        .await;
    assert_eq!(status, 201);
    let lane: Vec<(i64, bool)> = sqlx::query_as(
        "SELECT a.lane_seq, o.lane_after IS NOT NULL FROM alerts a JOIN outbox o ON o.alert_id = a.id \
         WHERE a.lane_seq IS NOT NULL ORDER BY a.lane_seq",
    )
    .fetch_all(&api.db.pool)
    .await
    .unwrap();
    assert_eq!(lane, vec![(1, false), (2, true)]);
}
