//! Trace context from the agent's request to the destination's receipt: the real decider,
//! dispatcher and sink, exporting OTLP/HTTP to a receiver that decodes what it gets with
//! the official protobuf types; the `traceparent` each attempt sent read back from the
//! sink's own records; bad and hostile trace headers.

use crate::common::capture::Capture;
use crate::common::decider::DeciderServe;
use crate::common::destinations::add_destination;
use crate::common::destinations::DestinationAdd;
use crate::common::procs::{
    dispatcher_args, spawn_dispatcher_with_metrics, wait_for_db, wait_for_series, Sink, SmtpSink,
};
use crate::common::{add_tenant, renewal, Api};
use outbox_core::trace_context::{TraceContext, TraceParent, TraceState};
use outbox_testkit::otlp::{OtlpReceiver, ReceivedSpan};
use outbox_testkit::TestDb;
use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::Digest;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
/// A string only the payload holds: no span or attribute may carry it.
const PAYLOAD_MARKER: &str = "confidential-quote-7731";

/// Export settings for a process: the receiver, and a short batch delay so the test waits
/// little for spans.
fn otel_env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.to_owned()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000".to_owned()),
    ]
}

fn find<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// The parts of a `traceparent` header: trace id, parent id, flags.
fn parts(traceparent: &str) -> (String, String, String) {
    let fields: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(fields.len(), 4, "{traceparent}");
    assert_eq!(fields[0], "00", "{traceparent}");
    (
        fields[1].to_owned(),
        fields[2].to_owned(),
        fields[3].to_owned(),
    )
}

