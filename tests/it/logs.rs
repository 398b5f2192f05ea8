//! What the logs say: JSON lines whose spans carry the alert id, attempt and worker, and
//! never a bearer token, a signing secret or a payload, even at debug level; and lines,
//! human or JSON, that what a client sends cannot forge, lengthen without bound or turn
//! into terminal commands, whichever library logs it.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::add_tenant;
use common::decider::DeciderServe;
use common::destinations::add_destination;
use common::procs::*;
use outbox_testkit::TestDb;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const SECRET: &str = "whsec_dGhpcyBpcyB0aGUgbmV3IHNlY3JldCBrZXkgISE=";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_carry_the_alert_and_never_a_token_or_a_secret() {
    let db = TestDb::new().await;
    let sink = Sink::start(&["--secret", SECRET]).await;
    let tenant = add_tenant(&db, "acme", &[]).await;
    add_destination(&db, tenant.id, "ops", &sink.hook_url(), |d| {
        d.signing_secrets = vec![SECRET.to_owned()];
    })
    .await;
    let decider = DeciderServe::on(&db.url)
        .with_metrics()
        .env("RUST_LOG", "debug")
        .start()
        .await;
    let (api, decider_metrics) = (decider.api.clone(), decider.metrics().to_owned());
    let args = dispatcher_args(&db, "logger", &[]);
    let (dispatcher, metrics) =
        spawn_dispatcher_with_metrics(&args, &[("RUST_LOG", "debug")]).await;

    let http = reqwest::Client::new();
    let approval = serde_json::json!({"destination": "ops", "subject": "s", "occurrence": "o", "payload": {"a": 1}});
    let answer = http
        .post(format!("{api}/v1/alerts"))
        .bearer_auth(&tenant.token)
        .json(&approval)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::CREATED);
    let id = answer.json::<serde_json::Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // A refused token is logged too, and must not show either.
    let forged = format!("aot_{}", "B".repeat(43));
    let refused = http
        .post(format!("{api}/v1/alerts"))
        .bearer_auth(&forged)
        .json(&approval)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::UNAUTHORIZED);
    sink.wait_for("the alert", |s| s["applied"] == 1).await;
    assert_eq!(sink.records(&id).await[0]["signature"], "valid");
    wait_for_db(
        &db,
        "SELECT count(*) FROM alert_states WHERE state = 'accepted'",
        |n| n == 1,
    )
    .await;

    let decider_text = metrics_text(&http, &decider_metrics).await;
    assert!(
        decider_text.contains("outbox_approvals_total{result=\"created\"} 1"),
        "{decider_text}"
    );
    assert!(
        decider_text.contains("outbox_depth{state=\"held\"} 0"),
        "{decider_text}"
    );
    // The dispatcher counts a delivery once its record is committed; poll for it.
    wait_for_series(
        &http,
        &metrics,
        "outbox_approval_to_acceptance_seconds_count{destination=\"ops\"}",
        |count| count == 1.0,
    )
    .await;

    let decider_logs = decider.log_lines().join("\n");
    let dispatcher_logs = dispatcher.log_lines().join("\n");
    for (name, logs) in [("decider", &decider_logs), ("dispatcher", &dispatcher_logs)] {
        assert!(!logs.is_empty(), "{name} logged nothing");
        assert!(!logs.contains(&tenant.token), "{name} logged the API token");
        assert!(!logs.contains(&forged), "{name} logged a presented token");
        assert!(!logs.contains(SECRET), "{name} logged the signing secret");
        assert!(
            !logs.contains(&SECRET["whsec_".len()..]),
            "{name} logged the secret's key"
        );
        for line in logs.lines() {
            serde_json::from_str::<serde_json::Value>(line)
                .unwrap_or_else(|_| panic!("{name} wrote a line that is not JSON: {line}"));
        }
    }
    // The dispatcher's lines about the alert carry its id, attempt and worker.
    let about_alert: Vec<serde_json::Value> = dispatcher_logs
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["span"]["alert_id"] == id.as_str())
        .collect();
    assert!(!about_alert.is_empty(), "no log line carries the alert id");
    assert_eq!(about_alert[0]["span"]["attempt"], 1);
    assert_eq!(about_alert[0]["span"]["worker"], "logger");
}

/// The start of a forged log line: an evidence checkpoint, whose logged hash the auditing
/// page tells operators to keep outside the database.
const FORGED: &str = "2026-12-07T00:00:00Z  INFO outbox_evidence::checkpoint: evidence checkpoint made number=9 hash=forged";

/// A JSON-RPC request to `/mcp` whose `id` holds a newline and a forged line, a terminal
/// escape that clears the screen, a bidirectional override, and 100 KB more: the MCP
/// library quotes the id of a request it answers with an error in a warning.
fn forging_request() -> Value {
    let id = format!("1\n{FORGED}\u{1b}[2J\u{202e}{}", "x".repeat(100_000));
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": "no_such_tool", "arguments": {}},
    })
}

