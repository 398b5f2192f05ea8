//! Secrets and tokens end to end, with the real `outboxctl`, `dispatcher` and `sink` over a
//! real database: signing secrets encrypted at rest and still signing, keys rotated,
//! secrets rotated with an overlap, secrets kept off argv, credentials in URLs redacted,
//! tokens listed, revoked and expired.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use base64::Engine;
use common::alerts::{self, evidence, state_of};
use common::assert_contains;
use common::destinations::DestinationAdd;
use common::procs::*;
use common::{assert_refused, Api, CliRun, Outboxctl};
use outbox_testkit::TestDb;
use reqwest::StatusCode;
use std::sync::{Arc, Mutex};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// The base64 part of [`SECRET`]: what must never be readable in the database.
const SECRET_KEY_TEXT: &str = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn key(byte: u8) -> String {
    base64::engine::general_purpose::STANDARD.encode([byte; 32])
}

fn keys_k1() -> String {
    format!("k1:{}", key(1))
}

/// `outboxctl` with `env` and, when given, `stdin`; loopback, where the sinks and receivers
/// of these tests listen, is opened in the egress guard.
async fn ctl<S: AsRef<str>>(
    db: &TestDb,
    args: &[S],
    env: &[(&str, &str)],
    stdin: Option<&str>,
) -> CliRun {
    let mut run = Outboxctl::on(db).args(args).loopback_allowed().envs(env);
    if let Some(text) = stdin {
        run = run.stdin(text);
    }
    run.run().await
}

/// `outboxctl secrets rewrap` with `keys` as OUTBOX_SECRET_KEYS.
async fn rewrap_with(db: &TestDb, keys: &str) -> CliRun {
    ctl(
        db,
        &["secrets", "rewrap"],
        &[("OUTBOX_SECRET_KEYS", keys)],
        None,
    )
    .await
}

/// `outboxctl destination rotate-secret NAME --tenant acme` with `flags`.
async fn rotate_secret(db: &TestDb, name: &str, flags: &[&str], env: &[(&str, &str)]) -> CliRun {
    let rotate = ["destination", "rotate-secret", name, "--tenant", "acme"];
    ctl(db, &[&rotate[..], flags].concat(), env, None).await
}

/// `outboxctl destination add` arguments for the webhook destination `ops` of tenant `acme`.
fn add_ops(url: &str, extra: &[&str]) -> Vec<String> {
    DestinationAdd::webhook("ops", url).args(extra).into_args()
}

async fn stored_secrets(db: &TestDb, name: &str) -> (Vec<String>, Vec<String>) {
    sqlx::query_as(
        "SELECT signing_secrets, retiring_signing_secrets FROM destinations WHERE name = $1",
    )
    .bind(name)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// A tenant `acme` made with `outboxctl` (no destination yet).
async fn tenant(db: &TestDb) -> uuid::Uuid {
    let run = ctl(db, &["tenant", "create", "acme"], &[], None).await;
    assert!(run.ok, "{}", run.stderr);
    run.stdout.trim().parse().unwrap()
}

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("{name}-{}", uuid::Uuid::new_v4()));
    std::fs::write(&path, text).unwrap();
    path
}

/// Approves one new alert for `destination` (a fresh subject each time).
async fn approve_one(db: &TestDb, tenant_id: uuid::Uuid, destination: &str) -> uuid::Uuid {
    let subject = format!("contract:{}", uuid::Uuid::new_v4());
    let payload = r#"{"text":"renewal due"}"#;
    alerts::approve_one(
        db,
        tenant_id,
        destination,
        &subject,
        "2027-01-31/30d",
        payload,
    )
    .await
}

