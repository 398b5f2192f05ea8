//! `outboxctl` as operators and scripts use it: the real binary against a real database.
//! Creating commands print only the id or token on stdout; bad input exits non-zero with
//! a one-line reason and writes nothing.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::assert_contains;
use common::destinations::DestinationAdd;
use common::{assert_refused, outboxctl, outboxctl_ok};
use common::{renewal, Api};
use outbox_testkit::TestDb;
use serde_json::Value;

#[tokio::test]
async fn setting_up_a_tenant_prints_only_what_scripts_capture() {
    let db = TestDb::new().await;
    let migrate = outboxctl_ok(&db, &["migrate"]).await;
    assert!(migrate.stdout.is_empty());

    let tenant = outboxctl_ok(&db, &["tenant", "create", "acme"]).await;
    let tenant_id: uuid::Uuid = tenant.stdout.trim().parse().expect("stdout is the id");
    let stored: String = sqlx::query_scalar("SELECT name FROM tenants WHERE id = $1")
        .bind(tenant_id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(stored, "acme");

    let token = outboxctl_ok(&db, &["token", "create", "--tenant", "acme"]).await;
    let token = token.stdout.trim().to_owned();
    assert!(token.starts_with("aot_"));
    // Only the hash is stored: the token's text appears nowhere in the table.
    let hashes: Vec<Vec<u8>> = sqlx::query_scalar("SELECT token_hash FROM api_tokens")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(hashes.len(), 1);
    assert_eq!(
        hashes[0],
        outbox_core::ApiToken::parse(&token).unwrap().hash().0
    );
    let plain: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM api_tokens WHERE position(convert_to($1, 'UTF8') IN token_hash) > 0",
    )
    .bind(&token)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(plain, 0);

    let destination = DestinationAdd::webhook("ops", "http://127.0.0.1:9000/hook")
        .args(&["--secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])
        .args(&["--idempotency-header", "Idempotency-Key"])
        .args(&["--idempotency-retention", "24h"])
        .args(&["--lookup-url", "http://127.0.0.1:9000/requests/{key}"])
        .args(&[
            "--on-uncertain",
            "retry",
            "--timeout",
            "5s",
            "--max-in-flight",
            "8",
        ])
        // The URLs are on loopback, which only an explicit allow-list opens.
        .loopback_allowed()
        .add(&db)
        .await;
    let destination_id: uuid::Uuid = destination.stdout.trim().parse().unwrap();
    let row: (String, f64, String, i32, i32, i32) = sqlx::query_as(
        "SELECT on_uncertain, extract(epoch FROM idempotency_retention)::float8, \
                lookup_url_template, timeout_ms, max_in_flight, cardinality(signing_secrets) \
         FROM destinations WHERE id = $1",
    )
    .bind(destination_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        row,
        (
            "retry".into(),
            86_400.0,
            "http://127.0.0.1:9000/requests/{key}".into(),
            5000,
            8,
            1
        )
    );

    let list = outboxctl(&db, &["destination", "list"]).await;
    assert!(list.ok);
    let lines: Vec<&str> = list.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", list.stdout);
    assert!(lines[0].starts_with("TENANT"));
    assert!(lines[1].contains("ops") && lines[1].contains("Idempotency-Key for 1day"));
    assert!(!list.stdout.contains("whsec_"), "secrets are never printed");

    let json = outboxctl(&db, &["destination", "list", "--json"]).await;
    let listed: Value = serde_json::from_str(json.stdout.trim()).unwrap();
    assert_eq!(listed["name"], "ops");
    assert_eq!(listed["on_uncertain"], "retry");
    assert_eq!(listed["signing_secret_count"], 1);
}

#[tokio::test]
async fn bad_setup_input_is_refused_in_one_line_and_writes_nothing() {
    let db = TestDb::new().await;
    assert!(outboxctl(&db, &["tenant", "create", "acme"]).await.ok);

    assert_refused(
        &outboxctl(&db, &["tenant", "create", "acme"]).await,
        "already exists",
    );
    assert_refused(
        &outboxctl(&db, &["tenant", "create", "  "]).await,
        "tenant name",
    );
    assert_refused(
        &outboxctl(&db, &["token", "create", "--tenant", "globex"]).await,
        "no tenant `globex`",
    );

    let add = |extra: &'static [&'static str]| {
        let mut args = vec!["destination", "add", "--tenant", "acme", "--name", "ops"];
        args.extend_from_slice(extra);
        args
    };
    let cases: [(&[&str], &str); 8] = [
        (&["--url", "ftp://example.com/x"], "http:// or https://"),
        (&["--url", "not a url"], "is not a URL"),
        (&["--url", "http://h/x", "--secret", "secret"], "whsec_"),
        (
            &["--url", "http://h/x", "--lookup-url", "http://h/lookup"],
            "{key}",
        ),
        (&["--url", "http://h/x", "--timeout", "1h"], "at most 300s"),
        (
            &["--url", "http://h/x", "--idempotency-header", "Bad Header"],
            "header name",
        ),
        (
            &["--url", "http://h/x", "--on-uncertain", "maybe"],
            "on-uncertain",
        ),
        (
            &["--url", "http://h/x", "--idempotency-retention", "soon"],
            "invalid duration",
        ),
    ];
    for (extra, needle) in cases {
        let run = outboxctl(&db, &add(extra)).await;
        assert!(!run.ok, "{extra:?} should fail");
        assert!(
            run.stderr.contains(needle),
            "{extra:?}: `{needle}` not in {}",
            run.stderr
        );
    }
    assert_eq!(db.count("destinations").await, 0);

    assert!(outboxctl(&db, &add(&["--url", "http://h/x"])).await.ok);
    assert_refused(
        &outboxctl(&db, &add(&["--url", "http://h/y"])).await,
        "already exists",
    );
    assert_eq!(db.count("destinations").await, 1);
}

#[tokio::test]
async fn alert_show_and_outbox_list_tell_the_story() {
    let api = Api::start().await;
    let (_, created) = api.approve(&api.acme.token, &renewal(9)).await;
    let id = created["id"].as_str().unwrap();

    let show = outboxctl_ok(&api.db, &["alert", "show", id]).await;
    assert!(show
        .stdout
        .starts_with(&format!("alert {id}  (revision 0)")));
    assert!(show.stdout.contains("state        pending"));
    assert!(show.stdout.contains("subject      contract:C-9"));
    assert!(show.stdout.contains("alert approved for destination `ops`"));

    let json = outboxctl(&api.db, &["alert", "show", id, "--json"]).await;
    let alert: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(alert["id"], id);
    assert_eq!(alert["evidence"].as_array().unwrap().len(), 1);

    let unknown = uuid::Uuid::now_v7().to_string();
    assert_refused(
        &outboxctl(&api.db, &["alert", "show", &unknown]).await,
        "no alert",
    );
    assert_refused(
        &outboxctl(&api.db, &["alert", "show", "17"]).await,
        "not an alert id",
    );

    let list = outboxctl_ok(&api.db, &["outbox", "list"]).await;
    let lines: Vec<&str> = list.stdout.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].starts_with("ID") && lines[0].contains("LAST EVIDENCE"));
    assert!(lines[1].starts_with(id) && lines[1].contains("pending"));

    let json = outboxctl(&api.db, &["outbox", "list", "--json"]).await;
    let rows: Vec<Value> = json
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["id"], id);
    assert_eq!(rows[0]["state"], "pending");

    let held = outboxctl(&api.db, &["outbox", "list", "--status", "held", "--json"]).await;
    assert!(held.ok);
    assert!(held.stdout.is_empty());
    let bad = outboxctl(&api.db, &["outbox", "list", "--status", "lost"]).await;
    assert!(!bad.ok);
    assert_contains(&bad.stderr, "unknown state `lost`");
}

