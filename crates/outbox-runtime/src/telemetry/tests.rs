//! Tests of the export pipeline with real parts: our processor and its thread, the
//! tracing-opentelemetry layer, the SDK, and (for the wire) the OTLP exporter with our
//! HTTP client against a stand-in collector. Stand-in exporters play the collector where
//! the test is about what happens around it (failing, hanging, slow). No global state:
//! each test builds its own pipeline under a scoped subscriber.

#![allow(clippy::unwrap_used)]

use super::config::BatchSettings;
use super::export::{Counters, QueueProcessor};
use super::json::WithTraceIds;
use super::*;
use opentelemetry::trace::{SpanContext, SpanId, Status, TraceFlags, TraceId};
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks, SpanProcessor};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Registry;

/// Waits (polling) until `check` holds, failing after 10 s.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A finished span, as the SDK hands it to a processor.
fn finished(n: u64, sampled: bool) -> SpanData {
    let flags = if sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    SpanData {
        span_context: SpanContext::new(
            TraceId::from(u128::from(n) + 1),
            SpanId::from(n + 1),
            flags,
            false,
            Default::default(),
        ),
        parent_span_id: SpanId::INVALID,
        parent_span_is_remote: false,
        span_kind: SpanKind::Internal,
        name: format!("span {n}").into(),
        start_time: SystemTime::UNIX_EPOCH,
        end_time: SystemTime::UNIX_EPOCH,
        attributes: Vec::new(),
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: Status::Unset,
        instrumentation_scope: InstrumentationScope::builder("test").build(),
    }
}

fn batch(max_queue_size: usize, export_timeout: Duration) -> BatchSettings {
    BatchSettings {
        max_queue_size,
        schedule_delay: Duration::ZERO,
        max_export_batch_size: 1,
        export_timeout,
    }
}

/// A collector that keeps everything.
#[derive(Debug, Clone, Default)]
struct Collect(Arc<Mutex<Vec<SpanData>>>);

impl Collect {
    fn spans(&self) -> Vec<SpanData> {
        self.0.lock().unwrap().clone()
    }

    fn named(&self, name: &str) -> SpanData {
        self.spans()
            .into_iter()
            .find(|span| span.name == name)
            .unwrap_or_else(|| panic!("no span {name} in {:?}", self.spans()))
    }
}

