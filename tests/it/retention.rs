//! Retention (`outboxctl prune`) on a real database: finished alerts past the cutoff lose
//! their payload, attempt rows and evidence lines; their identity, fingerprint, outcome and
//! reference stay, so a repeated approval is still recognised; live, held, recent and
//! (unless asked) failed alerts are untouched.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::assert_contains;
use common::{add_tenant, outboxctl, outboxctl_ok};
use outbox_store::alerts::{approve_batch, MonitorAlert};
use outbox_testkit::TestDb;
use serde_json::Value;
use uuid::Uuid;

/// An alert approved `days_ago` days ago (its id taken then, as approvals do), settled
/// with `outcome` (or live when `None`), with one attempt row and two evidence lines.
async fn old_alert(
    db: &TestDb,
    tenant: Uuid,
    destination: Uuid,
    subject: &str,
    days_ago: u64,
    outcome: Option<&str>,
) -> Uuid {
    let approved = std::time::SystemTime::now() - std::time::Duration::from_secs(days_ago * 86_400);
    let since_epoch = approved.duration_since(std::time::UNIX_EPOCH).unwrap();
    let id = Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        since_epoch.as_secs(),
        since_epoch.subsec_nanos(),
    ));
    sqlx::query(
        "WITH approved AS ( \
             INSERT INTO alerts (id, tenant_id, subject, occurrence, destination_id, revision, \
                 payload, payload_sha256, created_at, created_by) \
             VALUES ($1, $2, $3, 'due', $4, 0, '{\"amount\": 1}', \
                 sha256(convert_to('{\"amount\": 1}', 'UTF8')), now() - $6 * interval '1 day', 'test') \
             RETURNING id, created_at \
         ) \
         INSERT INTO alert_outcomes (alert_id, outcome, destination_reference, settled_at) \
         SELECT id, $5, CASE WHEN $5 = 'accepted' THEN 'r-1' END, created_at + interval '1 second' \
         FROM approved WHERE $5 IS NOT NULL",
    )
    .bind(id)
    .bind(tenant)
    .bind(subject)
    .bind(destination)
    .bind(outcome)
    .bind(days_ago as i64)
    .execute(&db.pool)
    .await
    .unwrap();
    if outcome.is_none() {
        sqlx::query("INSERT INTO outbox (alert_id, destination_id) VALUES ($1, $2)")
            .bind(id)
            .bind(destination)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    sqlx::query(
        "INSERT INTO delivery_attempts (alert_id, attempt, worker, fencing_token, started_at, \
             finished_at, idempotency_key, payload_sha256, outcome, http_status, to_state, line) \
         SELECT id, 1, 'w', 1, created_at, created_at + interval '1 second', id::text, \
                payload_sha256, 'accepted', 200, 'accepted', 'accepted' \
         FROM alerts WHERE id = $1",
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO alert_events (alert_id, at, from_state, to_state, actor, line) \
         SELECT id, created_at, NULL, 'pending', 'test', 'approved' FROM alerts WHERE id = $1",
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .unwrap();
    id
}

/// (payload text, pruned, attempt rows, evidence lines) of one alert.
async fn kept(db: &TestDb, id: Uuid) -> (String, bool, i64, i64) {
    sqlx::query_as(
        "SELECT payload::text, pruned_at IS NOT NULL, \
                (SELECT count(*) FROM delivery_attempts WHERE alert_id = a.id), \
                (SELECT count(*) FROM alert_evidence WHERE alert_id = a.id) \
         FROM alerts a WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn prune_removes_only_finished_history_past_the_cutoff_and_keeps_identities() {
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &["ops"]).await;
    let ops: Uuid = sqlx::query_scalar("SELECT id FROM destinations WHERE name = 'ops'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let accepted = old_alert(&db, tenant.id, ops, "accepted", 40, Some("accepted")).await;
    let superseded = old_alert(&db, tenant.id, ops, "superseded", 45, Some("superseded")).await;
    let failed = old_alert(&db, tenant.id, ops, "failed", 40, Some("failed")).await;
    let held = old_alert(&db, tenant.id, ops, "held", 40, Some("held")).await;
    let live = old_alert(&db, tenant.id, ops, "live", 40, None).await;
    let recent = old_alert(&db, tenant.id, ops, "recent", 10, Some("accepted")).await;
    let untouched = |payload: &str| (payload.to_owned(), false, 1, 2);
    let original = "{\"amount\": 1}";
    // Rendered email holds the payload's content: it goes with the payload.
    for id in [accepted, recent] {
        outbox_store::rendered::store_once(
            &db.pool,
            id,
            &format!("{id}@acme.example"),
            b"Subject: amount 1\r\n\r\namount 1\r\n",
            &"0".repeat(64),
            "sha256:test",
        )
        .await
        .unwrap();
    }

    // A dry run counts and changes nothing.
    let dry = outboxctl_ok(
        &db,
        &["prune", "--older-than", "30d", "--dry-run", "--json"],
    )
    .await;
    let dry: Value = serde_json::from_str(&dry.stdout).unwrap();
    assert_eq!(
        (
            dry["alerts"].as_u64(),
            dry["attempts"].as_u64(),
            dry["evidence"].as_u64()
        ),
        (Some(2), Some(2), Some(4))
    );
    for id in [accepted, superseded, failed, held, live, recent] {
        assert_eq!(kept(&db, id).await, untouched(original));
    }

    // One alert per transaction, to walk the cursor.
    let run = outboxctl_ok(&db, &["prune", "--older-than", "30d", "--batch", "1"]).await;
    assert!(run.stdout.starts_with("pruned 2 alerts"), "{}", run.stdout);
    assert_eq!(kept(&db, accepted).await, ("{}".to_owned(), true, 0, 0));
    assert_eq!(kept(&db, superseded).await, ("{}".to_owned(), true, 0, 0));
    let rendered = |id: Uuid| {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM rendered_messages WHERE alert_id = $1")
            .bind(id)
            .fetch_one(&db.pool)
    };
    assert_eq!(
        rendered(accepted).await.unwrap(),
        0,
        "pruned with its alert"
    );
    assert_eq!(
        rendered(recent).await.unwrap(),
        1,
        "inside the cutoff: kept"
    );
    for id in [failed, held, live, recent] {
        assert_eq!(kept(&db, id).await, untouched(original));
    }
    // Outcome and reference stay; `alert show` says what happened.
    let (outcome, reference): (String, Option<String>) = sqlx::query_as(
        "SELECT outcome, destination_reference FROM alert_outcomes WHERE alert_id = $1",
    )
    .bind(accepted)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (outcome.as_str(), reference.as_deref()),
        ("accepted", Some("r-1"))
    );
    let show = outboxctl(&db, &["alert", "show", &accepted.to_string()]).await;
    assert_contains(&show.stdout, "removed by retention");

    // The identity still holds: approving it again creates nothing.
    let again = approve_batch(
        &mut db.pool.acquire().await.unwrap(),
        tenant.id,
        &[MonitorAlert {
            destination_id: ops,
            subject: "accepted".to_owned(),
            occurrence: "due".to_owned(),
            payload_json: original.to_owned(),
        }],
        "monitor",
        None,
    )
    .await
    .unwrap();
    assert!(again.is_empty());

    // Running again finds nothing new; failed alerts only when asked.
    let rerun = outboxctl(&db, &["prune", "--older-than", "30d"]).await;
    assert!(
        rerun.stdout.starts_with("pruned 0 alerts"),
        "{}",
        rerun.stdout
    );
    let with_failed = outboxctl(&db, &["prune", "--older-than", "30d", "--include-failed"]).await;
    assert!(
        with_failed.stdout.starts_with("pruned 1 alerts"),
        "{}",
        with_failed.stdout
    );
    assert_eq!(kept(&db, failed).await, ("{}".to_owned(), true, 0, 0));
    for id in [held, live, recent] {
        assert_eq!(kept(&db, id).await, untouched(original));
    }

    // A pruned failed alert has no payload left to send: replay refuses it, by id and in bulk.
    let by_id = outboxctl(&db, &["replay", &failed.to_string(), "--note", "retry"]).await;
    assert!(!by_id.ok, "{}", by_id.stdout);
    assert_eq!(by_id.stderr.trim().lines().count(), 1, "{}", by_id.stderr);
    assert_contains(&by_id.stderr, "pruned");
    outboxctl_ok(&db, &["replay", "--status", "failed", "--note", "retry"]).await;
    let queued: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE alert_id = $1")
        .bind(failed)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(queued, 0, "a pruned alert went back in the queue");
}

#[tokio::test]
async fn prune_refuses_a_bad_cutoff_with_one_line() {
    let db = TestDb::new().await;
    for args in [
        &["prune", "--older-than", "soon"][..],
        &["prune", "--older-than", "0s"][..],
        &["prune"][..],
    ] {
        let run = outboxctl(&db, args).await;
        assert!(!run.ok, "{args:?} should fail");
        assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
        assert_contains(&run.stderr, "older-than");
    }
}