#[tokio::test]
async fn the_in_flight_bound_defaults_by_what_can_settle_and_is_explained() {
    let db = TestDb::new().await;
    assert!(outboxctl(&db, &["tenant", "create", "acme"]).await.ok);
    let add = |name: &'static str, extra: &'static [&'static str]| {
        let webhook = DestinationAdd::webhook(name, "http://127.0.0.1:9000/hook");
        let add = webhook.loopback_allowed().args(extra);
        let db = &db;
        async move { add.add(db).await }
    };
    let plain = add("plain", &[]).await;
    assert_contains(
        &plain.stderr,
        "in flight: at most 4 at once; a crash can leave at most 4 alerts uncertain here (held for an operator)",
    );
    add("dedup", &["--idempotency-retention", "24h"]).await;
    add(
        "lookup",
        &["--lookup-url", "http://127.0.0.1:9000/requests/{key}"],
    )
    .await;
    add(
        "chosen",
        &["--max-in-flight", "2", "--on-uncertain", "retry"],
    )
    .await;
    let bounds: Vec<(String, i32)> =
        sqlx::query_as("SELECT name, max_in_flight FROM destinations ORDER BY name")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        bounds,
        vec![
            ("chosen".into(), 2),
            ("dedup".into(), 16),
            ("lookup".into(), 16),
            ("plain".into(), 4)
        ]
    );

    let show = outboxctl_ok(&db, &["destination", "show", "chosen", "--tenant", "acme"]).await;
    assert_contains(
        &show.stdout,
        "max in flight:  2 (a crash can leave at most 2 alerts uncertain here (resent, possibly as duplicates))",
    );
    let json = outboxctl(
        &db,
        &[
            "destination",
            "show",
            "lookup",
            "--tenant",
            "acme",
            "--json",
        ],
    )
    .await;
    let shown: Value = serde_json::from_str(json.stdout.trim()).unwrap();
    assert_eq!(shown["max_in_flight"], 16);
    assert_eq!(
        shown["crash_bound"],
        "a crash can leave at most 16 alerts uncertain here (settled by a lookup)"
    );
    let list = outboxctl(&db, &["destination", "list"]).await;
    assert_contains(&list.stdout, "A CRASH LEAVES AT MOST");
    assert_contains(&list.stdout, "4 uncertain, held for an operator");

    assert_refused(
        &outboxctl(&db, &["destination", "show", "nope", "--tenant", "acme"]).await,
        "no destination `nope`",
    );
}

