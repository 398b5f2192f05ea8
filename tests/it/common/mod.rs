//! Shared set-up for the root integration tests. Here: a tenant with a token and
//! destinations, and the approval API served in-process on a real socket ([`Api`]);
//! beside it, the real binaries ([`procs`]: sink, dispatcher; [`decider`]; [`cli`]:
//! outboxctl), the contract tools' programs ([`contract_tools`]), destinations ([`destinations`]), alerts through the store ([`alerts`]) and
//! a receiver of the tests' own ([`capture`]).

#![allow(dead_code)]

pub mod alerts;
pub mod capture;
pub mod cli;
pub mod contract_tools;
pub mod decider;
pub mod destinations;
pub mod evidence;
pub mod procs;

// `tests/crash.rs` shares this module and runs no `outboxctl`.
#[allow(unused_imports)]
pub use cli::{assert_refused, outboxctl, outboxctl_ok, revise, CliRun, Outboxctl};

use outbox_testkit::TestDb;
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;
use tokio::task::JoinHandle;

/// Asserts that `text` contains `needle`, showing both when it does not.
#[track_caller]
pub fn assert_contains(text: &str, needle: &str) {
    assert!(text.contains(needle), "`{needle}` not in: {text}");
}

/// A tenant as a test uses it.
pub struct TestTenant {
    pub id: uuid::Uuid,
    pub token: String,
}

/// The approval API over a fresh database, with tenant `acme` (destination `ops`).
pub struct Api {
    pub db: TestDb,
    pub base: String,
    pub http: reqwest::Client,
    pub acme: TestTenant,
    server: JoinHandle<()>,
}

impl Api {
    pub async fn start() -> Self {
        Self::start_on(TestDb::new().await).await
    }

    pub async fn start_on(db: TestDb) -> Self {
        let acme = add_tenant(&db, "acme", &["ops"]).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let pool = db.pool.clone();
        let server = tokio::spawn(async move {
            outbox_api::serve(listener, pool, std::future::pending())
                .await
                .unwrap();
        });
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        Api {
            db,
            base,
            http,
            acme,
            server,
        }
    }

    /// POSTs `body` (raw text) as JSON to `path` with `token`.
    pub async fn post_raw(&self, path: &str, token: &str, body: String) -> (StatusCode, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        read(response).await
    }

    pub async fn post(&self, path: &str, token: &str, body: &Value) -> (StatusCode, Value) {
        self.post_raw(path, token, body.to_string()).await
    }

    pub async fn get(&self, path: &str, token: &str) -> (StatusCode, Value) {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        read(response).await
    }

    pub async fn approve(&self, token: &str, body: &Value) -> (StatusCode, Value) {
        self.post("/v1/alerts", token, body).await
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Reads a response: errors must be problem+json, successes plain JSON.
pub async fn read(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status.is_client_error() || status.is_server_error() {
        assert_eq!(content_type, "application/problem+json", "{status}: {body}");
        assert!(
            body["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("/problems/")),
            "{body}"
        );
        assert_eq!(body["status"], status.as_u16(), "{body}");
        assert!(
            body["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{body}"
        );
    }
    (status, body)
}

/// Creates a tenant with a token and the named destinations.
pub async fn add_tenant(db: &TestDb, name: &str, destinations: &[&str]) -> TestTenant {
    let id = outbox_store::tenants::create(&db.pool, name, "UTC", None)
        .await
        .unwrap();
    let token = outbox_store::tokens::create(&db.pool, id, Some("tests"))
        .await
        .unwrap();
    for destination in destinations {
        let hook = "http://127.0.0.1:9/hook";
        destinations::add_destination(db, id, destination, hook, |d| {
            d.timeout = Duration::from_secs(10);
            d.max_in_flight = 16;
        })
        .await;
    }
    TestTenant {
        id,
        token: token.expose().to_owned(),
    }
}

/// A renewal alert approval for contract `n`.
pub fn renewal(n: usize) -> Value {
    serde_json::json!({
        "destination": "ops",
        "subject": format!("contract:C-{n}"),
        "occurrence": "2027-03-31/30d",
        "payload": {
            "kind": "contract_renewal",
            "contract": format!("C-{n}"),
            "vendor": "Acme Tools",
            "amount": "12000.00",
            "currency": "EUR",
            "days_remaining": 30
        }
    })
}

/// Rows in the alerts table, the outbox and the evidence trail.
pub async fn counts(db: &TestDb) -> (i64, i64, i64) {
    (
        db.count("alerts").await,
        db.count("outbox").await,
        db.count("alert_events").await,
    )
}
