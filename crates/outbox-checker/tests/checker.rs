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
        timeout: Duration::from_secs(1),
        max_in_flight: 4,
        ..NewDestination::webhook(tenant, name, url)
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
        chain_seen: row.chain_seen(),
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
    let email = outbox_store::destinations::EmailSettings {
        relay: outbox_core::SmtpRelay::new("127.0.0.1", 25).unwrap(),
        smtp_tls: outbox_core::SmtpTls::None,
        smtp_username: None,
        smtp_password: None,
        smtp_ca_pem: None,
        mail: outbox_store::destinations::Mailing {
            from: "alerts@acme.example".into(),
            to: vec!["ops@acme.example".into()],
            locale: None,
        },
    };
    let new = NewDestination {
        timeout: Duration::from_secs(1),
        max_in_flight: 4,
        ..NewDestination::email(tenant, "mail", email)
    };
    outbox_store::destinations::create(&db.pool, &new)
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

/// Destination `ops` of a new tenant, ordered per key (blocking on failed heads), with
/// alerts approved in lane `k` (subjects `k0`, `k1`, ...) and in lane `j`; returns the
/// tenant and each lane's alert ids in approval order.
async fn ordered_history(db: &TestDb, in_k: usize, in_j: usize) -> (Uuid, Vec<Uuid>, Vec<Uuid>) {
    let tenant = outbox_store::tenants::create(&db.pool, "acme", "UTC", None)
        .await
        .unwrap();
    let ops = outbox_store::destinations::create(
        &db.pool,
        &destination(tenant, "ops", "http://127.0.0.1:9/hook"),
    )
    .await
    .unwrap();
    let per_key = outbox_store::lanes::OrderingSettings {
        ordering: outbox_core::Ordering::PerKey,
        on_head_failed: outbox_core::OnHeadFailed::Block,
    };
    outbox_store::lanes::set_ordering(&db.pool, ops, per_key, false, "test")
        .await
        .unwrap();
    let mut lanes = (Vec::new(), Vec::new());
    for (key, n, ids) in [("k", in_k, &mut lanes.0), ("j", in_j, &mut lanes.1)] {
        for i in 0..n {
            let subject = format!("{key}{i}");
            let approval = outbox_store::alerts::Approval {
                tenant_id: tenant,
                destination: "ops",
                subject: &subject,
                occurrence: "o",
                payload_json: "{\"n\": 1}",
                actor: "test",
                ordering_key: Some(key),
            };
            match outbox_store::alerts::approve(&db.pool, approval)
                .await
                .unwrap()
            {
                outbox_store::alerts::ApproveOutcome::Created(id) => ids.push(id),
                other => panic!("expected a new alert, got {other:?}"),
            }
        }
    }
    (tenant, lanes.0, lanes.1)
}

/// Claims the due alerts and settles each as `outcome`, as a dispatcher does (releasing
/// its lane when the outcome does); returns the ids settled.
async fn settle_due(db: &TestDb, outcome: outbox_core::Outcome) -> Vec<Uuid> {
    let mut settled = Vec::new();
    for row in claim(db).await {
        let done = Completion {
            alert_id: row.alert_id,
            fencing_token: row.fencing_token,
            worker: "w".into(),
            attempt: None,
            next: Next::Settle {
                outcome,
                reference: None,
            },
            line: outcome.to_string(),
            disable_destination: None,
            lane: row.lane_key.clone().map(|key| dispatch::LaneHead {
                key,
                skips_failed: row.destination.lane_skips_failed,
            }),
            chain_seen: row.chain_seen(),
        };
        assert!(dispatch::complete(&db.pool, &done).await.unwrap());
        settled.push(row.alert_id);
    }
    settled
}

/// The `applied` records of `ids`, in that order, with the payload `ordered_history`
/// approved.
async fn applied_in_order(db: &TestDb, ids: &[Uuid]) -> Vec<SinkRecord> {
    let hash: String =
        sqlx::query_scalar("SELECT encode(payload_sha256, 'hex') FROM alerts LIMIT 1")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    ids.iter()
        .map(|id| applied(&id.to_string(), &hash))
        .collect()
}