impl SpanExporter for Collect {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

/// A collector that says when an export starts and answers only when let through.
#[derive(Debug)]
struct Gated {
    started: std_mpsc::Sender<usize>,
    gate: Arc<tokio::sync::Semaphore>,
}

impl SpanExporter for Gated {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let _ = self.started.send(batch.len());
        match self.gate.acquire().await {
            Ok(permit) => {
                permit.forget();
                Ok(())
            }
            Err(_) => Err(OTelSdkError::InternalFailure("gate closed".to_owned())),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    Accept,
    Fail,
    Hang,
}

/// A collector that accepts, fails or never answers, as told.
#[derive(Debug, Clone)]
struct Scripted(Arc<Mutex<Mode>>);

impl Scripted {
    fn set(&self, mode: Mode) {
        *self.0.lock().unwrap() = mode;
    }
}

impl SpanExporter for Scripted {
    async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
        let mode = *self.0.lock().unwrap();
        match mode {
            Mode::Accept => Ok(()),
            Mode::Fail => Err(OTelSdkError::InternalFailure(
                "the collector answered 503".to_owned(),
            )),
            Mode::Hang => std::future::pending().await,
        }
    }
}

/// Log output kept in memory.
#[derive(Debug, Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    fn dispatch(&self) -> tracing::Dispatch {
        tracing::Dispatch::new(
            tracing_subscriber::fmt()
                .with_writer(self.clone())
                .with_ansi(false)
                .with_max_level(tracing::Level::TRACE)
                .finish(),
        )
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;

    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

fn test_pipeline<S, E>(exporter: E) -> (OtelLayer<S>, Pipeline)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    E: SpanExporter + 'static,
{
    Pipeline::build(
        BatchSettings::default(),
        config::Sampling::default().sampler(),
        Resource::builder_empty()
            .with_service_name("test-service")
            .build(),
        exporter,
        None,
    )
    .unwrap()
}

#[test]
fn a_full_queue_drops_spans_and_counts_them() {
    let (started, starts) = std_mpsc::channel();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let exporter = Gated {
        started,
        gate: gate.clone(),
    };
    let counters = Arc::new(Counters::default());
    let processor = QueueProcessor::start(
        exporter,
        batch(2, Duration::from_secs(30)),
        counters.clone(),
        None,
    )
    .unwrap();
    processor.on_end(finished(0, true));
    // The export thread holds the first span; the queue has room for two more.
    assert_eq!(starts.recv_timeout(Duration::from_secs(10)), Ok(1));
    for n in 1..=4 {
        processor.on_end(finished(n, true));
    }
    processor.on_end(finished(9, false));
    assert_eq!(counters.dropped(), 2, "two spans found the queue full");
    assert_eq!(counters.exported(), 0);
    gate.add_permits(3);
    eventually("three exports", || counters.exported() == 3);
    assert_eq!(counters.dropped(), 2, "an unsampled span is not counted");
    processor
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();
    processor.on_end(finished(10, true));
    assert_eq!(counters.dropped(), 3, "a span after shutdown is dropped");
}

#[test]
fn failed_and_unanswered_exports_count_as_dropped_and_are_logged_once() {
    let logs = Logs::default();
    let exporter = Scripted(Arc::new(Mutex::new(Mode::Fail)));
    let counters = Arc::new(Counters::default());
    let processor = QueueProcessor::start(
        exporter.clone(),
        batch(16, Duration::from_millis(100)),
        counters.clone(),
        Some(logs.dispatch()),
    )
    .unwrap();
    processor.on_end(finished(0, true));
    eventually("a failed export", || counters.dropped() == 1);
    processor.on_end(finished(1, true));
    eventually("a second failed export", || counters.dropped() == 2);
    exporter.set(Mode::Hang);
    processor.on_end(finished(2, true));
    eventually("an export timing out", || counters.dropped() == 3);
    exporter.set(Mode::Accept);
    processor.on_end(finished(3, true));
    eventually("the recovery logged", || logs.text().contains(" INFO "));
    assert_eq!(
        (counters.exported(), counters.dropped()),
        (1, 3),
        "{}",
        logs.text()
    );
    processor
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();

    let text = logs.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].contains("WARN"), "{text}");
    assert!(
        lines[0].contains("the collector answered 503"),
        "the reason is given: {text}"
    );
    assert!(lines[1].contains("INFO"), "{text}");
    assert!(lines[1].contains("works again"), "{text}");
}

#[test]
fn shutdown_is_bounded_when_the_collector_hangs() {
    let (started, starts) = std_mpsc::channel();
    let exporter = Gated {
        started,
        gate: Arc::new(tokio::sync::Semaphore::new(0)),
    };
    let counters = Arc::new(Counters::default());
    let processor = QueueProcessor::start(
        exporter,
        batch(16, Duration::from_secs(60)),
        counters.clone(),
        None,
    )
    .unwrap();
    processor.on_end(finished(0, true));
    assert_eq!(starts.recv_timeout(Duration::from_secs(10)), Ok(1));
    let begun = Instant::now();
    let result = processor.shutdown_with_timeout(Duration::from_millis(200));
    assert!(
        matches!(result, Err(OTelSdkError::Timeout(_))),
        "{result:?}"
    );
    assert!(begun.elapsed() < Duration::from_secs(5));
    assert!(matches!(
        processor.shutdown_with_timeout(Duration::from_millis(10)),
        Err(OTelSdkError::AlreadyShutdown)
    ));
}

