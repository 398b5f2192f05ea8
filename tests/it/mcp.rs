//! The MCP server as agents meet it: a real `decider serve` (`/mcp`, Streamable HTTP) and
//! a real `outboxctl mcp` (stdio), driven by the official MCP Python SDK
//! (`tests/contract/mcp_client.py`, run with the contract tools' python), and then the
//! database read from here: what the agent was told must be what was written.
//!
//! The SDK comes from PyPI at the version `tests/contract/requirements.txt` pins; a test
//! fails, never skips, when it is missing (`common::contract_tools`).

use crate::common::contract_tools::run_contract_tool;
use crate::common::decider::DeciderServe;
use crate::common::{add_tenant, assert_refused, counts, Outboxctl};
use outbox_testkit::TestDb;
use serde_json::Value;
use uuid::Uuid;

/// Runs one scenario of the Python client and returns the JSON object it printed last.
async fn client(scenario: &str, args: &[&str]) -> Value {
    let mut all = vec!["tests/contract/mcp_client.py", scenario];
    all.extend_from_slice(args);
    let stdout = run_contract_tool("python", &all).await;
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|err| panic!("{scenario} printed {stdout}: {err}"))
}

fn id(summary: &Value, member: &str) -> Uuid {
    Uuid::parse_str(summary[member].as_str().unwrap()).unwrap()
}

