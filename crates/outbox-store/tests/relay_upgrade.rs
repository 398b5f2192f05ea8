//! Upgrading a database whose email destinations kept their relay in `url` as
//! `smtp://host:port` (migration 20261217000021 moves it to `smtp_host` and `smtp_port`),
//! against a real PostgreSQL: each relay moves over (an IPv6 host without its brackets, a
//! relay without a port on 25), is listed as before and read as the dispatcher sends to
//! it; and the table now takes a relay only in its columns.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use outbox_core::{SmtpRelay, SmtpTls};
use outbox_store::destinations::{EmailSettings, Mailing, NewDestination};
use outbox_testkit::TestDb;
use uuid::Uuid;

/// The migration that moves the relay.
const RELAY_COLUMNS: i64 = 20261217000021;

/// What the earlier release wrote for an email destination `name` relaying to `url`.
async fn email_destination_before(db: &TestDb, tenant_id: Uuid, name: &str, url: &str) {
    sqlx::query(
        "INSERT INTO destinations (id, tenant_id, name, kind, url, smtp_tls, mail_from, mail_to) \
         VALUES ($1, $2, $3, 'email', $4, 'none', 'alerts@acme.example', \
                 ARRAY['ops@acme.example'])",
    )
    .bind(Uuid::now_v7())
    .bind(tenant_id)
    .bind(name)
    .bind(url)
    .execute(&db.pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn relays_kept_in_the_url_move_to_their_columns() {
    let db = TestDb::migrated_before(RELAY_COLUMNS).await;
    let tenant_id = outbox_store::tenants::create(&db.pool, "acme", "UTC", None)
        .await
        .unwrap();
    for (name, url) in [
        ("named", "smtp://relay.example.org:2525"),
        ("v4", "smtp://127.0.0.1:25"),
        ("v6", "smtp://[::1]:587"),
        ("no-port", "smtp://relay.example.org"),
    ] {
        email_destination_before(&db, tenant_id, name, url).await;
    }

    outbox_store::MIGRATOR.run(&db.pool).await.unwrap();

    let moved: Vec<(String, Option<String>, String, i32)> =
        sqlx::query_as("SELECT name, url, smtp_host, smtp_port FROM destinations ORDER BY name")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        moved,
        [
            ("named", None, "relay.example.org", 2525),
            ("no-port", None, "relay.example.org", 25),
            ("v4", None, "127.0.0.1", 25),
            ("v6", None, "::1", 587),
        ]
        .map(|(name, url, host, port)| (name.to_owned(), url, host.to_owned(), port))
    );
    let listed: Vec<(String, String)> = outbox_store::destinations::list(&db.pool, None)
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.name, d.url))
        .collect();
    assert_eq!(
        listed,
        [
            ("named", "smtp://relay.example.org:2525"),
            ("no-port", "smtp://relay.example.org:25"),
            ("v4", "smtp://127.0.0.1:25"),
            ("v6", "smtp://[::1]:587"),
        ]
        .map(|(name, url)| (name.to_owned(), url.to_owned()))
    );
}

#[tokio::test]
async fn a_relay_is_kept_in_its_columns_only() {
    let db = TestDb::new().await;
    let tenant_id = outbox_store::tenants::create(&db.pool, "acme", "UTC", None)
        .await
        .unwrap();
    let email = EmailSettings {
        relay: SmtpRelay::new("::1", 2525).unwrap(),
        smtp_tls: SmtpTls::None,
        smtp_username: None,
        smtp_password: None,
        smtp_ca_pem: None,
        mail: Mailing {
            from: "alerts@acme.example".to_owned(),
            to: vec!["ops@acme.example".to_owned()],
            locale: None,
        },
    };
    let id = outbox_store::destinations::create(
        &db.pool,
        &NewDestination::email(tenant_id, "mail", email),
    )
    .await
    .unwrap();
    let stored: (Option<String>, String, i32) =
        sqlx::query_as("SELECT url, smtp_host, smtp_port FROM destinations WHERE id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(stored, (None, "::1".to_owned(), 2525));

    // An email destination's URL, or a webhook without one, is refused.
    for refused in [
        "UPDATE destinations SET url = 'smtp://[::1]:2525' WHERE kind = 'email'",
        "INSERT INTO destinations (id, tenant_id, name) \
         VALUES (gen_random_uuid(), (SELECT id FROM tenants), 'no-url')",
        "INSERT INTO destinations (id, tenant_id, name, url, smtp_host, smtp_port) \
         VALUES (gen_random_uuid(), (SELECT id FROM tenants), 'relayed', \
                 'https://hooks.example/x', 'relay.example.org', 25)",
    ] {
        let err = sqlx::query(refused).execute(&db.pool).await.unwrap_err();
        assert!(
            err.to_string().contains("destinations_kind_shape"),
            "{refused}: {err}"
        );
    }
}
