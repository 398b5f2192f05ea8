//! The lifecycle against a real database: the typed names against the schema's CHECK
//! constraints, and the batch completion against the single-row transitions.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use super::standing::{OUTCOME, SETTLED_AT};
use super::*;
use crate::dispatch::{self, AttemptRecord, Completion, Next};
use crate::sql_names::SqlName;
use outbox_core::{
    AlertState, AttemptKind, AttemptOutcome, BulkReplayState, DestinationKind, LiveStatus, Locale,
    OnUncertain, OperatorRole, Outcome, SmtpTls,
};
use outbox_testkit::TestDb;
use std::collections::BTreeSet;
use std::time::Duration;
use uuid::Uuid;

/// The names a CHECK constraint on `table.column` allows, read from the catalogue
/// (`column = ANY (ARRAY['a'::text, ...])`, or `column IN (...)` as PostgreSQL prints it).
async fn check_values(db: &TestDb, table: &str, column: &str) -> BTreeSet<String> {
    let definitions: Vec<String> = sqlx::query_scalar(
        "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c \
         WHERE c.conrelid = $1::regclass AND c.contype = 'c'",
    )
    .bind(table)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    // The column's own CHECK is the one that starts with it: another may name it too
    // (`smtp_ca_pem` needs `smtp_tls` in starttls or tls).
    let needle = format!("({column} = ANY (ARRAY[");
    let matching: Vec<&String> = definitions
        .iter()
        .filter(|d| d.starts_with(&format!("CHECK ({needle}")))
        .collect();
    assert_eq!(
        matching.len(),
        1,
        "one CHECK lists {table}.{column}: {definitions:?}"
    );
    let list = matching[0].split(&needle).nth(1).unwrap();
    let list = &list[..list.find(']').unwrap()];
    list.split(", ")
        .map(|item| {
            item.trim_end_matches("::text")
                .trim_matches('\'')
                .to_owned()
        })
        .collect()
}

fn names<T: Copy + std::fmt::Display>(all: &[T]) -> BTreeSet<String> {
    all.iter().map(ToString::to_string).collect()
}

#[tokio::test]
async fn every_typed_name_is_exactly_what_the_schema_allows() {
    let db = TestDb::new().await;
    let pairs = [
        ("outbox", "status", names(LiveStatus::ALL)),
        ("alert_outcomes", "outcome", names(Outcome::ALL)),
        ("alert_events", "from_state", names(AlertState::ALL)),
        ("alert_events", "to_state", names(AlertState::ALL)),
        ("delivery_attempts", "to_state", names(AlertState::ALL)),
        ("delivery_attempts", "kind", names(AttemptKind::ALL)),
        ("delivery_attempts", "outcome", names(AttemptOutcome::ALL)),
        ("destinations", "kind", names(DestinationKind::ALL)),
        ("destinations", "on_uncertain", names(OnUncertain::ALL)),
        (
            "destinations",
            "ordering",
            names(outbox_core::Ordering::ALL),
        ),
        (
            "destinations",
            "on_head_failed",
            names(outbox_core::OnHeadFailed::ALL),
        ),
        ("console_bulk_replays", "state", names(BulkReplayState::ALL)),
        ("destinations", "smtp_tls", names(SmtpTls::ALL)),
        ("destinations", "locale", names(&Locale::ALL)),
        ("tenants", "locale", names(&Locale::ALL)),
        ("operator_accounts", "role", names(OperatorRole::ALL)),
    ];
    for (table, column, typed) in pairs {
        // Equal sets: every variant's name passes the CHECK, and every name the CHECK
        // allows parses into a variant.
        let allowed = check_values(&db, table, column).await;
        assert_eq!(allowed, typed, "{table}.{column}");
    }
    // The state view is the live status or the outcome: both lists together are the states.
    let mut both = names(LiveStatus::ALL);
    both.extend(names(Outcome::ALL));
    assert_eq!(both, names(AlertState::ALL));
}