#[tokio::test]
async fn a_lane_accepted_out_of_approval_order_is_reported() {
    let db = TestDb::new().await;
    let (_, k, j) = ordered_history(&db, 3, 2).await;
    // Each lane's head at a time, as the lanes release them.
    for _ in 0..3 {
        settle_due(&db, outbox_core::Outcome::Accepted).await;
    }
    let judge = |order: Vec<Uuid>| {
        let db = &db;
        async move {
            let records = applied_in_order(db, &order).await;
            check(&db.pool, 1, &sink(Capability::PlainHold, records))
                .await
                .unwrap()
        }
    };

    // Lanes interleaved, each in its own order: passes.
    let in_order = judge(vec![j[0], k[0], k[1], j[1], k[2]]).await;
    assert!(in_order.passed(), "{in_order}");
    assert_eq!(in_order.out_of_order, 0);
    assert_eq!(in_order.ordered.len(), 1, "{in_order}");
    let lanes = &in_order.ordered[0];
    assert_eq!(
        (
            lanes.lanes,
            lanes.alerts,
            lanes.deepest,
            lanes.accepted,
            lanes.judged
        ),
        (2, 5, 3, 5, 5),
        "{in_order}"
    );
    assert!(in_order.to_string().contains("lanes at ops"), "{in_order}");

    // k1 first accepted before k0: everything else holds, so only the order check can
    // fail it. A later resend of k1 does not repair it (the first acceptance counts).
    let overtaken = judge(vec![k[1], j[0], k[0], k[1], j[1], k[2]]).await;
    assert_eq!(overtaken.out_of_order, 1, "{overtaken}");
    assert!(!overtaken.passed());
    assert!(
        overtaken
            .offences
            .iter()
            .filter(|o| o.kind != "effective duplicate")
            .all(|o| o.kind == "out of order" && o.alert_id == Some(k[1])),
        "{:?}",
        overtaken.offences
    );
    let first_only = judge(vec![k[1], j[0], k[0], j[1], k[2]]).await;
    assert_eq!(first_only.out_of_order, 1, "{first_only}");
    assert!(
        first_only.offences.iter().all(|o| o.kind == "out of order"),
        "only the order is wrong: {:?}",
        first_only.offences
    );
    assert!(first_only.to_string().contains("out of order"));
    let detail = &first_only.offences[0].detail;
    assert!(
        detail.starts_with("lane `k` at `ops`: position 2 was first accepted at record 1")
            && detail.contains("before position 1"),
        "{detail}"
    );

    // The last of a lane first: it overtook both ahead of it, one offender.
    let last_first = judge(vec![k[2], k[0], k[1], j[0], j[1]]).await;
    assert_eq!(last_first.out_of_order, 1, "{last_first}");
}

#[tokio::test]
async fn alerts_waiting_behind_a_held_head_are_not_lost_but_only_behind_one() {
    let db = TestDb::new().await;
    let (_, k, j) = ordered_history(&db, 3, 2).await;
    // Both heads held (their answers lost): k1 and k2 wait behind k0, j1 behind j0.
    let held = settle_due(&db, outbox_core::Outcome::Held).await;
    assert_eq!(held.len(), 2);
    let heads_applied = applied_in_order(&db, &[k[0], j[0]]).await;
    let report = check(
        &db.pool,
        1,
        &sink(Capability::PlainHold, heads_applied.clone()),
    )
    .await
    .unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!(
        (report.lost, report.waiting_behind_blocked_heads),
        (0, 3),
        "{report}"
    );
    let lanes = &report.ordered[0];
    assert_eq!(
        (
            lanes.lanes,
            lanes.blocked_heads,
            lanes.held_heads,
            lanes.waiting
        ),
        (2, 2, 2, 3),
        "{report}"
    );

    // An alert behind a held head that reached the sink went past it, whether the sink
    // saw the head first or never.
    for order in [vec![k[0], j[0], k[1]], vec![j[0], k[1]]] {
        let records = applied_in_order(&db, &order).await;
        let report = check(&db.pool, 1, &sink(Capability::PlainHold, records))
            .await
            .unwrap();
        assert_eq!(report.out_of_order, 1, "{report}");
        assert!(
            report.offences[0].detail.contains("past position 1"),
            "{:?}",
            report.offences
        );
    }
    // So did one that was sent and held, though the sink has no record of it.
    sqlx::query("UPDATE outbox SET lane_after = NULL WHERE alert_id = $1")
        .bind(j[1])
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        settle_due(&db, outbox_core::Outcome::Held).await,
        vec![j[1]]
    );
    let report = check(
        &db.pool,
        1,
        &sink(Capability::PlainHold, heads_applied.clone()),
    )
    .await
    .unwrap();
    assert_eq!(
        (report.out_of_order, report.waiting_behind_blocked_heads),
        (1, 2),
        "{report}"
    );

    // The head resolved as accepted: the lane goes on, so what still waits behind an
    // accepted head (here put back by hand, as if the release had not handed the place
    // on) is lost, and so is the new head left pending.
    let mut tx = db.pool.begin().await.unwrap();
    outbox_store::lifecycle::resolve(
        &mut tx,
        k[0],
        &outbox_store::lifecycle::Resolution::Accepted {
            reference: "r".into(),
        },
        "op",
        "found it",
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    sqlx::query("UPDATE outbox SET lane_after = $1 WHERE alert_id = $2")
        .bind(k[0])
        .bind(k[1])
        .execute(&db.pool)
        .await
        .unwrap();
    let report = check(&db.pool, 1, &sink(Capability::PlainHold, heads_applied))
        .await
        .unwrap();
    assert_eq!(
        (report.lost, report.waiting_behind_blocked_heads),
        (2, 0),
        "{report}"
    );
    assert_eq!(report.ordered[0].blocked_heads, 1, "j0 still blocks j");
}

