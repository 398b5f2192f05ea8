//! The checker can fail: broken histories, built by hand in a real database, are each
//! reported; a clean one passes.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use outbox_checker::{
    check, check_with_inboxes, explain, Capability, Inbox, InboxMessage, Sink, SinkRecord,
};
use outbox_store::destinations::NewDestination;
use outbox_store::dispatch::{self, ClaimedAlert, Completion, Next};
use outbox_testkit::TestDb;
use std::time::Duration;
use uuid::Uuid;

/// A destination `name` of `tenant` at `url` that holds its uncertain sends.
fn destination(tenant: Uuid, name: &str, url: &str) -> NewDestination {
    NewDestination {
        tenant_id: tenant,
        name: name.into(),
        url: url.into(),
        signing_secrets: vec![],
        idempotency_header: "Idempotency-Key".into(),
        idempotency_retention: None,
        lookup_url_template: None,
        on_uncertain: outbox_core::OnUncertain::Hold,
        timeout: Duration::from_secs(1),
        max_in_flight: 4,
    }
}

/// Approves alert `subject` / `o` of `tenant` for `destination`.
async fn approve(db: &TestDb, tenant: Uuid, destination: &str, subject: &str, payload: &str) {
    outbox_store::alerts::approve(
        &db.pool,
        outbox_store::alerts::Approval {
            tenant_id: tenant,
            destination,
            subject,
            occurrence: "o",
            payload_json: payload,
            actor: "test",
            ordering_key: None,
        },
    )
    .await
    .unwrap();
}

/// Claims every due alert (up to 10) as worker `w`.
async fn claim(db: &TestDb) -> Vec<ClaimedAlert> {
    dispatch::claim(&db.pool, "w", 10, Duration::from_secs(30), &[])
        .await
        .unwrap()
}

/// Records the claimed `row` as accepted by its destination, with `reference`.
async fn settle_accepted(db: &TestDb, row: &ClaimedAlert, reference: &str) {
    let done = Completion {
        alert_id: row.alert_id,
        fencing_token: row.fencing_token,
        worker: "w".into(),
        attempt: None,
        next: Next::Settle {
            outcome: outbox_core::Outcome::Accepted,
            reference: Some(reference.into()),
        },
        line: "accepted".into(),
        disable_destination: None,
        lane: None,
    };
    assert!(dispatch::complete(&db.pool, &done).await.unwrap());
}