/// A tenant, a destination and `n` approved alerts, claimed by worker `w`.
async fn claimed_alerts(db: &TestDb, n: usize) -> Vec<dispatch::ClaimedAlert> {
    let tenant = crate::tenants::create(&db.pool, "acme", "UTC", None)
        .await
        .unwrap();
    crate::destinations::create(
        &db.pool,
        &crate::destinations::NewDestination {
            timeout: Duration::from_secs(1),
            max_in_flight: 16,
            ..crate::destinations::NewDestination::webhook(tenant, "ops", "http://127.0.0.1:9/hook")
        },
    )
    .await
    .unwrap();
    for i in 0..n {
        let payload = format!(r#"{{"alert": {i}}}"#);
        crate::alerts::approve(
            &db.pool,
            crate::alerts::Approval {
                tenant_id: tenant,
                destination: "ops",
                subject: &format!("contract:{i}"),
                occurrence: "2027-01-31/30d",
                payload_json: &payload,
                actor: "test",
                ordering_key: None,
            },
        )
        .await
        .unwrap();
    }
    let claimed = dispatch::claim(&db.pool, "w", n as i64, Duration::from_secs(60), &[])
        .await
        .unwrap();
    assert_eq!(claimed.len(), n);
    claimed
}

/// The state joins are plain `const` text (so that every reader can write them into its
/// statement with `format!`), and name `accepted` as a literal: the one the enum writes,
/// so that a renamed state cannot leave them behind.
#[test]
fn the_state_joins_name_accepted_as_the_enum_writes_it() {
    assert!(
        STATE_JOINS.contains(&format!("newest.to_state = {}", Outcome::Accepted.sql())),
        "{STATE_JOINS}"
    );
}

/// Alerts are never deleted (nothing of the product deletes one, and the outbox's row has
/// no key to cascade from it): a `DELETE` or `TRUNCATE` of `alerts` is refused with the
/// reason, and the alert and its queue row stay.
#[tokio::test]
async fn deleting_alerts_is_refused() {
    let db = TestDb::new().await;
    let claimed = claimed_alerts(&db, 1).await;
    let id = claimed[0].alert_id;
    for statement in [
        format!("DELETE FROM alerts WHERE id = '{id}'"),
        "TRUNCATE alerts CASCADE".to_owned(),
    ] {
        let refused = sqlx::query(&statement).execute(&db.pool).await.unwrap_err();
        assert!(
            refused.to_string().contains("alerts are never deleted"),
            "{statement}: {refused}"
        );
    }
    let (alerts, queued): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM alerts WHERE id = $1), \
                (SELECT count(*) FROM outbox WHERE alert_id = $1)",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((alerts, queued), (1, 1));
}

/// An alert belongs to a destination of its own tenant, checked once per statement: a
/// monitor's batch with one alert for another tenant's destination is refused whole (the
/// foreign-key error code) and writes nothing. What makes that check hold without a lock
/// is refused too: deleting a destination, moving one to another tenant, and moving an
/// alert to another tenant (the same trigger refuses a change of its destination).
#[tokio::test]
async fn an_alert_for_another_tenants_destination_is_refused() {
    let db = TestDb::new().await;
    let claimed = claimed_alerts(&db, 1).await;
    let ours: (Uuid, Uuid) =
        sqlx::query_as("SELECT tenant_id, destination_id FROM alerts WHERE id = $1")
            .bind(claimed[0].alert_id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let other = crate::tenants::create(&db.pool, "globex", "UTC", None)
        .await
        .unwrap();
    let alert = |destination_id: Uuid, subject: &str| crate::alerts::MonitorAlert {
        destination_id,
        subject: subject.to_owned(),
        occurrence: "2027-01-31/30d".to_owned(),
        payload_json: r#"{"a": 1}"#.to_owned(),
    };
    let before = db.count("alerts").await;
    let mut conn = db.pool.acquire().await.unwrap();
    let refused = crate::alerts::approve_batch(
        &mut conn,
        other,
        &[
            alert(ours.1, "contract:theirs"),
            alert(ours.1, "contract:z"),
        ],
        "test",
        None,
    )
    .await
    .unwrap_err();
    let crate::StoreError::Database(sqlx::Error::Database(refused)) = refused else {
        panic!("not a database error: {refused:?}");
    };
    assert_eq!(refused.code().as_deref(), Some("23503"), "{refused}");
    assert!(refused.message().contains("not its tenant's"), "{refused}");
    assert_eq!(db.count("alerts").await, before);
    assert_eq!(db.count("outbox").await, 1);
    for statement in [
        format!("DELETE FROM destinations WHERE id = '{}'", ours.1),
        "TRUNCATE destinations CASCADE".to_owned(),
        format!(
            "UPDATE destinations SET tenant_id = '{other}' WHERE id = '{}'",
            ours.1
        ),
        format!(
            "UPDATE alerts SET tenant_id = '{other}' WHERE id = '{}'",
            claimed[0].alert_id
        ),
    ] {
        let refused = sqlx::query(&statement).execute(&db.pool).await.unwrap_err();
        let refused = refused.to_string();
        assert!(
            refused.contains("never deleted") || refused.contains("never change"),
            "{statement}: {refused}"
        );
    }
    let (destinations, alert_tenant): (i64, Uuid) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM destinations WHERE tenant_id = $1), \
                (SELECT tenant_id FROM alerts WHERE id = $2)",
    )
    .bind(ours.0)
    .bind(claimed[0].alert_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((destinations, alert_tenant), (1, ours.0));
}

