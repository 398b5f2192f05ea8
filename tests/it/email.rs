//! Email destinations end to end: the real `dispatcher` mails alerts over SMTP to the real
//! `sink --smtp-listen` (an inbox that de-duplicates nothing), and the inbox and the
//! database are read back. Each alert's message is rendered once, stored, and every
//! attempt sends those exact bytes; a lost final reply is held (or resent unchanged).

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use base64::Engine;
use common::alerts::{approve_renewal, evidence, evidence_by, state_of, RENEWAL};
use common::assert_contains;
use common::destinations::DestinationAdd;
use common::procs::*;
use common::{outboxctl, outboxctl_ok, Outboxctl};
use outbox_testkit::tls::{TestCa, TlsFiles};
use outbox_testkit::TestDb;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};
use uuid::Uuid;

const PASSWORD: &str = "s3cret-relay-pass";

/// A running SMTP inbox: the sink with `--smtp-listen` (and `--smtps-listen` when given),
/// and the ports its destinations are given.
struct Inbox {
    sink: SmtpSink,
    smtp_port: String,
    /// The implicit-TLS listener's port, when it has one.
    smtps_port: Option<String>,
}

impl Inbox {
    async fn start() -> Inbox {
        Inbox::start_with(&[], &[]).await
    }

    /// An inbox that requires AUTH as `relay` with [`PASSWORD`].
    async fn start_with_auth() -> Inbox {
        Inbox::start_with(&[], &[("SINK_SMTP_AUTH", &relay_auth())]).await
    }

    async fn start_with(extra: &[&str], env: &[(&str, &str)]) -> Inbox {
        let sink = SmtpSink::start_with(extra, env).await;
        Inbox {
            smtp_port: port(&sink.smtp_addr),
            smtps_port: sink.smtps_addr.as_deref().map(port),
            sink,
        }
    }

    /// An inbox that presents `files`' certificate: `STARTTLS` on its SMTP port, implicit
    /// TLS on its SMTPS port.
    async fn start_tls(files: &TlsFiles, env: &[(&str, &str)]) -> Inbox {
        let (cert, key) = (files.cert(), files.key());
        let args = [
            "--smtps-listen",
            "127.0.0.1:0",
            "--smtp-tls-cert",
            cert.to_str().unwrap(),
            "--smtp-tls-key",
            key.to_str().unwrap(),
        ];
        Inbox::start_with(&args, env).await
    }

    /// Whether the sink logged a line containing `text`.
    fn logged(&self, text: &str) -> bool {
        self.sink.logged(text)
    }

    async fn messages(&self) -> Vec<Value> {
        self.sink.messages().await
    }

    async fn faults(&self, faults: Value) {
        self.sink.sink.faults(faults).await;
    }

    /// Drops the connection after the data of alert `id`'s message, before the final reply.
    async fn lose_the_final_reply_to(&self, id: Uuid) {
        let message_id = format!("{id}@acme.example");
        self.faults(json!({"smtp_drop_for_message_ids": [message_id]}))
            .await;
    }

    /// An email destination to this inbox's plain SMTP port, without TLS.
    fn destination(&self, name: &str) -> DestinationAdd {
        DestinationAdd::email_relay(name, &self.smtp_port, "none")
    }
}

/// The sink's `SINK_SMTP_AUTH`: the relay's user and [`PASSWORD`], in the environment (a
/// flag would show the password to every user of the machine).
fn relay_auth() -> String {
    format!("relay:{PASSWORD}")
}

/// The port of a listener's address (`127.0.0.1:port`).
fn port(addr: &str) -> String {
    addr.rsplit(':').next().unwrap().to_owned()
}

/// A test's set-up: a fresh database, an inbox, and tenant `acme` with the email
/// destination `name` to that inbox (`flags`: its recipients and settings).
async fn inbox_with_destination(name: &str, flags: &[&str]) -> (TestDb, Inbox) {
    let db = TestDb::new().await;
    let inbox = Inbox::start().await;
    add_email_destination(&db, &inbox, name, flags).await;
    (db, inbox)
}

/// Adds tenant `acme` (once) and an email destination to `inbox` without TLS.
async fn add_email_destination(db: &TestDb, inbox: &Inbox, name: &str, extra: &[&str]) {
    add_to_acme(db, inbox.destination(name).args(extra)).await;
}

/// Adds tenant `acme` (once) and an email destination to the relay at 127.0.0.1:`port`
/// speaking `tls` (`none`, `starttls` or `tls`).
async fn add_relay_destination(db: &TestDb, name: &str, port: &str, tls: &str, extra: &[&str]) {
    add_to_acme(db, DestinationAdd::email_relay(name, port, tls).args(extra)).await;
}

/// Adds tenant `acme` (once) and the destination `add` describes, which must succeed.
async fn add_to_acme(db: &TestDb, add: DestinationAdd) {
    let _ = outboxctl(db, &["tenant", "create", "acme"]).await;
    add.add(db).await;
}

/// Runs a dispatcher with `--drain` at debug level and returns everything it logged.
async fn drain_logged(db: &TestDb, worker: &str, extra: &[&str]) -> String {
    let mut args = dispatcher_args(db, worker, extra);
    args.push("--drain".into());
    // `Run` waits up to DEADLINE and kills a dispatcher that has not finished by then.
    let output = outbox_testkit::process::Run::new(env!("CARGO_BIN_EXE_dispatcher"))
        .args(&args)
        .env("RUST_LOG", "debug")
        .output()
        .await;
    let logs = String::from_utf8_lossy(&output.stderr).into_owned();
    for line in logs.lines() {
        eprintln!("[dispatcher] {line}");
    }
    assert!(
        output.status.success(),
        "dispatcher exited with {}",
        output.status
    );
    logs
}

/// The stored message of an alert: its bytes and their fingerprint as the sink computes it
/// (the data as received, which ends with the CRLF before the final dot).
async fn stored(db: &TestDb, id: Uuid) -> (Vec<u8>, String) {
    let message = outbox_store::rendered::find(&db.pool, id)
        .await
        .unwrap()
        .expect("a rendered message is stored");
    let mut on_the_wire = message.bytes.clone();
    on_the_wire.extend_from_slice(b"\r\n");
    let sha = Sha256::digest(&on_the_wire)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    (message.bytes, sha)
}

fn for_alert(messages: &[Value], id: Uuid) -> Vec<Value> {
    messages
        .iter()
        .filter(|m| m["alert_id"] == id.to_string().as_str())
        .cloned()
        .collect()
}