#[test]
fn the_figures_are_rendered_for_prometheus() {
    let mut out = String::new();
    render(&mut out, 7, 2, true);
    for line in [
        "# TYPE outbox_trace_spans_exported_total counter",
        "outbox_trace_spans_exported_total 7",
        "# TYPE outbox_trace_spans_dropped_total counter",
        "outbox_trace_spans_dropped_total 2",
        "# TYPE outbox_tracing_enabled gauge",
        "outbox_tracing_enabled 1",
    ] {
        assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
    }
    assert_eq!(out.lines().filter(|l| l.starts_with("# HELP")).count(), 3);
    // Nothing in this test process installs export.
    let mut out = String::new();
    render_metrics(&mut out);
    assert!(out.contains("outbox_trace_spans_dropped_total 0"));
    assert!(out.contains("outbox_tracing_enabled 0"));
    assert!(!enabled());
    let span = tracing::Span::none();
    assert_eq!(start_in_trace(&span, [1; 16], None), None);
    assert_eq!(current_context(&span), None);
}

#[test]
fn counters_follow_the_spans_of_a_pipeline() {
    let collect = Collect::default();
    let (layer, pipeline) = test_pipeline(collect.clone());
    tracing::subscriber::with_default(Registry::default().with(layer), || {
        for _ in 0..3 {
            let _span = tracing::info_span!("work").entered();
        }
    });
    pipeline.provider.force_flush().unwrap();
    assert_eq!(collect.spans().len(), 3);
    assert_eq!(pipeline.counters.exported(), 3);
    assert_eq!(pipeline.counters.dropped(), 0);
}

#[test]
fn start_in_trace_makes_a_linked_root_span_of_the_given_trace() {
    let collect = Collect::default();
    let (layer, pipeline) = test_pipeline(collect.clone());
    let approval = TraceParent {
        trace_id: [0xab; 16],
        parent_id: [0xcd; 8],
        flags: 1,
    };
    let claim_start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let claim_end = claim_start + Duration::from_millis(40);
    let (sent, other) = tracing::subscriber::with_default(Registry::default().with(layer), || {
        // Started inside another span, which must not become its parent.
        let _outer = tracing::info_span!("outer").entered();
        let attempt = tracing::info_span!("attempt");
        let sent = w3c::start_in_trace(&attempt, approval.trace_id, Some(&approval)).unwrap();
        assert_eq!(w3c::current_context(&attempt), Some(sent));
        assert_eq!(
            w3c::start_in_trace(&attempt, approval.trace_id, None),
            None,
            "a started span keeps its place"
        );
        w3c::record_child_span(
            &pipeline.tracer,
            &attempt,
            ChildSpan {
                name: "claim outbox",
                kind: SpanKind::Consumer,
                start: claim_start,
                end: claim_end,
                attributes: vec![KeyValue::new("outbox.claim.rows", 3_i64)],
            },
        );
        let other = w3c::current_context(&tracing::info_span!(parent: None, "other")).unwrap();
        (sent, other)
    });
    pipeline.provider.force_flush().unwrap();

    assert_eq!(sent.trace_id, approval.trace_id);
    assert_ne!(sent.parent_id, approval.parent_id);
    assert!(sent.sampled());
    assert_ne!(
        other.trace_id, approval.trace_id,
        "the override is used once"
    );

    let attempt = collect.named("attempt");
    assert_eq!(
        attempt.span_context.trace_id().to_bytes(),
        approval.trace_id
    );
    assert_eq!(attempt.span_context.span_id().to_bytes(), sent.parent_id);
    assert_eq!(attempt.parent_span_id, SpanId::INVALID, "no parent");
    assert_eq!(attempt.links.links.len(), 1);
    let link = &attempt.links.links[0].span_context;
    assert_eq!(link.trace_id().to_bytes(), approval.trace_id);
    assert_eq!(link.span_id().to_bytes(), approval.parent_id);
    assert!(link.is_remote());

    let claim = collect.named("claim outbox");
    assert_eq!(claim.span_context.trace_id().to_bytes(), approval.trace_id);
    assert_eq!(claim.parent_span_id.to_bytes(), sent.parent_id);
    assert_eq!(claim.span_kind, SpanKind::Consumer);
    assert_eq!((claim.start_time, claim.end_time), (claim_start, claim_end));
    assert!(claim
        .attributes
        .contains(&KeyValue::new("outbox.claim.rows", 3_i64)));
    assert_ne!(
        collect.named("outer").span_context.trace_id().to_bytes(),
        approval.trace_id
    );
}

