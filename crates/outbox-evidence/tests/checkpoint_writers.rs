//! Whom a checkpoint waits for, on a real PostgreSQL: the transactions of its own
//! database that may still commit entries of its range, and no others. Every database of
//! a server shows its locks in `pg_locks`; a long transaction in another one (another
//! application, another tenant's outbox) must not hold this database's checkpoints up.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

mod common;

use outbox_evidence::checkpoint::{make_checkpoint, Made, Memory};
use outbox_testkit::TestDb;

#[tokio::test]
async fn a_transaction_open_in_another_database_does_not_hold_up_a_checkpoint() {
    let db = TestDb::new().await;
    let elsewhere = TestDb::new().await;
    let tenant = common::tenant_with_ops(&db).await;
    common::approve_to_ops(&db, tenant, "renewal:a").await;
    // A transaction of another database that has written (it has a transaction id) and
    // stays open while the checkpoint is made.
    let mut open = elsewhere.pool.begin().await.unwrap();
    sqlx::query("SELECT txid_current()")
        .execute(&mut *open)
        .await
        .unwrap();

    let made = make_checkpoint(&db.pool, None, &mut Memory::default())
        .await
        .unwrap();
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