#[tokio::test]
async fn secrets_are_encrypted_at_rest_and_the_dispatcher_signs_with_the_decrypted_secret() {
    let db = TestDb::new().await;
    let tenant_id = tenant(&db).await;
    let sink = Sink::start(&["--secret", SECRET]).await;
    let file = temp_file("secret", &format!("{SECRET}\n"));
    let add = ctl(
        &db,
        &add_ops(&sink.hook_url(), &["--secret-file", file.to_str().unwrap()]),
        &[("OUTBOX_SECRET_KEYS", &keys_k1())],
        None,
    )
    .await;
    std::fs::remove_file(&file).unwrap();
    assert!(add.ok, "{}", add.stderr);
    assert!(!add.stderr.contains("warning"), "{}", add.stderr);

    // Read back from the database: sealed under k1, the secret nowhere in the row.
    let (current, _) = stored_secrets(&db, "ops").await;
    assert_eq!(current.len(), 1);
    assert!(current[0].starts_with("enc:v1:k1:"), "{}", current[0]);
    let row: String = sqlx::query_scalar("SELECT d::text FROM destinations d")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(!row.contains(SECRET_KEY_TEXT), "{row}");

    // The dispatcher, given the same keys, signs with the decrypted secret: the sink's own
    // signature check says so.
    let id = approve_one(&db, tenant_id, "ops").await;
    drain(&db, "d1", &["--secret-keys", &keys_k1()]).await;
    assert_eq!(state_of(&db, id).await, "accepted");
    let records = sink.records(&id.to_string()).await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["signature"], "valid", "{records:?}");

    let list = ctl(&db, &["destination", "list"], &[], None).await;
    assert_contains(&list.stdout, "1 sealed");
}

