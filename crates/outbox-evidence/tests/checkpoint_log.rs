//! The checkpoint log on a real PostgreSQL: every checkpoint appended once, as a note the
//! signing key vouches for, whichever process made it; and a database that no longer
//! holds what the log published (a checkpoint deleted, or deleted and made again with the
//! tip rewritten to match) stops the log, which keeps what it published.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

mod common;

use outbox_core::evidence::note::parse_log;
use outbox_core::evidence::signing::CheckpointSigner;
use outbox_evidence::checkpoint::{checkpoint_of, make_checkpoint, Memory};
use outbox_evidence::published::{self, CheckpointLog, LogError};
use outbox_testkit::TestDb;
use std::path::PathBuf;

/// A file of the test's own, removed when dropped.
struct LogFile(PathBuf);

impl LogFile {
    fn new() -> LogFile {
        LogFile(std::env::temp_dir().join(format!(
            "outbox-checkpoint-log-{}.notes",
            uuid::Uuid::new_v4().simple()
        )))
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.0).unwrap_or_default()
    }
}

impl Drop for LogFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Approves an alert about `subject` and makes a checkpoint over it, as a process that
/// has just started (it remembers nothing).
async fn approve_and_checkpoint(
    db: &TestDb,
    tenant: uuid::Uuid,
    subject: &str,
    key: &CheckpointSigner,
) {
    // As every process does at start: its key's public half is recorded.
    outbox_store::evidence_chain::register_key(&db.pool, key.key_id(), &key.public_key().to_text())
        .await
        .unwrap();
    common::approve_to_ops(db, tenant, subject).await;
    let made = make_checkpoint(&db.pool, Some(key), &mut Memory::default())
        .await
        .unwrap();
    assert!(made.is_ok(), "{made:?}");
}

