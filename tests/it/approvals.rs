//! The approval API's write path against a real PostgreSQL: one alert per identity under
//! races and repeated runs, conflicts that change nothing, revisions, tenant isolation.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::{add_tenant, counts, renewal, Api};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::Barrier;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_identical_approvals_make_one_alert() {
    let api = Arc::new(Api::start_on(outbox_testkit::TestDb::with_pool_size(60).await).await);
    let barrier = Arc::new(Barrier::new(50));
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let api = api.clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            api.approve(&api.acme.token, &renewal(7)).await
        }));
    }
    let mut statuses = Vec::new();
    let mut ids = Vec::new();
    for task in tasks {
        let (status, body) = task.await.unwrap();
        statuses.push(status);
        ids.push(body["id"].as_str().unwrap().to_owned());
    }

    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == StatusCode::CREATED)
            .count(),
        1
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == StatusCode::OK).count(),
        49
    );
    ids.dedup();
    assert_eq!(ids.len(), 1, "every response names the same alert");

    assert_eq!(api.db.count("alerts").await, 1);
    assert_eq!(api.db.count("outbox").await, 1);
    let stored: (String, String) = sqlx::query_as(
        "SELECT a.id::text, o.alert_id::text FROM alerts a JOIN outbox o ON o.alert_id = a.id",
    )
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    assert_eq!(stored.0, ids[0]);
}

