//! Arbitrary bytes in every form field and query parameter of the console, against a real
//! `decider serve --console-listen` over a real database: bad input is a 4xx page, never a
//! server error. The NUL character, which PostgreSQL's text cannot hold, is refused as bad
//! input wherever it is sent.

use super::*;
use common::decider::{Decider, DeciderServe};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// The decider under test, an operator signed in to it, and things that exist.
struct Target {
    _decider: Decider,
    base: String,
    http: reqwest::Client,
    db: TestDb,
    cookie: String,
    csrf: String,
    alert: Uuid,
    destination: Uuid,
    bulk: Uuid,
}

/// Percent-encodes every byte but the unreserved ones.
fn encode(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A field a client can fill: method, path, the field, and the other fields sent with it
/// (`CSRF` is replaced by the session's form token).
type Field = (
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

/// Every field a client can fill.
const FIELDS: &[Field] = &[
    ("GET", "/console/outbox", "tenant", &[]),
    ("GET", "/console/outbox", "destination", &[]),
    ("GET", "/console/outbox", "state", &[]),
    ("GET", "/console/outbox", "from", &[]),
    ("GET", "/console/outbox", "to", &[]),
    ("GET", "/console/outbox", "subject", &[]),
    ("GET", "/console/outbox", "before", &[]),
    ("GET", "/console/audit", "operator", &[]),
    ("GET", "/console/audit", "after", &[]),
    (
        "GET",
        "/console/bulk-replay",
        "tenant",
        &[("state", "held")],
    ),
    (
        "GET",
        "/console/bulk-replay",
        "subject",
        &[("state", "failed")],
    ),
    ("GET", "/console/bulk-replay", "state", &[]),
    ("GET", "/console/alerts/ALERT/resolve", "as", &[]),
    ("POST", "/console/login", "name", &[("password", "x")]),
    ("POST", "/console/login", "password", &[("name", "alice")]),
    (
        "POST",
        "/console/login",
        "login_token",
        &[("name", "x"), ("password", "x")],
    ),
    (
        "POST",
        "/console/alerts/ALERT/replay",
        "note",
        &[("csrf", "CSRF")],
    ),
    (
        "POST",
        "/console/alerts/ALERT/replay",
        "csrf",
        &[("note", "n")],
    ),
    (
        "POST",
        "/console/alerts/ALERT/resolve",
        "note",
        &[("csrf", "CSRF"), ("resolution", "abandon")],
    ),
    (
        "POST",
        "/console/alerts/ALERT/resolve",
        "resolution",
        &[("csrf", "CSRF"), ("note", "n")],
    ),
    (
        "POST",
        "/console/alerts/ALERT/resolve",
        "reference",
        &[("csrf", "CSRF"), ("note", "n"), ("resolution", "accepted")],
    ),
    (
        "POST",
        "/console/destinations/DESTINATION/enabled",
        "enabled",
        &[("csrf", "CSRF")],
    ),
    (
        "POST",
        "/console/bulk-replay",
        "note",
        &[("csrf", "CSRF"), ("state", "held"), ("tenant", "nobody")],
    ),
    (
        "POST",
        "/console/bulk-replay",
        "tenant",
        &[("csrf", "CSRF"), ("state", "held"), ("note", "n")],
    ),
    (
        "POST",
        "/console/bulk-replay",
        "subject",
        &[
            ("csrf", "CSRF"),
            ("state", "held"),
            ("tenant", "nobody"),
            ("note", "n"),
        ],
    ),
    (
        "POST",
        "/console/bulk-replay/BULK/running",
        "running",
        &[("csrf", "CSRF")],
    ),
];

impl Target {
    async fn start() -> Target {
        let db = TestDb::new().await;
        let tenant = add_tenant(&db, "acme", &["ops"]).await;
        let alert = approve_many(&db, tenant.id, "ops", 1).await[0];
        let destination: Uuid = sqlx::query_scalar("SELECT id FROM destinations")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        let bulk = outbox_store::bulk_replays::create_bulk_replay(
            &db.pool,
            "alice",
            "n",
            Some(&[tenant.id]),
            &outbox_store::alert_listings::AlertFilter {
                tenant: Some("nobody".into()),
                state: Some(outbox_core::AlertState::Held),
                ..Default::default()
            },
            0,
        )
        .await
        .unwrap();
        sqlx::query("UPDATE console_bulk_replays SET state = 'done'")
            .execute(&db.pool)
            .await
            .unwrap();
        let password = outbox_core::password::new_password();
        outbox_store::operator_accounts::create(
            &db.pool,
            "alice",
            outbox_core::OperatorRole::Operator,
            None,
            &outbox_core::password::hash_password(&password).unwrap(),
        )
        .await
        .unwrap();
        let decider = DeciderServe::on(&db.url).with_console().start().await;
        let base = decider.console().to_owned();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(DEADLINE)
            .build()
            .unwrap();
        let mut target = Target {
            _decider: decider,
            base,
            http,
            db,
            cookie: String::new(),
            csrf: String::new(),
            alert,
            destination,
            bulk,
        };
        let (pre_session, token) = target.login_form().await;
        let signed = target
            .http
            .post(format!("{}/console/login", target.base))
            .header("cookie", pre_session)
            .form(&[
                ("name", "alice"),
                ("password", &password),
                ("login_token", &token),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(signed.status(), StatusCode::SEE_OTHER);
        target.cookie = cookie_of(&signed);
        let overview = target.send("GET", "/console", "").await;
        assert_eq!(overview.status, StatusCode::OK);
        target.csrf = csrf_of(&overview.body);
        target
    }

    async fn login_form(&self) -> (String, String) {
        fetch_login_form(&self.http, &self.base).await
    }

    /// Sends `encoded` (already URL-encoded `name=value` pairs) to `path`: in the query of
    /// a GET, as the form of a POST.
    async fn send(&self, method: &str, path: &str, encoded: &str) -> Page {
        let path = path
            .replace("ALERT", &self.alert.to_string())
            .replace("DESTINATION", &self.destination.to_string())
            .replace("BULK", &self.bulk.to_string());
        let url = format!("{}{path}", self.base);
        let request = if method == "GET" {
            self.http.get(format!("{url}?{encoded}"))
        } else {
            self.http
                .post(url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(encoded.to_owned())
        };
        let request = if path == "/console/login" && method == "POST" {
            let (pre_session, token) = self.login_form().await;
            let encoded = format!("{encoded}&login_token={}", encode(token.as_bytes()));
            self.http
                .post(format!("{}/console/login", self.base))
                .header("cookie", pre_session)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(encoded)
        } else {
            request.header("cookie", &self.cookie)
        };
        let response = request.send().await.unwrap();
        Page {
            status: response.status(),
            headers: response.headers().clone(),
            body: response.text().await.unwrap(),
        }
    }

    /// Field number `index` set to `value` (raw bytes), the others as listed.
    async fn fill(&self, index: usize, value: &[u8]) -> (String, Page) {
        let (method, path, field, others) = FIELDS[index];
        let mut pairs = vec![format!("{field}={}", encode(value))];
        for (name, other) in others {
            let other = if *other == "CSRF" { &self.csrf } else { *other };
            pairs.push(format!("{name}={}", encode(other.as_bytes())));
        }
        // The login form's own token is added last by `send`, so a fuzzed one comes first
        // and is the one read.
        let encoded = pairs.join("&");
        let what = format!("{method} {path} {field}={}", encode(value));
        (what, self.send(method, path, &encoded).await)
    }
}

#[test]
fn arbitrary_bytes_in_any_console_field_are_never_a_server_error() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let target = runtime.block_on(Target::start());

    // The NUL character in each field is bad input, and nothing is counted or written.
    runtime.block_on(async {
        for index in 0..FIELDS.len() {
            let (what, page) = target.fill(index, b"a\0b").await;
            assert_eq!(
                page.status,
                StatusCode::BAD_REQUEST,
                "{what}: {}",
                page.body
            );
            assert!(page.body.contains("NUL"), "{what}: {}", page.body);
        }
        assert_eq!(target.db.count("console_sign_in_failures").await, 0);
        let written: i64 =
            sqlx::query_scalar("SELECT count(*) FROM console_audit WHERE action <> 'signed in'")
                .fetch_one(&target.db.pool)
                .await
                .unwrap();
        assert_eq!(written, 0, "nothing but the operator's own sign-in");
    });

    let mut runner = TestRunner::new(Config {
        cases: 200,
        failure_persistence: None,
        ..Config::default()
    });
    let value = prop_oneof![
        vec(any::<u8>(), 0..48),
        // Text near what the fields expect, with a stray byte somewhere.
        (
            prop::sample::select(
                &[
                    "held",
                    "2026-12-01T10:00",
                    "+262143-01-01T00:00",
                    "abandon",
                    "true",
                    "1-1-1",
                    "acme",
                    "ops",
                    "accepted",
                ][..]
            ),
            any::<u8>(),
            any::<prop::sample::Index>()
        )
            .prop_map(|(text, byte, at)| {
                let mut bytes = text.as_bytes().to_vec();
                bytes.insert(at.index(bytes.len() + 1), byte);
                bytes
            }),
    ];
    runner
        .run(&(0..FIELDS.len(), value), |(index, value)| {
            let (what, page) = runtime.block_on(target.fill(index, &value));
            prop_assert!(
                page.status.is_client_error()
                    || page.status.is_success()
                    || page.status.is_redirection(),
                "{what}: {} {}",
                page.status,
                page.body
            );
            Ok(())
        })
        .unwrap();
    drop(target);
}