/// Runs `statements` as a database administrator would, with the triggers that keep the
/// evidence insert-only set aside (`session_replication_role = replica`), in one
/// transaction; `$1` is `bound` where a statement takes it.
async fn tamper(db: &TestDb, statements: &[&str], bound: &[u8]) {
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await
        .unwrap();
    for statement in statements {
        let query = sqlx::query(statement);
        let query = if statement.contains("$1") {
            query.bind(bound.to_vec())
        } else {
            query
        };
        query.execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
}

async fn stored_hash(db: &TestDb, seq: i64) -> Option<[u8; 32]> {
    outbox_store::evidence_chain::checkpoint(&db.pool, seq)
        .await
        .unwrap()
        .map(|c| checkpoint_of(&c).hash())
}

#[tokio::test]
async fn every_checkpoint_is_published_once_as_a_note_its_key_vouches_for() {
    let db = TestDb::new().await;
    let tenant = common::tenant_with_ops(&db).await;
    let (key, _) = CheckpointSigner::generate();
    let file = LogFile::new();
    approve_and_checkpoint(&db, tenant, "renewal:a", &key).await;
    approve_and_checkpoint(&db, tenant, "renewal:b", &key).await;

    let mut log = CheckpointLog::open(&file.0).unwrap();
    assert_eq!(log.publish_new(&db.pool, Some(&key)).await.unwrap(), 2);
    // Nothing new: nothing appended.
    assert_eq!(log.publish_new(&db.pool, Some(&key)).await.unwrap(), 0);
    // Another process's log (or this one after a restart) goes on where the file ends.
    approve_and_checkpoint(&db, tenant, "renewal:c", &key).await;
    let mut reopened = CheckpointLog::open(&file.0).unwrap();
    assert_eq!(reopened.publish_new(&db.pool, Some(&key)).await.unwrap(), 1);

    let parsed = parse_log(&file.text()).unwrap();
    assert!(parsed.torn_tail.is_none());
    let seqs: Vec<u64> = parsed
        .checkpoints
        .iter()
        .map(|n| n.checkpoint.seq)
        .collect();
    assert_eq!(seqs, [1, 2, 3]);
    for note in &parsed.checkpoints {
        let seq = i64::try_from(note.checkpoint.seq).unwrap();
        assert_eq!(Some(note.hash()), stored_hash(&db, seq).await);
        assert_eq!(note.trusted_by(&[key.public_key()]), Ok(true));
    }
    let (anchors, problems) = published::anchors_of(&parsed, &[key.public_key()]);
    assert!(problems.is_empty(), "{problems:?}");
    assert!(published::hold_database_to(&db.pool, &anchors)
        .await
        .unwrap()
        .is_empty());
}

/// Checkpoint 2 deleted, and the tip rewritten to name checkpoint 1 (`$1`, its hash).
const ROLL_BACK_TO_ONE: &[&str] = &[
    "DELETE FROM evidence_checkpoints WHERE seq = 2",
    "UPDATE evidence_checkpoint_tip SET seq = 1, hash = $1",
];

#[tokio::test]
async fn a_checkpoint_deleted_and_made_again_stops_the_log_which_keeps_the_original() {
    let db = TestDb::new().await;
    let tenant = common::tenant_with_ops(&db).await;
    let (key, _) = CheckpointSigner::generate();
    let file = LogFile::new();
    approve_and_checkpoint(&db, tenant, "renewal:a", &key).await;
    approve_and_checkpoint(&db, tenant, "renewal:b", &key).await;
    let mut log = CheckpointLog::open(&file.0).unwrap();
    log.publish_new(&db.pool, Some(&key)).await.unwrap();
    let published_two = stored_hash(&db, 2).await.unwrap();
    let before = file.text();

    // An administrator without the key deletes checkpoint 2 and rewrites the tip to name
    // checkpoint 1, so that a maker that has just started takes the database at its word
    // and signs another checkpoint 2.
    let one = stored_hash(&db, 1).await.unwrap();
    tamper(&db, ROLL_BACK_TO_ONE, &one).await;
    approve_and_checkpoint(&db, tenant, "renewal:c", &key).await;
    let remade = stored_hash(&db, 2).await.unwrap();
    assert_ne!(remade, published_two, "the test needs another checkpoint 2");

    let err = log.publish_new(&db.pool, Some(&key)).await.unwrap_err();
    assert!(
        matches!(&err, LogError::Disagrees(why) if why.contains("checkpoint 2 was published with hash")),
        "{err}"
    );
    // Stopped for good in this process, and the file holds what was published, once.
    assert!(log.publish_new(&db.pool, Some(&key)).await.is_err());
    assert_eq!(file.text(), before);

    // The log holds the database to the original: `verify --checkpoints` names it.
    let parsed = parse_log(&file.text()).unwrap();
    let (anchors, _) = published::anchors_of(&parsed, &[key.public_key()]);
    let problems = published::hold_database_to(&db.pool, &anchors)
        .await
        .unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].place, "checkpoint 2");

    // A maker that knows the log's newest checkpoint refuses to sign past a database
    // rolled back behind it, even after a restart.
    tamper(&db, ROLL_BACK_TO_ONE, &one).await;
    common::approve_to_ops(&db, tenant, "renewal:d").await;
    let newest = CheckpointLog::open(&file.0).unwrap().newest().unwrap();
    let mut knowing = Memory::knowing(outbox_evidence::verify::Anchor {
        seq: i64::try_from(newest.0).unwrap(),
        hash: newest.1,
    });
    let made = make_checkpoint(&db.pool, Some(&key), &mut knowing)
        .await
        .unwrap();
    assert!(
        matches!(made, Err(outbox_evidence::checkpoint::Skipped::Refused(_))),
        "{made:?}"
    );
    assert_eq!(stored_hash(&db, 2).await, None);
}

#[tokio::test]
async fn a_deleted_checkpoint_stops_the_log() {
    let db = TestDb::new().await;
    let tenant = common::tenant_with_ops(&db).await;
    let (key, _) = CheckpointSigner::generate();
    let file = LogFile::new();
    approve_and_checkpoint(&db, tenant, "renewal:a", &key).await;
    let mut log = CheckpointLog::open(&file.0).unwrap();
    log.publish_new(&db.pool, Some(&key)).await.unwrap();
    tamper(&db, &["DELETE FROM evidence_checkpoints"], &[]).await;
    let err = log.publish_new(&db.pool, Some(&key)).await.unwrap_err();
    assert!(
        err.to_string().contains("is no longer in the database"),
        "{err}"
    );
}

#[test]
fn a_log_whose_last_note_was_cut_short_is_not_appended_to() {
    let file = LogFile::new();
    let (key, _) = CheckpointSigner::generate();
    let checkpoint = outbox_core::evidence::chain::Checkpoint {
        seq: 1,
        made_at_micros: 1_796_256_000_000_000,
        size: 1,
        root: [1; 32],
        previous: [0; 32],
    };
    let note = outbox_core::evidence::note::write_note(&checkpoint, None, Some(&key));
    std::fs::write(&file.0, &note[..note.len() - 10]).unwrap();
    let err = CheckpointLog::open(&file.0).unwrap_err();
    assert!(err.to_string().contains("cut short"), "{err}");
}