/// What settling leaves, as every reader reads it: the alert's resting place, reference
/// and time, and whether it is still queued.
async fn settled_row(db: &TestDb, id: Uuid) -> (Option<String>, Option<String>, bool, bool) {
    sqlx::query_as(&format!(
        "SELECT {OUTCOME}, {DESTINATION_REFERENCE}, {SETTLED_AT} IS NOT NULL, \
                o.alert_id IS NOT NULL \
         FROM alerts a {STATE_JOINS} WHERE a.id = $1"
    ))
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// Whether the alert has a row in `alert_outcomes`.
async fn has_outcome_row(db: &TestDb, id: Uuid) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM alert_outcomes WHERE alert_id = $1)")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn lifecycle_batch_and_single_row_settle_alike() {
    let db = TestDb::new().await;
    let cases = [
        (Outcome::Accepted, Some("ref-1")),
        (Outcome::Failed, None),
        (Outcome::Held, None),
    ];
    let claimed = claimed_alerts(&db, 2 * cases.len()).await;
    for ((outcome, reference), pair) in cases.into_iter().zip(claimed.chunks(2)) {
        let (by_batch, by_row) = (&pair[0], &pair[1]);
        let completion = Completion {
            alert_id: by_batch.alert_id,
            fencing_token: by_batch.fencing_token,
            worker: "w".to_owned(),
            attempt: Some(AttemptRecord {
                kind: AttemptKind::Send,
                attempt: 1,
                started_at: chrono::Utc::now(),
                outcome: AttemptOutcome::Accepted,
                http_status: Some(200),
                destination_reference: reference.map(str::to_owned),
                error_class: None,
                response_excerpt: None,
            }),
            next: Next::Settle {
                outcome,
                reference: reference.map(str::to_owned),
            },
            line: "settled".to_owned(),
            disable_destination: None,
            lane: None,
            chain_seen: by_batch.chain_seen(),
        };
        let applied = dispatch::complete_batch(&db.pool, &[completion])
            .await
            .unwrap();
        assert_eq!(applied, [true]);

        let mut tx = db.pool.begin().await.unwrap();
        settle(&mut tx, by_row.alert_id, outcome, reference)
            .await
            .unwrap();
        tx.commit().await.unwrap();

        let batch = settled_row(&db, by_batch.alert_id).await;
        let single = settled_row(&db, by_row.alert_id).await;
        assert_eq!(batch, single, "{outcome}");
        assert_eq!(
            batch,
            (
                Some(outcome.as_str().to_owned()),
                reference.map(str::to_owned),
                true,
                false
            )
        );
        // The one difference is where it is written: the batch's acceptance is its
        // attempt row alone; an operator's settlement, and every other outcome, is a row.
        assert_eq!(
            has_outcome_row(&db, by_batch.alert_id).await,
            outcome != Outcome::Accepted,
            "{outcome}"
        );
        assert!(has_outcome_row(&db, by_row.alert_id).await, "{outcome}");
    }
}

