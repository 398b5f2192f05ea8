//! The chain's writers against each other, on a real PostgreSQL: a dispatcher's
//! completion links its attempt to the head its outbox row carries, read by the statement
//! that fences on the row. A line another writer adds while the completion waits for that
//! row must come before the attempt in the chain, never beside it (a fork that `verify`
//! would name); and the row keeps the new head when it goes back to the queue. The
//! dispatcher links its attempt itself from the head its claim saw, and the statement
//! takes that hash only while the row still carries that head.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

mod common;

use chrono::Utc;
use outbox_core::{AlertState, AttemptKind, AttemptOutcome, LiveStatus, Outcome};
use outbox_evidence::verify::{verify_alert, Trust};
use outbox_store::dispatch::{self, AttemptRecord, ChainSeen, ClaimedAlert, Completion, Next};
use outbox_store::lifecycle::{append_event, Event};
use outbox_testkit::TestDb;
use std::time::Duration;
use uuid::Uuid;

/// Two alerts approved to one destination and claimed by worker `w`.
async fn two_claimed(db: &TestDb) -> Vec<ClaimedAlert> {
    let tenant = common::tenant_with_ops(db).await;
    for subject in ["renewal:a", "renewal:b"] {
        common::approve_to_ops(db, tenant, subject).await;
    }
    let mut claimed = dispatch::claim(&db.pool, "w", 10, Duration::from_secs(60), &[])
        .await
        .unwrap();
    claimed.sort_by_key(|row| row.alert_id);
    assert_eq!(claimed.len(), 2);
    claimed
}

/// Attempt 1 of `row`, refused by its destination (the line says where it goes next).
fn refused(row: &ClaimedAlert, next: Next) -> Completion {
    Completion {
        alert_id: row.alert_id,
        fencing_token: row.fencing_token,
        worker: "w".into(),
        attempt: Some(AttemptRecord {
            kind: AttemptKind::Send,
            attempt: 1,
            started_at: Utc::now(),
            outcome: AttemptOutcome::NotProcessed,
            http_status: Some(503),
            destination_reference: None,
            error_class: Some("http_503".into()),
            response_excerpt: Some("busy".into()),
        }),
        next,
        line: "attempt 1 refused (HTTP 503)".into(),
        disable_destination: None,
        lane: None,
        chain_seen: row.chain_seen(),
    }
}

