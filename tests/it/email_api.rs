//! HTTP email APIs end to end: a webhook destination with a body template (Resend's
//! `POST /emails` shape) added through the real `outboxctl`, delivered by the real
//! `dispatcher` to the real `sink` (which keeps the bodies it gets), read back from the
//! sink's records and the database. The body is rendered once, stored before the first
//! send, and every attempt sends those bytes with the same idempotency key.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::alerts::{approve_renewal, evidence, reference_of, state_of};
use common::assert_contains;
use common::destinations::DestinationAdd;
use common::procs::*;
use common::{outboxctl, outboxctl_ok};
use outbox_testkit::TestDb;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use uuid::Uuid;

const API_KEY: &str = "re_test_0123456789abcdef";

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A file in the temporary folder holding `text`, named for this test process.
/// A file of its own per call: the tests of this binary run at once, and one removing
/// its file must not pull it from under another.
fn temp_file(name: &str, text: &str) -> String {
    let path = std::env::temp_dir().join(format!("outbox-email-api-{}-{name}", Uuid::new_v4()));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Adds tenant `acme` and a Resend-shaped destination `resend` posting to `sink`.
async fn add_resend_destination(db: &TestDb, sink: &Sink) {
    assert!(outboxctl(db, &["tenant", "create", "acme"]).await.ok);
    let key_file = temp_file("api-key", &format!("{API_KEY}\n"));
    let url = format!("{}/emails", sink.base);
    let add = DestinationAdd::webhook("resend", &url)
        .args(&["--body-template", "email-api-resend"])
        .args(&["--from", "Acme Alerts <alerts@acme.example>"])
        .args(&["--to", "cfo@acme.example", "--locale", "es"])
        .args(&["--bearer-token-file", &key_file])
        .args(&["--idempotency-retention", "24h"])
        .loopback_allowed();
    let run = add.run(db).await;
    let _ = std::fs::remove_file(&key_file);
    assert!(run.ok, "{}", run.stderr);
}

/// A test's set-up: a fresh database, a sink that keeps the bodies it gets (and keys for a
/// day), the Resend-shaped destination posting to it, and one renewal approved for it.
async fn one_renewal_for_resend() -> (TestDb, Sink, Uuid) {
    let db = TestDb::new().await;
    let sink = Sink::start(&["--retention", "24h", "--keep-bodies"]).await;
    add_resend_destination(&db, &sink).await;
    let id = approve(&db).await;
    (db, sink, id)
}

/// Approves the renewal of contract A-17 for `resend`.
async fn approve(db: &TestDb) -> Uuid {
    approve_renewal(db, "resend", "contract:A-17").await
}

#[tokio::test]
async fn an_email_api_receives_the_rendered_email_in_its_shape_with_the_key_and_its_api_key() {
    let (db, sink, id) = one_renewal_for_resend().await;
    drain(&db, "w1", &[]).await;

    assert_eq!(state_of(&db, id).await, "accepted");
    let records = sink.records(&id.to_string()).await;
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(record["path"], "/emails");
    assert_eq!(record["outcome"], "applied");
    assert_eq!(
        record["authorization"],
        format!("Bearer sha256:{}", sha256_hex(API_KEY.as_bytes())).as_str()
    );
    let body: Value = serde_json::from_str(record["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["from"], "Acme Alerts <alerts@acme.example>");
    assert_eq!(body["to"], json!(["cfo@acme.example"]));
    let subject = body["subject"].as_str().unwrap();
    assert!(
        subject.starts_with(
            "Renovación: el contrato A-17 de Acme Tools se renueva el 15 de enero de 2027"
        ),
        "{subject}"
    );
    let text = body["text"].as_str().unwrap();
    assert!(
        text.contains("12.000,00 €") && text.contains("quedan 30 días"),
        "{text}"
    );
    let html = body["html"].as_str().unwrap();
    assert!(html.contains("Acme Tools") && html.contains("<"), "{html}");
    assert_eq!(body["headers"]["X-Alert-Id"], id.to_string().as_str());
    assert_eq!(body["headers"]["X-Alert-Revision"], "0");

    // What was sent is what was stored before the send, and the evidence names it.
    let stored = outbox_store::rendered::find(&db.pool, id)
        .await
        .unwrap()
        .expect("the rendered body is stored");
    assert_eq!(record["payload_sha256"], stored.sha256.as_str());
    assert_eq!(
        stored.sha256,
        sha256_hex(record["body"].as_str().unwrap().as_bytes())
    );
    let trail = evidence(&db, id).await.join("\n");
    assert!(
        trail.contains(&format!("request body sha256:{}", stored.sha256)),
        "{trail}"
    );
    // The destination's reference is the API's answer (`{"id": ...}`).
    let reference = reference_of(&db, id).await;
    assert_eq!(reference.as_deref(), record["receipt"].as_str());

    // The key is never shown: the listing says only that there is one.
    let list = outboxctl_ok(&db, &["destination", "list", "--tenant", "acme"]).await;
    assert_contains(&list.stdout, "webhook (email-api-resend)");
    assert_contains(&list.stdout, "api key");
    assert!(!list.stdout.contains(API_KEY), "{}", list.stdout);
}

#[tokio::test]
async fn a_retry_after_a_server_error_sends_the_same_bytes_with_the_same_key() {
    let (db, sink, id) = one_renewal_for_resend().await;
    // The first attempt meets a 500 (the API may have acted); the destination keeps keys
    // for 24 hours, so it is resent with the same key inside that window.
    sink.faults(json!({"script": [{"status": 500}]})).await;
    drain(&db, "w1", &[]).await;

    assert_eq!(state_of(&db, id).await, "accepted");
    let records = sink.records(&id.to_string()).await;
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0]["status"], 500);
    assert_eq!(records[1]["outcome"], "applied");
    assert_eq!(records[0]["key"], records[1]["key"]);
    assert_eq!(records[0]["payload_sha256"], records[1]["payload_sha256"]);
    assert_eq!(records[0]["body"], records[1]["body"]);
    let stored = outbox_store::rendered::find(&db.pool, id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(records[1]["payload_sha256"], stored.sha256.as_str());
    let trail = evidence(&db, id).await.join("\n");
    assert!(trail.contains("resending with the same key"), "{trail}");

    // The referee agrees: every request carried the stored body, applied once.
    let judged = outbox_checker::Sink {
        destination: "resend".to_owned(),
        capability: outbox_checker::Capability::Idempotent,
        records: records
            .iter()
            .map(|r| outbox_checker::SinkRecord {
                key: r["key"].as_str().map(str::to_owned),
                payload_sha256: r["payload_sha256"].as_str().map(str::to_owned),
                outcome: r["outcome"].as_str().unwrap_or("").to_owned(),
            })
            .collect(),
    };
    let report = outbox_checker::check(&db.pool, 0, &[judged]).await.unwrap();
    assert!(report.passed(), "{report}");
}

#[tokio::test]
async fn a_body_template_stored_once_is_resent_unchanged_after_the_destination_changed() {
    let db = TestDb::new().await;
    let sink = Sink::start(&["--keep-bodies"]).await;
    add_resend_destination(&db, &sink).await;
    // No de-duplication window at the sink's end this time: the lost answer holds the
    // alert, and an operator replays it after the destination was switched to English.
    sqlx::query("UPDATE destinations SET idempotency_retention = NULL")
        .execute(&db.pool)
        .await
        .unwrap();
    let id = approve(&db).await;
    sink.faults(json!({"drop_response_for_keys": [id.to_string()]}))
        .await;
    drain(&db, "w1", &[]).await;
    assert_eq!(state_of(&db, id).await, "held");
    sqlx::query("UPDATE destinations SET locale = 'en'")
        .execute(&db.pool)
        .await
        .unwrap();
    outboxctl_ok(
        &db,
        &["replay", &id.to_string(), "--note", "not in the API's log"],
    )
    .await;
    drain(&db, "w2", &[]).await;

    assert_eq!(state_of(&db, id).await, "accepted");
    let records = sink.records(&id.to_string()).await;
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0]["body"], records[1]["body"]);
    let body: Value = serde_json::from_str(records[1]["body"].as_str().unwrap()).unwrap();
    assert!(
        body["text"].as_str().unwrap().contains("quedan 30 días"),
        "the resend must be the Spanish body first rendered: {body}"
    );
}