#[tokio::test]
async fn a_completion_never_replaces_an_outcome_already_recorded() {
    let db = TestDb::new().await;
    let claim = claimed_alerts(&db, 1).await.remove(0);
    // A live alert never has an outcome row; one written behind the product's back (as
    // "failed") must not be turned into "accepted" by the dispatcher's completion.
    sqlx::query("INSERT INTO alert_outcomes (alert_id, outcome) VALUES ($1, 'failed')")
        .bind(claim.alert_id)
        .execute(&db.pool)
        .await
        .unwrap();
    let refused = dispatch::complete_batch(&db.pool, &[accepted(&claim)]).await;
    assert!(refused.is_err(), "{refused:?}");
    let (outcome, live, attempts): (String, i64, i64) = sqlx::query_as(
        "SELECT (SELECT outcome FROM alert_outcomes WHERE alert_id = $1), \
                (SELECT count(*) FROM outbox WHERE alert_id = $1 AND status = 'sending'), \
                (SELECT count(*) FROM delivery_attempts WHERE alert_id = $1)",
    )
    .bind(claim.alert_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((outcome.as_str(), live, attempts), ("failed", 1, 0));
}

fn accepted(claim: &dispatch::ClaimedAlert) -> Completion {
    Completion {
        alert_id: claim.alert_id,
        fencing_token: claim.fencing_token,
        worker: "w".to_owned(),
        attempt: None,
        next: Next::Settle {
            outcome: Outcome::Accepted,
            reference: None,
        },
        line: "accepted".to_owned(),
        disable_destination: None,
        lane: None,
        chain_seen: claim.chain_seen(),
    }
}

#[tokio::test]
async fn a_revision_waits_until_the_alert_it_corrects_has_settled() {
    let db = TestDb::new().await;
    let original = claimed_alerts(&db, 1).await.remove(0);
    // Corrected while a dispatcher holds it: it may reach the destination, so it is not
    // superseded, and the correction must not overtake it.
    let crate::alerts::ReviseOutcome::Created {
        id: revision,
        superseded_previous: false,
        ..
    } = crate::alerts::revise(
        &db.pool,
        crate::alerts::Revision {
            tenant_id: None,
            alert_id: original.alert_id,
            payload_json: r#"{"alert": 0, "corrected": true}"#,
            reason: "wrong amount",
            actor: "test",
            trace: None,
        },
    )
    .await
    .unwrap()
    else {
        panic!("a revision queued beside its sending original");
    };
    let lease = Duration::from_secs(60);
    let claimed = dispatch::claim(&db.pool, "w2", 10, lease, &[])
        .await
        .unwrap();
    assert!(
        claimed.is_empty(),
        "claimed before its original settled: {claimed:?}"
    );
    assert!(
        !dispatch::work_due_within(&db.pool, Duration::ZERO)
            .await
            .unwrap(),
        "a waiting revision is not due work (a drain would wait for it forever)"
    );

    // Uncertain is not settled either.
    sqlx::query(&format!(
        "UPDATE outbox o SET {} WHERE o.alert_id = $1",
        requeue_assignments("'uncertain'", "now() + interval '1 hour'")
    ))
    .bind(original.alert_id)
    .execute(&db.pool)
    .await
    .unwrap();
    assert!(dispatch::claim(&db.pool, "w2", 10, lease, &[])
        .await
        .unwrap()
        .is_empty());

    // Once the original has come to rest, the revision goes out.
    sqlx::query("UPDATE outbox SET next_attempt_at = now() WHERE alert_id = $1")
        .bind(original.alert_id)
        .execute(&db.pool)
        .await
        .unwrap();
    let again = dispatch::claim(&db.pool, "w2", 10, lease, &[])
        .await
        .unwrap();
    assert_eq!(
        again.iter().map(|c| c.alert_id).collect::<Vec<_>>(),
        [original.alert_id],
        "the original is settled first"
    );
    let applied = dispatch::complete_batch(&db.pool, &[accepted(&again[0])])
        .await
        .unwrap();
    assert_eq!(applied, [true]);
    let last = dispatch::claim(&db.pool, "w2", 10, lease, &[])
        .await
        .unwrap();
    assert_eq!(
        last.iter().map(|c| c.alert_id).collect::<Vec<_>>(),
        [revision]
    );
}

/// Superseding the tail of an ordered lane that waits behind an unreleased head hands the
/// tail back to that head: the correction (and any later approval) still waits for it,
/// and goes once it is accepted.
#[tokio::test]
async fn a_revision_of_a_waiting_lane_tail_still_waits_for_the_head() {
    let db = TestDb::new().await;
    // The destination orders from now on: two approvals of one key form a lane (the
    // alert already claimed was approved unordered and is in none).
    let (_, lane) = one_lane(&db, 2).await;
    let lease = Duration::from_secs(60);
    let first = dispatch::claim(&db.pool, "w", 10, lease, &[])
        .await
        .unwrap();
    assert_eq!(
        first.iter().map(|c| c.alert_id).collect::<Vec<_>>(),
        [lane[0]]
    );
    let crate::alerts::ReviseOutcome::Created {
        id: revision,
        superseded_previous: true,
        ..
    } = crate::alerts::revise(
        &db.pool,
        crate::alerts::Revision {
            tenant_id: None,
            alert_id: lane[1],
            payload_json: r#"{"n": 2}"#,
            reason: "wrong amount",
            actor: "test",
            trace: None,
        },
    )
    .await
    .unwrap()
    else {
        panic!("the waiting tail, never sent, is superseded");
    };
    assert!(
        dispatch::claim(&db.pool, "w", 10, lease, &[])
            .await
            .unwrap()
            .is_empty(),
        "the correction of the tail went past the lane's head, still sending"
    );
    assert!(dispatch::complete(&db.pool, &head_accepted(&first[0]))
        .await
        .unwrap());
    let next = dispatch::claim(&db.pool, "w", 10, lease, &[])
        .await
        .unwrap();
    assert_eq!(
        next.iter().map(|c| c.alert_id).collect::<Vec<_>>(),
        [revision]
    );
}

/// Approves `n` alerts with one ordering key to `ops`, made to order per key first: one
/// lane, in approval order. Returns the tenant and the alerts.
async fn one_lane(db: &TestDb, n: usize) -> (Uuid, Vec<Uuid>) {
    let tenant = claimed_alerts(db, 1).await.remove(0).tenant_id;
    let ops = crate::destinations::id_by_name(&db.pool, tenant, "ops")
        .await
        .unwrap();
    let per_key = crate::lanes::OrderingSettings {
        ordering: outbox_core::Ordering::PerKey,
        on_head_failed: outbox_core::OnHeadFailed::Block,
    };
    crate::lanes::set_ordering(&db.pool, ops, per_key, false, "test")
        .await
        .unwrap();
    let mut lane = Vec::new();
    for i in 0..n {
        let approved = crate::alerts::approve(
            &db.pool,
            crate::alerts::Approval {
                tenant_id: tenant,
                destination: "ops",
                subject: &format!("ticket:{i}"),
                occurrence: "o",
                payload_json: r#"{"n": 1}"#,
                actor: "test",
                ordering_key: Some("customer:1"),
            },
        )
        .await
        .unwrap();
        let crate::alerts::ApproveOutcome::Created(id) = approved else {
            panic!("expected a new alert, got {approved:?}");
        };
        lane.push(id);
    }
    (tenant, lane)
}

/// The accepted completion of a lane head's claim.
fn head_accepted(claim: &dispatch::ClaimedAlert) -> Completion {
    Completion {
        lane: claim.lane_key.clone().map(|key| dispatch::LaneHead {
            key,
            skips_failed: false,
        }),
        ..accepted(claim)
    }
}

/// An outbox row's status, lease owner and the alert it waits behind.
async fn lane_row(db: &TestDb, id: Uuid) -> (String, Option<String>, Option<Uuid>) {
    sqlx::query_as("SELECT status, lease_owner, lane_after FROM outbox WHERE alert_id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Releasing a lane's head claims the next alert for the same dispatcher in the same
/// transaction (a lease, a fencing token, attempt 1 started), and only that one: the one
/// behind it still waits, and no claim can take either. A completion without the hand-on
/// leaves the next one due for any claim, and a stale completion claims nothing.
#[tokio::test]
async fn releasing_a_lane_head_claims_the_next_alert_for_the_same_dispatcher() {
    let db = TestDb::new().await;
    let (_, lane) = one_lane(&db, 3).await;
    let lease = Duration::from_secs(60);
    let head = dispatch::claim(&db.pool, "w", 10, lease, &[])
        .await
        .unwrap();
    assert_eq!(
        head.iter().map(|c| c.alert_id).collect::<Vec<_>>(),
        [lane[0]],
        "only the lane's head is due"
    );
    let stale = Completion {
        fencing_token: head[0].fencing_token + 1_000,
        ..head_accepted(&head[0])
    };
    let recorded =
        dispatch::complete_batch_handing_on(&db.pool, &[stale, head_accepted(&head[0])], lease)
            .await
            .unwrap();
    assert!(
        !recorded[0].applied && recorded[0].next.is_empty(),
        "{recorded:?}"
    );
    assert!(recorded[1].applied, "{recorded:?}");
    let next: Vec<Uuid> = recorded[1].next.iter().map(|c| c.alert_id).collect();
    assert_eq!(next, [lane[1]], "the release claims the lane's next alert");
    let second = &recorded[1].next[0];
    assert_eq!(second.attempts, 1);
    assert_eq!(second.claimed_from, LiveStatus::Pending);
    assert_eq!(second.lane_key.as_deref(), Some("customer:1"));
    assert_eq!(second.payload, r#"{"n": 1}"#);
    assert!(second.lease_expires_at >= second.db_now + chrono::Duration::seconds(59));
    assert_eq!(
        lane_row(&db, lane[1]).await,
        ("sending".to_owned(), Some("w".to_owned()), None)
    );
    assert_eq!(
        lane_row(&db, lane[2]).await,
        ("pending".to_owned(), None, Some(lane[1])),
        "the third still waits behind the second"
    );
    assert!(
        dispatch::claim(&db.pool, "other", 10, lease, &[])
            .await
            .unwrap()
            .is_empty(),
        "a claim takes neither the handed-on alert nor the one behind it"
    );
    // Without the hand-on, the release leaves the next alert to any claim.
    assert!(dispatch::complete(&db.pool, &head_accepted(second))
        .await
        .unwrap());
    assert_eq!(
        lane_row(&db, lane[2]).await,
        ("pending".to_owned(), None, None)
    );
    let third = dispatch::claim(&db.pool, "other", 10, lease, &[])
        .await
        .unwrap();
    assert_eq!(
        third.iter().map(|c| c.alert_id).collect::<Vec<_>>(),
        [lane[2]]
    );
    // The lane's last alert leaves nothing to claim, and clears the tail.
    let recorded =
        dispatch::complete_batch_handing_on(&db.pool, &[head_accepted(&third[0])], lease)
            .await
            .unwrap();
    assert!(recorded[0].applied && recorded[0].next.is_empty());
    let tail: Option<Uuid> = sqlx::query_scalar("SELECT tail_alert FROM alert_lanes")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(tail, None);
}

/// A monitors' bulk approval to a destination that orders per key joins each lane once
/// per new alert, in occurrence order, behind the lane's tail; a repeated identity (in a
/// later batch, or twice in one) takes no position.
#[tokio::test]
async fn a_bulk_approval_joins_each_lane_in_occurrence_order_once() {
    let db = TestDb::new().await;
    // One lane ("k1") with an alert already: the API's single join.
    let (tenant, lane) = one_lane(&db, 1).await;
    let ops = crate::destinations::id_by_name(&db.pool, tenant, "ops")
        .await
        .unwrap();
    let alert = |subject: &str, occurrence: &str| crate::alerts::MonitorAlert {
        destination_id: ops,
        subject: subject.to_owned(),
        occurrence: occurrence.to_owned(),
        payload_json: format!(r#"{{"o": "{occurrence}"}}"#),
    };
    let mut conn = db.pool.acquire().await.unwrap();
    let first = crate::alerts::approve_batch(
        &mut conn,
        tenant,
        &[
            alert("customer:1", "o3"),
            alert("k2", "o1"),
            alert("customer:1", "o2"),
            alert("customer:1", "o2"),
        ],
        "test",
        None,
    )
    .await
    .unwrap();
    assert_eq!(first.len(), 3, "the identity given twice is approved once");
    let again = crate::alerts::approve_batch(
        &mut conn,
        tenant,
        &[alert("customer:1", "o2"), alert("customer:1", "o4")],
        "test",
        None,
    )
    .await
    .unwrap();
    assert_eq!(again.len(), 1, "the repeated identity is left alone");
    // (subject, occurrence) -> (lane position, the occurrence it waits behind).
    let rows: Vec<(String, String, Option<i64>, Option<String>)> = sqlx::query_as(
        "SELECT a.subject, a.occurrence, a.lane_seq, w.occurrence \
         FROM alerts a JOIN outbox o ON o.alert_id = a.id \
         LEFT JOIN alerts w ON w.id = o.lane_after \
         WHERE a.lane_seq IS NOT NULL ORDER BY a.subject, a.lane_seq",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        rows.iter()
            .map(|(s, o, seq, w)| (s.as_str(), o.as_str(), *seq, w.as_deref()))
            .collect::<Vec<_>>(),
        [
            // The lane of key customer:1: the API's alert (subject ticket:0), then the
            // bulk ones in occurrence order.
            ("customer:1", "o2", Some(2), Some("o")),
            ("customer:1", "o3", Some(3), Some("o2")),
            ("customer:1", "o4", Some(4), Some("o3")),
            ("k2", "o1", Some(1), None),
            ("ticket:0", "o", Some(1), None),
        ]
    );
    let tails: Vec<(String, i64, String)> = sqlx::query_as(
        "SELECT l.ordering_key, l.last_seq, a.occurrence FROM alert_lanes l \
         JOIN alerts a ON a.id = l.tail_alert ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        tails,
        [
            ("customer:1".to_owned(), 4, "o4".to_owned()),
            ("k2".to_owned(), 1, "o1".to_owned())
        ]
    );
    assert_eq!(lane.len(), 1);
}

/// Four deciders approving overlapping batches at once to a destination that orders per
/// key: each identity is approved once, and each lane's positions are 1..n with every
/// alert waiting behind the one before it and the tail the last, so no position is lost
/// and no alert waits behind one that was never written.
#[tokio::test]
async fn racing_bulk_approvals_leave_whole_lanes() {
    let db = TestDb::new().await;
    let (tenant, _) = one_lane(&db, 0).await;
    let ops = crate::destinations::id_by_name(&db.pool, tenant, "ops")
        .await
        .unwrap();
    let mut deciders = Vec::new();
    for decider in 0..4_u32 {
        let pool = db.pool.clone();
        // Every decider approves all 3 keys x 20 occurrences, in its own order of chunks.
        let mut alerts: Vec<crate::alerts::MonitorAlert> = (0..60_u32)
            .map(|i| crate::alerts::MonitorAlert {
                destination_id: ops,
                subject: format!("k{}", i % 3),
                occurrence: format!("o{:02}", i / 3),
                payload_json: format!(r#"{{"by": {decider}}}"#),
            })
            .collect();
        alerts.rotate_left(decider as usize * 15);
        deciders.push(tokio::spawn(async move {
            let mut conn = pool.acquire().await.unwrap();
            let mut created = 0;
            for chunk in alerts.chunks(15) {
                let mut chunk = chunk.to_vec();
                chunk.sort_by(|a, b| (&a.subject, &a.occurrence).cmp(&(&b.subject, &b.occurrence)));
                created += crate::alerts::approve_batch(&mut conn, tenant, &chunk, "t", None)
                    .await
                    .unwrap()
                    .len();
            }
            created
        }));
    }
    let mut created = 0;
    for decider in deciders {
        created += decider.await.unwrap();
    }
    assert_eq!(created, 60, "each identity approved once");
    // Walk each lane by position: 1..n, each behind the one before, the tail the last.
    let rows: Vec<(String, Uuid, i64, Option<Uuid>)> = sqlx::query_as(
        "SELECT a.subject, a.id, a.lane_seq, o.lane_after FROM alerts a \
         JOIN outbox o ON o.alert_id = a.id WHERE a.lane_seq IS NOT NULL \
         ORDER BY a.subject, a.lane_seq",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 60);
    let mut previous: Option<(&str, Uuid)> = None;
    for (subject, id, seq, after) in &rows {
        match previous {
            Some((lane, before)) if lane == subject.as_str() => {
                assert_eq!(*after, Some(before), "{subject} #{seq}");
            }
            _ => {
                assert_eq!((*seq, *after), (1, None), "{subject} starts at 1, due");
            }
        }
        previous = Some((subject.as_str(), *id));
    }
    let lanes: Vec<(String, i64, Uuid)> =
        sqlx::query_as("SELECT ordering_key, last_seq, tail_alert FROM alert_lanes ORDER BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    for (key, last_seq, tail) in &lanes {
        let members: Vec<_> = rows.iter().filter(|r| &r.0 == key).collect();
        assert_eq!(*last_seq, members.len() as i64, "{key}");
        assert_eq!(Some(*tail), members.last().map(|r| r.1), "{key}");
        for (n, member) in members.iter().enumerate() {
            assert_eq!(member.2, n as i64 + 1, "{key}: positions without gaps");
        }
    }
}

/// A completion of attempt 1 of `claim` that settles it (`Some`) or requeues it.
fn sent(claim: &dispatch::ClaimedAlert, settle: Option<(Outcome, Option<&str>)>) -> Completion {
    let (outcome, next) = match settle {
        Some((outcome, reference)) => (
            if outcome == Outcome::Accepted {
                AttemptOutcome::Accepted
            } else {
                AttemptOutcome::Uncertain
            },
            Next::Settle {
                outcome,
                reference: reference.map(str::to_owned),
            },
        ),
        None => (
            AttemptOutcome::NotProcessed,
            Next::Requeue {
                status: LiveStatus::Pending,
                at: chrono::Utc::now(),
            },
        ),
    };
    Completion {
        alert_id: claim.alert_id,
        fencing_token: claim.fencing_token,
        worker: "w".to_owned(),
        attempt: Some(AttemptRecord {
            kind: AttemptKind::Send,
            attempt: claim.attempts,
            started_at: chrono::Utc::now(),
            outcome,
            http_status: Some(200),
            destination_reference: None,
            error_class: None,
            response_excerpt: None,
        }),
        next,
        line: format!("attempt {} ended {outcome}", claim.attempts),
        disable_destination: None,
        lane: None,
        chain_seen: claim.chain_seen(),
    }
}

/// The alert row's version (`xmin` changes with every write of the row) and its number
/// of `alert_events` rows.
async fn alert_row_and_events(db: &TestDb, id: Uuid) -> (String, i64) {
    sqlx::query_as(
        "SELECT a.xmin::text, (SELECT count(*) FROM alert_events e WHERE e.alert_id = a.id) \
         FROM alerts a WHERE a.id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// The outcome row of an alert: (outcome, reference), if it has one.
async fn outcome_row(db: &TestDb, id: Uuid) -> Option<(String, Option<String>)> {
    sqlx::query_as("SELECT outcome, destination_reference FROM alert_outcomes WHERE alert_id = $1")
        .bind(id)
        .fetch_optional(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_routine_delivery_writes_neither_the_alert_row_nor_an_event_yet_its_trail_reads_whole() {
    let db = TestDb::new().await;
    let claim = claimed_alerts(&db, 1).await.remove(0);
    let before = alert_row_and_events(&db, claim.alert_id).await;
    assert_eq!(before.1, 1, "the approval's line");

    let applied = dispatch::complete_batch(
        &db.pool,
        &[sent(&claim, Some((Outcome::Accepted, Some("ref-7"))))],
    )
    .await
    .unwrap();
    assert_eq!(applied, [true]);

    assert_eq!(
        alert_row_and_events(&db, claim.alert_id).await,
        before,
        "the wide alert row was not rewritten and no event row was added"
    );
    assert_eq!(
        outcome_row(&db, claim.alert_id).await,
        Some(("accepted".to_owned(), Some("ref-7".to_owned())))
    );
    let alert = crate::alerts::detail(&db.pool, None, claim.alert_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(alert.state, AlertState::Accepted);
    assert_eq!(alert.destination_reference.as_deref(), Some("ref-7"));
    assert!(alert.settled_at.is_some());
    let trail: Vec<_> = alert
        .evidence
        .iter()
        .map(|e| {
            (
                e.from_state,
                e.to_state,
                e.attempt,
                e.actor.as_str(),
                e.line.as_str(),
            )
        })
        .collect();
    assert_eq!(
        trail,
        [
            (
                None,
                AlertState::Pending,
                None,
                "test",
                "alert approved for destination `ops`; queued for delivery"
            ),
            (
                Some(AlertState::Sending),
                AlertState::Accepted,
                Some(1),
                "dispatcher:w",
                "attempt 1 ended accepted"
            ),
        ]
    );
}

#[tokio::test]
async fn replay_deletes_the_outcome_and_the_redelivery_writes_it_again() {
    let db = TestDb::new().await;
    let claim = claimed_alerts(&db, 1).await.remove(0);
    dispatch::complete_batch(&db.pool, &[sent(&claim, Some((Outcome::Held, None)))])
        .await
        .unwrap();
    assert_eq!(
        outcome_row(&db, claim.alert_id).await,
        Some(("held".to_owned(), None))
    );

    let mut tx = db.pool.begin().await.unwrap();
    replay(&mut tx, claim.alert_id, "alice", "checked")
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(outcome_row(&db, claim.alert_id).await, None, "live again");
    assert_eq!(
        crate::alerts::current_state(&db.pool, claim.alert_id)
            .await
            .unwrap(),
        AlertState::Pending
    );

    let again = dispatch::claim(&db.pool, "w", 10, Duration::from_secs(60), &[])
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempts, 2, "attempt numbers go on");
    dispatch::complete_batch(
        &db.pool,
        &[sent(&again[0], Some((Outcome::Accepted, Some("ref-2"))))],
    )
    .await
    .unwrap();
    assert_eq!(
        outcome_row(&db, claim.alert_id).await,
        Some(("accepted".to_owned(), Some("ref-2".to_owned())))
    );
    let lines: Vec<String> = evidence_trail(&db.pool, claim.alert_id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| format!("{} {}", e.to_state, e.line))
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(lines[1], "held attempt 1 ended uncertain");
    assert!(
        lines[2].starts_with("pending replayed by alice"),
        "{lines:?}"
    );
    assert_eq!(lines[3], "accepted attempt 2 ended accepted");
}

#[tokio::test]
async fn resolving_a_held_alert_as_accepted_records_the_operators_reference() {
    let db = TestDb::new().await;
    let claimed = claimed_alerts(&db, 2).await;
    dispatch::complete_batch(
        &db.pool,
        &[
            sent(&claimed[0], Some((Outcome::Held, None))),
            sent(&claimed[1], Some((Outcome::Held, None))),
        ],
    )
    .await
    .unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let accepted = Resolution::Accepted {
        reference: "INV-9".to_owned(),
    };
    resolve(&mut tx, claimed[0].alert_id, &accepted, "alice", "portal")
        .await
        .unwrap();
    resolve(
        &mut tx,
        claimed[1].alert_id,
        &Resolution::Abandon,
        "alice",
        "gone",
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        outcome_row(&db, claimed[0].alert_id).await,
        Some(("accepted".to_owned(), Some("INV-9".to_owned())))
    );
    assert_eq!(
        outcome_row(&db, claimed[1].alert_id).await,
        Some(("failed".to_owned(), None))
    );
    let alert = crate::alerts::detail(&db.pool, None, claimed[0].alert_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(alert.state, AlertState::Accepted);
    assert_eq!(alert.destination_reference.as_deref(), Some("INV-9"));
    // Refused once accepted, naming the reference it keeps.
    let mut tx = db.pool.begin().await.unwrap();
    let refused = replay(&mut tx, claimed[0].alert_id, "alice", "again")
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("reference INV-9"), "{refused}");
}

#[tokio::test]
async fn the_state_view_and_the_readers_joins_agree() {
    let db = TestDb::new().await;
    let claimed = claimed_alerts(&db, 3).await;
    dispatch::complete_batch(
        &db.pool,
        &[
            sent(&claimed[0], Some((Outcome::Accepted, None))),
            sent(&claimed[1], None),
        ],
    )
    .await
    .unwrap();
    let by_view: Vec<(Uuid, String)> =
        sqlx::query_as("SELECT alert_id, state FROM alert_states ORDER BY alert_id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let by_joins: Vec<(Uuid, String)> = sqlx::query_as(&format!(
        "SELECT a.id, {STATE} FROM alerts a {STATE_JOINS} ORDER BY a.id"
    ))
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(by_view, by_joins);
    // STATE is the live status, else OUTCOME (which it spells out in place: a constant
    // cannot be built from another).
    let by_parts: Vec<(Uuid, String)> = sqlx::query_as(&format!(
        "SELECT a.id, COALESCE(o.status, {OUTCOME}) FROM alerts a {STATE_JOINS} ORDER BY a.id"
    ))
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(by_view, by_parts);
    let states: BTreeSet<&str> = by_view.iter().map(|(_, s)| s.as_str()).collect();
    assert_eq!(states, BTreeSet::from(["accepted", "pending", "sending"]));
}

/// What a row left behind in the tables: (outbox status, where it came to rest, attempt
/// rows).
async fn left_behind(db: &TestDb, id: Uuid) -> (Option<String>, Option<String>, i64) {
    sqlx::query_as(&format!(
        "SELECT o.status, {OUTCOME}, \
                (SELECT count(*) FROM delivery_attempts WHERE alert_id = a.id) \
         FROM alerts a {STATE_JOINS} WHERE a.id = $1"
    ))
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// The batch completion's fence is its own DELETE or UPDATE of the outbox row, matched by
/// fencing token: a completion that meets the row while another transaction is taking
/// the claim over (as the lease sweep does) waits for it, checks the token again on the
/// row's newest version, and then writes nothing at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_that_waits_on_a_takeover_writes_nothing() {
    let db = TestDb::new().await;
    let claimed = claimed_alerts(&db, 2).await;
    // One settles, one requeues (what `sent` builds for `Some` and `None`).
    for (claim, settle) in claimed.iter().zip([Some((Outcome::Accepted, None)), None]) {
        // The takeover: the row goes back to `uncertain` with its claim cleared, and is
        // held uncommitted while the completion runs.
        let mut takeover = db.pool.begin().await.unwrap();
        sqlx::query(&format!(
            "UPDATE outbox SET {} WHERE alert_id = $1",
            requeue_assignments("'uncertain'", "now()")
        ))
        .bind(claim.alert_id)
        .execute(&mut *takeover)
        .await
        .unwrap();

        let pool = db.pool.clone();
        let done = sent(claim, settle);
        let completion =
            tokio::spawn(async move { dispatch::complete_batch(&pool, &[done]).await });
        // The completion must be waiting on the row's lock before the takeover commits.
        db.until_a_statement_waits_for_a_lock("removed AS (").await;
        takeover.commit().await.unwrap();

        let applied = completion.await.unwrap().unwrap();
        assert_eq!(applied, [false], "the claim had been taken over");
        assert_eq!(
            left_behind(&db, claim.alert_id).await,
            (Some("uncertain".to_owned()), None, 0),
            "the takeover's row stands, with no outcome and no attempt row"
        );
    }
}

/// A stale completion and the current one of the same alert in one batch: only the
/// current claim's is applied, and the alert settles once.
#[tokio::test]
async fn in_one_batch_only_the_current_claims_completion_applies() {
    let db = TestDb::new().await;
    let claim = claimed_alerts(&db, 1).await.remove(0);
    let mut stale = claim.clone();
    stale.fencing_token -= 1;
    let applied = dispatch::complete_batch(
        &db.pool,
        &[
            sent(&stale, Some((Outcome::Accepted, None))),
            sent(&claim, Some((Outcome::Accepted, None))),
        ],
    )
    .await
    .unwrap();
    assert_eq!(applied, [false, true]);
    assert_eq!(
        left_behind(&db, claim.alert_id).await,
        (None, Some("accepted".to_owned()), 1)
    );
}