#[tokio::test]
async fn migrate_status_lists_applied_and_pending_migrations_and_changes_nothing() {
    let expected = outbox_store::schema::expected_version().to_string();
    let carried = outbox_store::MIGRATOR.iter().count();

    // A migrated database: every migration applied, with when.
    let db = TestDb::new().await;
    let run = outboxctl_ok(&db, &["migrate", "--status"]).await;
    let rows: Vec<&str> = run.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), carried, "{}", run.stdout);
    assert!(
        rows.iter().all(|row| row.contains(" applied ")),
        "{}",
        run.stdout
    );
    assert!(
        rows.last().unwrap().starts_with(&expected),
        "{}",
        run.stdout
    );
    assert_eq!(
        run.stderr.trim(),
        format!("schema is up to date (version {expected})")
    );

    // An empty database: everything pending, and looking writes nothing (not even sqlx's
    // bookkeeping table).
    let server = outbox_testkit::server_url();
    let (url, name) = outbox_store::connect::create_database(&server, "outbox_test")
        .await
        .unwrap();
    let output = outbox_testkit::process::Run::new(env!("CARGO_BIN_EXE_outboxctl"))
        .args(["migrate", "--status", "--database-url", &url])
        .output()
        .await;
    let (stdout, stderr) = (
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    );
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        stdout
            .lines()
            .filter(|row| row.contains(" pending "))
            .count(),
        carried,
        "{stdout}"
    );
    assert_eq!(
        stderr.trim(),
        format!("{carried} pending: run `outboxctl migrate`")
    );
    let pool = outbox_store::connect(&url, "check", 1).await.unwrap();
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    outbox_store::connect::drop_database(&server, &name)
        .await
        .unwrap();
    assert_eq!(tables, 0, "--status created a table");
}

#[tokio::test]
async fn every_binary_says_its_version_and_the_schema_it_expects() {
    let line = format!(
        "{} (schema {})",
        env!("CARGO_PKG_VERSION"),
        outbox_store::schema::expected_version()
    );
    for (name, binary) in [
        ("outboxctl", env!("CARGO_BIN_EXE_outboxctl")),
        ("decider", env!("CARGO_BIN_EXE_decider")),
        ("dispatcher", env!("CARGO_BIN_EXE_dispatcher")),
    ] {
        let output = outbox_testkit::process::Run::new(binary)
            .args(["--version"])
            .output()
            .await;
        assert!(output.status.success());
        assert_eq!(
            String::from_utf8(output.stdout).unwrap().trim(),
            format!("{name} {line}")
        );
    }
}