/// An approval sent with a `traceparent` makes one trace: the API's server span (the
/// caller's child), the approval's producer span under it, and, linked to the approval
/// span rather than its children, the consumer span of each delivery attempt, here one
/// that failed and one that succeeded. The sink received on each attempt the approval's
/// trace with that attempt's own span as the parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_from_the_agents_request_to_the_destinations_receipt() {
    let receiver = OtlpReceiver::start().await;
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &[]).await;
    let sink = Sink::start(&[]).await;
    add_destination(&db, acme.id, "hooks", &sink.hook_url(), |_| {}).await;
    // The first attempt is refused with a 503; the retry is accepted.
    sink.faults(json!({"script": [{"status": 503}]})).await;

    let env = otel_env(&receiver.endpoint());
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut decider = DeciderServe::on(&db.url);
    for (key, value) in &env_refs {
        decider = decider.env(key, value);
    }
    let decider = decider.start().await;
    let args = dispatcher_args(&db, "traced", &[]);
    let (dispatcher, _metrics) = spawn_dispatcher_with_metrics(&args, &env_refs).await;

    let mut approval = renewal(7);
    approval["destination"] = json!("hooks");
    approval["payload"]["note"] = json!(PAYLOAD_MARKER);
    let response = reqwest::Client::new()
        .post(format!("{}/v1/alerts", decider.api))
        .bearer_auth(&acme.token)
        .header("traceparent", format!("00-{TRACE}-{CALLER_SPAN}-01"))
        .header("tracestate", "congo=t61rcWkgMzE")
        .json(&approval)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let alert: Value = response.json().await.unwrap();
    assert_eq!(alert["trace_id"], TRACE, "{alert}");
    let id = alert["id"].as_str().unwrap().to_owned();

    wait_for_db(
        &db,
        "SELECT count(*) FROM alert_states WHERE state = 'accepted'",
        |n| n == 1,
    )
    .await;

    // What the destination received, from its own records.
    let records = sink.records(&id).await;
    assert_eq!(records.len(), 2, "{records:?}");
    let mut sent_spans = Vec::new();
    for record in &records {
        let (trace, parent, flags) = parts(record["trace_parent"].as_str().unwrap());
        assert_eq!(trace, TRACE, "{record}");
        assert_eq!(flags, "01", "{record}");
        assert_eq!(record["trace_state"], "congo=t61rcWkgMzE", "{record}");
        sent_spans.push(parent);
    }
    assert_ne!(
        sent_spans[0], sent_spans[1],
        "each attempt sends its own span id"
    );
    assert!(!sent_spans.contains(&CALLER_SPAN.to_owned()));

    let spans = receiver
        .wait_for_spans(Duration::from_secs(30), |spans| {
            let attempts = find(spans, "process outbox");
            let clients = find(spans, "POST");
            attempts.len() >= 2
                && clients.len() >= 2
                && !find(spans, "settle").is_empty()
                && !find(spans, "approve outbox").is_empty()
                && !find(spans, "POST /v1/alerts").is_empty()
        })
        .await;

    let server = find(&spans, "POST /v1/alerts");
    assert_eq!(server.len(), 1);
    let server = server[0];
    assert_eq!(server.trace_id, TRACE);
    assert_eq!(server.parent_span_id.as_deref(), Some(CALLER_SPAN));
    assert_eq!(server.kind, "server");
    assert_eq!(server.service_name, "decider");
    assert_eq!(server.attr_str("http.route").as_deref(), Some("/v1/alerts"));
    assert_eq!(
        server.attr_str("http.response.status_code").as_deref(),
        Some("201")
    );

    let approval = find(&spans, "approve outbox");
    assert_eq!(approval.len(), 1);
    let approval = approval[0];
    assert_eq!(approval.trace_id, TRACE);
    assert_eq!(approval.kind, "producer");
    assert_eq!(
        approval.parent_span_id.as_deref(),
        Some(server.span_id.as_str())
    );
    assert_eq!(approval.attr_str("messaging.message.id"), Some(id.clone()));
    assert_eq!(
        approval.attr_str("messaging.destination.name").as_deref(),
        Some("outbox")
    );

    // The stored context is the approval span's: every attempt links to it.
    let stored: String = sqlx::query_scalar("SELECT traceparent FROM alerts WHERE id = $1::uuid")
        .bind(&id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(parts(&stored).1, approval.span_id);

    let mut attempts = find(&spans, "process outbox");
    attempts.sort_by_key(|s| s.start_unix_nanos);
    assert_eq!(attempts.len(), 2);
    for (n, attempt) in attempts.iter().enumerate() {
        assert_eq!(attempt.trace_id, TRACE);
        assert_eq!(attempt.kind, "consumer");
        assert_eq!(attempt.service_name, "dispatcher");
        assert_eq!(attempt.parent_span_id, None, "linked, not parented");
        assert!(
            attempt
                .links
                .iter()
                .any(|l| l.trace_id == TRACE && l.span_id == approval.span_id),
            "{attempt:?}"
        );
        assert_eq!(
            attempt.span_id, sent_spans[n],
            "the sink got this attempt's span"
        );
        assert_eq!(
            attempt.attr_str("outbox.attempt"),
            Some((n + 1).to_string())
        );
        assert_eq!(
            attempt.attr_str("outbox.destination").as_deref(),
            Some("hooks")
        );
        assert_eq!(attempt.attr_str("messaging.message.id"), Some(id.clone()));
        // The claim batch, the request and the settle are the attempt's children.
        for child in ["claim outbox", "POST", "settle"] {
            assert!(
                spans.iter().any(|s| s.name == child
                    && s.parent_span_id.as_deref() == Some(attempt.span_id.as_str())),
                "no `{child}` under attempt {}: {}",
                n + 1,
                receiver.render_tree(TRACE)
            );
        }
    }
    assert_eq!(
        attempts[0].attr_str("outbox.outcome").as_deref(),
        Some("not_processed")
    );
    assert!(attempts[0].attr_str("error.type").is_some());
    assert_eq!(
        attempts[0].attr_str("http.response.status_code").as_deref(),
        Some("503")
    );
    assert_eq!(
        attempts[1].attr_str("outbox.outcome").as_deref(),
        Some("accepted")
    );
    assert_eq!(
        attempts[1].attr_str("http.response.status_code").as_deref(),
        Some("200")
    );

    // No span carries the payload, the token or the destination's URL.
    for span in &spans {
        for (key, _) in span.attributes.iter() {
            let value = span.attr_str(key).unwrap_or_default();
            for secret in [PAYLOAD_MARKER, acme.token.as_str(), "/hook"] {
                assert!(
                    !value.contains(secret),
                    "span `{}` attribute `{key}` carries `{secret}`",
                    span.name
                );
            }
        }
    }

    // The trail names the trace.
    let show = crate::common::outboxctl(&db, &["alert", "show", &id]).await;
    assert!(
        show.stdout.contains(&format!("trace        {TRACE}")),
        "{}",
        show.stdout
    );
    assert!(
        show.stdout
            .contains(&format!("queued for delivery; trace {TRACE}")),
        "{}",
        show.stdout
    );
    drop(dispatcher);
    drop(decider);
}