#[tokio::test]
async fn bad_email_api_destinations_are_refused_in_one_line_and_write_nothing() {
    let db = TestDb::new().await;
    assert!(outboxctl(&db, &["tenant", "create", "acme"]).await.ok);
    let syntax_error = temp_file("syntax.json", "{\"subject\": {{ subject }\n}\n");
    let undefined = temp_file("undefined.json", "{\"subject\": {{ title }}}\n");
    let not_json = temp_file("not-json.json", "subject={{ subject }}\n");
    let key_file = temp_file("bad-case-key", "re_key\n");
    let base = [
        "destination",
        "add",
        "--tenant",
        "acme",
        "--name",
        "api",
        "--url",
        "http://127.0.0.1:9/emails",
        "--allow-private",
        TEST_ALLOW_PRIVATE,
    ];
    let mail = ["--from", "alerts@acme.example", "--to", "cfo@acme.example"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            [
                &base[..],
                &["--body-template-file", &syntax_error],
                &mail[..],
            ]
            .concat(),
            "line 1: syntax error",
        ),
        (
            [&base[..], &["--body-template-file", &undefined], &mail[..]].concat(),
            "undefined",
        ),
        (
            [&base[..], &["--body-template-file", &not_json], &mail[..]].concat(),
            "not a JSON object",
        ),
        (
            [
                &base[..],
                &["--body-template", "email-api-mailgun"],
                &mail[..],
            ]
            .concat(),
            "unknown body template",
        ),
        (
            [
                &base[..],
                &[
                    "--body-template",
                    "email-api-resend",
                    "--to",
                    "cfo@acme.example",
                ],
            ]
            .concat(),
            "needs --from",
        ),
        (
            [
                &base[..],
                &[
                    "--body-template",
                    "email-api-resend",
                    "--from",
                    "alerts@acme.example",
                ],
            ]
            .concat(),
            "needs at least one --to",
        ),
        (
            [
                &base[..],
                &[
                    "--body-template",
                    "email-api-resend",
                    "--from",
                    "not an address",
                    "--to",
                    "cfo@acme.example",
                ],
            ]
            .concat(),
            "is not a mail address",
        ),
        (
            [&base[..], &mail[..]].concat(),
            "webhooks with a --body-template",
        ),
        (
            [&base[..], &["--bearer-token-file", &key_file]].concat(),
            "apply to webhooks with a --body-template",
        ),
        // A relay's CA means nothing to an HTTP email API: refused, not ignored.
        (
            [
                &base[..],
                &[
                    "--body-template",
                    "email-api-resend",
                    "--smtp-ca-file",
                    &key_file,
                ],
                &mail[..],
            ]
            .concat(),
            "--smtp-* apply to --kind email destinations only",
        ),
        (
            vec![
                "destination",
                "add",
                "--tenant",
                "acme",
                "--name",
                "mail",
                "--kind",
                "email",
                "--smtp-host",
                "127.0.0.1",
                "--smtp-tls",
                "none",
                "--from",
                "alerts@acme.example",
                "--to",
                "cfo@acme.example",
                "--body-template",
                "email-api-resend",
                "--allow-private",
                TEST_ALLOW_PRIVATE,
            ],
            "apply to webhook destinations only",
        ),
    ];
    for (args, expected) in cases {
        let run = outboxctl(&db, &args).await;
        assert!(!run.ok, "{args:?} was accepted");
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {}", run.stderr);
        assert!(
            lines[0].starts_with("error: ") && lines[0].contains(expected),
            "{args:?}: {}",
            run.stderr
        );
        assert_eq!(
            db.count("destinations").await,
            0,
            "{args:?} wrote something"
        );
    }
    for file in [syntax_error, undefined, not_json, key_file] {
        let _ = std::fs::remove_file(file);
    }
}
