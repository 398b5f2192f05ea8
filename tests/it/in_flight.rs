//! The crash blast radius at a destination nothing can settle automatically: two real
//! dispatcher processes share one plain `hold` destination (added with the default bound)
//! with a slow sink and a backlog; the rows in `sending` for it, sampled from the database
//! while they work, never exceed its bound, and a SIGKILL of one leaves at most the bound
//! held, exactly the rows it had in flight.

use crate::common;
use crate::common::add_tenant;
use crate::common::alerts::approve_many;
use crate::common::destinations::DestinationAdd;
use crate::common::procs::{dispatcher_args, spawn_dispatcher, Sink, DEADLINE};
use common::assert_contains;
use outbox_testkit::process::Process;
use outbox_testkit::TestDb;
use serde_json::json;
use std::time::{Duration, Instant};

const BACKLOG: usize = 200;

/// A dispatcher with a short lease (its warnings about the expired leases are expected
/// here; they go to its log file, which the harness prints only if the test fails).
fn dispatcher(db: &TestDb, worker: &str) -> Process {
    spawn_dispatcher(&dispatcher_args(db, worker, &["--lease", "1s"]), None)
}

/// Rows of the destination in `sending`: all of them, and those dispatcher `a` holds.
async fn in_flight(db: &TestDb, destination: uuid::Uuid) -> (i64, i64, i64) {
    sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE lease_owner = 'a'), \
                count(*) FILTER (WHERE lease_owner = 'b') \
         FROM outbox WHERE status = 'sending' AND destination_id = $1",
    )
    .bind(destination)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_dispatchers_stay_within_the_bound_and_a_crash_holds_at_most_it() {
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &[]).await;
    let sink = Sink::start(&[]).await;
    sink.faults(json!({"latency_ms": 150})).await;
    // No lookup, no de-duplication window, `hold`: added without --max-in-flight.
    let added = DestinationAdd::webhook("plain", &sink.hook_url())
        .args(&["--timeout", "1s"])
        .loopback_allowed()
        .add(&db)
        .await;
    assert_contains(
        &added.stderr,
        "a crash can leave at most 4 alerts uncertain here (held for an operator)",
    );
    let destination: uuid::Uuid = added.stdout.trim().parse().unwrap();
    let bound: i32 = sqlx::query_scalar("SELECT max_in_flight FROM destinations WHERE id = $1")
        .bind(destination)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        bound, 4,
        "the default bound of a destination nothing can settle"
    );
    let bound = i64::from(bound);
    approve_many(&db, tenant.id, "plain", BACKLOG).await;

    let mut a = dispatcher(&db, "a");
    let mut b = dispatcher(&db, "b");

    // Both claim from the same destination; whichever holds rows first is killed (which
    // of the two wins the destination's claims is a race, and not what is tested).
    let started = Instant::now();
    let mut most = 0;
    let (victim, survivor_name) = loop {
        let (all, of_a, of_b) = in_flight(&db, destination).await;
        most = most.max(all);
        if of_a > 0 {
            break (&mut a, "b");
        }
        if of_b > 0 {
            break (&mut b, "a");
        }
        assert!(
            started.elapsed() < DEADLINE,
            "no dispatcher ever had rows in flight; states {:?}",
            common::alerts::states(&db).await
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    victim.kill().await.unwrap();
    // What it held when it died: exactly what the crash leaves uncertain.
    let (_, of_a, of_b) = in_flight(&db, destination).await;
    let killed_share = if survivor_name == "b" { of_a } else { of_b };
    assert!(
        (1..=bound).contains(&killed_share),
        "the killed dispatcher had {killed_share} rows in flight"
    );

    // The survivor delivers the rest; the killed one's rows become uncertain when their lease runs out, and
    // the destination offers nothing to settle them with, so they are held.
    loop {
        let (all, ..) = in_flight(&db, destination).await;
        most = most.max(all);
        if db.count("outbox").await == 0 {
            break;
        }
        assert!(
            started.elapsed() < 2 * DEADLINE,
            "the backlog never drained"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        most <= bound,
        "{most} rows in sending at once, bound {bound}"
    );
    let states = common::alerts::states(&db).await;
    let held = states.get("held").copied().unwrap_or(0);
    assert_eq!(held, killed_share, "held: {states:?}");
    assert!(held <= bound);
    assert_eq!(
        states.get("accepted").copied().unwrap_or(0),
        BACKLOG as i64 - held,
        "{states:?}"
    );
    // The sink's own count: every accepted alert once.
    let stats = sink.stats().await;
    assert_eq!(stats["effective_duplicates"], 0, "{stats}");
}