/// A collector that is down never holds a delivery back: every alert is delivered, the
/// dropped spans are counted on `/metrics`, and nothing is logged at ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_slows_and_fails_nothing() {
    // A port that was just free: nothing listens there.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let endpoint = format!("http://{closed}");
    let sink = Sink::start(&[]).await;
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &[]).await;
    add_destination(&db, acme.id, "hooks", &sink.hook_url(), |_| {}).await;
    let env = otel_env(&endpoint);
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let args = dispatcher_args(&db, "blind", &[]);
    let (dispatcher, metrics) = spawn_dispatcher_with_metrics(&args, &env_refs).await;

    let mut decider = DeciderServe::on(&db.url);
    for (key, value) in &env_refs {
        decider = decider.env(key, value);
    }
    let decider = decider.start().await;
    let http = reqwest::Client::new();
    for n in 0..20 {
        let mut approval = renewal(n);
        approval["destination"] = json!("hooks");
        let response = http
            .post(format!("{}/v1/alerts", decider.api))
            .bearer_auth(&acme.token)
            .json(&approval)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    wait_for_db(
        &db,
        "SELECT count(*) FROM alert_states WHERE state = 'accepted'",
        |n| n == 20,
    )
    .await;
    assert_eq!(sink.stats().await["applied"], 20);

    // The spans of those deliveries could not be exported: counted, not lost silently.
    let dropped = wait_for_series(
        &http,
        &metrics,
        "outbox_trace_spans_dropped_total",
        |dropped| dropped > 0.0,
    )
    .await;
    assert!(dropped > 0.0);
    for process in [&dispatcher, &decider.process] {
        let lines = process.log_lines();
        assert!(
            !lines.iter().any(|line| line.contains("ERROR")),
            "{}",
            lines.join("\n")
        );
        let warnings = lines.iter().filter(|line| line.contains("WARN")).count();
        assert!(warnings <= 2, "{}", lines.join("\n"));
    }
}

/// Sends `head` (request line and headers, CRLF-separated, without the final blank
/// line) and `body` over a raw connection: the only way to send header bytes an HTTP
/// client refuses to.
async fn raw_post(base: &str, head: &str, body: &str) -> u16 {
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{head}\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer}"))
}