/// Whether each attempt row of `alert_id` holds the hash the database itself links it
/// with: SHA-256 of the entry before it (or the alert's genesis) and the row's record.
async fn attempts_match_the_databases_link(db: &TestDb, alert_id: Uuid) -> bool {
    sqlx::query_scalar(
        "WITH entries AS ( \
             SELECT chain_pos, entry_hash, NULL::bytea AS attempt_record FROM alert_events \
             WHERE alert_id = $1 \
             UNION ALL \
             SELECT chain_pos, entry_hash, evidence_attempt_record(d) FROM delivery_attempts d \
             WHERE alert_id = $1 \
         ), linked AS ( \
             SELECT attempt_record, entry_hash, \
                    lag(entry_hash) OVER (ORDER BY chain_pos) AS previous FROM entries \
         ) \
         SELECT bool_and(entry_hash = sha256(previous || attempt_record)) FROM linked \
         WHERE attempt_record IS NOT NULL",
    )
    .bind(alert_id)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// Failed for good: the alert leaves the queue.
fn failed() -> Next {
    Next::Settle {
        outcome: Outcome::Failed,
        reference: None,
    }
}

/// Back in the queue as pending, due at `at`.
fn retry_at(at: chrono::DateTime<Utc>) -> Next {
    Next::Requeue {
        status: LiveStatus::Pending,
        at,
    }
}

async fn verified(db: &TestDb, alert_id: Uuid) -> usize {
    let report = verify_alert(&db.pool, alert_id, &Trust::default(), false)
        .await
        .unwrap();
    assert!(
        report.problems.is_empty(),
        "alert {alert_id}: {:?}",
        report.problems
    );
    report.entries
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_written_while_a_completion_waits_comes_before_its_attempt() {
    let db = TestDb::new().await;
    let claimed = two_claimed(&db).await;
    let (settled, requeued) = (&claimed[0], &claimed[1]);

    // An operator's note on both alerts, written under their outbox rows' locks (as every
    // writer of a live alert's chain holds them) and not committed yet.
    let mut operator = db.pool.begin().await.unwrap();
    for row in &claimed {
        sqlx::query("SELECT 1 FROM outbox WHERE alert_id = $1 FOR UPDATE")
            .bind(row.alert_id)
            .execute(&mut *operator)
            .await
            .unwrap();
        append_event(
            &mut *operator,
            Event {
                alert_id: row.alert_id,
                from: Some(AlertState::Sending),
                to: AlertState::Sending,
                attempt: None,
                actor: "operator:ann",
                line: "checked with the vendor",
            },
        )
        .await
        .unwrap();
    }

    // The dispatcher's completion of both starts meanwhile, and waits for the rows.
    let batch = vec![
        refused(settled, failed()),
        refused(requeued, retry_at(Utc::now() + chrono::Duration::hours(1))),
    ];
    let pool = db.pool.clone();
    let completion =
        tokio::spawn(async move { dispatch::complete_batch(&pool, &batch).await.unwrap() });
    db.until_a_statement_waits_for_a_lock("removed AS (").await;
    operator.commit().await.unwrap();
    assert_eq!(completion.await.unwrap(), vec![true, true]);

    // Each chain: the approval, the note, then the attempt, one after the other.
    for row in &claimed {
        assert_eq!(verified(&db, row.alert_id).await, 3);
        let order: Vec<String> = sqlx::query_scalar(
            "SELECT kind FROM ( \
                 SELECT 'line' AS kind, chain_pos FROM alert_events WHERE alert_id = $1 \
                 UNION ALL \
                 SELECT 'attempt', chain_pos FROM delivery_attempts WHERE alert_id = $1) x \
             ORDER BY chain_pos",
        )
        .bind(row.alert_id)
        .fetch_all(&db.pool)
        .await
        .unwrap();
        assert_eq!(order, ["line", "line", "attempt"]);
    }
    // The requeued row carries the attempt's hash as its head, and the next writer links
    // to it: a later note through the chain's trigger, then a later completion.
    let (head, attempt_hash): (Vec<u8>, Vec<u8>) = sqlx::query_as(
        "SELECT o.chain_head, d.entry_hash FROM outbox o \
         JOIN delivery_attempts d ON d.alert_id = o.alert_id WHERE o.alert_id = $1",
    )
    .bind(requeued.alert_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(head, attempt_hash);
    append_event(
        &db.pool,
        Event {
            alert_id: requeued.alert_id,
            from: Some(AlertState::Pending),
            to: AlertState::Pending,
            attempt: None,
            actor: "operator:ann",
            line: "vendor says their endpoint is back",
        },
    )
    .await
    .unwrap();
    sqlx::query("UPDATE outbox SET next_attempt_at = now() WHERE alert_id = $1")
        .bind(requeued.alert_id)
        .execute(&db.pool)
        .await
        .unwrap();
    let again = dispatch::claim(&db.pool, "w", 10, Duration::from_secs(60), &[])
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    let mut done = refused(&again[0], failed());
    if let Some(attempt) = done.attempt.as_mut() {
        attempt.attempt = 2;
    }
    assert!(dispatch::complete(&db.pool, &done).await.unwrap());
    assert_eq!(verified(&db, requeued.alert_id).await, 5);
}

/// The dispatcher links its attempt row from the head its claim returned: that hash is
/// the one the database would compute (settled and requeued alike), and the statement
/// takes it as given while the row still carries the head the claim saw (shown by a
/// fingerprint the dispatcher got wrong: the stored hash is the dispatcher's, and verify
/// names it). A hash linked to a head the row no longer carries is never taken: the
/// statement links the row from its newest head instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatchers_hash_is_taken_only_for_the_head_the_row_still_carries() {
    let db = TestDb::new().await;
    let claimed = two_claimed(&db).await;
    let (settled, requeued) = (&claimed[0], &claimed[1]);
    assert!(settled.chain_seen().is_some() && requeued.chain_seen().is_some());
    let batch = [
        refused(settled, failed()),
        refused(requeued, retry_at(Utc::now())),
    ];
    assert_eq!(
        dispatch::complete_batch(&db.pool, &batch).await.unwrap(),
        [true, true]
    );
    for row in &claimed {
        assert!(attempts_match_the_databases_link(&db, row.alert_id).await);
        assert_eq!(verified(&db, row.alert_id).await, 2);
    }

    // Attempt 2 of the requeued alert, linked by a dispatcher that got the payload's
    // fingerprint wrong, from the head the row carries: its hash is taken as given.
    let again = dispatch::claim(&db.pool, "w", 10, Duration::from_secs(60), &[])
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    let mut wrong = refused(&again[0], retry_at(Utc::now()));
    let head = again[0].chain_seen().unwrap().head;
    wrong.chain_seen = Some(ChainSeen {
        head,
        payload_sha256: [7; 32],
    });
    if let Some(attempt) = wrong.attempt.as_mut() {
        attempt.attempt = 2;
    }
    assert!(dispatch::complete(&db.pool, &wrong).await.unwrap());
    let stored: Vec<u8> = sqlx::query_scalar(
        "SELECT payload_sha256 FROM delivery_attempts WHERE alert_id = $1 AND attempt = 2",
    )
    .bind(requeued.alert_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        stored, [7; 32],
        "the attempt row keeps what the dispatcher said"
    );
    let report = verify_alert(&db.pool, requeued.alert_id, &Trust::default(), false)
        .await
        .unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.to_string().contains("records payload fingerprint 0707")),
        "verify names the wrong fingerprint: {:?}",
        report.problems
    );

    // The same mistake, linked to a head the row no longer carries: not taken.
    let db = TestDb::new().await;
    let claimed = two_claimed(&db).await;
    let mut stale = refused(&claimed[0], failed());
    let seen = claimed[0].chain_seen().unwrap();
    stale.chain_seen = Some(ChainSeen {
        head: [9; 32],
        payload_sha256: seen.payload_sha256,
    });
    assert!(dispatch::complete(&db.pool, &stale).await.unwrap());
    assert!(attempts_match_the_databases_link(&db, claimed[0].alert_id).await);
    assert_eq!(verified(&db, claimed[0].alert_id).await, 2);
}