#[test]
fn a_remote_parent_is_taken_with_its_state() {
    let collect = Collect::default();
    let (layer, pipeline) = test_pipeline(collect.clone());
    let caller =
        TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
    let state = TraceState::parse(["congo=t61rcWkgMzE"]).unwrap();
    let own = tracing::subscriber::with_default(Registry::default().with(layer), || {
        let span = tracing::info_span!("request");
        w3c::set_remote_parent(&span, &caller, Some(&state));
        let own = w3c::current_context(&span).unwrap();
        // Too late once started: the parent stays.
        w3c::set_remote_parent(&span, &caller.with_parent([9; 8]), None);
        own
    });
    pipeline.provider.force_flush().unwrap();
    let request = collect.named("request");
    assert_eq!(own.trace_id, caller.trace_id);
    assert_eq!(request.span_context.span_id().to_bytes(), own.parent_id);
    assert_eq!(request.parent_span_id.to_bytes(), caller.parent_id);
    assert!(request.parent_span_is_remote);
    assert_eq!(
        request.span_context.trace_state().header(),
        "congo=t61rcWkgMzE"
    );
}

#[test]
fn json_lines_carry_the_trace_and_span_ids() {
    let logs = Logs::default();
    let (layer, pipeline) = test_pipeline(Collect::default());
    let json = tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(true)
        .map_event_format(WithTraceIds)
        .with_writer(logs.clone());
    let ids = tracing::subscriber::with_default(Registry::default().with(json).with(layer), || {
        tracing::info!("before any span");
        let span = tracing::info_span!("work", alert_id = 7);
        let _entered = span.enter();
        tracing::info!(answer = 42, "inside");
        let elsewhere = tracing::info_span!(parent: None, "elsewhere");
        tracing::info!(parent: &elsewhere, "given another parent");
        w3c::current_context(&span).unwrap()
    });
    drop(pipeline);
    let lines: Vec<serde_json::Value> = logs
        .text()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{}", logs.text());
    assert!(lines[0].get("trace_id").is_none());
    assert_eq!(lines[1]["fields"]["answer"], 42);
    assert_eq!(lines[1]["span"]["alert_id"], 7);
    let trace_id = format!("{:032x}", u128::from_be_bytes(ids.trace_id));
    let span_id = format!("{:016x}", u64::from_be_bytes(ids.parent_id));
    assert_eq!(lines[1]["trace_id"], trace_id.as_str());
    assert_eq!(lines[1]["span_id"], span_id.as_str());
    assert!(lines[2].get("trace_id").is_none(), "{}", lines[2]);
}

/// A collector whose libraries trace while it exports, as the HTTP stack might.
#[derive(Debug, Clone)]
struct Chatty {
    collect: Collect,
    dispatch: Arc<OnceLock<tracing::Dispatch>>,
}

impl SpanExporter for Chatty {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        if let Some(dispatch) = self.dispatch.get() {
            tracing::dispatcher::with_default(dispatch, || {
                let _span = tracing::info_span!("made while exporting").entered();
                let _ours =
                    tracing::info_span!(target: "outbox_runtime::telemetry::export", "ours")
                        .entered();
                tracing::info!("exporting");
            });
        }
        self.collect.export(batch).await
    }
}

