//! Approvals written as a group, against a real PostgreSQL: each is answered as it would
//! be alone (created, existing, conflict, unknown destination), what the group wrote is
//! what single approvals write, a lane's approval keeps its place, one bad approval costs
//! the others nothing, and approvals that arrive together share one commit.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use outbox_core::{CheckedPayload, OnHeadFailed, Ordering};
use outbox_store::alerts::{self, ApprovalGroups, Approved, CheckedApproval};
use outbox_store::destinations::NewDestination;
use outbox_store::lanes::OrderingSettings;
use outbox_store::StoreError;
use outbox_testkit::TestDb;
use std::time::Duration;
use uuid::Uuid;

/// Tenant `acme` with destinations `ops` (unordered) and `lanes` (ordered per key), and
/// tenant `beta` with its own `ops`.
async fn tenants(db: &TestDb) -> (Uuid, Uuid) {
    let mut ids = Vec::new();
    for (tenant, destinations) in [("acme", &["ops", "lanes"][..]), ("beta", &["ops"][..])] {
        let tenant_id = outbox_store::tenants::create(&db.pool, tenant, "UTC", None)
            .await
            .unwrap();
        for name in destinations {
            let ordering = if *name == "lanes" {
                Ordering::PerKey
            } else {
                Ordering::None
            };
            outbox_store::destinations::create(
                &db.pool,
                &NewDestination {
                    timeout: Duration::from_secs(1),
                    max_in_flight: 100,
                    ordering: OrderingSettings {
                        ordering,
                        on_head_failed: OnHeadFailed::Block,
                    },
                    ..NewDestination::webhook(tenant_id, name, "http://127.0.0.1:9/hook")
                },
            )
            .await
            .unwrap();
        }
        ids.push(tenant_id);
    }
    (ids[0], ids[1])
}

fn approval<'a>(
    tenant_id: Uuid,
    destination: &'a str,
    subject: &'a str,
    payload: &'a str,
) -> CheckedApproval<'a> {
    CheckedApproval {
        tenant_id,
        destination,
        subject,
        occurrence: "2027-01-31/30d",
        payload: CheckedPayload::check(payload).unwrap(),
        actor: "api-token:test",
        ordering_key: None,
        notify_dispatchers: false,
        trace: None,
    }
}

fn created(answer: &Result<Approved, StoreError>) -> &alerts::AlertDetail {
    match answer {
        Ok(Approved::Created(alert)) => alert,
        other => panic!("expected a new alert, got {other:?}"),
    }
}