/// Two alerts, both delivered and recorded as accepted; returns their ids and hashes.
async fn clean_history(db: &TestDb) -> Vec<(String, String)> {
    let tenant = outbox_store::tenants::create(&db.pool, "acme", "UTC", None)
        .await
        .unwrap();
    let ops = NewDestination {
        idempotency_retention: Some(Duration::from_secs(3600)),
        ..destination(tenant, "ops", "http://127.0.0.1:9/hook")
    };
    outbox_store::destinations::create(&db.pool, &ops)
        .await
        .unwrap();
    for n in 0..2 {
        approve(
            db,
            tenant,
            "ops",
            &format!("s{n}"),
            &format!("{{\"n\": {n}}}"),
        )
        .await;
    }
    for row in claim(db).await {
        settle_accepted(db, &row, "r").await;
    }
    sqlx::query_as("SELECT id::text, encode(payload_sha256, 'hex') FROM alerts ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

fn applied(key: &str, hash: &str) -> SinkRecord {
    SinkRecord {
        key: Some(key.into()),
        payload_sha256: Some(hash.into()),
        outcome: "applied".into(),
    }
}

fn sink(capability: Capability, records: Vec<SinkRecord>) -> Vec<Sink> {
    vec![Sink {
        destination: "ops".into(),
        capability,
        records,
    }]
}

#[tokio::test]
async fn a_clean_history_passes() {
    let db = TestDb::new().await;
    let alerts = clean_history(&db).await;
    let records = alerts.iter().map(|(k, h)| applied(k, h)).collect();
    let report = check(&db.pool, 7, &sink(Capability::Idempotent, records))
        .await
        .unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!(report.alerts, 2);
    assert!(report.to_string().contains("seed 7: 2 committed alerts"));
}

#[tokio::test]
async fn a_duplicate_row_inserted_by_hand_is_reported() {
    let db = TestDb::new().await;
    let alerts = clean_history(&db).await;
    sqlx::query("ALTER TABLE alerts DROP CONSTRAINT alerts_identity_key")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(
        "WITH copy AS ( \
             INSERT INTO alerts (id, tenant_id, subject, occurrence, destination_id, revision, \
                 payload, payload_sha256, created_by) \
             SELECT gen_random_uuid(), tenant_id, subject, occurrence, destination_id, revision, \
                    payload, payload_sha256, created_by FROM alerts WHERE subject = 's0' \
             RETURNING id \
         ) \
         INSERT INTO alert_outcomes (alert_id, outcome, settled_at) \
         SELECT c.id, ao.outcome, ao.settled_at FROM copy c, alerts a \
         JOIN alert_outcomes ao ON ao.alert_id = a.id WHERE a.subject = 's0'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let records = alerts.iter().map(|(k, h)| applied(k, h)).collect();
    let report = check(&db.pool, 1, &sink(Capability::Idempotent, records))
        .await
        .unwrap();
    assert_eq!(report.logical_duplicates, 1, "{report}");
    assert_eq!(
        report.partial_commits, 1,
        "the copy has no evidence: {report}"
    );
    assert!(!report.passed());
}

#[tokio::test]
async fn a_sink_record_without_a_committed_alert_is_unexpected() {
    let db = TestDb::new().await;
    let alerts = clean_history(&db).await;
    let mut records: Vec<_> = alerts.iter().map(|(k, h)| applied(k, h)).collect();
    records.push(applied(&Uuid::now_v7().to_string(), "00"));
    let report = check(&db.pool, 1, &sink(Capability::Idempotent, records))
        .await
        .unwrap();
    assert_eq!(report.unexpected, 1, "{report}");
    assert!(!report.passed());
}

#[tokio::test]
async fn a_payload_changed_between_attempts_is_a_mutated_retry() {
    let db = TestDb::new().await;
    let alerts = clean_history(&db).await;
    let (key, hash) = &alerts[0];
    let records = vec![
        applied(key, hash),
        SinkRecord {
            key: Some(key.clone()),
            payload_sha256: Some("ff".repeat(32)),
            outcome: "wire_duplicate".into(),
        },
        applied(&alerts[1].0, &alerts[1].1),
    ];
    let report = check(&db.pool, 1, &sink(Capability::Idempotent, records))
        .await
        .unwrap();
    assert_eq!(report.mutated_retries, 1, "{report}");
    assert!(!report.passed());
    let explained = explain(&db.pool, &report, &sink(Capability::Idempotent, vec![]))
        .await
        .unwrap();
    assert!(explained.contains(key.as_str()), "{explained}");
    assert!(
        explained.contains("accepted"),
        "the evidence trail is printed: {explained}"
    );
}

#[tokio::test]
async fn duplicates_are_judged_by_the_sinks_capability() {
    let db = TestDb::new().await;
    let alerts = clean_history(&db).await;
    let (key, hash) = &alerts[0];
    let twice = vec![
        applied(key, hash),
        applied(key, hash),
        applied(&alerts[1].0, &alerts[1].1),
    ];
    // Applied twice where it must not be.
    let report = check(&db.pool, 1, &sink(Capability::Idempotent, twice.clone()))
        .await
        .unwrap();
    assert_eq!(report.effective_duplicates, vec![("ops".to_owned(), 1)]);
    assert!(!report.passed());
    // At a `retry` sink it is allowed only for an alert flagged as a possible duplicate.
    let report = check(&db.pool, 1, &sink(Capability::PlainRetry, twice.clone()))
        .await
        .unwrap();
    assert!(!report.passed(), "not flagged");
    sqlx::query("UPDATE alerts SET possible_duplicate = true WHERE id = $1::uuid")
        .bind(key)
        .execute(&db.pool)
        .await
        .unwrap();
    let report = check(&db.pool, 1, &sink(Capability::PlainRetry, twice))
        .await
        .unwrap();
    assert!(report.passed(), "{report}");
    // A wire duplicate at a plain sink means a resend that should not have happened.
    let resent = vec![
        applied(key, hash),
        SinkRecord {
            key: Some(key.clone()),
            payload_sha256: Some(hash.clone()),
            outcome: "wire_duplicate".into(),
        },
        applied(&alerts[1].0, &alerts[1].1),
    ];
    let report = check(&db.pool, 1, &sink(Capability::PlainHold, resent.clone()))
        .await
        .unwrap();
    assert!(!report.passed());
    let report = check(&db.pool, 1, &sink(Capability::Lookup, resent))
        .await
        .unwrap();
    assert!(report.passed(), "{report}");
}

#[tokio::test]
async fn lost_and_uncertain_alerts_are_reported() {
    let db = TestDb::new().await;
    let alerts = clean_history(&db).await;
    // One alert back in the queue as uncertain, as if the drain never settled it.
    sqlx::query(
        "WITH live_again AS (DELETE FROM alert_outcomes WHERE alert_id = $1::uuid RETURNING alert_id) \
         INSERT INTO outbox (alert_id, destination_id, status) \
         SELECT a.id, a.destination_id, 'uncertain' FROM alerts a JOIN live_again l ON l.alert_id = a.id",
    )
    .bind(&alerts[0].0)
    .execute(&db.pool)
    .await
    .unwrap();
    let records = alerts.iter().map(|(k, h)| applied(k, h)).collect();
    let report = check(&db.pool, 1, &sink(Capability::Idempotent, records))
        .await
        .unwrap();
    assert_eq!(report.unresolved_uncertain, 1, "{report}");
    assert_eq!(report.lost, 1, "{report}");
    assert!(!report.passed());
}

#[tokio::test]
async fn an_acceptance_the_sink_never_saw_is_a_phantom() {
    let db = TestDb::new().await;
    let alerts = clean_history(&db).await;
    let records = vec![applied(&alerts[1].0, &alerts[1].1)];
    let report = check(&db.pool, 1, &sink(Capability::Idempotent, records))
        .await
        .unwrap();
    assert_eq!(report.phantom_acceptances, 1, "{report}");
    assert!(!report.passed());
}

/// An email destination `mail` with one alert, its message stored and the alert accepted;
/// returns the message as an inbox records it (Message-ID without angle
/// brackets, SHA-256 of the data as received: the bytes and the CRLF before the dot).
async fn email_history(db: &TestDb) -> InboxMessage {
    let tenant = outbox_store::tenants::create(&db.pool, "acme", "UTC", None)
        .await
        .unwrap();
    let new = destination(tenant, "mail", "smtp://127.0.0.1:25");
    let email = outbox_store::destinations::EmailSettings {
        smtp_tls: "none".into(),
        smtp_username: None,
        smtp_password: None,
        mail_from: "alerts@acme.example".into(),
        mail_to: vec!["ops@acme.example".into()],
        locale: None,
        smtp_ca_pem: None,
    };
    let id = outbox_store::destinations::new_id();
    outbox_store::destinations::create_email_with_id(&db.pool, id, &new, &email)
        .await
        .unwrap();
    approve(db, tenant, "mail", "s", "{\"n\": 1}").await;
    let row = claim(db).await.remove(0);
    let alert_id = row.alert_id;
    let bytes = b"Message-ID: <m@acme.example>\r\n\r\nhello".to_vec();
    let mut on_the_wire = bytes.clone();
    on_the_wire.extend_from_slice(b"\r\n");
    let sha = |b: &[u8]| -> String {
        use sha2::Digest;
        sha2::Sha256::digest(b)
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    };
    let message_id = format!("<{alert_id}@acme.example>");
    outbox_store::rendered::store_once(&db.pool, alert_id, &message_id, &bytes, &sha(&bytes), "v")
        .await
        .unwrap();
    settle_accepted(db, &row, "Q1").await;
    InboxMessage {
        message_id: Some(format!("{alert_id}@acme.example")),
        alert_id: Some(alert_id.to_string()),
        sha256: sha(&on_the_wire),
    }
}

fn inbox(capability: Capability, messages: Vec<InboxMessage>) -> Vec<Inbox> {
    vec![Inbox {
        destination: "mail".into(),
        capability,
        messages,
    }]
}

#[tokio::test]
async fn an_inbox_is_judged_by_message_id_and_the_stored_bytes() {
    let db = TestDb::new().await;
    let received = email_history(&db).await;
    let judge = |messages: Vec<InboxMessage>, capability| {
        let pool = db.pool.clone();
        async move {
            check_with_inboxes(&pool, 1, &[], &inbox(capability, messages))
                .await
                .unwrap()
        }
    };

    let once = judge(vec![received.clone()], Capability::PlainHold).await;
    assert!(once.passed(), "{once}");
    assert!(
        once.to_string().contains("messages in inbox mail"),
        "{once}"
    );

    let twice = judge(
        vec![received.clone(), received.clone()],
        Capability::PlainHold,
    )
    .await;
    assert_eq!(
        twice.effective_duplicates,
        vec![("mail".to_owned(), 1)],
        "{twice}"
    );
    assert!(!twice.passed());
    // At a `retry` destination a second copy is allowed only for a flagged alert.
    let unflagged = judge(
        vec![received.clone(), received.clone()],
        Capability::PlainRetry,
    )
    .await;
    assert!(!unflagged.passed(), "{unflagged}");

    let missing = judge(vec![], Capability::PlainHold).await;
    assert_eq!(missing.phantom_acceptances, 1, "{missing}");

    let mut changed = received.clone();
    changed.sha256 = "00".repeat(32);
    let mutated = judge(vec![changed], Capability::PlainHold).await;
    assert_eq!(mutated.mutated_retries, 1, "{mutated}");

    let mut stray = received.clone();
    stray.alert_id = Some(Uuid::now_v7().to_string());
    let unexpected = judge(vec![received.clone(), stray], Capability::PlainHold).await;
    assert_eq!(unexpected.unexpected, 1, "{unexpected}");
    assert!(!unexpected.passed());
}
