#![allow(clippy::unwrap_used)]
//! The sink over real sockets: each test serves one in-process on an ephemeral port and
//! drives it with reqwest, as the dispatcher would. The SMTP side has its own module, in
//! this same test binary.

mod smtp;

use clap::Parser;
use outbox_sink::{serve, SinkArgs};
use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

struct TestSink {
    base: String,
    client: Client,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl TestSink {
    /// Serves a sink with these flags. The listener is bound before this returns, so
    /// requests can be sent at once: the kernel queues connections until the sink accepts.
    async fn start(flags: &[&str]) -> TestSink {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let args = SinkArgs::parse_from(std::iter::once("sink").chain(flags.iter().copied()));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, args, async {
            let _ = stopped.await;
        }));
        TestSink {
            base,
            // No proxy: a proxy configured in the environment must not sit in between.
            client: Client::builder().no_proxy().build().unwrap(),
            stop: Some(stop),
            task,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn deliver(&self, key: Option<&str>, body: &str) -> reqwest::Result<reqwest::Response> {
        let mut request = self
            .client
            .post(self.url("/hooks/alerts"))
            .header("content-type", "application/json")
            .body(body.to_owned());
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send().await
    }

    /// Delivers and expects a 200 with a receipt; returns the receipt.
    async fn applied(&self, key: Option<&str>) -> String {
        let response = self.deliver(key, r#"{"alert":1}"#).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "application/json");
        let body: Value = response.json().await.unwrap();
        body["id"].as_str().unwrap().to_owned()
    }

    /// Sends a request without a body to `path` and returns its response.
    async fn call(&self, method: Method, path: &str) -> reqwest::Response {
        self.client
            .request(method, self.url(path))
            .send()
            .await
            .unwrap()
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let response = self.client.get(self.url(path)).send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap())
    }

    async fn stats(&self) -> Value {
        let (status, stats) = self.get("/stats").await;
        assert_eq!(status, StatusCode::OK);
        stats
    }

    async fn records(&self, key: Option<&str>) -> Vec<Value> {
        let path = match key {
            Some(key) => format!("/_sink/records?key={key}"),
            None => "/_sink/records".to_owned(),
        };
        let (status, records) = self.get(&path).await;
        assert_eq!(status, StatusCode::OK);
        records.as_array().unwrap().clone()
    }

    async fn faults(&self, faults: Value) -> (StatusCode, Value) {
        let response = self
            .client
            .post(self.url("/_sink/faults"))
            .json(&faults)
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap())
    }

    /// Stops the sink and checks that it shuts down cleanly.
    async fn stop(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        self.task.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn with_retention_a_repeated_key_is_a_wire_duplicate_with_the_original_receipt() {
    let sink = TestSink::start(&["--retention", "1h"]).await;
    let first = sink.applied(Some("alert-1")).await;
    assert_eq!(first, "r-1");
    assert_eq!(sink.applied(Some("alert-1")).await, first);
    assert_eq!(sink.applied(Some("alert-2")).await, "r-2");

    let stats = sink.stats().await;
    assert_eq!(
        stats,
        json!({
            "requests": 3, "distinct_keys": 2, "applied": 2, "wire_duplicates": 1,
            "effective_duplicates": 0, "failed": 0, "scripted": 0, "dropped": 0,
            "bad_signatures": 0, "refused": 0,
        })
    );

    let records = sink.records(Some("alert-1")).await;
    assert_eq!(records.len(), 2);
    assert_eq!(records[0]["outcome"], "applied");
    assert_eq!(records[1]["outcome"], "wire_duplicate");
    assert_eq!(records[1]["receipt"], "r-1");
    assert_eq!(records[1]["status"], 200);
    assert_eq!(records[1]["path"], "/hooks/alerts");
    assert_eq!(records[1]["signature"], "unchecked");
    assert_eq!(
        records[0]["payload_sha256"].as_str().unwrap().len(),
        64,
        "hex of a SHA-256"
    );
    assert_eq!(records[0]["payload_sha256"], records[1]["payload_sha256"]);
    sink.stop().await;
}

#[tokio::test]
async fn without_retention_a_repeated_key_is_an_effective_duplicate() {
    let sink = TestSink::start(&[]).await;
    assert_eq!(sink.applied(Some("alert-1")).await, "r-1");
    assert_eq!(sink.applied(Some("alert-1")).await, "r-2");
    assert_eq!(sink.applied(None).await, "r-3");

    let stats = sink.stats().await;
    assert_eq!(stats["requests"], 3);
    assert_eq!(stats["applied"], 3);
    assert_eq!(stats["distinct_keys"], 1);
    assert_eq!(stats["wire_duplicates"], 0);
    assert_eq!(stats["effective_duplicates"], 1);

    let records = sink.records(None).await;
    assert_eq!(records.len(), 3);
    assert_eq!(records[2]["key"], Value::Null);
    let seqs: Vec<_> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3]);
    sink.stop().await;
}

