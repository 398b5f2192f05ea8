//! A destination's in-flight bound holds in the database: claims from any number of
//! connections at once never leave more than `max_in_flight` of its rows in `sending`.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use outbox_store::dispatch;
use outbox_testkit::TestDb;
use sqlx::{Connection, PgConnection};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

const BOUND: u32 = 4;
const LEASE: Duration = Duration::from_secs(60);

/// A tenant with destination `plain` (bound [`BOUND`]) and `roomy` (bound 100), and
/// `n` pending alerts for each.
async fn backlog(db: &TestDb, n: usize) -> (Uuid, Uuid) {
    let tenant = outbox_store::tenants::create(&db.pool, "acme", "UTC", None)
        .await
        .unwrap();
    let mut ids = Vec::new();
    for (name, bound) in [("plain", BOUND), ("roomy", 100)] {
        ids.push(
            outbox_store::destinations::create(
                &db.pool,
                &outbox_store::destinations::NewDestination {
                    timeout: Duration::from_secs(1),
                    max_in_flight: bound,
                    ..outbox_store::destinations::NewDestination::webhook(
                        tenant,
                        name,
                        "http://127.0.0.1:9/hook",
                    )
                },
            )
            .await
            .unwrap(),
        );
        for i in 0..n {
            outbox_store::alerts::approve(
                &db.pool,
                outbox_store::alerts::Approval {
                    tenant_id: tenant,
                    destination: name,
                    subject: &format!("contract:{i}"),
                    occurrence: "2027-01-31/30d",
                    payload_json: &format!(r#"{{"alert": {i}}}"#),
                    actor: "test",
                    ordering_key: None,
                },
            )
            .await
            .unwrap();
        }
    }
    (ids[0], ids[1])
}

/// Rows of `destination` in `sending`, read back from the table.
async fn sending(db: &TestDb, destination: Uuid) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM outbox WHERE status = 'sending' AND destination_id = $1",
    )
    .bind(destination)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_racing_from_many_connections_never_overshoot_the_bound() {
    let db = TestDb::new().await;
    let (plain, roomy) = backlog(&db, 30).await;
    let claimers = 8;
    let rounds = 5;
    let barrier = Arc::new(tokio::sync::Barrier::new(claimers));
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..claimers {
        let (url, barrier) = (db.url.clone(), barrier.clone());
        tasks.spawn(async move {
            let mut conn = PgConnection::connect(&url).await.unwrap();
            let mut claimed = Vec::new();
            for _ in 0..rounds {
                // Every claimer's statement starts at the same moment, and none commits
                // before all of them have claimed: the claims overlap completely.
                barrier.wait().await;
                let mut tx = conn.begin().await.unwrap();
                claimed.extend(
                    dispatch::claim_on(&mut tx, &format!("w{c}"), 10, LEASE, &[])
                        .await
                        .unwrap(),
                );
                barrier.wait().await;
                tx.commit().await.unwrap();
            }
            claimed
        });
    }
    let mut claimed = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        claimed.extend(joined.unwrap());
    }
    let of = |destination: Uuid| {
        claimed
            .iter()
            .filter(|row| row.destination.id == destination)
            .count() as i64
    };
    // Nothing completed, so every claim of `plain` is still in flight: all of them
    // together are at most its bound, and one claimer or another filled it.
    assert_eq!(
        of(plain),
        i64::from(BOUND),
        "claims of the bounded destination"
    );
    assert_eq!(sending(&db, plain).await, i64::from(BOUND));
    // The other destination's rows were claimed meanwhile (all 30: its bound is 100).
    assert_eq!(of(roomy), 30);
    assert_eq!(sending(&db, roomy).await, 30);
}

#[tokio::test]
async fn a_claim_under_way_keeps_a_second_one_off_the_destination_until_it_commits() {
    let db = TestDb::new().await;
    let (plain, _) = backlog(&db, 10).await;
    let tenant: Uuid = sqlx::query_scalar("SELECT id FROM tenants")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let mut first = PgConnection::connect(&db.url).await.unwrap();
    let mut second = PgConnection::connect(&db.url).await.unwrap();
    let of_plain = |rows: Vec<dispatch::ClaimedAlert>| -> Vec<dispatch::ClaimedAlert> {
        rows.into_iter()
            .filter(|row| row.destination.id == plain)
            .collect()
    };

    // Two rows already in flight.
    let earlier = of_plain(
        dispatch::claim_on(&mut first, "w0", 2, LEASE, &[])
            .await
            .unwrap(),
    );
    assert_eq!(earlier.len(), 2);
    // A claim still open (as if its statement were running) takes the room left: 2.
    let mut open = first.begin().await.unwrap();
    let taken = of_plain(
        dispatch::claim_on(&mut open, "w1", 10, LEASE, &[])
            .await
            .unwrap(),
    );
    assert_eq!(taken.len(), 2);
    // Meanwhile a row comes due that is older than every other (an approval that
    // committed late): a second claim counting only what is committed would see room for
    // 2, find the open claim's rows locked, take the late one and leave 5 in flight. It
    // skips the destination instead.
    outbox_store::alerts::approve(
        &db.pool,
        outbox_store::alerts::Approval {
            tenant_id: tenant,
            destination: "plain",
            subject: "contract:late",
            occurrence: "2027-01-31/30d",
            payload_json: r#"{"alert": "late"}"#,
            ordering_key: None,
            actor: "test",
        },
    )
    .await
    .unwrap();
    sqlx::query(
        "UPDATE outbox SET next_attempt_at = now() - interval '1 hour' \
         WHERE alert_id = (SELECT id FROM alerts WHERE subject = 'contract:late')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let skipped = of_plain(
        dispatch::claim_on(&mut second, "w2", 10, LEASE, &[])
            .await
            .unwrap(),
    );
    assert!(
        skipped.is_empty(),
        "a second claim took {} rows of a destination another claim is working on",
        skipped.len()
    );
    open.commit().await.unwrap();
    assert_eq!(sending(&db, plain).await, i64::from(BOUND));

    // Once it committed, the destination is full for everyone.
    assert!(of_plain(
        dispatch::claim_on(&mut second, "w2", 10, LEASE, &[])
            .await
            .unwrap()
    )
    .is_empty());

    // A row given back makes room for exactly one more: the oldest, the late one.
    assert!(dispatch::release(&db.pool, &taken[0], "w1", "test")
        .await
        .unwrap());
    let again = of_plain(
        dispatch::claim_on(&mut second, "w2", 10, LEASE, &[])
            .await
            .unwrap(),
    );
    assert_eq!(again.len(), 1);
    assert_eq!(sending(&db, plain).await, i64::from(BOUND));
}