async fn mcp_call(api: &str, token: &str, message: &Value) -> Value {
    reqwest::Client::new()
        .post(format!("{api}/mcp"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(message)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Polls `read` until it holds `needle`, up to [`DEADLINE`]; returns what it read last.
async fn wait_for_text(what: &str, needle: &str, read: impl Fn() -> String) -> String {
    let started = Instant::now();
    loop {
        let text = read();
        if text.contains(needle) {
            return text;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{what} never logged `{needle}`: {text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `decider serve` logging as it does by default, in human lines, into a file of its own
/// (the tests' processes otherwise log JSON lines); killed when dropped, its file removed.
struct HumanLoggingDecider {
    _child: tokio::process::Child,
    dir: PathBuf,
    api: String,
}

impl HumanLoggingDecider {
    async fn start(database_url: &str) -> HumanLoggingDecider {
        let dir = std::env::temp_dir().join(format!("outbox-human-log-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = std::fs::File::create(dir.join("decider.log")).unwrap();
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_decider"))
            .args(["serve", "--listen", "127.0.0.1:0", "--interval", "1h"])
            .args(["--database-url", database_url])
            .env_remove("LOG_FORMAT")
            .env_remove("RUST_LOG")
            .env_remove("FAILPOINTS")
            .env_remove("OUTBOX_ALLOW_PRIVATE")
            .stdout(std::process::Stdio::null())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut decider = HumanLoggingDecider {
            _child: child,
            dir,
            api: String::new(),
        };
        let log = wait_for_text("the decider", "approval API listening addr=", || {
            decider.log()
        })
        .await;
        let addr = log
            .split("approval API listening addr=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap();
        decider.api = format!("http://{addr}");
        decider
    }

    fn log(&self) -> String {
        let bytes = std::fs::read(self.dir.join("decider.log")).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl Drop for HumanLoggingDecider {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_cannot_forge_flood_or_command_the_deciders_human_log() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let decider = HumanLoggingDecider::start(&db.url).await;
    let before = decider.log().len();

    let answer = mcp_call(&decider.api, &acme.token, &forging_request()).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let log = wait_for_text("the decider", "response error", || decider.log()).await;

    let forged: Vec<&str> = log
        .lines()
        .filter(|line| line.starts_with(FORGED))
        .collect();
    assert!(forged.is_empty(), "a forged line: {forged:?}");
    assert!(
        !log.contains("\u{1b}[2J") && !log.contains('\u{202e}'),
        "a raw escape or override reached the log: {log}"
    );
    // The id is there, as text: its newline, its escape and its override shown.
    assert!(
        log.contains(&format!("1\\n{FORGED}\\x1b[2J\\u{{202e}}xxx")),
        "{log}"
    );
    // Cut, and said so: a 100 KB id costs the log less than a kilobyte.
    assert!(log.contains("bytes cut]"), "{log}");
    let grown = log.len() - before;
    assert!(grown < 2048, "the request added {grown} bytes to the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_reaches_json_lines_escaped_and_bounded() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let decider = DeciderServe::on(&db.url).start().await;

    let answer = mcp_call(&decider.api, &acme.token, &forging_request()).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    wait_for_text("the decider", "response error", || {
        decider.log_lines().join("\n")
    })
    .await;

    let lines = decider.log_lines();
    let quoting: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("response error"))
        .collect();
    assert_eq!(quoting.len(), 1, "{lines:?}");
    let line = quoting[0];
    assert!(line.len() < 2048, "a {} byte line", line.len());
    assert!(
        !line
            .chars()
            .any(outbox_core::untrusted::is_unsafe_on_terminal),
        "a raw control or override: {line}"
    );
    for line in &lines {
        serde_json::from_str::<Value>(line).unwrap_or_else(|_| panic!("not JSON: {line}"));
    }
    let event: Value = serde_json::from_str(line).unwrap();
    let id = event["fields"]["id"].as_str().unwrap();
    assert!(
        id.starts_with(&format!("1\n{FORGED}\u{1b}[2J\u{202e}xxx")),
        "{id}"
    );
    assert!(id.ends_with("bytes cut]"), "{id}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_calls_payload_is_not_logged_even_at_debug_level() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let decider = DeciderServe::on(&db.url)
        .env("RUST_LOG", "debug")
        .start()
        .await;
    const MARKER: &str = "payload-marker-5b1f0c";

    let call = json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "approve_alert", "arguments": {
            "destination": "ops",
            "subject": "contract:LOG-1",
            "occurrence": "2027-01-31/30d",
            "payload": {"note": MARKER},
        }},
    });
    let answer = mcp_call(&decider.api, &acme.token, &call).await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(
        answer["result"]["structuredContent"]["created"], true,
        "{answer}"
    );
    // The answer has been written by the time it is read: the decider logs the request's
    // end (at debug) before its answer leaves.
    let logs = wait_for_text("the decider", "\"route\":\"/mcp\"", || {
        decider.log_lines().join("\n")
    })
    .await;
    assert!(
        logs.contains("\"level\":\"DEBUG\""),
        "debug lines are logged: {logs}"
    );
    assert!(!logs.contains(MARKER), "the payload was logged: {logs}");
}
