//! Alerts as the tests make and read them through the store: approvals (one, many, the
//! renewal the email tests send), and each alert's state, evidence and reference.

use outbox_testkit::TestDb;
use serde_json::json;

/// A contract renewal's payload, due in 30 days (contract A-17 of Acme Tools, 15 January 2027).
pub const RENEWAL: &str = r#"{"kind": "contract_renewal", "contract": "A-17", "vendor": "Acme Tools", "amount": 12000.00, "currency": "EUR", "renewal_date": "2027-01-15", "action_date": "2026-12-16", "days_remaining": 30, "tier": 30}"#;

/// Approves one new alert straight through the store's write path, as actor `test`.
pub async fn approve_one(
    db: &TestDb,
    tenant_id: uuid::Uuid,
    destination: &str,
    subject: &str,
    occurrence: &str,
    payload_json: &str,
) -> uuid::Uuid {
    let approval = outbox_store::alerts::Approval {
        tenant_id,
        destination,
        subject,
        occurrence,
        payload_json,
        actor: "test",
        ordering_key: None,
    };
    match outbox_store::alerts::approve(&db.pool, approval)
        .await
        .unwrap()
    {
        outbox_store::alerts::ApproveOutcome::Created(id) => id,
        other => panic!("expected a new alert, got {other:?}"),
    }
}

/// Approves the [`RENEWAL`] of contract `subject` for tenant `acme`'s `destination`.
pub async fn approve_renewal(db: &TestDb, destination: &str, subject: &str) -> uuid::Uuid {
    let tenant = outbox_store::tenants::find(&db.pool, "acme").await.unwrap();
    approve_one(
        db,
        tenant.id,
        destination,
        subject,
        "2027-01-15/30d",
        RENEWAL,
    )
    .await
}

/// Approves `n` alerts for `destination` straight through the store's write path.
pub async fn approve_many(
    db: &TestDb,
    tenant_id: uuid::Uuid,
    destination: &str,
    n: usize,
) -> Vec<uuid::Uuid> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let payload = json!({"alert": i, "text": "renewal due"}).to_string();
        let subject = format!("contract:A-{i}");
        ids.push(
            approve_one(
                db,
                tenant_id,
                destination,
                &subject,
                "2027-01-31/30d",
                &payload,
            )
            .await,
        );
    }
    ids
}

/// The state of every alert, counted.
pub async fn states(db: &TestDb) -> std::collections::BTreeMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>("SELECT state, count(*) FROM alert_states GROUP BY state")
        .fetch_all(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

/// One alert's evidence lines, as its trail shows them.
pub async fn evidence(db: &TestDb, alert_id: uuid::Uuid) -> Vec<String> {
    evidence_by(db, alert_id)
        .await
        .into_iter()
        .map(|(_, line)| line)
        .collect()
}

/// One alert's evidence trail: (actor, line), oldest first.
pub async fn evidence_by(db: &TestDb, alert_id: uuid::Uuid) -> Vec<(String, String)> {
    outbox_store::lifecycle::evidence_trail(&db.pool, alert_id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.actor, e.line))
        .collect()
}

/// One alert's state.
pub async fn state_of(db: &TestDb, id: uuid::Uuid) -> String {
    sqlx::query_scalar("SELECT state FROM alert_states WHERE alert_id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Rows of the outbox in `status` (`pending`, `sending` or `uncertain`).
pub async fn outbox_rows_in(db: &TestDb, status: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox WHERE status = $1")
        .bind(status)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// The reference the destination gave an alert's delivery, if any.
pub async fn reference_of(db: &TestDb, id: uuid::Uuid) -> Option<String> {
    sqlx::query_scalar("SELECT destination_reference FROM alert_states WHERE alert_id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}
