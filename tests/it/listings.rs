//! A tenant's listings cannot slow every tenant's approvals: against a real `decider
//! serve`, a listing whose query outlasts the listing timeout is answered `503
//! listing-timeout` (never the database's words), a tenant's listings past its bound are
//! refused `429 too-many-listings` while another tenant's approval goes through on the
//! connections listings cannot take, and a subject text no index can look up is refused
//! `422 unsearchable-filter` over HTTP and MCP alike.
//!
//! A listing is made slow without a clock: the test holds an exclusive lock on
//! `alert_outcomes`, which every listing reads and no approval does, so a listing's query
//! waits for it for as long as the test wants; the barrier is PostgreSQL's own count of
//! statements waiting for a lock.

use crate::common::decider::{Decider, DeciderServe};
use crate::common::{add_tenant, read, renewal};
use outbox_testkit::TestDb;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;

/// Part of the listing statement's text, as `pg_stat_activity` shows it.
const LISTING_STATEMENT: &str = "FROM alerts a JOIN tenants t";

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

/// `GET /v1/alerts{query}` with `token`: the status, the `Retry-After` header, the body.
async fn list(
    http: &reqwest::Client,
    decider: &Decider,
    token: &str,
    query: &str,
) -> (StatusCode, Option<String>, Value) {
    let response = http
        .get(format!("{}/v1/alerts{query}", decider.api))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|value| value.to_str().unwrap().to_owned());
    let (status, body) = read(response).await;
    (status, retry_after, body)
}

async fn approve(http: &reqwest::Client, decider: &Decider, token: &str, n: usize) -> StatusCode {
    http.post(format!("{}/v1/alerts", decider.api))
        .bearer_auth(token)
        .json(&renewal(n))
        .send()
        .await
        .unwrap()
        .status()
}

/// Holds an exclusive lock on `alert_outcomes` until the transaction is dropped: every
/// listing's query waits for it, approvals never touch the table.
async fn block_listings(db: &TestDb) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut locker = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE alert_outcomes IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *locker)
        .await
        .unwrap();
    locker
}

/// Waits (polling, up to 60 s) until exactly `n` listing statements wait for a lock.
async fn until_listings_wait(db: &TestDb, n: i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock' \
               AND strpos(query, $1) > 0",
        )
        .bind(LISTING_STATEMENT)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        if waiting == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{waiting} listings wait for the lock, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_past_the_listing_timeout_is_answered_503_and_approvals_go_on() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let decider = DeciderServe::on(&db.url)
        .flags(&["--listing-timeout", "1s", "--checkpoint-interval", "off"])
        .start()
        .await;
    let http = client();
    assert_eq!(approve(&http, &decider, &acme.token, 1).await, 201);

    let locker = block_listings(&db).await;
    let (status, retry_after, problem) = list(&http, &decider, &acme.token, "").await;
    assert_eq!(status, 503, "{problem}");
    assert_eq!(problem["type"], "/problems/listing-timeout");
    assert!(
        problem["detail"].as_str().unwrap().contains("1s"),
        "{problem}"
    );
    assert_eq!(retry_after.as_deref(), Some("1"));
    // What PostgreSQL said stays in the server.
    let text = problem.to_string();
    for database_words in ["statement timeout", "canceling", "57014", "SQLSTATE"] {
        assert!(!text.contains(database_words), "{text}");
    }
    // Approvals do not wait for listings.
    assert_eq!(approve(&http, &decider, &acme.token, 2).await, 201);
    locker.rollback().await.unwrap();

    let (status, _, page) = list(&http, &decider, &acme.token, "").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["alerts"].as_array().unwrap().len(), 2, "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_21st_listing_of_a_tenant_is_refused_while_another_tenant_approves() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let globex = add_tenant(&db, "globex", &["ops"]).await;
    // Twenty listings of a tenant at once, on twenty of the pool's 24 connections.
    let decider = DeciderServe::on(&db.url)
        .flags(&[
            "--max-connections",
            "24",
            "--max-listing-connections",
            "20",
            "--max-listings-per-tenant",
            "20",
            "--listing-timeout",
            "10m",
            "--checkpoint-interval",
            "off",
        ])
        .start()
        .await;
    let http = client();
    assert_eq!(approve(&http, &decider, &acme.token, 1).await, 201);

    let locker = block_listings(&db).await;
    let decider = std::sync::Arc::new(decider);
    let twenty: Vec<_> = (0..20)
        .map(|_| {
            let (http, decider, token) = (http.clone(), decider.clone(), acme.token.clone());
            tokio::spawn(async move { list(&http, &decider, &token, "").await })
        })
        .collect();
    until_listings_wait(&db, 20).await;

    // The 21st waits its turn for a second, then is refused, naming the bound.
    let (status, retry_after, problem) = list(&http, &decider, &acme.token, "").await;
    assert_eq!(status, 429, "{problem}");
    assert_eq!(problem["type"], "/problems/too-many-listings");
    assert!(
        problem["detail"].as_str().unwrap().contains("20 listings"),
        "{problem}"
    );
    assert_eq!(retry_after.as_deref(), Some("1"));

    // Another tenant approves meanwhile, on the connections listings cannot take; its own
    // listing finds every connection lent to listings in use, and is told so.
    assert_eq!(approve(&http, &decider, &globex.token, 2).await, 201);
    let (status, retry_after, problem) = list(&http, &decider, &globex.token, "").await;
    assert_eq!(status, 503, "{problem}");
    assert_eq!(problem["type"], "/problems/listings-busy");
    assert_eq!(retry_after.as_deref(), Some("1"));

    locker.rollback().await.unwrap();
    for listing in twenty {
        let (status, _, page) = listing.await.unwrap();
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["alerts"].as_array().unwrap().len(), 1, "{page}");
    }
    let (status, _, page) = list(&http, &decider, &globex.token, "").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["alerts"][0]["subject"], "contract:C-2", "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_text_no_index_can_look_up_is_refused_by_name_over_http_and_mcp() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let decider = DeciderServe::on(&db.url).start().await;
    let http = client();
    assert_eq!(approve(&http, &decider, &acme.token, 1).await, 201);

    for short in ["ab", "C-1", "%25%25%25"] {
        let (status, _, problem) =
            list(&http, &decider, &acme.token, &format!("?subject={short}")).await;
        assert_eq!(status, 422, "{short}: {problem}");
        assert_eq!(problem["type"], "/problems/unsearchable-filter");
        assert_eq!(problem["filter"], "subject");
    }
    let (status, _, page) = list(&http, &decider, &acme.token, "?subject=tract").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["alerts"].as_array().unwrap().len(), 1, "{page}");

    // `list_alerts` refuses it the same way, as a tool error the agent reads.
    let call = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "list_alerts", "arguments": {"subject": "ab"}},
    });
    let answer: Value = http
        .post(format!("{}/mcp", decider.api))
        .bearer_auth(&acme.token)
        .header("accept", "application/json, text/event-stream")
        .json(&call)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let result = &answer["result"];
    assert_eq!(result["isError"], true, "{answer}");
    assert_eq!(
        result["structuredContent"]["type"], "/problems/unsearchable-filter",
        "{answer}"
    );
    assert_eq!(result["structuredContent"]["filter"], "subject", "{answer}");
}
