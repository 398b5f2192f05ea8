//! Whom a checkpoint waits for, on a real PostgreSQL: the transactions of its own
//! database that may still commit entries of its range, and no others. Every database of
//! a server shows its locks in `pg_locks`; a long transaction in another one (another
//! application, another tenant's outbox) must not hold this database's checkpoints up.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use outbox_core::OnUncertain;
use outbox_evidence::checkpoint::{make_checkpoint, Made};
use outbox_store::destinations::NewDestination;
use outbox_testkit::TestDb;
use std::time::Duration;

/// One alert approved in `db`: an evidence entry for a checkpoint to cover.
async fn one_alert(db: &TestDb) {
    let tenant = outbox_store::tenants::create(&db.pool, "acme", "UTC", None)
        .await
        .unwrap();
    outbox_store::destinations::create(
        &db.pool,
        &NewDestination {
            tenant_id: tenant,
            name: "ops".into(),
            url: "http://127.0.0.1:9/hook".into(),
            signing_secrets: vec![],
            idempotency_header: "Idempotency-Key".into(),
            idempotency_retention: None,
            lookup_url_template: None,
            on_uncertain: OnUncertain::Hold,
            timeout: Duration::from_secs(1),
            max_in_flight: 4,
        },
    )
    .await
    .unwrap();
    outbox_store::alerts::approve(
        &db.pool,
        outbox_store::alerts::Approval {
            tenant_id: tenant,
            destination: "ops",
            subject: "renewal:a",
            occurrence: "2027-01-31/30d",
            payload_json: r#"{"n": 1}"#,
            actor: "test",
            ordering_key: None,
        },
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_transaction_open_in_another_database_does_not_hold_up_a_checkpoint() {
    let db = TestDb::new().await;
    let elsewhere = TestDb::new().await;
    one_alert(&db).await;
    // A transaction of another database that has written (it has a transaction id) and
    // stays open while the checkpoint is made.
    let mut open = elsewhere.pool.begin().await.unwrap();
    sqlx::query("SELECT txid_current()")
        .execute(&mut *open)
        .await
        .unwrap();

    let made = make_checkpoint(&db.pool, None).await.unwrap();
    assert!(
        matches!(
            made,
            Ok(Made {
                seq: 1,
                size: 1,
                ..
            })
        ),
        "the checkpoint was not made: {made:?}"
    );
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM evidence_checkpoints")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(stored, 1);
    open.rollback().await.unwrap();
}