/// Records the claimed `row` as a dispatcher does when its send was accepted: the attempt
/// row says `accepted`, with the destination's `reference`.
async fn send_accepted(db: &TestDb, row: &ClaimedAlert, reference: &str) {
    let done = Completion {
        alert_id: row.alert_id,
        fencing_token: row.fencing_token,
        worker: "w".into(),
        attempt: Some(dispatch::AttemptRecord {
            kind: outbox_core::AttemptKind::Send,
            attempt: row.attempts,
            started_at: row.db_now,
            outcome: outbox_core::AttemptOutcome::Accepted,
            http_status: Some(200),
            destination_reference: Some(reference.into()),
            error_class: None,
            response_excerpt: None,
        }),
        next: Next::Settle {
            outcome: outbox_core::Outcome::Accepted,
            reference: Some(reference.into()),
        },
        line: "attempt accepted".into(),
        disable_destination: None,
        lane: None,
        chain_seen: row.chain_seen(),
    };
    assert!(dispatch::complete(&db.pool, &done).await.unwrap());
}

#[tokio::test]
async fn an_accepting_attempt_settles_an_alert_and_a_lost_queue_row_is_lost() {
    let db = TestDb::new().await;
    let tenant = outbox_store::tenants::create(&db.pool, "acme", "UTC", None)
        .await
        .unwrap();
    outbox_store::destinations::create(
        &db.pool,
        &destination(tenant, "ops", "http://127.0.0.1:9/hook"),
    )
    .await
    .unwrap();
    for n in 0..3 {
        approve(
            &db,
            tenant,
            "ops",
            &format!("s{n}"),
            &format!("{{\"n\": {n}}}"),
        )
        .await;
    }
    let claimed = claim(&db).await;
    assert_eq!(claimed.len(), 3);
    for row in &claimed[..2] {
        send_accepted(&db, row, "r").await;
    }
    // The third alert's queue row disappears by a path no transition takes: no attempt,
    // no outcome, nothing says where it went.
    let lost = claimed[2].alert_id;
    sqlx::query("DELETE FROM outbox WHERE alert_id = $1")
        .bind(lost)
        .execute(&db.pool)
        .await
        .unwrap();

    // The two acceptances wrote no outcome row: their attempt rows say so.
    let outcome_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM alert_outcomes")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(outcome_rows, 0);
    let states: Vec<(Uuid, Option<String>)> =
        sqlx::query_as("SELECT alert_id, state FROM alert_states ORDER BY alert_id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    for (id, state) in &states {
        let expected = (*id != lost).then(|| "accepted".to_owned());
        assert_eq!(state, &expected, "{id}");
    }

    let hashes: Vec<(String, String)> =
        sqlx::query_as("SELECT id::text, encode(payload_sha256, 'hex') FROM alerts WHERE id <> $1")
            .bind(lost)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let records = hashes.iter().map(|(k, h)| applied(k, h)).collect();
    let report = check(&db.pool, 1, &sink(Capability::Idempotent, records))
        .await
        .unwrap();
    // The lost row reads as lost, never as delivered; the accepted ones pass.
    assert_eq!(report.lost, 1, "{report}");
    assert_eq!(report.partial_commits, 1, "{report}");
    assert_eq!(report.phantom_acceptances, 0, "{report}");
    assert!(
        report.offences.iter().all(|o| o.alert_id == Some(lost)),
        "{report}"
    );
}
