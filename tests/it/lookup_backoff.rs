//! A destination whose lookup is broken: the dispatcher must ask it less and less often,
//! stop when the destination's budget is spent and hold the alert for an operator with the
//! reason, and still settle the alert by lookup when the lookup comes back. Real
//! `dispatcher` and `sink` processes over a real database; the lookup is a small HTTP
//! server in the test that answers 500 (then, when told, passes lookups on to the sink).
//! Counts and times come from the database's attempt rows.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use common::add_tenant;
use common::alerts::{approve_many, evidence, reference_of, state_of};
use common::destinations::add_destination;
use common::procs::*;
use outbox_testkit::TestDb;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The retry schedule the dispatcher runs with: short, and growing.
const DELAYS: [Duration; 4] = [
    Duration::from_millis(200),
    Duration::from_millis(400),
    Duration::from_millis(800),
    Duration::from_millis(1600),
];
const DELAYS_FLAG: &str = "200ms,400ms,800ms,1600ms";

/// The lookup server: the first `failures` lookups get a 500, later ones are passed on to
/// the sink's own receipt lookup.
struct Lookup {
    failures: usize,
    asked: AtomicUsize,
    sink_base: String,
    http: reqwest::Client,
}

async fn lookup(
    State(lookup): State<Arc<Lookup>>,
    Path(key): Path<String>,
) -> (StatusCode, String) {
    if lookup.asked.fetch_add(1, Ordering::SeqCst) < lookup.failures {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "receipt store unavailable".to_owned(),
        );
    }
    let answer = lookup
        .http
        .get(format!("{}/requests/{key}", lookup.sink_base))
        .send()
        .await
        .unwrap();
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap();
    (status, answer.text().await.unwrap())
}

/// Starts the lookup server; returns the lookup URL template.
async fn start_lookup(failures: usize, sink: &Sink) -> String {
    let state = Arc::new(Lookup {
        failures,
        asked: AtomicUsize::new(0),
        sink_base: sink.base.clone(),
        http: reqwest::Client::new(),
    });
    let app = axum::Router::new()
        .route("/lookup/{key}", axum::routing::get(lookup))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/lookup/{{key}}")
}

/// One alert to a destination with `lookup_url`, whose first send is applied by the sink
/// but its answer lost, so that the attempt is uncertain and settled by lookup.
async fn uncertain_alert(
    sink: &Sink,
    lookup_url: String,
    max_attempts: i32,
) -> (TestDb, uuid::Uuid) {
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &[]).await;
    add_destination(&db, tenant.id, "ops", &sink.hook_url(), |d| {
        d.lookup_url_template = Some(lookup_url);
    })
    .await;
    sqlx::query("UPDATE destinations SET max_attempts = $1")
        .bind(max_attempts)
        .execute(&db.pool)
        .await
        .unwrap();
    let id = approve_many(&db, tenant.id, "ops", 1).await[0];
    sink.faults(json!({"drop_response_for_keys": [id.to_string()]}))
        .await;
    (db, id)
}

/// The lookup attempt rows of an alert: (start, outcome, error class), oldest first.
async fn lookups(
    db: &TestDb,
    id: uuid::Uuid,
) -> Vec<(chrono::DateTime<chrono::Utc>, String, Option<String>)> {
    sqlx::query_as(
        "SELECT started_at, outcome, error_class FROM delivery_attempts \
         WHERE alert_id = $1 AND kind = 'lookup' ORDER BY started_at",
    )
    .bind(id)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_lookup_backs_off_and_the_alert_is_held_when_the_budget_is_spent() {
    const BUDGET: usize = 5;
    let sink = Sink::start(&[]).await;
    let lookup_url = start_lookup(usize::MAX, &sink).await;
    let (db, id) = uncertain_alert(&sink, lookup_url, BUDGET as i32).await;
    let _dispatcher = spawn_dispatcher(
        &dispatcher_args(&db, "d1", &["--retry-delays", DELAYS_FLAG]),
        None,
    );

    // Never more lookups than the budget, at any moment, until the alert is held.
    let started = Instant::now();
    loop {
        let asked = lookups(&db, id).await.len();
        assert!(
            asked <= BUDGET,
            "{asked} lookups after {:?}; the budget is {BUDGET}",
            started.elapsed()
        );
        if state_of(&db, id).await == "held" {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "never held; {asked} lookups so far"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let rows = lookups(&db, id).await;
    assert_eq!(rows.len(), BUDGET, "{rows:?}");
    assert!(
        rows.iter().all(|(_, outcome, class)| outcome == "uncertain"
            && class.as_deref() == Some("lookup_failed")),
        "{rows:?}"
    );
    // Each pause is drawn below the schedule's ceiling for the failures so far, and the
    // ceilings grow: the evidence states them, the attempt rows' times keep to them (plus
    // the poll interval and a loaded machine's slack).
    let lines = evidence(&db, id).await;
    let ceilings: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.split("(at most ").nth(1))
        .map(|rest| rest.trim_end_matches(')'))
        .collect();
    assert_eq!(
        ceilings,
        ["200ms", "400ms", "800ms", "1s 600ms"],
        "{lines:?}"
    );
    for (i, pair) in rows.windows(2).enumerate() {
        let gap = (pair[1].0 - pair[0].0).to_std().unwrap();
        assert!(
            gap <= DELAYS[i] + Duration::from_secs(2),
            "lookup {} came {gap:?} after the one before; ceiling {:?}",
            i + 2,
            DELAYS[i]
        );
    }
    let last = lines.last().unwrap();
    assert!(
        last.starts_with(&format!("lookup failed {BUDGET} times since ")),
        "{last}"
    );
    assert!(
        last.contains(
            ": HTTP 500; the destination allows 5 failed lookups per attempt; held for an operator"
        ),
        "{last}"
    );

    // Held means left alone: over a window longer than the longest delay, no lookup and
    // no resend.
    tokio::time::sleep(DELAYS[3] + Duration::from_millis(500)).await;
    assert_eq!(lookups(&db, id).await.len(), BUDGET);
    assert_eq!(sink.records(&id.to_string()).await.len(), 1, "no resend");
    assert_eq!(state_of(&db, id).await, "held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_that_recovers_still_settles_the_alert_accepted() {
    let sink = Sink::start(&["--lookup"]).await;
    let lookup_url = start_lookup(2, &sink).await;
    let (db, id) = uncertain_alert(&sink, lookup_url, 12).await;
    let _dispatcher = spawn_dispatcher(
        &dispatcher_args(&db, "d1", &["--retry-delays", DELAYS_FLAG]),
        None,
    );

    let started = Instant::now();
    while state_of(&db, id).await != "accepted" {
        assert!(
            started.elapsed() < DEADLINE,
            "not accepted: {:?}",
            evidence(&db, id).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let outcomes: Vec<String> = lookups(&db, id)
        .await
        .into_iter()
        .map(|(_, outcome, _)| outcome)
        .collect();
    assert_eq!(outcomes, ["uncertain", "uncertain", "found"]);
    let records = sink.records(&id.to_string()).await;
    assert_eq!(records.len(), 1, "confirmed without resending: {records:?}");
    let reference = reference_of(&db, id).await;
    assert_eq!(reference.as_deref(), records[0]["receipt"].as_str());
    assert!(evidence(&db, id)
        .await
        .iter()
        .any(|l| l.contains("confirmed by lookup")),);
}
