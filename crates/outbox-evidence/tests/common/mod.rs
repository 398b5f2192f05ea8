//! What the evidence crate's tests start from: a tenant with one destination, and
//! alerts approved to it.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use outbox_store::destinations::NewDestination;
use outbox_testkit::TestDb;
use std::time::Duration;
use uuid::Uuid;

/// Tenant `acme` with destination `ops` (a webhook nobody answers; at most 4 in flight).
pub async fn tenant_with_ops(db: &TestDb) -> Uuid {
    let tenant = outbox_store::tenants::create(&db.pool, "acme", "UTC", None)
        .await
        .unwrap();
    outbox_store::destinations::create(
        &db.pool,
        &NewDestination {
            timeout: Duration::from_secs(1),
            max_in_flight: 4,
            ..NewDestination::webhook(tenant, "ops", "http://127.0.0.1:9/hook")
        },
    )
    .await
    .unwrap();
    tenant
}

/// Approves an alert about `subject` for `tenant`'s `ops`.
pub async fn approve_to_ops(db: &TestDb, tenant: Uuid, subject: &str) {
    outbox_store::alerts::approve(
        &db.pool,
        outbox_store::alerts::Approval {
            tenant_id: tenant,
            destination: "ops",
            subject,
            occurrence: "2027-01-31/30d",
            payload_json: r#"{"n": 1}"#,
            actor: "test",
            ordering_key: None,
        },
    )
    .await
    .unwrap();
}