/// Malformed, oversized and hostile trace headers are ignored as the recommendation says:
/// the approval is answered as without them, with a new trace, never a 4xx or 5xx; and
/// nothing of them but a well-formed `traceparent`/`tracestate` reaches a destination.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_trace_headers_start_a_new_trace_and_never_reach_a_destination() {
    let api = Api::start().await;
    let capture = Capture::start().await;
    add_destination(&api.db, api.acme.id, "hooks", &capture.url(), |_| {}).await;
    let long_state = (0..40)
        .map(|n| format!("k{n}={}", "v".repeat(20)))
        .collect::<Vec<_>>()
        .join(",");
    let huge_parent = format!("00-{TRACE}-{CALLER_SPAN}-01{}", "0".repeat(8000));
    let cases: Vec<(&str, String)> = vec![
        ("short", "traceparent: 00-4bf92f35-00f067aa0ba902b7-01".to_owned()),
        ("zero trace", format!("traceparent: 00-{}-{CALLER_SPAN}-01", "0".repeat(32))),
        ("version ff", format!("traceparent: ff-{TRACE}-{CALLER_SPAN}-01")),
        ("upper case", format!("traceparent: 00-{}-{CALLER_SPAN}-01", TRACE.to_uppercase())),
        ("oversized", format!("traceparent: {huge_parent}")),
        (
            "two traceparents",
            format!("traceparent: 00-{TRACE}-{CALLER_SPAN}-01\r\ntraceparent: 00-{TRACE}-{CALLER_SPAN}-00"),
        ),
        (
            "smuggled header",
            format!("traceparent: 00-{TRACE}-{CALLER_SPAN}-01\r\ntracestate: a=1\r\nX-Smuggled: yes"),
        ),
        (
            "non-ascii tracestate",
            format!("traceparent: 00-{TRACE}-{CALLER_SPAN}-01\r\ntracestate: a=\u{e9}t\u{e9}"),
        ),
        (
            "too many tracestate entries",
            format!("traceparent: 00-{TRACE}-{CALLER_SPAN}-01\r\ntracestate: {long_state}"),
        ),
    ];
    for (n, (case, header)) in cases.iter().enumerate() {
        let mut approval = renewal(100 + n);
        approval["destination"] = json!("hooks");
        let head = format!(
            "POST /v1/alerts HTTP/1.1\r\nAuthorization: Bearer {}\r\n{header}",
            api.acme.token
        );
        let status = raw_post(&api.base, &head, &approval.to_string()).await;
        assert_eq!(status, 201, "{case}");
    }
    // Every alert has a well-formed trace; only the well-formed parent was kept.
    let stored: Vec<(String, Option<String>, Option<String>)> =
        sqlx::query_as("SELECT subject, traceparent, tracestate FROM alerts ORDER BY subject")
            .fetch_all(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(stored.len(), cases.len());
    for (subject, parent, state) in &stored {
        let parent = parent
            .as_deref()
            .unwrap_or_else(|| panic!("{subject} has no trace"));
        let (trace, _, _) = parts(parent);
        assert_eq!(trace.len(), 32);
        if let Some(state) = state {
            assert!(state.len() <= 512 && state.bytes().all(|b| (0x20..0x7f).contains(&b)));
        }
    }

    crate::common::procs::drain(&api.db, "w1", &[]).await;
    let seen = capture.all();
    assert_eq!(seen.len(), cases.len());
    for request in &seen {
        assert!(!request.headers.contains_key("x-smuggled"));
        for (name, value) in &request.headers {
            let bytes = value.as_bytes();
            assert!(
                !bytes.contains(&b'\r') && !bytes.contains(&b'\n'),
                "{name}: {value:?}"
            );
        }
        let (trace, _, _) = parts(&request.header("traceparent"));
        assert_eq!(trace.len(), 32);
        if let Some(state) = request.headers.get("tracestate") {
            let state = state.to_str().unwrap();
            assert!(state.len() <= 512, "{state}");
            assert!(!state.contains('\u{e9}'));
        }
    }
}

