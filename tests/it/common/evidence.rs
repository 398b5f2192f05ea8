//! Tampering with the evidence as a database administrator would, for the tests that
//! show it is seen.

use outbox_testkit::TestDb;

/// Deletes the newest checkpoint and rewrites the tip to name the one before (or removes
/// the tip with the only one), so that the database agrees with itself again; under the
/// checkpoint maker's lock, so that no checkpoint is being made meanwhile, and with the
/// triggers that keep the evidence insert-only set aside. Returns the deleted number.
pub async fn roll_back_newest_checkpoint(db: &TestDb) -> i64 {
    let mut tx = db.pool.begin().await.unwrap();
    for sql in [
        "SET LOCAL session_replication_role = replica",
        "SELECT pg_advisory_xact_lock(hashtext('outbox.evidence.checkpoint'))",
    ] {
        sqlx::query(sql).execute(&mut *tx).await.unwrap();
    }
    let deleted: i64 = sqlx::query_scalar(
        "DELETE FROM evidence_checkpoints WHERE seq = (SELECT max(seq) FROM evidence_checkpoints) \
         RETURNING seq",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    sqlx::query("DELETE FROM evidence_checkpoint_tip")
        .execute(&mut *tx)
        .await
        .unwrap();
    if let Some(before) = outbox_store::evidence_chain::newest_checkpoint(&mut *tx)
        .await
        .unwrap()
    {
        let hash = outbox_evidence::checkpoint::checkpoint_of(&before).hash();
        sqlx::query("INSERT INTO evidence_checkpoint_tip (seq, hash) VALUES ($1, $2)")
            .bind(before.seq)
            .bind(hash.as_slice())
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    deleted
}