#[test]
fn exporting_makes_no_spans_to_export() {
    let chatty = Chatty {
        collect: Collect::default(),
        dispatch: Arc::default(),
    };
    let (layer, pipeline) = test_pipeline(chatty.clone());
    let dispatch = tracing::Dispatch::new(Registry::default().with(layer));
    let _ = chatty.dispatch.set(dispatch.clone());
    tracing::dispatcher::with_default(&dispatch, || {
        let _span = tracing::info_span!("product work").entered();
    });
    pipeline.provider.force_flush().unwrap();
    pipeline.provider.force_flush().unwrap();
    let names: Vec<String> = chatty
        .collect
        .spans()
        .iter()
        .map(|span| span.name.to_string())
        .collect();
    assert_eq!(names, ["product work"]);
    // The export thread holds the subscriber (and so the pipeline) until it stops.
    pipeline.provider.shutdown().unwrap();
}

#[test]
fn spans_below_info_and_of_the_transport_are_not_exported() {
    let collect = Collect::default();
    let (layer, pipeline) = test_pipeline(collect.clone());
    tracing::subscriber::with_default(Registry::default().with(layer), || {
        let _kept = tracing::info_span!("kept").entered();
        let _debug = tracing::debug_span!("debug detail").entered();
        let _hyper = tracing::info_span!(target: "hyper::client", "connection").entered();
        let _warned = tracing::warn_span!("warned").entered();
    });
    pipeline.provider.force_flush().unwrap();
    let mut names: Vec<String> = collect
        .spans()
        .iter()
        .map(|span| span.name.to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["kept", "warned"]);
}

#[test]
fn only_the_products_own_spans_are_exported() {
    for target in [
        "outbox_runtime::telemetry::export",
        "opentelemetry_sdk::trace",
        "opentelemetry_otlp",
        "hyper_util::client::legacy",
        "reqwest::connect",
        "rmcp::service",
        "sqlx::query",
    ] {
        assert!(!exported_target(target), "{target}");
    }
    for target in [
        "outbox_dispatcher::claim_loop",
        "outbox_api::trace",
        "outbox_runtime",
    ] {
        assert!(exported_target(target), "{target}");
    }
}

/// A stand-in OTLP/HTTP collector: answers 200 to each request and hands over its head
/// and decoded body.
async fn collector(
    listener: tokio::net::TcpListener,
    received: std_mpsc::Sender<(
        String,
        opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
    )>,
) {
    use prost::Message;
    use tokio::io::AsyncWriteExt;
    while let Ok((mut stream, _)) = listener.accept().await {
        let received = received.clone();
        tokio::spawn(async move {
            while let Some((head, body)) = read_request(&mut stream).await {
                let request = Message::decode(body.as_slice()).unwrap();
                let _ = received.send((head, request));
                let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\n\
                               content-length: 0\r\n\r\n";
                if stream.write_all(answer).await.is_err() {
                    return;
                }
            }
        });
    }
}

async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<(String, Vec<u8>)> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length: usize = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())
            .flatten()
    })?;
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some((head, buf[head_end..head_end + length].to_vec()))
}

#[test]
fn spans_reach_a_collector_over_otlp_http() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (received, requests) = std_mpsc::channel();
    runtime.spawn(collector(listener, received));

    let exporter =
        otlp_exporter(&format!("http://{addr}/v1/traces"), Duration::from_secs(5)).unwrap();
    let (layer, pipeline) = test_pipeline(exporter);
    tracing::subscriber::with_default(Registry::default().with(layer), || {
        let _span = tracing::info_span!("delivered", outbox.attempt = 2).entered();
    });
    pipeline.provider.force_flush().unwrap();
    assert_eq!(pipeline.counters.exported(), 1);

    let (head, request) = requests.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(head.starts_with("POST /v1/traces HTTP/1.1"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/x-protobuf"),
        "{head}"
    );
    let resource_spans = &request.resource_spans[0];
    let service = resource_spans
        .resource
        .as_ref()
        .unwrap()
        .attributes
        .iter()
        .find(|kv| kv.key == "service.name")
        .unwrap();
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    assert!(
        matches!(
            service.value.as_ref().and_then(|value| value.value.as_ref()),
            Some(Value::StringValue(name)) if name == "test-service"
        ),
        "{service:?}"
    );
    let span = &resource_spans.scope_spans[0].spans[0];
    assert_eq!(span.name, "delivered");
    assert_eq!(span.trace_id.len(), 16);
}