/// An email carries the attempt's `Traceparent` (and `Tracestate`) at the top of the
/// message: each attempt its own span id in the alert's trace, while the rest of a resend
/// is the stored message byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_email_attempt_carries_its_own_traceparent_and_the_same_stored_message() {
    let db = TestDb::new().await;
    let inbox = SmtpSink::start(&[]).await;
    let port = inbox.smtp_addr.rsplit(':').next().unwrap().to_owned();
    let _ = crate::common::outboxctl(&db, &["tenant", "create", "acme"]).await;
    DestinationAdd::email_relay("cfo", &port, "none")
        .args(&["--to", "cfo@acme.example", "--on-uncertain", "retry"])
        .add(&db)
        .await;
    let tenant = outbox_store::tenants::find(&db.pool, "acme").await.unwrap();
    let given = TraceContext {
        parent: TraceParent::parse(&format!("00-{TRACE}-{CALLER_SPAN}-01")).unwrap(),
        state: TraceState::parse(["congo=t61rcWkgMzE"]),
    };
    let approved = outbox_store::alerts::approve_checked(
        &db.pool,
        outbox_store::alerts::CheckedApproval {
            tenant_id: tenant.id,
            destination: "cfo",
            subject: "contract:A-17",
            occurrence: "2027-01-15/30d",
            payload: outbox_core::CheckedPayload::check(crate::common::alerts::RENEWAL).unwrap(),
            actor: "test",
            ordering_key: None,
            notify_dispatchers: false,
            trace: Some(&given),
        },
    )
    .await
    .unwrap();
    let outbox_store::alerts::Approved::Created(alert) = approved else {
        panic!("{approved:?}");
    };
    let id = alert.id;
    // The first attempt's final reply is lost: the message is resent.
    inbox
        .sink
        .faults(json!({"smtp_drop_for_message_ids": [format!("{id}@acme.example")]}))
        .await;
    crate::common::procs::drain(&db, "w1", &[]).await;
    assert_eq!(crate::common::alerts::state_of(&db, id).await, "accepted");

    let stored = outbox_store::rendered::find(&db.pool, id)
        .await
        .unwrap()
        .unwrap();
    let mut on_the_wire = stored.bytes.clone();
    on_the_wire.extend_from_slice(b"\r\n");
    let stored_sha: String = sha2::Sha256::digest(&on_the_wire)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let messages: Vec<Value> = inbox
        .messages()
        .await
        .into_iter()
        .filter(|m| m["alert_id"] == id.to_string())
        .collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    let mut parents = Vec::new();
    for message in &messages {
        let (trace, parent, _) = parts(message["trace_parent"].as_str().unwrap());
        assert_eq!(trace, TRACE);
        assert_ne!(parent, CALLER_SPAN);
        assert_eq!(message["sha256"], stored_sha.as_str(), "{message}");
        parents.push(parent);
    }
    assert_ne!(parents[0], parents[1]);
    assert!(!String::from_utf8_lossy(&stored.bytes).contains("Traceparent"));
}

/// A repeated approval keeps the first approval's trace; when it came with another
/// trace, the evidence says so, and when it came with the same one (or none), nothing is
/// written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_approval_keeps_the_first_trace_and_says_so_when_it_differs() {
    let api = Api::start().await;
    let mut approval = renewal(1);
    approval["destination"] = json!("ops");
    let approve = |traceparent: Option<String>| {
        let mut request = api
            .http
            .post(format!("{}/v1/alerts", api.base))
            .bearer_auth(&api.acme.token)
            .json(&approval);
        if let Some(traceparent) = traceparent {
            request = request.header("traceparent", traceparent);
        }
        request.send()
    };
    let first = approve(Some(format!("00-{TRACE}-{CALLER_SPAN}-01")))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().await.unwrap();
    let id: uuid::Uuid = first["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(first["trace_id"], TRACE);

    // The same trace (another span of the caller's), or none: nothing is written.
    for again in [Some(format!("00-{TRACE}-0123456789abcdef-01")), None] {
        let response = approve(again).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert_eq!(crate::common::alerts::evidence(&api.db, id).await.len(), 1);

    let other = "0af7651916cd43dd8448eb211c80319c";
    let response = approve(Some(format!("00-{other}-b7ad6b7169203331-01")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["trace_id"], TRACE, "the alert keeps its first trace");
    let trail = crate::common::alerts::evidence(&api.db, id).await;
    assert_eq!(trail.len(), 2, "{trail:?}");
    assert!(
        trail[1].contains(&format!("approved again within trace {other}"))
            && trail[1].contains(&format!("keeps its first approval's trace {TRACE}")),
        "{trail:?}"
    );
    assert_eq!(
        crate::common::alerts::state_of(&api.db, id).await,
        "pending"
    );

    // A rerun in a new trace every time adds a line for the first ten only.
    for n in 1..=12u64 {
        let trace = format!("{n:032x}");
        let response = approve(Some(format!("00-{trace}-b7ad6b7169203331-01")))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let trail = crate::common::alerts::evidence(&api.db, id).await;
    assert_eq!(trail.len(), 1 + 10, "{trail:?}");
}