#[tokio::test]
async fn email_reaches_the_inbox_once_with_its_identity_in_each_locale_and_no_credentials_leak() {
    let db = TestDb::new().await;
    let inbox = Inbox::start_with_auth().await;
    let password_file =
        std::env::temp_dir().join(format!("outbox-email-pass-{}", std::process::id()));
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    let auth = [
        "--smtp-user",
        "relay",
        "--smtp-password-file",
        password_file.to_str().unwrap(),
    ];
    let mut cfo = vec!["--to", "cfo@acme.example", "--locale", "es"];
    cfo.extend_from_slice(&auth);
    add_email_destination(&db, &inbox, "cfo", &cfo).await;
    let mut ops = vec!["--to", "ops@acme.example", "--to", "oncall@acme.example"];
    ops.extend_from_slice(&auth);
    add_email_destination(&db, &inbox, "ops", &ops).await;
    std::fs::remove_file(&password_file).unwrap();

    let es = approve_renewal(&db, "cfo", "contract:A-17").await;
    let en = approve_renewal(&db, "ops", "contract:A-17").await;
    let logs = drain_logged(&db, "w1", &[]).await;

    assert_eq!(state_of(&db, es).await, "accepted");
    assert_eq!(state_of(&db, en).await, "accepted");
    let messages = inbox.messages().await;
    assert_eq!(messages.len(), 2, "{messages:?}");
    for (id, subject_word, body_word, rcpt) in [
        (
            es,
            "A-17",
            "15 de enero de 2027",
            json!(["cfo@acme.example"]),
        ),
        (
            en,
            "A-17",
            "January 15, 2027",
            json!(["ops@acme.example", "oncall@acme.example"]),
        ),
    ] {
        let got = for_alert(&messages, id);
        assert_eq!(got.len(), 1, "one message per alert: {messages:?}");
        assert_eq!(got[0]["message_id"], format!("{id}@acme.example"));
        assert_eq!(got[0]["rcpt_to"], rcpt);
        assert_eq!(got[0]["authenticated_as"], "relay");
        assert!(got[0]["subject"].as_str().unwrap().contains(subject_word));
        let (bytes, sha) = stored(&db, id).await;
        assert_eq!(
            got[0]["sha256"], sha,
            "the inbox has the stored bytes exactly"
        );
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains(&format!("X-Alert-Id: {id}")), "{text}");
        assert!(text.contains("X-Alert-Revision: 0"), "{text}");
        assert!(text.contains("multipart/alternative"), "{text}");
        // The bodies are encoded on the wire; the locale shows in the decoded text.
        let decoded = decode_quoted_printable(&text);
        assert!(decoded.contains(body_word), "{decoded}");
        let trail = evidence(&db, id).await.join("\n");
        assert!(trail.contains("accepted by the destination"), "{trail}");
        assert!(
            trail.contains(&format!(
                "reference {}",
                got[0]["queue_id"].as_str().unwrap()
            )),
            "the relay's queue id is the reference: {trail}"
        );
        assert!(
            trail.contains(&format!("message <{id}@acme.example> sha256:"))
                && trail.contains("rendered with templates builtin sha256:"),
            "{trail}"
        );
    }

    // The password is never logged (debug level) nor shown.
    assert!(!logs.is_empty(), "the dispatcher logged at debug level");
    let auth_plain =
        base64::engine::general_purpose::STANDARD.encode(format!("\0relay\0{PASSWORD}"));
    for secret in [PASSWORD, auth_plain.as_str()] {
        assert!(
            !logs.contains(secret),
            "the dispatcher logged the SMTP password"
        );
    }
    let stored_password = smtp_password_of(&db, "cfo").await;
    assert_eq!(
        stored_password, PASSWORD,
        "no keys configured: stored as given"
    );
    let list = outboxctl(&db, &["destination", "list"]).await;
    assert!(list.ok);
    assert!(list.stdout.contains("email") && list.stdout.contains("cfo@acme.example"));
    let json = outboxctl(&db, &["destination", "list", "--json"]).await;
    for out in [&list.stdout, &list.stderr, &json.stdout, &json.stderr] {
        assert!(
            !out.contains(PASSWORD),
            "destination list shows the password"
        );
    }
}

