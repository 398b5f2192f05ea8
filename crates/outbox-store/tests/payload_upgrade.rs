//! Upgrading a database whose payloads were stored as `jsonb` (migration
//! 20261215000001 keeps each as the text every attempt sends), against a real PostgreSQL:
//! an alert approved before the upgrade keeps the bytes it was fingerprinted by, its
//! evidence chain still starts where it started, a claim after the upgrade sends those
//! bytes, and the column still takes only JSON objects.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use outbox_testkit::TestDb;
use std::time::Duration;
use uuid::Uuid;

/// The migration that changes the column.
const PAYLOAD_AS_TEXT: i64 = 20261215000001;

/// Tenant `acme` and its destination `ops`, written as the earlier release's schema takes
/// them (the store's insert names columns later migrations add).
async fn acme_ops(db: &TestDb) -> (Uuid, Uuid) {
    let tenant_id = outbox_store::tenants::create(&db.pool, "acme", "UTC", None)
        .await
        .unwrap();
    let destination_id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO destinations (id, tenant_id, name, url, timeout_ms, max_in_flight) \
         VALUES ($1, $2, 'ops', 'http://127.0.0.1:9/hook', 1000, 100)",
    )
    .bind(destination_id)
    .bind(tenant_id)
    .execute(&db.pool)
    .await
    .unwrap();
    (tenant_id, destination_id)
}

#[tokio::test]
async fn an_alert_approved_before_the_upgrade_sends_the_bytes_it_was_fingerprinted_by() {
    let db = TestDb::migrated_before(PAYLOAD_AS_TEXT).await;
    let (tenant_id, destination_id) = acme_ops(&db).await;

    // What the earlier release wrote: the payload as `jsonb` (members out of order, with
    // spacing and a non-ASCII letter, as an agent may send them), fingerprinted by its text
    // form, and the alert's pending outbox row.
    let alert_id = Uuid::now_v7();
    let given = r#"{"b":{"c":"é"},   "a":[1,2.50]}"#;
    let genesis_before: Vec<u8> = sqlx::query_scalar(
        "WITH inserted AS ( \
             INSERT INTO alerts (id, tenant_id, subject, occurrence, destination_id, revision, \
                                 payload, payload_sha256, created_by) \
             VALUES ($1, $2, 'contract:ACME-7', '2027-01-31/30d', $3, 0, $4::jsonb, \
                     sha256(convert_to($4::jsonb::text, 'UTF8')), 'test') \
             RETURNING evidence_genesis(alerts) AS genesis \
         ), queued AS ( \
             INSERT INTO outbox (alert_id, destination_id) SELECT $1, $3 FROM inserted \
         ) \
         SELECT genesis FROM inserted",
    )
    .bind(alert_id)
    .bind(tenant_id)
    .bind(destination_id)
    .bind(given)
    .fetch_one(&db.pool)
    .await
    .unwrap();

    outbox_store::MIGRATOR.run(&db.pool).await.unwrap();

    let (column_type, stored, fingerprint_holds, genesis_after): (String, String, bool, Vec<u8>) =
        sqlx::query_as(
            "SELECT pg_typeof(a.payload)::text, a.payload, \
                    a.payload_sha256 = sha256(convert_to(a.payload, 'UTF8')), \
                    evidence_genesis(a) \
             FROM alerts a WHERE a.id = $1",
        )
        .bind(alert_id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(column_type, "text");
    // `jsonb`'s own rendering: members ordered by length then bytes, one space after each
    // separator, the number as written.
    assert_eq!(stored, r#"{"a": [1, 2.50], "b": {"c": "é"}}"#);
    assert!(fingerprint_holds, "the fingerprint is of the bytes stored");
    assert_eq!(
        genesis_after, genesis_before,
        "the evidence chain starts where it did"
    );

    let claimed = outbox_store::dispatch::claim(&db.pool, "w", 10, Duration::from_secs(30), &[])
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].payload, stored);
}

#[tokio::test]
async fn the_payload_column_takes_only_json_objects() {
    let db = TestDb::new().await;
    let (tenant_id, destination_id) = acme_ops(&db).await;
    for (payload, takes) in [
        (r#"{"amount": 1}"#, true),
        ("{}", true),
        ("[1, 2]", false),
        (r#""text""#, false),
        ("{not json", false),
        ("", false),
    ] {
        let written = sqlx::query(
            "INSERT INTO alerts (id, tenant_id, subject, occurrence, destination_id, revision, \
                                 payload, payload_sha256, created_by) \
             VALUES ($1, $2, 's', $3, $4, 0, $5, sha256(convert_to($5, 'UTF8')), 'test')",
        )
        .bind(Uuid::now_v7())
        .bind(tenant_id)
        .bind(Uuid::new_v4().to_string())
        .bind(destination_id)
        .bind(payload)
        .execute(&db.pool)
        .await;
        match written {
            Ok(_) => assert!(takes, "{payload:?} was stored"),
            Err(err) => {
                assert!(!takes, "{payload:?} was refused: {err}");
                let constraint = err
                    .as_database_error()
                    .and_then(|e| e.constraint())
                    .map(str::to_owned);
                // Either the check, or (for text that is not JSON at all) the parse the
                // check runs.
                assert!(
                    constraint.as_deref() == Some("alerts_payload_check")
                        || err
                            .to_string()
                            .contains("invalid input syntax for type json"),
                    "{payload:?}: {err}"
                );
            }
        }
    }
}