#[tokio::test]
async fn a_secret_that_cannot_be_decrypted_fails_the_alert_with_evidence_and_sends_nothing() {
    let db = TestDb::new().await;
    let tenant_id = tenant(&db).await;
    let sink = Sink::start(&["--secret", SECRET]).await;
    for name in ["ops", "other"] {
        let webhook = DestinationAdd::webhook(name, &sink.hook_url());
        let add = ctl(
            &db,
            &webhook.args(&["--secret-stdin"]).into_args(),
            &[("OUTBOX_SECRET_KEYS", &keys_k1())],
            Some(SECRET),
        )
        .await;
        assert!(add.ok, "{}", add.stderr);
    }
    // Attack: move `ops`'s sealed secret onto `other`. The associated data binds it to
    // `ops`, so it does not open for `other`.
    sqlx::query(
        "UPDATE destinations SET signing_secrets = \
             (SELECT signing_secrets FROM destinations WHERE name = 'ops') \
         WHERE name = 'other'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let moved = approve_one(&db, tenant_id, "other").await;
    drain(&db, "d1", &["--secret-keys", &keys_k1()]).await;
    assert_eq!(state_of(&db, moved).await, "failed");
    let lines = evidence(&db, moved).await.join("\n");
    assert!(lines.contains("does not decrypt"), "{lines}");

    // A dispatcher without the key: the same, with the reason, and no retries.
    let unkeyed = approve_one(&db, tenant_id, "ops").await;
    drain(&db, "d2", &[]).await;
    assert_eq!(state_of(&db, unkeyed).await, "failed");
    let lines = evidence(&db, unkeyed).await.join("\n");
    assert!(lines.contains("no key is configured"), "{lines}");
    let attempts = db.count("delivery_attempts").await;
    assert_eq!(attempts, 2, "one attempt each, no retry storm");
    assert_eq!(sink.stats().await["requests"], 0, "nothing sent unsigned");
}

#[tokio::test]
async fn rewrap_encrypts_plain_secrets_moves_them_to_the_new_key_and_can_run_again() {
    let db = TestDb::new().await;
    let tenant_id = tenant(&db).await;
    let sink = Sink::start(&["--secret", SECRET]).await;
    // No key yet: stored as given, with a warning saying so.
    let add = ctl(
        &db,
        &add_ops(&sink.hook_url(), &["--secret-stdin"]),
        &[],
        Some(SECRET),
    )
    .await;
    assert!(add.ok, "{}", add.stderr);
    assert_contains(&add.stderr, "warning: OUTBOX_SECRET_KEYS is not set");
    assert_eq!(stored_secrets(&db, "ops").await.0, vec![SECRET.to_owned()]);

    assert_refused(
        &ctl(&db, &["secrets", "rewrap"], &[], None).await,
        "OUTBOX_SECRET_KEYS is not set",
    );

    let rewrap = rewrap_with(&db, &keys_k1()).await;
    assert!(rewrap.ok, "{}", rewrap.stderr);
    let (current, _) = stored_secrets(&db, "ops").await;
    assert!(current[0].starts_with("enc:v1:k1:"), "{current:?}");

    // Key rotation: k2 first, k1 still there to open what it sealed.
    let both = format!("k2:{},k1:{}", key(2), key(1));
    let rewrap = rewrap_with(&db, &both).await;
    assert!(rewrap.ok, "{}", rewrap.stderr);
    let (current, _) = stored_secrets(&db, "ops").await;
    assert!(current[0].starts_with("enc:v1:k2:"), "{current:?}");
    // Running it again changes nothing.
    let again = rewrap_with(&db, &both).await;
    assert!(again.ok, "{}", again.stderr);
    assert_contains(&again.stderr, "0 destination(s)");
    assert_eq!(stored_secrets(&db, "ops").await.0, current);

    // k1 can now be dropped: the dispatcher with k2 alone signs correctly.
    let id = approve_one(&db, tenant_id, "ops").await;
    drain(&db, "d1", &["--secret-keys", &format!("k2:{}", key(2))]).await;
    assert_eq!(state_of(&db, id).await, "accepted");
    assert_eq!(sink.records(&id.to_string()).await[0]["signature"], "valid");

    // A key that is gone makes rewrap refuse, naming the problem, and change nothing.
    let only_k3 = format!("k3:{}", key(3));
    let lost = rewrap_with(&db, &only_k3).await;
    assert!(!lost.ok);
    assert_contains(&lost.stderr, "cannot be decrypted");
    assert_eq!(stored_secrets(&db, "ops").await.0, current);
}

#[tokio::test]
async fn secrets_are_read_from_files_and_stdin_and_bad_ones_are_refused_without_writing() {
    let db = TestDb::new().await;
    tenant(&db).await;
    let add = |extra: &'static [&'static str]| add_ops("https://hooks.example.com/x", extra);
    assert_refused(
        &ctl(&db, &add(&["--secret-stdin"]), &[], Some("not-a-secret\n")).await,
        "--secret-stdin",
    );
    assert_refused(
        &ctl(&db, &add(&["--secret-stdin"]), &[], Some("\n")).await,
        "holds no signing secret",
    );
    assert_refused(
        &ctl(
            &db,
            &add(&["--secret-file", "/nonexistent/secret"]),
            &[],
            None,
        )
        .await,
        "cannot be read",
    );
    assert_eq!(db.count("destinations").await, 0);
    let bad = format!("k1:{}", "c2hvcnQ=");
    assert_refused(
        &ctl(
            &db,
            &add(&["--secret-stdin"]),
            &[("OUTBOX_SECRET_KEYS", &bad)],
            Some(SECRET),
        )
        .await,
        "32 bytes",
    );
    assert_eq!(db.count("destinations").await, 0);
    // The error text never contains the secret.
    let wrong = ctl(
        &db,
        &add(&["--secret-stdin"]),
        &[],
        Some("whsec_c2hvcnRzZWNyZXQ="),
    )
    .await;
    assert!(
        !wrong.stderr.contains("c2hvcnRzZWNyZXQ"),
        "{}",
        wrong.stderr
    );
}

/// What a receiver saw: the id, timestamp, body and `webhook-signature` of each request.
type Seen = Arc<Mutex<Vec<(String, i64, Vec<u8>, String)>>>;

/// A receiver that keeps each request's signature header, to check every signature in it
/// separately (the sink only says whether any of them is valid).
async fn signature_recorder() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let kept = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let header = |name: &str| headers[name].to_str().unwrap().to_owned();
                    kept.lock().unwrap().push((
                        header("webhook-id"),
                        header("webhook-timestamp").parse().unwrap(),
                        body.to_vec(),
                        header("webhook-signature"),
                    ));
                    StatusCode::OK
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