/// The SMTP password of destination `name` as stored.
async fn smtp_password_of(db: &TestDb, name: &str) -> String {
    sqlx::query_scalar("SELECT smtp_password FROM destinations WHERE name = $1")
        .bind(name)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Soft line breaks and `=XX` escapes of quoted-printable undone, enough to read a body.
fn decode_quoted_printable(text: &str) -> String {
    let joined = text.replace("=\r\n", "");
    let bytes = joined.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'=' && i + 2 < bytes.len() {
            if let Ok(byte) = u8::from_str_radix(&joined[i + 1..i + 3], 16) {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn a_lost_final_reply_is_held_with_one_message_in_the_inbox_and_never_sent_again() {
    let (db, inbox) = inbox_with_destination("cfo", &["--to", "cfo@acme.example"]).await;
    let id = approve_renewal(&db, "cfo", "contract:A-17").await;
    inbox.lose_the_final_reply_to(id).await;

    drain_logged(&db, "w1", &[]).await;
    assert_eq!(state_of(&db, id).await, "held");
    let trail = evidence(&db, id).await.join("\n");
    assert!(
        trail.contains("lost after the message data, before the final reply"),
        "{trail}"
    );
    assert!(trail.contains("held for reconciliation"), "{trail}");
    let lookups: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM delivery_attempts WHERE alert_id = $1 AND kind = 'lookup'",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(lookups, 0, "SMTP has no lookup: {trail}");
    assert_eq!(for_alert(&inbox.messages().await, id).len(), 1);

    // A restarted dispatcher does not send it again.
    drain_logged(&db, "w2", &[]).await;
    assert_eq!(state_of(&db, id).await, "held");
    assert_eq!(for_alert(&inbox.messages().await, id).len(), 1);
}

#[tokio::test]
async fn with_on_uncertain_retry_the_resend_is_the_same_message_byte_for_byte() {
    let (db, inbox) = inbox_with_destination(
        "cfo",
        &["--to", "cfo@acme.example", "--on-uncertain", "retry"],
    )
    .await;
    let id = approve_renewal(&db, "cfo", "contract:A-17").await;
    inbox.lose_the_final_reply_to(id).await;

    drain_logged(&db, "w1", &[]).await;
    assert_eq!(state_of(&db, id).await, "accepted");
    let got = for_alert(&inbox.messages().await, id);
    assert_eq!(got.len(), 2, "the dropped one and the resend: {got:?}");
    let (_, sha) = stored(&db, id).await;
    for message in &got {
        assert_eq!(message["message_id"], format!("{id}@acme.example"));
        assert_eq!(message["sha256"], sha);
    }
    let trail = evidence(&db, id).await.join("\n");
    assert!(trail.contains("possible duplicate"), "{trail}");
}

#[tokio::test]
async fn a_resend_sends_the_stored_bytes_even_after_the_locale_and_the_tenants_templates_changed() {
    let (db, inbox) =
        inbox_with_destination("cfo", &["--to", "cfo@acme.example", "--locale", "es"]).await;
    // The tenant's own subject, from the dispatcher's templates folder.
    let templates = std::env::temp_dir().join(format!("outbox-templates-{}", Uuid::new_v4()));
    std::fs::create_dir_all(templates.join("acme")).unwrap();
    let subject = |locale: &str, text: &str| {
        let file = templates.join(format!("acme/contract_renewal.{locale}.subject.txt"));
        std::fs::write(file, text).unwrap();
    };
    subject("es", "Primera versión: {{ contract }}");
    let templates_dir = templates.to_str().unwrap().to_owned();
    let with_templates = ["--templates-dir", templates_dir.as_str()];

    let id = approve_renewal(&db, "cfo", "contract:A-17").await;
    inbox.lose_the_final_reply_to(id).await;
    drain_logged(&db, "w1", &with_templates).await;
    assert_eq!(state_of(&db, id).await, "held");
    let (spanish, sha) = stored(&db, id).await;
    let first = outbox_store::rendered::find(&db.pool, id)
        .await
        .unwrap()
        .unwrap();
    assert!(
        first.template_version.starts_with("tenant acme sha256:"),
        "{}",
        first.template_version
    );
    assert_eq!(
        for_alert(&inbox.messages().await, id)[0]["subject"],
        "Primera versión: A-17"
    );

    // Between the attempts the destination is switched to English and the tenant's
    // templates are rewritten, then the held alert is replayed: the resend must still be
    // the Spanish message first rendered, with its first subject.
    sqlx::query("UPDATE destinations SET locale = 'en' WHERE name = 'cfo'")
        .execute(&db.pool)
        .await
        .unwrap();
    subject("es", "Segunda versión: {{ contract }}");
    subject("en", "Second version: {{ contract }}");
    outboxctl_ok(
        &db,
        &[
            "replay",
            &id.to_string(),
            "--note",
            "relay confirmed it lost it",
        ],
    )
    .await;
    // A new alert meanwhile gets the new templates.
    let new = approve_renewal(&db, "cfo", "contract:B-2").await;
    drain_logged(&db, "w2", &with_templates).await;

    assert_eq!(state_of(&db, id).await, "accepted");
    let got = for_alert(&inbox.messages().await, id);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.iter().all(|m| m["sha256"] == sha.as_str()), "{got:?}");
    assert!(
        got.iter().all(|m| m["subject"] == "Primera versión: A-17"),
        "{got:?}"
    );
    assert_eq!(stored(&db, id).await.0, spanish);
    assert!(decode_quoted_printable(&String::from_utf8_lossy(&spanish)).contains("quedan 30 días"));
    assert_eq!(state_of(&db, new).await, "accepted");
    let got = for_alert(&inbox.messages().await, new);
    assert_eq!(got.len(), 1, "{got:?}");
    // (The test's payload names contract A-17 whatever the subject.)
    assert_eq!(got[0]["subject"], "Second version: A-17");
    std::fs::remove_dir_all(&templates).unwrap();
}

#[tokio::test]
async fn a_broken_tenant_template_stops_the_dispatcher_at_start_with_one_line() {
    let db = TestDb::new().await;
    let templates = std::env::temp_dir().join(format!("outbox-templates-{}", Uuid::new_v4()));
    std::fs::create_dir_all(templates.join("acme")).unwrap();
    std::fs::write(templates.join("acme/generic.en.subject.txt"), "{% if %}").unwrap();
    let mut args = dispatcher_args(&db, "w1", &["--templates-dir", templates.to_str().unwrap()]);
    args.push("--drain".into());
    let output = outbox_testkit::process::Run::new(env!("CARGO_BIN_EXE_dispatcher"))
        .args(&args)
        .env_remove("OUTBOX_ALLOW_PRIVATE")
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .await;
    std::fs::remove_dir_all(&templates).unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--templates-dir") && stderr.contains("generic.en.subject.txt"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_550_fails_with_the_reply_as_evidence_and_a_451_is_retried_until_accepted() {
    let (db, inbox) = inbox_with_destination("cfo", &["--to", "cfo@acme.example"]).await;

    let rejected = approve_renewal(&db, "cfo", "contract:A-17").await;
    inbox
        .faults(json!({"smtp_data_script": ["550 5.7.1 relaying denied"]}))
        .await;
    drain_logged(&db, "w1", &[]).await;
    assert_eq!(state_of(&db, rejected).await, "failed");
    let trail = evidence(&db, rejected).await.join("\n");
    assert!(
        trail.contains("rejected") && trail.contains("relaying denied"),
        "{trail}"
    );
    assert!(for_alert(&inbox.messages().await, rejected).is_empty());

    let retried = approve_renewal(&db, "cfo", "contract:B-2").await;
    inbox
        .faults(json!({"smtp_data_script": ["451 4.3.0 try later"]}))
        .await;
    drain_logged(&db, "w2", &[]).await;
    assert_eq!(state_of(&db, retried).await, "accepted");
    let trail = evidence(&db, retried).await.join("\n");
    assert!(
        trail.contains("not processed") && trail.contains("try later"),
        "{trail}"
    );
    assert_eq!(for_alert(&inbox.messages().await, retried).len(), 1);
}

#[tokio::test]
async fn bad_email_destinations_are_refused_in_one_line_and_write_nothing() {
    let db = TestDb::new().await;
    assert!(outboxctl(&db, &["tenant", "create", "acme"]).await.ok);
    let files = TestCa::new("outbox test CA").issue(&["relay.example"]);
    let (key_file, ca_file) = (files.key(), files.ca());
    let (key_file, ca_file) = (key_file.to_str().unwrap(), ca_file.to_str().unwrap());
    // An email destination `mail` at `host` speaking `tls`, and what each case adds.
    let mail = |host: &str, tls: &str, flags: &[&str]| {
        DestinationAdd::named("mail")
            .args(&["--kind", "email", "--smtp-host", host, "--smtp-tls", tls])
            .args(flags)
    };
    let from_to = ["--from", "a@b.example", "--to", "c@d.example"];
    let cases = [
        (
            mail("127.0.0.1", "none", &["--to", "a@b.example"]),
            "--from",
        ),
        (
            mail(
                "127.0.0.1",
                "none",
                &["--from", "not an address", "--to", "a@b.example"],
            ),
            "--from",
        ),
        (
            mail("127.0.0.1", "none", &["--from", "a@b.example"]),
            "--to",
        ),
        // Loopback without the allow-list: the egress guard refuses the relay.
        (mail("127.0.0.1", "none", &from_to), "--smtp-host"),
        // A CA file with a private key in it, or a CA without TLS to check it with.
        (
            mail("relay.example", "starttls", &["--smtp-ca-file", key_file]).args(&from_to),
            "it must hold CA certificates only",
        ),
        (
            mail("relay.example", "none", &["--smtp-ca-file", ca_file]).args(&from_to),
            "--smtp-ca-file needs --smtp-tls starttls or tls",
        ),
        (
            mail("relay.example", "none", &from_to)
                .args(&["--lookup-url", "http://x.example/{key}"]),
            "webhook destinations only",
        ),
    ];
    for (add, expected) in cases {
        let args = add.to_args();
        let run = add.run(&db).await;
        assert!(!run.ok, "{args:?} was accepted");
        assert!(run.stderr.starts_with("error:"), "{}", run.stderr);
        assert!(run.stderr.contains(expected), "{args:?}: {}", run.stderr);
    }
    assert_eq!(db.count("destinations").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_dying_after_the_send_is_replaced_and_resends_the_stored_bytes() {
    let (db, inbox) = inbox_with_destination(
        "cfo",
        &[
            "--to",
            "cfo@acme.example",
            "--on-uncertain",
            "retry",
            "--timeout",
            "1s",
        ],
    )
    .await;
    let id = approve_renewal(&db, "cfo", "contract:A-17").await;

    // The relay has the message; the dispatcher stops before recording anything, and dies.
    let mut first = spawn_dispatcher(
        &dispatcher_args(&db, "first", &[]),
        Some("dispatch-after-send=pause"),
    );
    let started = Instant::now();
    while for_alert(&inbox.messages().await, id).is_empty() {
        assert!(started.elapsed() < DEADLINE, "the first send never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_for_db(
        &db,
        "SELECT count(*) FROM outbox WHERE status = 'sending'",
        |n| n == 1,
    )
    .await;
    first.kill().await.unwrap();

    // Its replacement finds the lease expired, the attempt uncertain, and resends (policy
    // retry): the very bytes stored before the first send, not a new rendering.
    drain_logged(&db, "second", &["--drain-horizon", "10s"]).await;
    assert_eq!(state_of(&db, id).await, "accepted");
    let got = for_alert(&inbox.messages().await, id);
    assert_eq!(got.len(), 2, "{got:?}");
    let (_, sha) = stored(&db, id).await;
    assert!(got.iter().all(|m| m["sha256"] == sha.as_str()), "{got:?}");
    let trail = evidence_by(&db, id).await;
    assert!(
        trail.iter().any(|(actor, line)| actor == "dispatcher:first"
            && line.starts_with("lease expired during attempt 1")),
        "{trail:?}"
    );
}

#[tokio::test]
async fn the_smtp_password_is_sealed_at_rest_and_opened_only_to_authenticate() {
    let db = TestDb::new().await;
    let inbox = Inbox::start_with_auth().await;
    assert!(outboxctl(&db, &["tenant", "create", "acme"]).await.ok);
    let keys = format!(
        "k1:{}",
        base64::engine::general_purpose::STANDARD.encode([7u8; 32])
    );
    let add = inbox.destination("cfo").args(&[
        "--smtp-user",
        "relay",
        "--smtp-password-stdin",
        "--to",
        "cfo@acme.example",
    ]);
    let added = Outboxctl::on(&db)
        .args(&add.to_args())
        .env("OUTBOX_SECRET_KEYS", &keys)
        .stdin(&format!("{PASSWORD}\n"))
        .run()
        .await;
    assert!(added.ok, "{}", added.stderr);

    let row: String = sqlx::query_scalar("SELECT d::text FROM destinations d")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        !row.contains(PASSWORD),
        "the password is stored in clear: {row}"
    );
    let stored_password = smtp_password_of(&db, "cfo").await;
    assert!(
        stored_password.starts_with("enc:v1:k1:"),
        "{stored_password}"
    );

    let id = approve_renewal(&db, "cfo", "contract:A-17").await;
    let logs = drain_logged(&db, "w1", &["--secret-keys", &keys]).await;
    assert_eq!(state_of(&db, id).await, "accepted");
    let got = for_alert(&inbox.messages().await, id);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["authenticated_as"], "relay");
    assert!(!logs.contains(PASSWORD));

    // A new key: `secrets rewrap` re-seals the password, and a dispatcher that knows only
    // the new key still authenticates.
    let k2 = format!(
        "k2:{}",
        base64::engine::general_purpose::STANDARD.encode([9u8; 32])
    );
    let both = format!("{k2},{keys}");
    outboxctl_ok(&db, &["--secret-keys", &both, "secrets", "rewrap"]).await;
    let resealed = smtp_password_of(&db, "cfo").await;
    assert!(resealed.starts_with("enc:v1:k2:"), "{resealed}");
    let second = approve_renewal(&db, "cfo", "contract:A-18").await;
    drain_logged(&db, "w2", &["--secret-keys", &k2]).await;
    assert_eq!(state_of(&db, second).await, "accepted");
    let got = for_alert(&inbox.messages().await, second);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["authenticated_as"], "relay");
}

#[tokio::test]
async fn a_relay_on_a_blocked_address_is_never_connected_to() {
    // Added while loopback was opened; the dispatcher does not open it.
    let (db, inbox) = inbox_with_destination("cfo", &["--to", "cfo@acme.example"]).await;
    let id = approve_renewal(&db, "cfo", "contract:A-17").await;
    drain_logged(&db, "w1", &["--allow-private", "10.0.0.0/8"]).await;

    assert_eq!(state_of(&db, id).await, "failed");
    let trail = evidence(&db, id).await.join("\n");
    assert!(
        trail.contains("127.0.0.1 is not allowed: loopback"),
        "{trail}"
    );
    assert!(inbox.messages().await.is_empty());
    let enabled: bool = sqlx::query_scalar("SELECT enabled FROM destinations WHERE name = 'cfo'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(!enabled, "a blocked relay disables its destination");
}

#[tokio::test]
async fn a_correction_gets_its_own_message_id_threaded_under_the_original() {
    let (db, inbox) = inbox_with_destination("cfo", &["--to", "cfo@acme.example"]).await;
    let original = approve_renewal(&db, "cfo", "contract:A-17").await;
    drain_logged(&db, "w1", &[]).await;
    assert_eq!(state_of(&db, original).await, "accepted");

    let corrected = RENEWAL.replace("12000.00", "13500.00");
    let outcome = outbox_store::alerts::revise(
        &db.pool,
        outbox_store::alerts::Revision {
            tenant_id: None,
            alert_id: original,
            payload_json: &corrected,
            reason: "the amount was wrong",
            actor: "test",
            trace: None,
        },
    )
    .await
    .unwrap();
    let outbox_store::alerts::ReviseOutcome::Created { id: revision, .. } = outcome else {
        panic!("expected a new revision, got {outcome:?}");
    };
    drain_logged(&db, "w2", &[]).await;
    assert_eq!(state_of(&db, revision).await, "accepted");

    let messages = inbox.messages().await;
    assert_eq!(for_alert(&messages, original).len(), 1);
    let got = for_alert(&messages, revision);
    assert_eq!(got.len(), 1, "{messages:?}");
    assert_eq!(got[0]["message_id"], format!("{revision}@acme.example"));
    let (bytes, _) = stored(&db, revision).await;
    let headers = String::from_utf8_lossy(&bytes)
        .replace("\r\n ", " ")
        .replace("\r\n\t", " ");
    assert!(
        headers.contains(&format!("In-Reply-To: <{original}@acme.example>")),
        "{headers}"
    );
    assert!(
        headers.contains(&format!("References: <{original}@acme.example>")),
        "{headers}"
    );
    assert!(headers.contains("X-Alert-Revision: 1"), "{headers}");
}

#[tokio::test]
async fn a_destination_without_a_locale_mails_in_its_tenants() {
    let (db, inbox) = inbox_with_destination("cfo", &["--to", "cfo@acme.example"]).await;
    add_email_destination(
        &db,
        &inbox,
        "ops",
        &["--to", "ops@acme.example", "--locale", "en"],
    )
    .await;
    let refused = outboxctl(&db, &["tenant", "configure", "acme", "--locale", "fr"]).await;
    assert!(!refused.ok, "{}", refused.stdout);
    assert_contains(&refused.stderr, "fr");
    outboxctl_ok(&db, &["tenant", "configure", "acme", "--locale", "es"]).await;

    let tenants = approve_renewal(&db, "cfo", "contract:A-17").await;
    let own = approve_renewal(&db, "ops", "contract:A-17").await;
    drain_logged(&db, "w1", &[]).await;
    for (id, expected) in [(tenants, "15 de enero de 2027"), (own, "January 15, 2027")] {
        assert_eq!(state_of(&db, id).await, "accepted");
        let (bytes, _) = stored(&db, id).await;
        let decoded = decode_quoted_printable(&String::from_utf8_lossy(&bytes));
        assert!(decoded.contains(expected), "{decoded}");
    }
}

/// The error classes of an alert's send attempts, in order.
async fn attempt_classes(db: &TestDb, id: Uuid) -> Vec<(String, Option<String>)> {
    sqlx::query_as(
        "SELECT outcome, error_class FROM delivery_attempts \
         WHERE alert_id = $1 AND kind = 'send' ORDER BY attempt",
    )
    .bind(id)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// Writes the relay password into a file in `dir` and returns the `--smtp-user` and
/// `--smtp-password-file` flags naming it.
fn password_flags(dir: &std::path::Path) -> [String; 4] {
    let file = dir.join("relay-password");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    [
        "--smtp-user".into(),
        "relay".into(),
        "--smtp-password-file".into(),
        file.to_str().unwrap().to_owned(),
    ]
}

#[tokio::test]
async fn email_over_starttls_and_implicit_tls_reaches_the_inbox_once_with_auth_and_no_secret_logged(
) {
    let db = TestDb::new().await;
    let files = TestCa::new("outbox test CA").issue(&["127.0.0.1"]);
    let inbox = Inbox::start_tls(&files, &[("SINK_SMTP_AUTH", &relay_auth())]).await;
    let ca = files.ca();
    let auth = password_flags(files.dir());
    let mut flags = vec!["--smtp-ca-file", ca.to_str().unwrap()];
    flags.extend(auth.iter().map(String::as_str));
    let mut cfo = vec!["--to", "cfo@acme.example"];
    cfo.extend_from_slice(&flags);
    add_relay_destination(&db, "cfo", &inbox.smtp_port, "starttls", &cfo).await;
    let mut ops = vec!["--to", "ops@acme.example"];
    ops.extend_from_slice(&flags);
    let smtps_port = inbox.smtps_port.clone().unwrap();
    add_relay_destination(&db, "ops", &smtps_port, "tls", &ops).await;

    let over_starttls = approve_renewal(&db, "cfo", "contract:A-17").await;
    let over_tls = approve_renewal(&db, "ops", "contract:A-17").await;
    let logs = drain_logged(&db, "w1", &[]).await;

    let messages = inbox.messages().await;
    assert_eq!(messages.len(), 2, "{messages:?}");
    for (id, security) in [(over_starttls, "starttls"), (over_tls, "tls")] {
        assert_eq!(state_of(&db, id).await, "accepted");
        let got = for_alert(&messages, id);
        assert_eq!(got.len(), 1, "{messages:?}");
        assert_eq!(
            got[0]["tls"], security,
            "the session was encrypted: {got:?}"
        );
        assert_eq!(got[0]["authenticated_as"], "relay");
        let (_, sha) = stored(&db, id).await;
        assert_eq!(
            got[0]["sha256"], sha,
            "the inbox has the stored bytes exactly"
        );
    }
    let auth_plain =
        base64::engine::general_purpose::STANDARD.encode(format!("\0relay\0{PASSWORD}"));
    for secret in [PASSWORD, auth_plain.as_str()] {
        assert!(!logs.contains(secret), "the dispatcher logged the password");
        assert!(!inbox.logged(secret), "the sink logged the password");
    }
}

#[tokio::test]
async fn a_certificate_for_another_name_or_from_an_untrusted_ca_is_class_tls_and_nothing_is_sent() {
    let db = TestDb::new().await;
    let ca = TestCa::new("outbox test CA");
    let right_name = ca.issue(&["127.0.0.1"]);
    let wrong_name = ca.issue(&["relay.invalid"]);
    let another_ca = TestCa::new("another CA").issue(&["127.0.0.1"]);
    let inbox = Inbox::start_tls(&right_name, &[]).await;
    let misnamed = Inbox::start_tls(&wrong_name, &[]).await;

    let trusted_ca = right_name.ca();
    let other_ca = another_ca.ca();
    let to = ["--to", "cfo@acme.example"];
    // Trusted CA, but the certificate names another host.
    let flags = [&to[..], &["--smtp-ca-file", trusted_ca.to_str().unwrap()]].concat();
    add_relay_destination(&db, "misnamed", &misnamed.smtp_port, "starttls", &flags).await;
    // The right name, from a CA this destination does not trust.
    let flags = [&to[..], &["--smtp-ca-file", other_ca.to_str().unwrap()]].concat();
    let smtps_port = inbox.smtps_port.clone().unwrap();
    add_relay_destination(&db, "other-ca", &smtps_port, "tls", &flags).await;
    // No CA of its own: the public roots, which never issued the test CA.
    add_relay_destination(&db, "public-roots", &inbox.smtp_port, "starttls", &to).await;

    let mut ids = Vec::new();
    for destination in ["misnamed", "other-ca", "public-roots"] {
        ids.push((
            destination,
            approve_renewal(&db, destination, "contract:A-17").await,
        ));
    }
    // One attempt each: the retry is an hour away.
    drain_logged(&db, "w1", &["--retry-delays", "1h"]).await;

    for (destination, id) in ids {
        assert_eq!(state_of(&db, id).await, "pending", "{destination}");
        assert_eq!(
            attempt_classes(&db, id).await,
            [("not_sent".to_owned(), Some("tls".to_owned()))],
            "{destination}"
        );
        let trail = evidence(&db, id).await.join("\n");
        assert!(
            trail.contains("not sent") && trail.contains("certificate"),
            "{destination}: {trail}"
        );
    }
    assert!(inbox.messages().await.is_empty());
    assert!(misnamed.messages().await.is_empty());
}

#[tokio::test]
async fn a_relay_that_does_not_offer_starttls_gets_nothing_in_plain_text_not_even_auth() {
    let db = TestDb::new().await;
    let files = TestCa::new("outbox test CA").issue(&["127.0.0.1"]);
    let inbox = Inbox::start_tls(&files, &[("SINK_SMTP_AUTH", &relay_auth())]).await;
    // As an attacker on the path would, the relay's answer to EHLO leaves STARTTLS out.
    inbox.faults(json!({"smtp_hide_starttls": true})).await;
    let ca = files.ca();
    let auth = password_flags(files.dir());
    let mut flags = vec![
        "--to",
        "cfo@acme.example",
        "--smtp-ca-file",
        ca.to_str().unwrap(),
    ];
    flags.extend(auth.iter().map(String::as_str));
    add_relay_destination(&db, "cfo", &inbox.smtp_port, "starttls", &flags).await;
    let id = approve_renewal(&db, "cfo", "contract:A-17").await;

    drain_logged(&db, "w1", &["--retry-delays", "1h"]).await;
    assert_eq!(state_of(&db, id).await, "pending");
    assert_eq!(
        attempt_classes(&db, id).await,
        [("not_sent".to_owned(), Some("tls".to_owned()))]
    );
    let trail = evidence(&db, id).await.join("\n");
    assert!(trail.contains("does not offer STARTTLS"), "{trail}");
    assert!(inbox.messages().await.is_empty());
    assert!(
        !inbox.logged("SMTP client authenticated") && !inbox.logged("SMTP authentication failed"),
        "credentials went out in plain text"
    );
}

#[tokio::test]
async fn a_refused_sender_is_not_sent_with_class_mail_from_and_retried_whatever_the_reply() {
    let (db, inbox) = inbox_with_destination("cfo", &["--to", "cfo@acme.example"]).await;
    let id = approve_renewal(&db, "cfo", "contract:A-17").await;
    inbox
        .faults(json!({"smtp_mail_from_script": ["451 4.7.1 sender deferred", "550 5.7.1 sender refused"]}))
        .await;

    drain_logged(&db, "w1", &[]).await;
    assert_eq!(state_of(&db, id).await, "accepted");
    assert_eq!(
        attempt_classes(&db, id).await,
        [
            ("not_sent".to_owned(), Some("mail_from".to_owned())),
            ("not_sent".to_owned(), Some("mail_from".to_owned())),
            ("accepted".to_owned(), None),
        ]
    );
    let trail = evidence(&db, id).await.join("\n");
    assert!(
        trail.contains("not sent (MAIL FROM") && trail.contains("sender deferred"),
        "{trail}"
    );
    assert_eq!(for_alert(&inbox.messages().await, id).len(), 1);
}

#[tokio::test]
async fn a_contracts_owners_get_its_renewal_alert_beside_the_destinations_recipients_once() {
    let (db, inbox) = inbox_with_destination("finance", &["--to", "cfo@acme.example"]).await;
    let dir = std::env::temp_dir().join(format!("outbox-contracts-{}", Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let header = "external_id,vendor,amount,currency,renewal_date,destinations,recipients\n";
    let good = dir.join("contracts.csv");
    // The owner CFO@... is the destination's own cfo@... in other letters: mailed once.
    std::fs::write(
        &good,
        format!("{header}A-17,Acme Tools,12000.00,EUR,2027-01-15,finance,buyer@acme.example;CFO@acme.example\n"),
    )
    .unwrap();
    let bad = dir.join("bad.csv");
    std::fs::write(
        &bad,
        format!("{header}A-17,Acme Tools,12000.00,EUR,2027-01-15,finance,someone\nB-2,Acme Tools,1.00,EUR,2027-01-15,finance,b@acme.example\n"),
    )
    .unwrap();

    let refused = import_contracts(&db, &bad).await;
    assert!(!refused.ok, "{}", refused.stdout);
    assert!(
        refused.stderr.starts_with("error:")
            && refused.stderr.trim_end().lines().count() == 1
            && refused.stderr.contains("line 2: recipient `someone`"),
        "{}",
        refused.stderr
    );
    assert_eq!(db.count("contracts").await, 0, "a bad file writes nothing");
    let imported = import_contracts(&db, &good).await;
    assert!(imported.ok, "{}", imported.stderr);
    std::fs::remove_dir_all(&dir).unwrap();

    // Thirty days before the action date: the 30-day alert is due.
    let decided = common::decider::run_once(&db.url)
        .args(["--now", "2026-12-16T12:00:00Z"])
        .output()
        .await
        .status;
    assert!(decided.success());
    let (id, payload): (Uuid, Value) =
        sqlx::query_as("SELECT id, payload::jsonb FROM alerts WHERE subject = 'contract:A-17'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        payload["recipients"],
        json!(["buyer@acme.example", "CFO@acme.example"]),
        "the payload carries the owners, so every retry has them"
    );

    drain_logged(&db, "w1", &[]).await;
    assert_eq!(state_of(&db, id).await, "accepted");
    let messages = inbox.messages().await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(
        messages[0]["rcpt_to"],
        json!(["cfo@acme.example", "buyer@acme.example"])
    );
    let (bytes, _) = stored(&db, id).await;
    let headers = String::from_utf8_lossy(&bytes).replace("\r\n ", " ");
    assert!(
        headers.contains("To: cfo@acme.example, buyer@acme.example\r\n"),
        "{headers}"
    );
}

#[tokio::test]
async fn sighup_reloads_the_tenants_templates_for_the_next_alert() {
    let (db, inbox) = inbox_with_destination("cfo", &["--to", "cfo@acme.example"]).await;
    let templates = std::env::temp_dir().join(format!("outbox-templates-{}", Uuid::new_v4()));
    std::fs::create_dir_all(templates.join("acme")).unwrap();
    let subject = templates.join("acme/contract_renewal.en.subject.txt");
    std::fs::write(&subject, "Before: {{ contract }}").unwrap();
    let args = dispatcher_args(&db, "w1", &["--templates-dir", templates.to_str().unwrap()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (dispatcher, _) = spawn_listening(
        env!("CARGO_BIN_EXE_dispatcher"),
        &args,
        &[("RUST_LOG", "info")],
        "dispatcher started",
    )
    .await;

    let before = approve_renewal(&db, "cfo", "contract:A-17").await;
    let accepted = |id: Uuid| {
        format!("SELECT count(*) FROM alert_states WHERE alert_id = '{id}' AND state = 'accepted'")
    };
    wait_for_db(&db, &accepted(before), |n| n == 1).await;
    std::fs::write(&subject, "After: {{ contract }}").unwrap();
    let hangup = std::process::Command::new("kill")
        .args(["-HUP", &dispatcher.id().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(hangup.success());
    let started = Instant::now();
    while !dispatcher
        .log_lines()
        .iter()
        .any(|l| l.contains("templates reloaded"))
    {
        assert!(
            started.elapsed() < DEADLINE,
            "the templates were not reloaded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = approve_renewal(&db, "cfo", "contract:B-2").await;
    wait_for_db(&db, &accepted(after), |n| n == 1).await;

    let messages = inbox.messages().await;
    assert_eq!(for_alert(&messages, before)[0]["subject"], "Before: A-17");
    assert_eq!(for_alert(&messages, after)[0]["subject"], "After: A-17");
    drop(dispatcher);
    std::fs::remove_dir_all(&templates).unwrap();
}

/// `outboxctl contract import FILE --tenant acme`.
async fn import_contracts(db: &TestDb, file: &std::path::Path) -> common::CliRun {
    let path = file.to_str().unwrap();
    outboxctl(db, &["contract", "import", path, "--tenant", "acme"]).await
}

/// Recipients a `To` header cannot be trusted to show: a quoted local part (a header built
/// from a list holding one does not read back as that list) and IP address domains.
const HIDDEN: [&str; 3] = [
    r#""a,b"@attacker.example"#,
    "x@[127.0.0.1]",
    "spy@127.0.0.1",
];

/// The addresses of the `To` header the sink recorded, in order.
fn to_header_addresses(message: &Value) -> Vec<String> {
    message["to"]
        .as_str()
        .expect("the sink recorded a To header")
        .split(',')
        .map(|address| address.trim().to_owned())
        .collect()
}

/// The renewal payload with `recipients` set.
fn renewal_naming(recipients: &[&str]) -> Value {
    let mut payload: Value = serde_json::from_str(RENEWAL).unwrap();
    payload["recipients"] = json!(recipients);
    payload
}

#[tokio::test]
async fn recipients_a_to_header_would_hide_are_refused_at_approval_and_nothing_is_mailed() {
    let api = common::Api::start().await;
    let inbox = Inbox::start().await;
    add_email_destination(&api.db, &inbox, "finance", &["--to", "legit@acme.example"]).await;
    for (n, hidden) in HIDDEN.iter().enumerate() {
        let payload = renewal_naming(&["cfo@acme.example", "spy@attacker.example", hidden]);
        let (status, problem) = api
            .approve(
                &api.acme.token,
                &json!({
                    "destination": "finance",
                    "subject": "contract:A-17",
                    "occurrence": format!("2027-01-15/{n}"),
                    "payload": payload,
                }),
            )
            .await;
        assert_eq!(status.as_u16(), 422, "{hidden}: {problem}");
        assert_eq!(problem["type"], "/problems/invalid-recipients");
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            detail.contains(hidden) && !detail.contains('\n'),
            "{detail}"
        );
    }
    assert_eq!(api.db.count("alerts").await, 0, "nothing was approved");

    drain_logged(&api.db, "w1", &[]).await;
    assert_eq!(inbox.messages().await, Vec::<Value>::new());
}

#[tokio::test]
async fn an_alert_names_at_most_100_recipients_at_approval() {
    let api = common::Api::start().await;
    let inbox = Inbox::start().await;
    add_email_destination(&api.db, &inbox, "finance", &["--to", "legit@acme.example"]).await;
    let owners: Vec<String> = (0..=100)
        .map(|i| format!("owner-{i}@acme.example"))
        .collect();
    let owners: Vec<&str> = owners.iter().map(String::as_str).collect();
    let approval = |owners: &[&str], occurrence: &str| {
        json!({
            "destination": "finance",
            "subject": "contract:A-17",
            "occurrence": occurrence,
            "payload": renewal_naming(owners),
        })
    };
    let (status, problem) = api
        .approve(&api.acme.token, &approval(&owners, "2027-01-15/30d"))
        .await;
    assert_eq!(status.as_u16(), 422, "{problem}");
    assert_eq!(problem["type"], "/problems/invalid-recipients");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("101 recipients; an alert goes to at most 100"),
        "{problem}"
    );
    assert_eq!(api.db.count("alerts").await, 0);
    // A repeated address counts once.
    let mut repeated = owners[..100].to_vec();
    repeated.push("OWNER-0@acme.example");
    let (status, body) = api
        .approve(&api.acme.token, &approval(&repeated, "2027-01-15/15d"))
        .await;
    assert_eq!(status.as_u16(), 201, "{body}");
}

/// An alert's payload (`$1`) stored as if it had been approved so, with its fingerprint.
const STORED_AS_APPROVED: &str = "UPDATE alerts SET payload = $1::text, \
     payload_sha256 = sha256(convert_to($1::text, 'UTF8')) WHERE id = $2";

#[tokio::test]
async fn a_hidden_recipient_stored_before_the_check_fails_the_alert_at_send_with_nothing_mailed() {
    let (db, inbox) = inbox_with_destination("finance", &["--to", "legit@acme.example"]).await;
    // Rows as a version without the check could have written them: the payload is
    // rewritten in place, past the approval's check, with the fingerprint that version
    // would have given it (the dispatcher refuses to send a payload that is not the one
    // its fingerprint says).
    let mut alerts = Vec::new();
    for (n, hidden) in HIDDEN.iter().enumerate() {
        let id = approve_renewal(&db, "finance", &format!("contract:A-{n}")).await;
        sqlx::query(STORED_AS_APPROVED)
            .bind(renewal_naming(&["spy@attacker.example", hidden]))
            .bind(id)
            .execute(&db.pool)
            .await
            .unwrap();
        alerts.push((id, *hidden));
    }
    drain_logged(&db, "w1", &[]).await;
    for (id, hidden) in alerts {
        assert_eq!(state_of(&db, id).await, "failed", "{hidden}");
        let lines = evidence(&db, id).await.join("\n");
        assert!(lines.contains(&format!("recipient `{hidden}`")), "{lines}");
    }
    assert_eq!(inbox.messages().await, Vec::<Value>::new());
}

#[tokio::test]
async fn a_stored_message_whose_to_header_leaves_out_a_recipient_is_never_sent() {
    let (db, inbox) = inbox_with_destination("finance", &["--to", "legit@acme.example"]).await;
    let id = approve_renewal(&db, "finance", "contract:A-17").await;
    sqlx::query(STORED_AS_APPROVED)
        .bind(renewal_naming(&["spy@attacker.example"]))
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    // The message as rendered before `To` was built from the whole list: it names one
    // recipient, the envelope two.
    let bytes = format!(
        "From: alerts@acme.example\r\nTo: legit@acme.example\r\nSubject: Renewal\r\n\
         Message-ID: <{id}@acme.example>\r\nX-Alert-Id: {id}\r\n\r\nRenewal due.\r\n"
    );
    outbox_store::rendered::store_once(
        &db.pool,
        id,
        &format!("<{id}@acme.example>"),
        bytes.as_bytes(),
        &format!("{:x}", Sha256::digest(bytes.as_bytes())),
        "builtin",
    )
    .await
    .unwrap();

    drain_logged(&db, "w1", &[]).await;
    assert_eq!(state_of(&db, id).await, "failed");
    let lines = evidence(&db, id).await.join("\n");
    assert!(
        lines.contains("To header names [legit@acme.example]")
            && lines.contains("[legit@acme.example, spy@attacker.example]"),
        "{lines}"
    );
    assert_eq!(inbox.messages().await, Vec::<Value>::new());
}

#[tokio::test]
async fn everyone_a_message_is_sent_to_is_named_in_its_to_header() {
    let api = common::Api::start().await;
    let inbox = Inbox::start().await;
    add_email_destination(
        &api.db,
        &inbox,
        "finance",
        &["--to", "cfo@acme.example", "--to", "legit@acme.example"],
    )
    .await;
    let owners: Vec<String> = (0..30).map(|i| format!("owner-{i}@acme.example")).collect();
    let mut named: Vec<&str> = owners.iter().map(String::as_str).collect();
    named.push("CFO@acme.example");
    let (status, body) = api
        .approve(
            &api.acme.token,
            &json!({
                "destination": "finance",
                "subject": "contract:A-17",
                "occurrence": "2027-01-15/30d",
                "payload": renewal_naming(&named),
            }),
        )
        .await;
    assert_eq!(status.as_u16(), 201, "{body}");
    drain_logged(&api.db, "w1", &[]).await;

    let messages = inbox.messages().await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    let envelope: Vec<String> = serde_json::from_value(messages[0]["rcpt_to"].clone()).unwrap();
    assert_eq!(envelope.len(), 32, "each address once: {envelope:?}");
    assert_eq!(envelope[..2], ["cfo@acme.example", "legit@acme.example"]);
    assert_eq!(to_header_addresses(&messages[0]), envelope);
}

#[tokio::test]
async fn contract_files_naming_hidden_recipients_import_nothing() {
    let db = TestDb::new().await;
    assert!(outboxctl(&db, &["tenant", "create", "acme"]).await.ok);
    let dir = std::env::temp_dir().join(format!("outbox-contracts-{}", Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    for hidden in HIDDEN {
        let csv = dir.join("contracts.csv");
        // The field quoted as CSV quotes it: in double quotes, a quote doubled.
        let owners = format!("\"cfo@acme.example;{}\"", hidden.replace('"', "\"\""));
        std::fs::write(
            &csv,
            format!(
                "external_id,vendor,amount,currency,renewal_date,recipients\n\
                 A-1,Acme,10,EUR,2027-01-15,cfo@acme.example\n\
                 A-2,Acme,10,EUR,2027-01-15,{owners}\n"
            ),
        )
        .unwrap();
        let json = dir.join("contracts.json");
        let items = json!([
            {"external_id": "J-1", "vendor": "Acme", "amount": 10, "currency": "EUR",
             "renewal_date": "2027-01-15", "recipients": ["cfo@acme.example"]},
            {"external_id": "J-2", "vendor": "Acme", "amount": 10, "currency": "EUR",
             "renewal_date": "2027-01-15", "recipients": ["cfo@acme.example", hidden]},
        ]);
        std::fs::write(&json, items.to_string()).unwrap();

        for (file, row) in [(&csv, "line 3"), (&json, "item 2")] {
            let path = file.to_str().unwrap();
            let run = import_contracts(&db, file).await;
            assert!(!run.ok, "{path} with {hidden} was imported");
            assert!(
                run.stderr.starts_with("error:")
                    && run.stderr.trim_end().lines().count() == 1
                    && run.stderr.contains(&format!("{row}: recipient `{hidden}`")),
                "{}",
                run.stderr
            );
        }
    }
    assert_eq!(db.count("contracts").await, 0, "a bad file writes nothing");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn destination_recipients_that_a_to_header_would_hide_are_refused_in_one_line() {
    let db = TestDb::new().await;
    assert!(outboxctl(&db, &["tenant", "create", "acme"]).await.ok);
    let finance = || {
        DestinationAdd::named("finance")
            .args(&["--from", "alerts@acme.example"])
            .loopback_allowed()
    };
    let email = ["--kind", "email", "--smtp-host", "127.0.0.1"];
    let email = [&email[..], &["--smtp-tls", "none"]].concat();
    let key = std::env::temp_dir().join(format!("outbox-api-key-{}", Uuid::new_v4()));
    std::fs::write(&key, "re_test_key\n").unwrap();
    let email_api = ["--url", "https://8.8.8.8/emails"];
    let email_api = [&email_api[..], &["--body-template", "email-api-resend"]].concat();
    let email_api = [
        &email_api[..],
        &["--bearer-token-file", key.to_str().unwrap()],
    ]
    .concat();
    for kind in [&email[..], &email_api[..]] {
        for (hidden, why) in HIDDEN.iter().zip([
            "has a quoted local part",
            "is addressed to an IP address",
            "is addressed to an IP address",
        ]) {
            let add = finance()
                .args(kind)
                .args(&["--to", "cfo@acme.example", "--to", hidden]);
            let args = add.to_args();
            let run = add.run(&db).await;
            assert!(!run.ok, "{args:?} was accepted");
            assert_eq!(run.stderr.trim_end().lines().count(), 1, "{}", run.stderr);
            assert!(
                run.stderr
                    .starts_with(&format!("error: --to: recipient `{hidden}` {why}")),
                "{}",
                run.stderr
            );
        }
    }
    assert_eq!(db.count("destinations").await, 0);
    // The same flags with plain addresses are accepted.
    let add = finance().args(&email).args(&["--to", "cfo@acme.example"]);
    add.add(&db).await;
    std::fs::remove_file(&key).unwrap();
}