/// One "run" of a monitor: approve alerts for contracts 0..20.
async fn scheduler_run(api: &Api) -> Vec<StatusCode> {
    let mut statuses = Vec::new();
    for n in 0..20 {
        statuses.push(api.approve(&api.acme.token, &renewal(n)).await.0);
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_running_twice_in_a_row_creates_nothing_the_second_time() {
    let api = Api::start().await;
    let first = scheduler_run(&api).await;
    assert!(first.iter().all(|s| *s == StatusCode::CREATED));
    let after_first = counts(&api.db).await;
    assert_eq!(after_first, (20, 20, 20));

    let second = scheduler_run(&api).await;
    assert!(second.iter().all(|s| *s == StatusCode::OK), "{second:?}");
    assert_eq!(counts(&api.db).await, after_first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scheduler_running_twice_at_once_creates_each_alert_once() {
    let api = Arc::new(Api::start_on(outbox_testkit::TestDb::with_pool_size(30).await).await);
    let barrier = Arc::new(Barrier::new(2));
    let runs: Vec<_> = (0..2)
        .map(|_| {
            let api = api.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                scheduler_run(&api).await
            })
        })
        .collect();
    let mut created = 0;
    for run in runs {
        let statuses = run.await.unwrap();
        assert!(statuses
            .iter()
            .all(|s| *s == StatusCode::CREATED || *s == StatusCode::OK));
        created += statuses
            .iter()
            .filter(|s| **s == StatusCode::CREATED)
            .count();
    }
    assert_eq!(
        created, 20,
        "each contract's alert is created by exactly one run"
    );
    assert_eq!(counts(&api.db).await, (20, 20, 20));
    let per_identity: i64 = sqlx::query_scalar(
        "SELECT max(n) FROM (SELECT count(*) AS n FROM alerts GROUP BY tenant_id, subject, occurrence, destination_id, revision) x",
    )
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    assert_eq!(per_identity, 1);
}

#[tokio::test]
async fn same_identity_with_another_payload_is_a_conflict_and_changes_nothing() {
    let api = Api::start().await;
    let (status, original) = api.approve(&api.acme.token, &renewal(1)).await;
    assert_eq!(status, StatusCode::CREATED);
    let stored_before: String = sqlx::query_scalar("SELECT payload::text FROM alerts")
        .fetch_one(&api.db.pool)
        .await
        .unwrap();

    let mut changed = renewal(1);
    changed["payload"]["amount"] = json!("99999.00");
    let (status, problem) = api.approve(&api.acme.token, &changed).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(problem["type"], "/problems/identity-conflict");
    assert_eq!(problem["existing_alert_id"], original["id"]);
    assert!(problem["detail"].as_str().unwrap().contains("revision"));

    assert_eq!(counts(&api.db).await, (1, 1, 1));
    let stored_after: String = sqlx::query_scalar("SELECT payload::text FROM alerts")
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(stored_after, stored_before);
    assert!(stored_after.contains("12000.00"));
}

#[tokio::test]
async fn key_order_and_whitespace_do_not_make_a_different_payload() {
    let api = Api::start().await;
    let (status, first) = api
        .post_raw(
            "/v1/alerts",
            &api.acme.token,
            r#"{"destination":"ops","subject":"s","occurrence":"o","payload":{"a":1,"b":[1,2]}}"#
                .into(),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, second) = api
        .post_raw(
            "/v1/alerts",
            &api.acme.token,
            r#"{ "payload": { "b": [1, 2], "a": 1 }, "occurrence": "o", "subject": "s", "destination": "ops" }"#.into(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first["id"], second["id"]);
    assert_eq!(api.db.count("alerts").await, 1);
}

#[tokio::test]
async fn get_shows_identity_state_attempts_and_evidence() {
    let api = Api::start().await;
    let (_, created) = api.approve(&api.acme.token, &renewal(3)).await;
    let id = created["id"].as_str().unwrap();
    let (status, alert) = api.get(&format!("/v1/alerts/{id}"), &api.acme.token).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(alert["id"], id);
    assert_eq!(alert["revision"], 0);
    assert_eq!(alert["subject"], "contract:C-3");
    assert_eq!(alert["occurrence"], "2027-03-31/30d");
    assert_eq!(alert["destination"], "ops");
    assert_eq!(alert["state"], "pending");
    assert_eq!(alert["attempts"], json!([]));
    assert_eq!(alert["payload"], renewal(3)["payload"]);
    let evidence = alert["evidence"].as_array().unwrap();
    assert_eq!(evidence.len(), 1);
    assert_eq!(evidence[0]["to_state"], "pending");
    assert!(evidence[0]["line"].as_str().unwrap().contains("approved"));
}

async fn revise(api: &Api, id: &Value, payload: Value, reason: &str) -> (StatusCode, Value) {
    api.post(
        &format!("/v1/alerts/{}/revisions", id.as_str().unwrap()),
        &api.acme.token,
        &json!({"payload": payload, "reason": reason}),
    )
    .await
}

#[tokio::test]
async fn a_correction_is_a_new_revision_that_supersedes_an_unsent_original() {
    let api = Api::start().await;
    let (_, original) = api.approve(&api.acme.token, &renewal(5)).await;
    let mut corrected = renewal(5)["payload"].clone();
    corrected["amount"] = json!("12500.00");

    let (status, revision) =
        revise(&api, &original["id"], corrected.clone(), "amount was wrong").await;
    assert_eq!(status, StatusCode::CREATED, "{revision}");
    assert_eq!(revision["revision"], 1);
    assert_eq!(revision["reason"], "amount was wrong");
    assert_ne!(
        revision["id"], original["id"],
        "a revision has its own notification id"
    );
    assert_eq!(revision["state"], "pending");

    // Two alerts, and only the revision is still queued: the unsent original never goes out.
    assert_eq!(api.db.count("alerts").await, 2);
    let queued: Vec<String> = sqlx::query_scalar("SELECT alert_id::text FROM outbox")
        .fetch_all(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(queued, vec![revision["id"].as_str().unwrap().to_owned()]);
    let (_, shown) = api
        .get(
            &format!("/v1/alerts/{}", original["id"].as_str().unwrap()),
            &api.acme.token,
        )
        .await;
    assert_eq!(shown["state"], "superseded");
    assert_eq!(shown["revisions"].as_array().unwrap().len(), 2);

    // Resubmitting the original approval is not a revision: it returns the original.
    let (status, again) = api.approve(&api.acme.token, &renewal(5)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["id"], original["id"]);
    // Approving the corrected payload names the revision that has it.
    let mut approve_corrected = renewal(5);
    approve_corrected["payload"] = corrected.clone();
    let (status, same) = api.approve(&api.acme.token, &approve_corrected).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(same["id"], revision["id"]);
    assert_eq!(api.db.count("alerts").await, 2);

    // A retried revision request returns the revision it already made.
    let (status, retried) =
        revise(&api, &original["id"], corrected.clone(), "amount was wrong").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(retried["id"], revision["id"]);
    // A different correction of a revised alert must target the latest revision.
    let mut other = corrected.clone();
    other["amount"] = json!("1.00");
    let (status, problem) = revise(&api, &original["id"], other, "again").await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(problem["type"], "/problems/not-latest-revision");
    assert_eq!(problem["latest_alert_id"], revision["id"]);
    // A revision that changes nothing is refused.
    let (status, problem) = revise(&api, &revision["id"], corrected, "same again").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem["type"], "/problems/revision-unchanged");
    assert_eq!(api.db.count("alerts").await, 2);
    assert_eq!(api.db.count("outbox").await, 1);
}

#[tokio::test]
async fn a_correction_of_an_alert_that_may_have_been_sent_does_not_supersede_it() {
    let api = Api::start().await;
    let (_, original) = api.approve(&api.acme.token, &renewal(6)).await;
    let id: uuid::Uuid = original["id"].as_str().unwrap().parse().unwrap();
    // A dispatcher has claimed it: the send may be under way.
    sqlx::query(
        "UPDATE outbox SET status = 'sending', lease_owner = 'w1', \
         lease_expires_at = now() + interval '1 minute', fencing_token = 1, attempts = 1 \
         WHERE alert_id = $1",
    )
    .bind(id)
    .execute(&api.db.pool)
    .await
    .unwrap();

    let mut corrected = renewal(6)["payload"].clone();
    corrected["vendor"] = json!("Acme Tools GmbH");
    let (status, revision) = revise(&api, &original["id"], corrected, "vendor name").await;
    assert_eq!(status, StatusCode::CREATED);

    let states: Vec<(String, String)> =
        sqlx::query_as("SELECT alert_id::text, state FROM alert_states ORDER BY alert_id")
            .fetch_all(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(
        states,
        vec![
            (
                original["id"].as_str().unwrap().to_owned(),
                "sending".to_owned()
            ),
            (
                revision["id"].as_str().unwrap().to_owned(),
                "pending".to_owned()
            ),
        ]
    );
    let (_, shown) = api.get(&format!("/v1/alerts/{id}"), &api.acme.token).await;
    let lines: Vec<&str> = shown["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["line"].as_str().unwrap())
        .collect();
    assert!(
        lines.iter().any(|l| l.contains("corrected by revision 1")),
        "{lines:?}"
    );
}

#[tokio::test]
async fn tenants_never_see_or_touch_each_others_alerts_or_destinations() {
    let api = Api::start().await;
    let globex = add_tenant(&api.db, "globex", &["globex-ops"]).await;
    let (_, acme_alert) = api.approve(&api.acme.token, &renewal(1)).await;
    let acme_id = acme_alert["id"].as_str().unwrap();
    let before = counts(&api.db).await;

    // Read: another tenant's alert does not exist for this token.
    let (status, problem) = api
        .get(&format!("/v1/alerts/{acme_id}"), &globex.token)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(problem["type"], "/problems/alert-not-found");

    // Revise: same answer, nothing written.
    let (status, _) = api
        .post(
            &format!("/v1/alerts/{acme_id}/revisions"),
            &globex.token,
            &json!({"payload": {"x": 1}, "reason": "hijack"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Target: acme's destination is unknown to globex, even with acme's identity.
    let (status, problem) = api.approve(&globex.token, &renewal(1)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem["type"], "/problems/unknown-destination");
    assert_eq!(counts(&api.db).await, before);

    // Its own destination works, and makes its own alert even with the same subject.
    let mut own = renewal(1);
    own["destination"] = json!("globex-ops");
    let (status, globex_alert) = api.approve(&globex.token, &own).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_ne!(globex_alert["id"], acme_alert["id"]);
    let (status, _) = api
        .get(
            &format!("/v1/alerts/{}", globex_alert["id"].as_str().unwrap()),
            &api.acme.token,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_created_answer_is_the_alert_as_stored() {
    let api = Api::start().await;
    let (status, created) = api.approve(&api.acme.token, &renewal(4)).await;
    assert_eq!(status, StatusCode::CREATED);
    let id = created["id"].as_str().unwrap();
    let (status, shown) = api.get(&format!("/v1/alerts/{id}"), &api.acme.token).await;
    assert_eq!(status, StatusCode::OK);
    // Written and answered in one statement, read back here in another: the same alert,
    // field by field (times, fingerprint, payload text, revisions, evidence).
    assert_eq!(created, shown);
}

/// The next notification on the dispatchers' wake-up channel, or a failure after 10 s.
async fn next_wake_up(listener: &mut sqlx::postgres::PgListener) -> String {
    tokio::time::timeout(std::time::Duration::from_secs(10), listener.recv())
        .await
        .expect("no notification within 10 s")
        .unwrap()
        .payload()
        .to_owned()
}

/// Sends `marker` on the wake-up channel, committed at once. Notifications are delivered
/// in commit order, so whatever arrives before the marker was committed before it.
async fn send_marker(db: &outbox_testkit::TestDb, marker: &str) {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(outbox_store::wake_ups::WAKE_UP_CHANNEL)
        .bind(marker)
        .execute(&db.pool)
        .await
        .unwrap();
}

#[tokio::test]
async fn an_approval_wakes_dispatchers_on_its_commit_and_a_rolled_back_one_wakes_nobody() {
    let api = Api::start().await;
    let db = &api.db;
    let mut listener = sqlx::postgres::PgListener::connect_with(&db.pool)
        .await
        .unwrap();
    listener
        .listen(outbox_store::wake_ups::WAKE_UP_CHANNEL)
        .await
        .unwrap();
    let payloads: Vec<String> = (0..3)
        .map(|i| json!({"vendor": "Acme", "n": i}).to_string())
        .collect();
    let approval = |i: usize| outbox_store::alerts::CheckedApproval {
        tenant_id: api.acme.id,
        destination: "ops",
        subject: "contract:W-1",
        occurrence: ["first", "second", "third"][i],
        payload: outbox_core::CheckedPayload::check(&payloads[i]).unwrap(),
        actor: "test",
        ordering_key: None,
        notify_dispatchers: true,
        trace: None,
    };

    // Written inside a transaction that rolls back: nothing stays, nobody is woken.
    let mut tx = db.pool.begin().await.unwrap();
    let written = outbox_store::alerts::approve_on(&mut tx, approval(0))
        .await
        .unwrap();
    assert!(matches!(
        written,
        outbox_store::alerts::Approved::Created(_)
    ));
    tx.rollback().await.unwrap();
    send_marker(db, "after the rollback").await;
    assert_eq!(next_wake_up(&mut listener).await, "after the rollback");
    assert_eq!(counts(db).await, (0, 0, 0));

    // Written and not yet committed: nobody is woken until the commit.
    let mut tx = db.pool.begin().await.unwrap();
    outbox_store::alerts::approve_on(&mut tx, approval(1))
        .await
        .unwrap();
    send_marker(db, "before the commit").await;
    assert_eq!(next_wake_up(&mut listener).await, "before the commit");
    tx.commit().await.unwrap();
    assert_eq!(next_wake_up(&mut listener).await, "");
    assert_eq!(counts(db).await, (1, 1, 1));

    // Through the API on an idle server: the dispatchers are woken by the approval's own
    // commit, so before its 201 answer arrives.
    let mut body = renewal(5);
    body["occurrence"] = json!("api");
    let (status, _) = api.approve(&api.acme.token, &body).await;
    assert_eq!(status, StatusCode::CREATED);
    send_marker(db, "after the answer").await;
    assert_eq!(next_wake_up(&mut listener).await, "");
    assert_eq!(next_wake_up(&mut listener).await, "after the answer");
}

/// Found by Schemathesis: a reason at its limit (2000 bytes) made an evidence line over
/// the trail's own limit, and the revision failed with a 500.
#[tokio::test]
async fn a_revision_with_the_longest_reason_is_taken_and_kept_whole() {
    let api = Api::start().await;
    let (_, original) = api.approve(&api.acme.token, &renewal(8)).await;
    let mut corrected = renewal(8)["payload"].clone();
    corrected["amount"] = json!("12500.00");
    let reason = "é".repeat(1000); // 2000 bytes of UTF-8

    let (status, revision) = revise(&api, &original["id"], corrected, &reason).await;
    assert_eq!(status, StatusCode::CREATED, "{revision}");
    assert_eq!(
        revision["reason"],
        reason.as_str(),
        "the reason is kept whole"
    );
    let approval_line = revision["evidence"][0]["line"].as_str().unwrap();
    assert!(approval_line.len() <= 2000, "{}", approval_line.len());
    assert!(approval_line.contains("ééé…"), "{approval_line}");
}