/// Which of `secrets` each signature in the last request verifies with, one set per
/// signature.
fn signers(seen: &Seen, secrets: &[&str]) -> Vec<Vec<usize>> {
    let seen = seen.lock().unwrap();
    let (id, timestamp, body, header) = seen.last().unwrap();
    header
        .split(' ')
        .map(|signature| {
            secrets
                .iter()
                .enumerate()
                .filter(|(_, secret)| {
                    let key = outbox_core::signing::decode_secret(secret).unwrap();
                    outbox_core::signing::verify(&[key], id, *timestamp, body, signature)
                })
                .map(|(i, _)| i)
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn a_rotated_secret_signs_beside_the_old_one_during_the_overlap_then_alone() {
    let db = TestDb::new().await;
    let tenant_id = tenant(&db).await;
    let (url, seen) = signature_recorder().await;
    let keys = keys_k1();
    let env = [("OUTBOX_SECRET_KEYS", keys.as_str())];
    let add = ctl(&db, &add_ops(&url, &["--secret-stdin"]), &env, Some(SECRET)).await;
    assert!(add.ok, "{}", add.stderr);

    let rotate = rotate_secret(&db, "ops", &["--generate", "--overlap", "24h"], &env).await;
    assert!(rotate.ok, "{}", rotate.stderr);
    let new_secret = rotate.stdout.trim().to_owned();
    assert!(new_secret.starts_with("whsec_"), "{new_secret}");
    assert_ne!(new_secret, SECRET);
    let (current, retiring) = stored_secrets(&db, "ops").await;
    assert!(current[0].starts_with("enc:v1:k1:") && retiring[0].starts_with("enc:v1:k1:"));
    assert!(!current[0].contains(&new_secret[6..]));
    let list = ctl(&db, &["destination", "list"], &[], None).await;
    assert_contains(&list.stdout, "1 + 1 until");

    // During the overlap: two signatures, one by each secret.
    approve_one(&db, tenant_id, "ops").await;
    drain(&db, "d1", &["--secret-keys", &keys]).await;
    assert_eq!(
        signers(&seen, &[SECRET, &new_secret]),
        vec![vec![1], vec![0]],
        "the new secret's signature and the old one's"
    );

    // The overlap ends (as if 24 hours had passed): only the new secret signs.
    sqlx::query("UPDATE destinations SET retiring_until = now() - interval '1 second'")
        .execute(&db.pool)
        .await
        .unwrap();
    let second = approve_one(&db, tenant_id, "ops").await;
    drain(&db, "d2", &["--secret-keys", &keys]).await;
    assert_eq!(state_of(&db, second).await, "accepted");
    assert_eq!(signers(&seen, &[SECRET, &new_secret]), vec![vec![1]]);

    // A rotation from a file with no overlap: the replaced secret stops at once.
    let file = temp_file("rotated", &format!("{SECRET}\n"));
    let from_file = ["--secret-file", file.to_str().unwrap(), "--overlap", "0s"];
    let rotate = rotate_secret(&db, "ops", &from_file, &env).await;
    std::fs::remove_file(&file).unwrap();
    assert!(rotate.ok, "{}", rotate.stderr);
    assert!(rotate.stdout.is_empty(), "a given secret is not echoed");
    assert_eq!(stored_secrets(&db, "ops").await.1, Vec::<String>::new());

    // One source is required, and unknown destinations are refused.
    assert_refused(&rotate_secret(&db, "ops", &[], &env).await, "required");
    let unknown = rotate_secret(&db, "nope", &["--generate"], &env).await;
    assert_refused(&unknown, "no destination named `nope`");
}

#[tokio::test]
async fn credentials_in_urls_are_redacted_in_every_view() {
    let db = TestDb::new().await;
    let tenant_id = tenant(&db).await;
    let password = "s3cr3tpass";
    let url = format!("http://hooker:{password}@127.0.0.1:9/hook");
    let lookup = format!("http://hooker:{password}@127.0.0.1:9/lookup/{{key}}");
    let add = ctl(&db, &add_ops(&url, &["--lookup-url", &lookup]), &[], None).await;
    assert!(add.ok, "{}", add.stderr);
    let id = approve_one(&db, tenant_id, "ops").await;
    drain(&db, "d1", &[]).await;

    let list = ctl(&db, &["destination", "list"], &[], None).await;
    assert_contains(&list.stdout, "http://***@127.0.0.1:9/hook");
    let json = ctl(&db, &["destination", "list", "--json"], &[], None).await;
    assert_contains(&json.stdout, "http://***@127.0.0.1:9/lookup/{key}");

    let id = id.to_string();
    for view in [
        vec!["destination", "list"],
        vec!["destination", "list", "--json"],
        vec!["alert", "show", &id],
        vec!["alert", "show", &id, "--json"],
        vec!["outbox", "list", "--status", "pending"],
        vec!["outbox", "list", "--json"],
        vec!["stats"],
        vec!["stats", "--json"],
    ] {
        let run = ctl(&db, &view, &[], None).await;
        assert!(run.ok, "{view:?}: {}", run.stderr);
        assert!(
            !run.stdout.contains(password) && !run.stderr.contains(password),
            "{view:?} shows the password: {}",
            run.stdout
        );
    }
    let lines = evidence(&db, id.parse().unwrap()).await.join("\n");
    assert!(!lines.is_empty());
    assert!(!lines.contains(password), "{lines}");
}

#[tokio::test]
async fn credential_query_values_are_hidden_in_every_view() {
    let db = TestDb::new().await;
    tenant(&db).await;
    let url = "http://127.0.0.1:9/hook?api_key=QUERYSECRET&X-Auth=AUTHSECRET&page=2";
    let lookup = "http://127.0.0.1:9/lookup/{key}?sig=LOOKUPSECRET";
    let add = ctl(&db, &add_ops(url, &["--lookup-url", lookup]), &[], None).await;
    assert!(add.ok, "{}", add.stderr);

    for view in [
        vec!["destination", "list"],
        vec!["destination", "list", "--json"],
        vec!["destination", "show", "ops", "--tenant", "acme"],
        vec!["destination", "show", "ops", "--tenant", "acme", "--json"],
    ] {
        let run = ctl(&db, &view, &[], None).await;
        assert!(run.ok, "{view:?}: {}", run.stderr);
        for secret in ["QUERYSECRET", "AUTHSECRET", "LOOKUPSECRET"] {
            assert!(
                !run.stdout.contains(secret) && !run.stderr.contains(secret),
                "{view:?} shows {secret}: {}",
                run.stdout
            );
        }
        assert!(
            run.stdout
                .contains("http://127.0.0.1:9/hook?api_key=***&X-Auth=***&page=2"),
            "{view:?}: {}",
            run.stdout
        );
    }
    let show = ctl(
        &db,
        &["destination", "show", "ops", "--tenant", "acme"],
        &[],
        None,
    )
    .await;
    assert_contains(&show.stdout, "http://127.0.0.1:9/lookup/{key}?sig=***");
    // Only the views hide them: the destination keeps its URL.
    let stored: String = sqlx::query_scalar("SELECT url FROM destinations WHERE name = 'ops'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(stored, url);
}

/// `decider run-once` polling the watchlists at `news_url` with `flags` and `env`: whether
/// it succeeded, and what it logged (at warn level).
async fn poll_news(
    db: &TestDb,
    news_url: &str,
    flags: &[&str],
    env: &[(&str, &str)],
) -> (bool, String) {
    let mut run = common::decider::poll_news_once(&db.url, news_url)
        .args(flags)
        .env_remove("WEBZ_TOKEN")
        .env_remove("WEBZ_TOKEN_FILE");
    for (name, value) in env {
        run = run.env(name, value);
    }
    let output = run.output().await;
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// One way of giving a process a secret: a name for it, the flags, the environment.
type SecretGiven<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a str)>);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_news_token_comes_from_a_file_or_the_environment_and_as_a_flag_it_warns() {
    let db = crate::egress::acme_watching_the_news().await;
    let (feed, seen) = crate::egress::recording_server().await;
    let news_url = format!("{feed}/newsApiLite");
    let file = temp_file("webz-token", "token-from-a-file\n");
    let cases: [SecretGiven; 3] = [
        (
            "token-from-a-file",
            vec!["--webz-token-file", file.to_str().unwrap()],
            vec![],
        ),
        (
            "token-from-the-env",
            vec![],
            vec![("WEBZ_TOKEN", "token-from-the-env")],
        ),
        (
            "token-on-argv",
            vec!["--webz-token", "token-on-argv"],
            vec![],
        ),
    ];
    for (token, flags, env) in cases {
        seen.lock().unwrap().clear();
        let (ok, logs) = poll_news(&db, &news_url, &flags, &env).await;
        assert!(ok, "{token}: {logs}");
        let requests = seen.lock().unwrap().clone();
        assert!(
            !requests.is_empty()
                && requests
                    .iter()
                    .all(|r| r.contains(&format!("token={token}"))),
            "{token}: {requests:?}"
        );
        let warned =
            logs.contains("WARN") && logs.contains("use WEBZ_TOKEN or --webz-token-file instead");
        assert_eq!(warned, token == "token-on-argv", "{token}: {logs}");
        assert!(!logs.contains(token), "{token} logged: {logs}");
    }

    let absent = file.with_extension("absent");
    let (ok, logs) = poll_news(
        &db,
        &news_url,
        &["--webz-token-file", absent.to_str().unwrap()],
        &[],
    )
    .await;
    assert!(!ok && logs.contains("--webz-token-file: reading"), "{logs}");
    std::fs::remove_file(&file).unwrap();
}

#[tokio::test]
async fn revoked_and_expired_tokens_are_refused_with_401() {
    let api = Api::start().await;
    let db = &api.db;
    let probe = format!("/v1/alerts/{}", uuid::Uuid::now_v7());
    // The fixture's token works: an unknown alert is 404, not 401.
    assert_eq!(
        api.get(&probe, &api.acme.token).await.0,
        StatusCode::NOT_FOUND
    );

    let created = ctl(
        db,
        &[
            "token",
            "create",
            "--tenant",
            "acme",
            "--label",
            "ci",
            "--expires-in",
            "90d",
        ],
        &[],
        None,
    )
    .await;
    assert!(created.ok, "{}", created.stderr);
    let expiring = created.stdout.trim().to_owned();
    assert_eq!(api.get(&probe, &expiring).await.0, StatusCode::NOT_FOUND);

    let list = ctl(
        db,
        &["token", "list", "--tenant", "acme", "--json"],
        &[],
        None,
    )
    .await;
    assert!(list.ok, "{}", list.stderr);
    let tokens: Vec<serde_json::Value> = list
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(tokens.len(), 2);
    let ci = tokens.iter().find(|t| t["label"] == "ci").unwrap();
    assert!(
        ci["expires_at"].is_string() && ci["last_used_at"].is_string(),
        "{ci}"
    );
    let ci_id = ci["id"].as_str().unwrap().to_owned();
    let fixture = tokens.iter().find(|t| t["label"] == "tests").unwrap();
    let fixture_id = fixture["id"].as_str().unwrap().to_owned();
    // Never the token, nor its hash.
    let hash_hex: String =
        sqlx::query_scalar("SELECT encode(token_hash, 'hex') FROM api_tokens WHERE label = 'ci'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let table = ctl(db, &["token", "list"], &[], None).await;
    for shown in [&list.stdout, &table.stdout] {
        assert!(!shown.contains(&expiring[4..]) && !shown.contains(&api.acme.token[4..]));
        assert!(!shown.contains(&hash_hex));
    }
    assert!(table.stdout.contains(&ci_id) && table.stdout.contains("active"));

    // Expiry moved into the past (as if 90 days had gone by): 401 within the bound.
    sqlx::query(
        "UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE label = 'ci'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    refused_within_the_bound(&api, &probe, &expiring, std::time::Instant::now()).await;
    assert!(ctl(db, &["token", "list"], &[], None)
        .await
        .stdout
        .contains("expired"));

    // Revocation holds within the bound, and then for approvals too.
    let revoke = ctl(db, &["token", "revoke", &fixture_id], &[], None).await;
    assert!(revoke.ok, "{}", revoke.stderr);
    refused_within_the_bound(&api, &probe, &api.acme.token, std::time::Instant::now()).await;
    let (status, _) = api.approve(&api.acme.token, &common::renewal(1)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(db.count("alerts").await, 0);
    let again = ctl(db, &["token", "revoke", &fixture_id], &[], None).await;
    assert!(
        again.ok && again.stderr.contains("already revoked"),
        "{}",
        again.stderr
    );
    assert_refused(
        &ctl(db, &["token", "revoke", "17"], &[], None).await,
        "not a token id",
    );
    assert_refused(
        &ctl(
            db,
            &["token", "revoke", &uuid::Uuid::now_v7().to_string()],
            &[],
            None,
        )
        .await,
        "no token",
    );
}

/// Polls `path` with `token`, whose revocation (or expiry) was committed before `changed`:
/// a request may still be served from the token cache while it starts within
/// [`outbox_api::TOKEN_CACHE_TTL`] of `changed`; every request that starts later is
/// refused, and once one is refused, all the next ones are.
async fn refused_within_the_bound(api: &Api, path: &str, token: &str, changed: std::time::Instant) {
    let bound = changed + outbox_api::TOKEN_CACHE_TTL;
    loop {
        let started = std::time::Instant::now();
        let (status, body) = api.get(path, token).await;
        if status == StatusCode::UNAUTHORIZED {
            break;
        }
        assert!(
            started < bound,
            "a request that started {:?} after the change was still served: {status} {body}",
            started - changed
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for _ in 0..3 {
        assert_eq!(api.get(path, token).await.0, StatusCode::UNAUTHORIZED);
    }
}

#[tokio::test]
async fn a_revoked_token_is_refused_within_the_cache_bound_on_every_path() {
    let api = Api::start().await;
    let db = &api.db;
    // The token is in use, so the decider holds its answer.
    let (status, _) = api.approve(&api.acme.token, &common::renewal(1)).await;
    assert_eq!(status, StatusCode::CREATED);
    let probe = format!("/v1/alerts/{}", uuid::Uuid::now_v7());
    assert_eq!(
        api.get(&probe, &api.acme.token).await.0,
        StatusCode::NOT_FOUND
    );

    let id: uuid::Uuid = sqlx::query_scalar("SELECT id FROM api_tokens")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    outbox_store::tokens::revoke(&db.pool, id).await.unwrap();
    refused_within_the_bound(&api, &probe, &api.acme.token, std::time::Instant::now()).await;

    // Approvals and revisions are refused too, and write nothing.
    let before = common::counts(db).await;
    let (status, _) = api.approve(&api.acme.token, &common::renewal(2)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let alert: uuid::Uuid = sqlx::query_scalar("SELECT id FROM alerts")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let (status, _) = api
        .post(
            &format!("/v1/alerts/{alert}/revisions"),
            &api.acme.token,
            &serde_json::json!({"payload": {"a": 1}, "reason": "after revocation"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(common::counts(db).await, before);
}

#[tokio::test]
async fn rewrapping_never_overwrites_a_rotation_that_happened_meanwhile() {
    let db = TestDb::new().await;
    let tenant_id = tenant(&db).await;
    let add = ctl(
        &db,
        &add_ops("https://hooks.example.com/x", &["--secret-stdin"]),
        &[],
        Some(SECRET),
    )
    .await;
    assert!(add.ok, "{}", add.stderr);
    let id = outbox_store::destinations::id_by_name(&db.pool, tenant_id, "ops")
        .await
        .unwrap();
    // What a rewrap read, then a rotation lands before it writes.
    let read = outbox_store::destinations::stored_secrets_page(&db.pool, None, 10)
        .await
        .unwrap()
        .remove(0);
    let rotated = outbox_core::signing::generate_secret();
    outbox_store::destinations::rotate_secret(&db.pool, id, &rotated, std::time::Duration::ZERO)
        .await
        .unwrap();
    let resealed = outbox_store::destinations::StoredSecrets {
        id,
        signing_secrets: vec!["enc:v1:k1:stale".to_owned()],
        retiring_signing_secrets: vec![],
        smtp_password: None,
        bearer_token: None,
    };
    let written = outbox_store::destinations::replace_stored_secrets(&db.pool, &read, &resealed)
        .await
        .unwrap();
    assert!(!written, "the stale rewrap must not land");
    assert_eq!(stored_secrets(&db, "ops").await.0, vec![rotated]);
}