/// Approves each of `approvals` through `groups`, all at once: each in a task of its
/// own, spawned before any runs. On a test's single-threaded runtime the tasks run in
/// the order spawned, so all are queued before the writer the first one starts.
async fn approve_together(
    groups: &ApprovalGroups,
    approvals: &[CheckedApproval<'_>],
) -> Vec<Result<Approved, StoreError>> {
    let tasks: Vec<_> = approvals
        .iter()
        .map(|a| {
            let (groups, held) = (groups.clone(), Owned::of(a));
            tokio::spawn(async move { groups.approve(held.as_approval()).await })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

/// What a spawned task needs of a [`CheckedApproval`], owned.
struct Owned {
    tenant_id: Uuid,
    destination: String,
    subject: String,
    payload: String,
    ordering_key: Option<String>,
}

impl Owned {
    fn of(a: &CheckedApproval<'_>) -> Self {
        Owned {
            tenant_id: a.tenant_id,
            destination: a.destination.to_owned(),
            subject: a.subject.to_owned(),
            payload: a.payload.as_str().to_owned(),
            ordering_key: a.ordering_key.map(str::to_owned),
        }
    }

    fn as_approval(&self) -> CheckedApproval<'_> {
        CheckedApproval {
            ordering_key: self.ordering_key.as_deref(),
            ..approval(
                self.tenant_id,
                &self.destination,
                &self.subject,
                &self.payload,
            )
        }
    }
}

/// The transaction that inserted each alert.
async fn inserting_transactions(db: &TestDb, ids: &[Uuid]) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT a.xmin::text FROM unnest($1::uuid[]) WITH ORDINALITY AS i(id, n) \
         JOIN alerts a ON a.id = i.id ORDER BY i.n",
    )
    .bind(ids)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_group_answers_each_approval_as_it_would_be_answered_alone() {
    let db = TestDb::new().await;
    let (acme, beta) = tenants(&db).await;
    let first = created(
        &alerts::approve_checked(&db.pool, approval(acme, "ops", "contract:x", r#"{"n": 1}"#))
            .await,
    )
    .clone();

    let group = [
        approval(acme, "ops", "contract:new", r#"{"n": 2}"#),
        approval(acme, "ops", "contract:x", r#"{"n": 1}"#),
        approval(acme, "ops", "contract:x", r#"{"n": 99}"#),
        approval(acme, "nowhere", "contract:y", r#"{"n": 3}"#),
        approval(acme, "lanes", "contract:z", r#"{"n": 4}"#),
        approval(beta, "ops", "contract:new", r#"{"n": 2}"#),
        approval(acme, "ops", "contract:twice", r#"{"n": 5}"#),
        approval(acme, "ops", "contract:twice", r#"{"n": 5}"#),
        approval(acme, "ops", "contract:clash", r#"{"n": 6}"#),
        approval(acme, "ops", "contract:clash", r#"{"n": 7}"#),
    ];
    let answers = alerts::approve_group(&db.pool, &group).await.unwrap();
    assert_eq!(answers.len(), group.len());

    let new = created(&answers[0]);
    assert_eq!(
        (new.tenant.as_str(), new.subject.as_str(), new.revision),
        ("acme", "contract:new", 0)
    );
    assert_eq!(new.payload.get(), r#"{"n": 2}"#);
    assert_eq!(new.evidence.len(), 1);
    assert_eq!(
        new.evidence[0].line,
        "alert approved for destination `ops`; queued for delivery"
    );
    assert!(new.next_attempt_at.is_some());
    assert!(matches!(answers[1], Ok(Approved::Existing(id)) if id == first.id));
    assert!(
        matches!(answers[2], Ok(Approved::Conflict { original, latest })
            if original == first.id && latest == first.id),
        "{:?}",
        answers[2]
    );
    assert!(
        matches!(&answers[3], Err(StoreError::UnknownDestination(name)) if name == "nowhere"),
        "{:?}",
        answers[3]
    );
    let in_lane = created(&answers[4]);
    let other_tenant = created(&answers[5]);
    assert_eq!(other_tenant.tenant, "beta");
    let twice = created(&answers[6]);
    assert!(matches!(answers[7], Ok(Approved::Existing(id)) if id == twice.id));
    let clash = created(&answers[8]);
    assert!(
        matches!(answers[9], Ok(Approved::Conflict { original, latest })
            if original == clash.id && latest == clash.id),
        "{:?}",
        answers[9]
    );

    // Read back: one alert, one pending outbox row and one evidence line per alert created,
    // and nothing for the others.
    assert_eq!(db.count("alerts").await, 6);
    assert_eq!(db.count("outbox").await, 6);
    assert_eq!(db.count("alert_events").await, 6);
    // Each live row carries its first line's hash as its chain head, as a single
    // approval's does.
    let unlinked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox o JOIN alert_events e ON e.alert_id = o.alert_id \
         WHERE o.chain_head IS DISTINCT FROM e.entry_hash OR o.status <> 'pending'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(unlinked, 0);
    // The lane's alert has its place (the first of its lane); the others have none.
    let lane_seqs: Vec<(Uuid, Option<i64>)> =
        sqlx::query_as("SELECT id, lane_seq FROM alerts WHERE lane_seq IS NOT NULL")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(lane_seqs, vec![(in_lane.id, Some(1))]);
    // The group's alerts were committed together, the lane's among them: a place in a
    // lane is taken by the group's statement as by a single approval's.
    let grouped = inserting_transactions(
        &db,
        &[new.id, other_tenant.id, twice.id, clash.id, in_lane.id],
    )
    .await;
    assert!(grouped.iter().all(|xid| *xid == grouped[0]), "{grouped:?}");
}

#[tokio::test]
async fn one_approval_the_database_refuses_costs_the_others_nothing() {
    let db = TestDb::new().await;
    let (acme, _) = tenants(&db).await;
    // An ordering key past the column's limit: the API refuses it before writing, so only
    // the database's CHECK stops it here, and it fails the group's statement whole.
    let too_long = "k".repeat(201);
    let mut bad = approval(acme, "ops", "contract:bad", r#"{"n": 0}"#);
    bad.ordering_key = Some(&too_long);
    let group = [
        approval(acme, "ops", "contract:a", r#"{"n": 1}"#),
        bad,
        approval(acme, "ops", "contract:b", r#"{"n": 2}"#),
    ];
    let groups = ApprovalGroups::new(db.pool.clone());
    let answers = approve_together(&groups, &group).await;

    created(&answers[0]);
    assert!(
        matches!(&answers[1], Err(StoreError::Database(_))),
        "{:?}",
        answers[1]
    );
    created(&answers[2]);
    let subjects: Vec<String> = sqlx::query_scalar("SELECT subject FROM alerts ORDER BY subject")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(subjects, ["contract:a", "contract:b"]);
    assert_eq!(db.count("outbox").await, 2);
}

/// Every approval is queued before a writer runs (see [`approve_together`]), so the first
/// writer finds them all waiting: one group, one transaction.
#[tokio::test]
async fn approvals_that_arrive_together_share_one_commit() {
    let db = TestDb::new().await;
    let (acme, _) = tenants(&db).await;
    let subjects: Vec<String> = (0..24).map(|i| format!("contract:{i}")).collect();
    let groups = ApprovalGroups::new(db.pool.clone());
    let together: Vec<CheckedApproval<'_>> = subjects
        .iter()
        .map(|subject| approval(acme, "ops", subject, r#"{"n": 1}"#))
        .collect();
    let answers = approve_together(&groups, &together).await;
    let ids: Vec<Uuid> = answers.iter().map(|answer| created(answer).id).collect();

    assert_eq!(db.count("alerts").await, 24);
    assert_eq!(db.count("outbox").await, 24);
    assert_eq!(db.count("alert_events").await, 24);
    let transactions = inserting_transactions(&db, &ids).await;
    assert_eq!(transactions.len(), 24);
    assert!(
        transactions.iter().all(|xid| *xid == transactions[0]),
        "{transactions:?}"
    );

    // Alone, an approval is written at once, a group of one.
    let alone = groups
        .approve(approval(acme, "ops", "contract:alone", r#"{"n": 1}"#))
        .await;
    let alone = created(&alone).id;
    assert_ne!(
        inserting_transactions(&db, &[alone]).await[0],
        transactions[0]
    );
}

#[tokio::test]
async fn with_the_database_away_each_approval_of_a_group_is_told_so() {
    let db = TestDb::new().await;
    let (acme, _) = tenants(&db).await;
    let pool = outbox_store::connect(&db.url, "approval-groups-test", 2)
        .await
        .unwrap();
    let groups = ApprovalGroups::new(pool.clone());
    pool.close().await;
    let group = [
        approval(acme, "ops", "contract:a", r#"{"n": 1}"#),
        approval(acme, "ops", "contract:b", r#"{"n": 2}"#),
        approval(acme, "ops", "contract:c", r#"{"n": 3}"#),
    ];
    let answers = approve_together(&groups, &group).await;
    for answer in &answers {
        assert!(
            matches!(answer, Err(err) if err.is_unavailable()),
            "{answer:?}"
        );
    }
    assert_eq!(db.count("alerts").await, 0);
}