#[tokio::test]
async fn lookup_finds_applied_keys_only_when_enabled() {
    let sink = TestSink::start(&["--lookup"]).await;
    let receipt = sink.applied(Some("alert:1/a")).await;
    let (status, found) = sink.get("/requests/alert%3A1%2Fa").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(found, json!({ "id": receipt, "key": "alert:1/a" }));
    let (status, missing) = sink.get("/requests/never-sent").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(missing, json!({ "error": "not found" }));
    sink.stop().await;

    let sink = TestSink::start(&[]).await;
    sink.applied(Some("alert-1")).await;
    let (status, _) = sink.get("/requests/alert-1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    sink.stop().await;
}

#[tokio::test]
async fn a_dropped_response_is_a_transport_error_but_the_delivery_was_applied() {
    let sink = TestSink::start(&["--lookup", "--retention", "1h"]).await;
    // Warm the connection up first, so the drop also shows on a kept-alive connection.
    sink.applied(Some("other")).await;
    let (status, faults) = sink
        .faults(json!({ "drop_response_for_keys": ["alert-1"] }))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(faults["drop_response_for_keys"], json!(["alert-1"]));

    let err = sink
        .deliver(Some("alert-1"), r#"{"alert":1}"#)
        .await
        .unwrap_err();
    assert!(err.status().is_none(), "expected no status, got {err:?}");
    assert!(err.is_request(), "expected a transport error, got {err:?}");

    let records = sink.records(Some("alert-1")).await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["dropped"], true);
    assert_eq!(records[0]["status"], Value::Null);
    assert_eq!(records[0]["outcome"], "applied");
    let receipt = records[0]["receipt"].as_str().unwrap().to_owned();

    let (status, found) = sink.get("/requests/alert-1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(found["id"], receipt.as_str());

    // The drop was one-shot: the retry is answered, with the receipt already given.
    assert_eq!(sink.applied(Some("alert-1")).await, receipt);
    let stats = sink.stats().await;
    assert_eq!(stats["dropped"], 1);
    assert_eq!(stats["applied"], 2);
    assert_eq!(stats["wire_duplicates"], 1);
    assert_eq!(sink.records(Some("alert-1")).await[1]["status"], 200);
    sink.stop().await;
}

#[tokio::test]
async fn a_drop_rate_of_one_drops_every_response() {
    let sink = TestSink::start(&["--drop-response-rate", "1"]).await;
    for _ in 0..3 {
        let err = sink.deliver(None, "{}").await.unwrap_err();
        assert!(err.status().is_none());
    }
    let stats = sink.stats().await;
    assert_eq!(
        (stats["applied"].as_u64(), stats["dropped"].as_u64()),
        (Some(3), Some(3))
    );
    sink.stop().await;
}

#[tokio::test]
async fn a_scripted_response_is_served_once_then_deliveries_apply_again() {
    let sink = TestSink::start(&[]).await;
    let (status, faults) = sink
        .faults(json!({ "script": [
            { "status": 429, "headers": { "Retry-After": "7" }, "body": "slow down" }
        ] }))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(faults["script"][0]["status"], 429);

    let response = sink.deliver(Some("alert-1"), "{}").await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "7");
    assert_eq!(response.text().await.unwrap(), "slow down");

    assert_eq!(sink.applied(Some("alert-1")).await, "r-1");
    let records = sink.records(Some("alert-1")).await;
    assert_eq!(records[0]["outcome"], "scripted");
    assert_eq!(records[0]["status"], 429);
    assert_eq!(records[0]["receipt"], Value::Null);
    assert_eq!(records[1]["outcome"], "applied");
    let stats = sink.stats().await;
    assert_eq!(
        (stats["scripted"].as_u64(), stats["applied"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(stats["effective_duplicates"], 0);
    sink.stop().await;
}

#[tokio::test]
async fn a_fail_rate_of_one_refuses_everything_and_applies_nothing() {
    let sink = TestSink::start(&["--fail-rate", "1.0", "--lookup"]).await;
    let response = sink.deliver(Some("alert-1"), "{}").await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"].is_string());

    let stats = sink.stats().await;
    assert_eq!(
        (stats["failed"].as_u64(), stats["applied"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(stats["distinct_keys"], 0);
    let (status, _) = sink.get("/requests/alert-1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let records = sink.records(None).await;
    assert_eq!(records[0]["outcome"], "failed");
    assert_eq!(records[0]["status"], 503);

    // Clearing the faults lets deliveries through again; the fail status stays.
    let response = sink.call(Method::DELETE, "/_sink/faults").await;
    assert_eq!(response.status(), StatusCode::OK);
    let faults: Value = response.json().await.unwrap();
    assert_eq!(faults["fail_rate"], 0.0);
    assert_eq!(faults["fail_status"], 503);
    assert_eq!(sink.applied(Some("alert-1")).await, "r-1");
    sink.stop().await;
}

#[tokio::test]
async fn with_a_secret_only_well_signed_recent_deliveries_are_applied() {
    let sink = TestSink::start(&["--secret", SECRET, "--timestamp-tolerance", "5m"]).await;
    let key = outbox_core::signing::decode_secret(SECRET).unwrap();
    let body = r#"{"alert":"signed"}"#;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let send = |signature: Option<(i64, String)>, idempotency_key: &'static str| {
        let mut request = sink
            .client
            .post(sink.url("/hooks/alerts"))
            .header("Idempotency-Key", idempotency_key)
            .body(body);
        if let Some((timestamp, signature)) = signature {
            request = request
                .header("webhook-id", "msg_1")
                .header("webhook-timestamp", timestamp.to_string())
                .header("webhook-signature", signature);
        }
        request.send()
    };
    let signed = |secret: &[u8], timestamp: i64| {
        let header = outbox_core::signing::signature_header(
            &[secret.to_vec()],
            "msg_1",
            timestamp,
            body.as_bytes(),
        );
        Some((timestamp, header))
    };

    let attempts = [
        (signed(&key, now), "valid", StatusCode::OK),
        (signed(&[7u8; 32], now), "invalid", StatusCode::UNAUTHORIZED),
        (None, "missing", StatusCode::UNAUTHORIZED),
        // Correctly signed, but replayed an hour later, or dated an hour ahead.
        (signed(&key, now - 3600), "stale", StatusCode::UNAUTHORIZED),
        (
            signed(&key, now + 3600),
            "stale-future",
            StatusCode::UNAUTHORIZED,
        ),
        // Years old, as a captured request replayed much later would be.
        (
            signed(&key, 1_500_000_000),
            "stale-years",
            StatusCode::UNAUTHORIZED,
        ),
    ];
    for (signature, k, status) in attempts {
        assert_eq!(send(signature, k).await.unwrap().status(), status, "{k}");
    }

    for (k, signature, outcome, status) in [
        ("valid", "valid", "applied", 200),
        ("invalid", "invalid", "refused", 401),
        ("missing", "missing", "refused", 401),
        ("stale", "stale", "refused", 401),
        ("stale-future", "stale", "refused", 401),
        ("stale-years", "stale", "refused", 401),
    ] {
        let records = sink.records(Some(k)).await;
        assert_eq!(records.len(), 1, "{k}");
        assert_eq!(records[0]["signature"], signature, "{k}");
        assert_eq!(records[0]["outcome"], outcome, "{k}");
        assert_eq!(records[0]["status"], status, "{k}");
    }
    let stats = sink.stats().await;
    assert_eq!(stats["requests"], 6);
    assert_eq!(stats["applied"], 1);
    assert_eq!(stats["refused"], 5);
    assert_eq!(stats["bad_signatures"], 5);
    // A refused key was never applied, so lookups do not find it either.
    assert_eq!(stats["distinct_keys"], 1);
    sink.stop().await;
}

#[tokio::test]
async fn without_a_secret_signatures_are_not_checked() {
    let sink = TestSink::start(&[]).await;
    let response = sink
        .client
        .post(sink.url("/hooks/alerts"))
        .header("webhook-id", "msg_1")
        .header("webhook-timestamp", "1")
        .header("webhook-signature", "v1,bm9wZQ==")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let records = sink.records(None).await;
    assert_eq!(records[0]["signature"], "unchecked");
    assert_eq!(records[0]["outcome"], "applied");
    sink.stop().await;
}

#[tokio::test]
async fn records_can_be_filtered_by_key_and_reset() {
    let sink = TestSink::start(&[]).await;
    sink.applied(Some("a b")).await;
    sink.applied(Some("other")).await;
    sink.applied(Some("a b")).await;
    sink.applied(None).await;

    let records = sink.records(Some("a%20b")).await;
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|r| r["key"] == "a b"));
    assert_eq!(sink.records(Some("other")).await.len(), 1);
    assert_eq!(sink.records(Some("nobody")).await.len(), 0);
    assert_eq!(sink.records(None).await.len(), 4);

    let response = sink.call(Method::POST, "/_sink/reset").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(sink.records(None).await.is_empty());
    assert_eq!(sink.stats().await["requests"], 0);
    sink.stop().await;
}

#[tokio::test]
async fn records_carry_the_trace_headers_received_and_mark_junk() {
    let sink = TestSink::start(&[]).await;
    let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let send = |key: &'static str, headers: Vec<(&'static str, Vec<u8>)>| {
        let mut request = sink
            .client
            .post(sink.url("/hooks/alerts"))
            .header("Idempotency-Key", key)
            .body("{}");
        for (name, value) in headers {
            let value = reqwest::header::HeaderValue::from_bytes(&value).unwrap();
            request = request.header(name, value);
        }
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{key}");
        }
    };
    send(
        "traced",
        vec![
            ("traceparent", parent.as_bytes().to_vec()),
            ("tracestate", b"outbox=a1,other=x".to_vec()),
        ],
    )
    .await;
    send("untraced", vec![]).await;
    // Bytes past ASCII and a tab are allowed by HTTP in a field value, but are not a
    // trace context; a value over 512 bytes is not recorded either.
    send(
        "junk",
        vec![
            ("traceparent", b"00-\xff\xfe-01".to_vec()),
            ("tracestate", b"a=1\tb=2".to_vec()),
        ],
    )
    .await;
    send("long", vec![("tracestate", vec![b'a'; 513])]).await;

    let traced = &sink.records(Some("traced")).await[0];
    assert_eq!(traced["trace_parent"], parent);
    assert_eq!(traced["trace_state"], "outbox=a1,other=x");
    let untraced = sink.records(Some("untraced")).await[0].clone();
    assert!(untraced.get("trace_parent").is_none(), "{untraced}");
    assert!(untraced.get("trace_state").is_none(), "{untraced}");
    let junk = &sink.records(Some("junk")).await[0];
    assert_eq!(junk["trace_parent"], outbox_sink::INVALID_TRACE_HEADER);
    assert_eq!(junk["trace_state"], outbox_sink::INVALID_TRACE_HEADER);
    let long = &sink.records(Some("long")).await[0];
    assert_eq!(long["trace_state"], outbox_sink::INVALID_TRACE_HEADER);
    assert!(long.get("trace_parent").is_none());
    sink.stop().await;
}

#[tokio::test]
async fn bad_fault_changes_are_refused_and_change_nothing() {
    let sink = TestSink::start(&[]).await;
    for bad in [
        json!({ "fail_rate": 1.5 }),
        json!({ "drop_response_rate": -0.1 }),
        json!({ "fail_rat": 0.5 }),
        json!({ "fail_status": 42 }),
        json!({ "script": [{ "status": 200, "mood": "grumpy" }] }),
        json!({ "script": [{ "status": 200, "headers": { "bad header": "x" } }] }),
        json!({ "latency_ms": "slow" }),
        json!({ "smtp_drop_rate": 2 }),
        json!({ "smtp_rcpt_script": ["250 2.1.5 fine"] }),
        json!({ "smtp_fail_reply": "try later" }),
    ] {
        let (status, body) = sink.faults(bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(body["error"].is_string(), "{bad}");
    }
    let response = sink
        .client
        .post(sink.url("/_sink/faults"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);

    let (status, faults) = sink.faults(json!({})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        faults,
        json!({
            "drop_response_rate": 0.0, "fail_rate": 0.0, "fail_status": 503, "latency_ms": 0,
            "drop_response_for_keys": [], "script": [],
            "smtp_drop_rate": 0.0, "smtp_fail_rate": 0.0, "smtp_fail_reply": "451 4.3.0 try later",
            "smtp_latency_ms": 0, "smtp_drop_for_message_ids": [], "smtp_rcpt_script": [],
            "smtp_data_script": [], "smtp_mail_from_script": [], "smtp_hide_starttls": false,
        })
    );
    sink.stop().await;
}

#[tokio::test]
async fn the_same_seed_gives_the_same_faults() {
    async fn statuses(seed: &str) -> Vec<u16> {
        let sink = TestSink::start(&["--seed", seed, "--fail-rate", "0.5"]).await;
        let mut statuses = Vec::new();
        for _ in 0..20 {
            statuses.push(sink.deliver(None, "{}").await.unwrap().status().as_u16());
        }
        sink.stop().await;
        statuses
    }
    let first = statuses("42").await;
    assert_eq!(first, statuses("42").await);
    assert!(first.contains(&200) && first.contains(&503), "{first:?}");
}

#[tokio::test]
async fn oversized_bodies_and_unknown_routes() {
    let sink = TestSink::start(&[]).await;
    let big = "x".repeat(outbox_sink::MAX_BODY_BYTES + 1);
    let response = sink.deliver(Some("big"), &big).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let records = sink.records(Some("big")).await;
    assert_eq!(records[0]["outcome"], "too_large");
    assert_eq!(records[0]["payload_sha256"], Value::Null);
    assert_eq!(sink.stats().await["applied"], 0);

    // Exactly at the limit is fine.
    let at_limit = "x".repeat(outbox_sink::MAX_BODY_BYTES);
    let response = sink.deliver(Some("at-limit"), &at_limit).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    for path in ["/nowhere", "/_sink/nothing", "/requests/x"] {
        let (status, body) = sink.get(path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(body["error"], "not found");
    }
    let response = sink.call(Method::POST, "/_sink/records").await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    sink.stop().await;
}

#[tokio::test]
async fn latency_delays_the_answer() {
    let sink = TestSink::start(&["--latency", "200ms"]).await;
    let started = std::time::Instant::now();
    sink.applied(None).await;
    assert!(started.elapsed() >= std::time::Duration::from_millis(200));

    // A scripted answer does not wait.
    let (_, faults) = sink.faults(json!({ "script": [{ "status": 500 }] })).await;
    assert_eq!(faults["latency_ms"], 200);
    let response = sink.deliver(None, "{}").await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    sink.stop().await;
}

#[tokio::test]
async fn a_dropped_response_writes_no_byte() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sink = TestSink::start(&["--drop-response-rate", "1"]).await;
    let mut stream = tokio::net::TcpStream::connect(sink.base.trim_start_matches("http://"))
        .await
        .unwrap();
    stream
        .write_all(
            b"POST /hook HTTP/1.1\r\nHost: sink\r\nIdempotency-Key: raw\r\n\
              Content-Length: 2\r\n\r\n{}",
        )
        .await
        .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&answer),
        "",
        "nothing written before the close"
    );
    assert_eq!(sink.records(Some("raw")).await[0]["dropped"], true);
    sink.stop().await;
}