/// The tenant, subject and revision of every alert, by id.
async fn alerts_of(db: &TestDb, tenant: Uuid) -> Vec<(Uuid, String, i32, Option<String>)> {
    sqlx::query_as(
        "SELECT id, subject, revision, reason FROM alerts WHERE tenant_id = $1 ORDER BY revision",
    )
    .bind(tenant)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_approves_once_revises_and_reads_its_trail_and_no_other_tenant_sees_it() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let globex = add_tenant(&db, "globex", &["ops"]).await;
    let decider = DeciderServe::on(&db.url).start().await;
    let url = format!("{}/mcp", decider.api);

    let summary = client("flow", &[&url, &acme.token, &globex.token]).await;
    let (original, revision) = (id(&summary, "alert_id"), id(&summary, "revision_id"));

    // Two approvals of one identity made one alert; the changed payload made nothing until
    // it came as a revision; the other tenant's calls made nothing at all.
    let stored = alerts_of(&db, acme.id).await;
    assert_eq!(
        stored,
        vec![
            (original, "contract:MCP-1".to_owned(), 0, None),
            (
                revision,
                "contract:MCP-1".to_owned(),
                1,
                Some("the quote was revised to 12,500 EUR".to_owned())
            ),
        ]
    );
    assert!(alerts_of(&db, globex.id).await.is_empty());
    let amount: String =
        sqlx::query_scalar("SELECT payload::jsonb->>'amount' FROM alerts WHERE id = $1")
            .bind(revision)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(amount, "12500.00");
    let evidence: Vec<String> =
        sqlx::query_scalar("SELECT actor FROM alert_events WHERE alert_id = $1")
            .bind(original)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert!(!evidence.is_empty());
    assert!(
        evidence.iter().any(|actor| actor.starts_with("api-token:")),
        "the approval is the token's: {evidence:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_mcp_requests_are_refused_clearly_and_write_nothing() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let decider = DeciderServe::on(&db.url).start().await;
    let url = format!("{}/mcp", decider.api);

    client("hostile", &[&url, &acme.token]).await;

    let http = reqwest::Client::new();
    let post = |body: String, token: Option<&str>| {
        let mut request = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    let list_tools = r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#;

    // No token, or a wrong one: the API's own 401, before any MCP processing.
    for token in [None, Some("not-a-token")] {
        let response = post(list_tools.to_owned(), token).await.unwrap();
        assert_eq!(response.status(), 401, "{token:?}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["type"], "/problems/unauthorized");
    }

    // Not JSON, and JSON that is not JSON-RPC: the protocol's own errors, worded.
    for (body, code, says) in [
        (
            "{\"jsonrpc\": \"2.0\", \"id\": 1, ".to_owned(),
            -32700,
            "not valid JSON",
        ),
        (
            r#"{"hello": "world"}"#.to_owned(),
            -32600,
            "not a JSON-RPC 2.0 message",
        ),
    ] {
        let response = post(body, Some(&acme.token)).await.unwrap();
        assert_eq!(response.status(), 400);
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["jsonrpc"], "2.0");
        assert_eq!(answer["id"], Value::Null);
        assert_eq!(answer["error"]["code"], code, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    }

    // A body over the API's limit: 413 problem+json, as on every other route.
    let huge = format!(
        r#"{{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {{"name": "approve_alert", "arguments": {{"destination": "ops", "subject": "s", "occurrence": "o", "payload": {{"blob": "{}"}}}}}}}}"#,
        "x".repeat(400 * 1024)
    );
    let response = post(huge, Some(&acme.token)).await.unwrap();
    assert_eq!(response.status(), 413);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let problem: Value = response.json().await.unwrap();
    assert_eq!(problem["type"], "/problems/payload-too-large");

    // Only POSTs of JSON: there is no stream to GET and no session to DELETE.
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let response = http
            .request(method.clone(), &url)
            .bearer_auth(&acme.token)
            .header("accept", "application/json, text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405, "{method}");
        assert_eq!(response.headers()["allow"], "POST");
        let (_, problem) = crate::common::read(response).await;
        assert_eq!(problem["type"], "/problems/method-not-allowed");
    }
    let response = http
        .post(&url)
        .bearer_auth(&acme.token)
        .header("content-type", "text/plain")
        .body(list_tools)
        .send()
        .await
        .unwrap();
    let (status, problem) = crate::common::read(response).await;
    assert_eq!(status, 415);
    assert_eq!(problem["type"], "/problems/unsupported-media-type");

    // And a well-formed request still works after all of that.
    let response = post(list_tools.to_owned(), Some(&acme.token))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["result"]["tools"].as_array().unwrap().len(), 5);

    assert_eq!(counts(&db).await, (0, 0, 0), "nothing was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outboxctl_mcp_serves_a_local_agent_over_stdio() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let dir = std::env::temp_dir().join(format!("outbox-mcp-{}", Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{}\n", acme.token)).unwrap();

    let summary = client(
        "stdio",
        &[
            env!("CARGO_BIN_EXE_outboxctl"),
            token_file.to_str().unwrap(),
            &db.url,
        ],
    )
    .await;

    // A token the database does not know ends the command at once, with the reason.
    std::fs::write(&token_file, "aot_not-a-token-of-anyone\n").unwrap();
    let refused = Outboxctl::on(&db)
        .args(&["mcp", "--token-file", token_file.to_str().unwrap()])
        .stdin("")
        .run()
        .await;
    let _ = std::fs::remove_dir_all(&dir);
    assert_refused(&refused, "the bearer token is not valid");

    let stored = alerts_of(&db, acme.id).await;
    assert_eq!(
        stored,
        vec![(
            id(&summary, "alert_id"),
            "contract:STDIO-1".to_owned(),
            0,
            None
        )]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mcp_request_is_authenticated_so_a_revoked_token_stops_mid_conversation() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let decider = DeciderServe::on(&db.url).start().await;
    let url = format!("{}/mcp", decider.api);
    let http = reqwest::Client::new();
    let call = |n: u32| {
        let message = serde_json::json!({
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {"name": "list_destinations", "arguments": {}},
        });
        http.post(&url)
            .bearer_auth(&acme.token)
            .header("accept", "application/json, text/event-stream")
            .json(&message)
            .send()
    };

    let answer: Value = call(1).await.unwrap().json().await.unwrap();
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(
        answer["result"]["structuredContent"]["destinations"][0]["name"],
        "ops"
    );

    let tokens = outbox_store::tokens::list(&db.pool, Some(acme.id))
        .await
        .unwrap();
    outbox_store::tokens::revoke(&db.pool, tokens[0].id)
        .await
        .unwrap();
    // The next requests on the same conversation are refused once the token cache's bound
    // has passed (1 s), each on its own Authorization header.
    let deadline = std::time::Instant::now() + outbox_testkit::process::DEADLINE;
    let mut n = 2;
    let refused = loop {
        let response = call(n).await.unwrap();
        if response.status() == 401 {
            break response;
        }
        assert_eq!(response.status(), 200);
        assert!(
            std::time::Instant::now() < deadline,
            "the revoked token was still accepted"
        );
        n += 1;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let (_, problem) = crate::common::read(refused).await;
    assert_eq!(problem["type"], "/problems/unauthorized");
}

/// A `tools/call` of `name` with `arguments`, as a browser page at `origin` (if any) would
/// send it to `url`.
fn call_from(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    origin: Option<&str>,
    name: &str,
    arguments: Value,
) -> reqwest::RequestBuilder {
    let message = serde_json::json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    });
    let mut request = http
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(&message);
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_pages_reach_mcp_only_from_the_origins_the_operator_allows() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let decider = DeciderServe::on(&db.url)
        .flags(&["--mcp-allowed-origins", "https://agents.example.com"])
        .start()
        .await;
    let url = format!("{}/mcp", decider.api);
    let http = reqwest::Client::new();
    let approval = serde_json::json!({
        "destination": "ops",
        "subject": "contract:ORIGIN-1",
        "occurrence": "2027-01-31/30d",
        "payload": {"amount": "1.00"},
    });

    // A page elsewhere, and a rebinding page (its name now points here, so its origin is
    // this server's own address), are refused before their call runs.
    let own = decider.api.clone();
    for origin in ["https://evil.example", own.as_str(), "null"] {
        let response = call_from(
            &http,
            &url,
            &acme.token,
            Some(origin),
            "approve_alert",
            approval.clone(),
        )
        .send()
        .await
        .unwrap();
        let (status, problem) = crate::common::read(response).await;
        assert_eq!(status, 403, "{origin}: {problem}");
        assert_eq!(problem["type"], "/problems/origin-not-allowed");
        assert!(!problem.to_string().contains("evil"), "{problem}");
    }
    assert_eq!(counts(&db).await, (0, 0, 0), "a refused call wrote nothing");

    // The allowed page, and clients that are not browsers (no Origin), are served.
    for origin in [Some("https://agents.example.com"), None] {
        let answer: Value = call_from(
            &http,
            &url,
            &acme.token,
            origin,
            "list_destinations",
            serde_json::json!({}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        assert_eq!(answer["result"]["isError"], false, "{origin:?}: {answer}");
    }

    // Without the setting, no page is served.
    let default = DeciderServe::on(&db.url).start().await;
    let response = call_from(
        &http,
        &format!("{}/mcp", default.api),
        &acme.token,
        Some("https://agents.example.com"),
        "list_destinations",
        serde_json::json!({}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 403);

    // And an entry that is no origin stops the decider at start, naming it.
    let refused = outbox_testkit::process::Run::new(env!("CARGO_BIN_EXE_decider"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            &db.url,
        ])
        .args([
            "--mcp-allowed-origins",
            "https://ok.example,agents.example.com",
        ])
        .output()
        .await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("`agents.example.com` is not an origin"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_refusals_are_problems_that_quote_nothing_the_client_sent() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let decider = DeciderServe::on(&db.url).start().await;
    let url = format!("{}/mcp", decider.api);
    let http = reqwest::Client::new();
    const MARKER: &str = "marker<script>";
    let list_tools = r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#;
    let post = |accept: &str, version: Option<&str>| {
        let mut request = http
            .post(&url)
            .bearer_auth(&acme.token)
            .header("content-type", "application/json")
            .header("accept", accept)
            .body(list_tools);
        if let Some(version) = version {
            request = request.header("mcp-protocol-version", version);
        }
        request.send()
    };

    for (accept, version, status, kind) in [
        (
            format!("text/html, {MARKER}/x"),
            None,
            406,
            "not-acceptable",
        ),
        (
            "application/json, text/event-stream".to_owned(),
            Some(format!("2099-01-01 {MARKER}")),
            400,
            "unsupported-protocol-version",
        ),
    ] {
        let response = post(&accept, version.as_deref()).await.unwrap();
        assert_eq!(response.status(), status, "{kind}");
        let content_type = response.headers().get("content-type").cloned();
        let text = response.text().await.unwrap();
        assert_eq!(
            content_type.as_ref().and_then(|v| v.to_str().ok()),
            Some("application/problem+json"),
            "{kind}: {text}"
        );
        assert!(
            !text.contains("marker"),
            "{kind} quotes the request: {text}"
        );
        let problem: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(problem["type"], format!("/problems/{kind}"), "{problem}");
        assert_eq!(problem["status"], status);
    }
    // The versions this server speaks are served.
    let response = post("application/json, text/event-stream", Some("2025-06-18"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}