#[test]
fn an_unreachable_collector_costs_dropped_spans_only() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let exporter = otlp_exporter(
        &format!("http://{addr}/v1/traces"),
        Duration::from_millis(300),
    )
    .unwrap();
    let (layer, pipeline) = test_pipeline(exporter);
    tracing::subscriber::with_default(Registry::default().with(layer), || {
        let _span = tracing::info_span!("lost").entered();
    });
    pipeline.provider.force_flush().unwrap();
    assert_eq!(
        (pipeline.counters.exported(), pipeline.counters.dropped()),
        (0, 1)
    );
}

/// Set in the environment of the child process [`init_tracing_exports_and_logs_with_ids`]
/// starts: the global subscriber can be installed once per process, and only a process
/// of its own reads the `OTEL_*` variables as a binary does.
const CHILD: &str = "OUTBOX_TELEMETRY_TEST_CHILD";

/// The child's part (does nothing in an ordinary test run).
#[test]
fn child_process_body() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    crate::init_tracing("child-service");
    assert!(enabled());
    {
        let _span = tracing::info_span!("child work").entered();
        tracing::warn!("inside the span");
    }
    shutdown_tracing();
    assert!(!enabled());
    let mut figures = String::new();
    render_metrics(&mut figures);
    eprint!("{figures}");
}

#[test]
fn init_tracing_exports_and_logs_with_ids() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (received, requests) = std_mpsc::channel();
    runtime.spawn(collector(listener, received));

    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child.args([
        "--exact",
        "telemetry::tests::child_process_body",
        "--nocapture",
    ]);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("OTEL_") {
            child.env_remove(name);
        }
    }
    let output = child
        .env(CHILD, "1")
        .env("LOG_FORMAT", "json")
        // Quiet logs do not quiet the export.
        .env("RUST_LOG", "warn")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}/"))
        .env("OTEL_BSP_SCHEDULE_DELAY", "60000")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");

    let line = stderr
        .lines()
        .find(|line| line.contains("inside the span"))
        .unwrap_or_else(|| panic!("no log line in {stderr}"));
    let line: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(line["level"], "WARN");
    let trace_id = line["trace_id"].as_str().unwrap();
    let span_id = line["span_id"].as_str().unwrap();
    assert!(
        stderr.contains("outbox_trace_spans_exported_total 1"),
        "{stderr}"
    );
    assert!(
        stderr.contains("outbox_trace_spans_dropped_total 0"),
        "{stderr}"
    );

    // Exported at shutdown, long before the schedule delay.
    let (head, request) = requests.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(head.starts_with("POST /v1/traces "), "{head}");
    let resource_spans = &request.resource_spans[0];
    let service = resource_spans
        .resource
        .as_ref()
        .unwrap()
        .attributes
        .iter()
        .find(|kv| kv.key == "service.name")
        .unwrap();
    assert!(
        format!("{service:?}").contains("\"child-service\""),
        "{service:?}"
    );
    let span = &resource_spans.scope_spans[0].spans[0];
    assert_eq!(span.name, "child work");
    let hex = |bytes: &[u8]| -> String { bytes.iter().map(|b| format!("{b:02x}")).collect() };
    assert_eq!(hex(&span.trace_id), trace_id);
    assert_eq!(hex(&span.span_id), span_id);
    // Log lines stay logs: a line may quote what a destination answered.
    assert!(span.events.is_empty(), "no log line becomes a span event");
}
