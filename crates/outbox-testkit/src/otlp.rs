//! An OTLP/HTTP trace receiver for tests: a real HTTP endpoint on loopback that an
//! OpenTelemetry SDK exporter sends spans to (`OTEL_EXPORTER_OTLP_ENDPOINT` set to
//! [`OtlpReceiver::endpoint`]), decoding each export request with the official protobuf
//! types, so that a test checks what the product's own exporter put on the wire rather
//! than what a mock of it would.
//!
//! [`OtlpReceiver`] keeps every span received, flattened into [`ReceivedSpan`] (its
//! resource's `service.name`, ids in hex, kind, times, attributes as [`AttrValue`], links,
//! status); [`OtlpReceiver::wait_for_spans`] waits, woken by each export, until a condition
//! holds; [`OtlpReceiver::render_tree`] draws one trace as indented text, for failure
//! messages and for the docs.
//!
//! Only `POST /v1/traces` with `Content-Type: application/x-protobuf` is accepted, and no
//! `Content-Encoding` (there is no decompressor in the workspace, so gzip is answered 415,
//! which tells the exporter's configuration apart from a decoding bug). Refused requests
//! are kept as one line each and shown when a wait fails.

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{span, status, Span};
use prost::Message;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The path an OTLP/HTTP exporter appends to the endpoint for traces.
pub const TRACES_PATH: &str = "/v1/traces";

/// Largest export request read. The SDK's batches are far smaller; a bigger body is a bug
/// worth a refusal rather than an allocation.
const MAX_REQUEST_BYTES: usize = 32 * 1024 * 1024;

/// An OTLP/HTTP trace receiver on `127.0.0.1`, serving until dropped.
#[derive(Debug)]
pub struct OtlpReceiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

/// What the server task and the test share.
#[derive(Debug, Default)]
struct Shared {
    received: Mutex<Received>,
    /// Woken after each request, accepted or refused.
    arrived: Notify,
}

#[derive(Debug, Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    /// Export requests decoded and answered 200.
    requests: usize,
    /// One line per refused request: its status and why.
    refused: Vec<String>,
}

/// One span as received, flattened out of its resource and scope.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// The `service.name` attribute of the span's resource (empty when absent).
    pub service_name: String,
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 16 lowercase hex digits.
    pub span_id: String,
    /// The parent's span id, `None` for a root.
    pub parent_span_id: Option<String>,
    /// The span's name.
    pub name: String,
    /// `server`, `client`, `producer`, `consumer`, `internal`, or `unspecified`.
    pub kind: &'static str,
    /// Start, in nanoseconds since the Unix epoch.
    pub start_unix_nanos: u64,
    /// End, in nanoseconds since the Unix epoch.
    pub end_unix_nanos: u64,
    /// The span's attributes (the last one wins when a key repeats).
    pub attributes: BTreeMap<String, AttrValue>,
    /// The spans this one is linked to.
    pub links: Vec<ReceivedLink>,
    /// `unset`, `ok` or `error`.
    pub status_code: String,
    /// The status description (empty unless the status is `error`).
    pub status_message: String,
}

/// A link from a span to another, possibly in another trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedLink {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 16 lowercase hex digits.
    pub span_id: String,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// A string.
    String(String),
    /// A 64-bit integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A floating-point number.
    Double(f64),
    /// Anything else (arrays, maps, bytes, no value), rendered as text.
    Other(String),
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::String(s) | AttrValue::Other(s) => f.write_str(s),
            AttrValue::Int(i) => write!(f, "{i}"),
            AttrValue::Bool(b) => write!(f, "{b}"),
            AttrValue::Double(d) => write!(f, "{d}"),
        }
    }
}

impl ReceivedSpan {
    /// The attribute `key` rendered as text, whatever its type.
    pub fn attr_str(&self, key: &str) -> Option<String> {
        self.attributes.get(key).map(ToString::to_string)
    }

    /// How long the span lasted (zero when it claims to end before it starts).
    pub fn duration(&self) -> Duration {
        Duration::from_nanos(self.end_unix_nanos.saturating_sub(self.start_unix_nanos))
    }
}

impl OtlpReceiver {
    /// Binds `127.0.0.1` on a free port and serves there until dropped. The listener is
    /// bound before this returns, so an exporter may send at once.
    pub async fn start() -> OtlpReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP receiver on loopback");
        let addr = listener.local_addr().expect("the OTLP receiver's address");
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route(TRACES_PATH, any(export))
            .fallback(elsewhere)
            .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
            .with_state(Arc::clone(&shared));
        let server = tokio::spawn(async move {
            // Serving ends only with an accept error on loopback, which a test would show
            // as spans never arriving, with the dump of what did.
            let _ = axum::serve(listener, app).await;
        });
        OtlpReceiver {
            addr,
            shared,
            server,
        }
    }

    /// The base URL for `OTEL_EXPORTER_OTLP_ENDPOINT` (`http://127.0.0.1:PORT`); the SDK
    /// appends `/v1/traces`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The full URL of the traces route, for `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (which
    /// the SDK uses as given).
    pub fn traces_url(&self) -> String {
        format!("http://{}{TRACES_PATH}", self.addr)
    }

    /// Every span received so far, in arrival order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.shared.lock().spans.clone()
    }

    /// The number of export requests decoded and answered 200.
    pub fn requests(&self) -> usize {
        self.shared.lock().requests
    }

    /// The requests refused so far, one line each (status and reason).
    pub fn refused(&self) -> Vec<String> {
        self.shared.lock().refused.clone()
    }

    /// Waits until `what` holds of the spans received (checked now and after each
    /// request), and returns them. Panics after `deadline` with what was received.
    pub async fn wait_for_spans(
        &self,
        deadline: Duration,
        what: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        match self.wait(deadline, what).await {
            Ok(spans) => spans,
            Err(why) => panic!("{why}"),
        }
    }

    /// [`OtlpReceiver::wait_for_spans`], with the failure as an error.
    async fn wait(
        &self,
        deadline: Duration,
        what: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Result<Vec<ReceivedSpan>, String> {
        let until = tokio::time::Instant::now() + deadline;
        loop {
            // Registered before looking, so that a request landing in between still wakes
            // this wait.
            let arrived = self.shared.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let spans = self.spans();
            if what(&spans) {
                return Ok(spans);
            }
            if tokio::time::timeout_at(until, arrived).await.is_err() {
                return Err(format!(
                    "the spans awaited did not arrive within {deadline:?}\n{}",
                    self.dump()
                ));
            }
        }
    }

    /// Everything received, as text: counts, refusals, and each trace as a tree.
    pub fn dump(&self) -> String {
        let (requests, refused, spans) = {
            let received = self.shared.lock();
            (
                received.requests,
                received.refused.clone(),
                received.spans.clone(),
            )
        };
        let mut out = format!(
            "OTLP receiver at {}: {requests} export request(s), {} span(s), {} refused\n",
            self.endpoint(),
            spans.len(),
            refused.len()
        );
        for line in &refused {
            out.push_str(&format!("  refused: {line}\n"));
        }
        let mut traces: Vec<(u64, &str)> = Vec::new();
        for span in &spans {
            match traces.iter_mut().find(|(_, id)| *id == span.trace_id) {
                Some((start, _)) => *start = (*start).min(span.start_unix_nanos),
                None => traces.push((span.start_unix_nanos, &span.trace_id)),
            }
        }
        traces.sort();
        for (_, trace_id) in traces {
            out.push_str(&format!("trace {trace_id}:\n"));
            for line in render(&spans, trace_id).lines() {
                out.push_str(&format!("  {line}\n"));
            }
        }
        out
    }

    /// One trace as plain text: each span `name [kind] duration` with its notable
    /// attributes, children indented under their parent in order of start. Spans whose
    /// parent was not received (roots, and spans linked rather than parented) are at the
    /// top level, with `(linked to …)` for a link and `(parent … not received)` for a
    /// missing parent. Empty when nothing of the trace was received.
    pub fn render_tree(&self, trace_id: &str) -> String {
        render(&self.spans(), trace_id)
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Received> {
        // A panicking test thread leaves plain data behind, still worth showing.
        self.received.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn refuse(&self, status: StatusCode, why: String) -> Response {
        self.lock()
            .refused
            .push(format!("{} {why}", status.as_u16()));
        self.arrived.notify_waiters();
        (status, format!("{why}\n")).into_response()
    }
}

/// Any other path: 404, noted, since an exporter posting elsewhere (`/v1/traces` twice,
/// say, from a full URL given as the base endpoint) is a configuration error worth seeing.
async fn elsewhere(State(shared): State<Arc<Shared>>, method: Method, uri: Uri) -> Response {
    let why = format!("not found: {method} {uri} (only POST {TRACES_PATH} is served)");
    shared.refuse(StatusCode::NOT_FOUND, why)
}

/// The one route: `POST /v1/traces` with a protobuf body.
async fn export(
    State(shared): State<Arc<Shared>>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if method != Method::POST {
        let why = format!("method {method} not allowed: POST only");
        let mut response = shared.refuse(StatusCode::METHOD_NOT_ALLOWED, why);
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
        return response;
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let media_type = content_type.split(';').next().unwrap_or("").trim();
    if !media_type.eq_ignore_ascii_case("application/x-protobuf") {
        let why =
            format!("content type {content_type:?} not supported: application/x-protobuf only");
        return shared.refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, why);
    }
    if let Some(encoding) = headers.get(header::CONTENT_ENCODING) {
        let encoding = String::from_utf8_lossy(encoding.as_bytes()).into_owned();
        if !encoding.trim().eq_ignore_ascii_case("identity") {
            let why = format!("content encoding {encoding:?} not supported: send it uncompressed");
            return shared.refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, why);
        }
    }
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(request) => request,
        Err(err) => {
            let why = format!("not an ExportTraceServiceRequest: {err}");
            return shared.refuse(StatusCode::BAD_REQUEST, why);
        }
    };
    let spans = flatten(request);
    {
        let mut received = shared.lock();
        received.requests += 1;
        received.spans.extend(spans);
    }
    shared.arrived.notify_waiters();
    (
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}

/// The spans of a request, each with its resource's service name.
fn flatten(request: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for resource_spans in request.resource_spans {
        let service_name = resource_spans
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
            .map(|kv| attr_value(kv.value.as_ref()).to_string())
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                out.push(received_span(&service_name, span));
            }
        }
    }
    out
}

fn received_span(service_name: &str, span: Span) -> ReceivedSpan {
    let kind = match span::SpanKind::try_from(span.kind) {
        Ok(span::SpanKind::Server) => "server",
        Ok(span::SpanKind::Client) => "client",
        Ok(span::SpanKind::Producer) => "producer",
        Ok(span::SpanKind::Consumer) => "consumer",
        Ok(span::SpanKind::Internal) => "internal",
        Ok(span::SpanKind::Unspecified) | Err(_) => "unspecified",
    };
    let (status_code, status_message) = match &span.status {
        Some(s) => {
            let code = match status::StatusCode::try_from(s.code) {
                Ok(status::StatusCode::Ok) => "ok",
                Ok(status::StatusCode::Error) => "error",
                Ok(status::StatusCode::Unset) | Err(_) => "unset",
            };
            (code, s.message.clone())
        }
        None => ("unset", String::new()),
    };
    ReceivedSpan {
        service_name: service_name.to_owned(),
        trace_id: hex(&span.trace_id),
        span_id: hex(&span.span_id),
        parent_span_id: (!span.parent_span_id.is_empty()).then(|| hex(&span.parent_span_id)),
        name: span.name,
        kind,
        start_unix_nanos: span.start_time_unix_nano,
        end_unix_nanos: span.end_time_unix_nano,
        attributes: attributes(&span.attributes),
        links: span
            .links
            .iter()
            .map(|link| ReceivedLink {
                trace_id: hex(&link.trace_id),
                span_id: hex(&link.span_id),
            })
            .collect(),
        status_code: status_code.to_owned(),
        status_message,
    }
}

fn attributes(list: &[KeyValue]) -> BTreeMap<String, AttrValue> {
    list.iter()
        .map(|kv| (kv.key.clone(), attr_value(kv.value.as_ref())))
        .collect()
}

fn attr_value(value: Option<&AnyValue>) -> AttrValue {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => AttrValue::String(s.clone()),
        Some(any_value::Value::IntValue(i)) => AttrValue::Int(*i),
        Some(any_value::Value::BoolValue(b)) => AttrValue::Bool(*b),
        Some(any_value::Value::DoubleValue(d)) => AttrValue::Double(*d),
        Some(any_value::Value::BytesValue(bytes)) => AttrValue::Other(hex(bytes)),
        Some(any_value::Value::ArrayValue(array)) => {
            let items: Vec<String> = array
                .values
                .iter()
                .map(|v| attr_value(Some(v)).to_string())
                .collect();
            AttrValue::Other(format!("[{}]", items.join(", ")))
        }
        Some(any_value::Value::KvlistValue(map)) => {
            let items: Vec<String> = map
                .values
                .iter()
                .map(|kv| format!("{}: {}", kv.key, attr_value(kv.value.as_ref())))
                .collect();
            AttrValue::Other(format!("{{{}}}", items.join(", ")))
        }
        Some(any_value::Value::StringValueStrindex(i)) => AttrValue::Other(format!("strindex {i}")),
        None => AttrValue::Other(String::new()),
    }
}

/// Lowercase hex, as trace and span ids are written in `traceparent`.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes
        .iter()
        .flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 0xf)]])
        .map(char::from)
        .collect()
}

/// Attributes left out of the tree: what the tracing bridge adds to every span (source
/// location, thread, level, target, timings), which would drown the ones that tell spans
/// apart.
fn is_noise(key: &str) -> bool {
    key.starts_with("code.")
        || key.starts_with("thread.")
        || matches!(key, "busy_ns" | "idle_ns" | "level" | "target")
}

/// At most this many attributes per line of the tree, each value cut to
/// [`MAX_VALUE_CHARS`].
const MAX_ATTRIBUTES: usize = 6;
const MAX_VALUE_CHARS: usize = 60;

/// [`OtlpReceiver::render_tree`] over `spans`.
fn render(spans: &[ReceivedSpan], trace_id: &str) -> String {
    let mut trace: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.trace_id == trace_id).collect();
    trace.sort_by(|a, b| {
        (a.start_unix_nanos, a.end_unix_nanos).cmp(&(b.start_unix_nanos, b.end_unix_nanos))
    });
    let by_id: HashMap<&str, &ReceivedSpan> =
        trace.iter().map(|s| (s.span_id.as_str(), *s)).collect();
    let mut children: HashMap<&str, Vec<&ReceivedSpan>> = HashMap::new();
    let mut roots = Vec::new();
    for span in &trace {
        match span.parent_span_id.as_deref() {
            Some(parent) if by_id.contains_key(parent) && parent != span.span_id => {
                children.entry(parent).or_default().push(span);
            }
            _ => roots.push(*span),
        }
    }
    let services: HashSet<&str> = trace.iter().map(|s| s.service_name.as_str()).collect();
    let tree = Tree {
        trace_id,
        by_id,
        children,
        show_service: services.len() > 1,
    };
    let mut out = String::new();
    let mut drawn = HashSet::new();
    for root in &roots {
        tree.draw(root, 0, &mut drawn, &mut out);
    }
    // Spans on a parent cycle (malformed input) are reachable from no root; still shown.
    for span in &trace {
        if !drawn.contains(span.span_id.as_str()) {
            tree.draw(span, 0, &mut drawn, &mut out);
        }
    }
    out
}

struct Tree<'a> {
    trace_id: &'a str,
    by_id: HashMap<&'a str, &'a ReceivedSpan>,
    children: HashMap<&'a str, Vec<&'a ReceivedSpan>>,
    show_service: bool,
}

impl<'a> Tree<'a> {
    fn draw(
        &self,
        span: &'a ReceivedSpan,
        depth: usize,
        drawn: &mut HashSet<&'a str>,
        out: &mut String,
    ) {
        if !drawn.insert(span.span_id.as_str()) {
            return;
        }
        out.push_str(&"  ".repeat(depth));
        out.push_str(&self.line(span, depth == 0));
        out.push('\n');
        for child in self
            .children
            .get(span.span_id.as_str())
            .into_iter()
            .flatten()
        {
            self.draw(child, depth + 1, drawn, out);
        }
    }

    fn line(&self, span: &ReceivedSpan, top: bool) -> String {
        let mut line = format!(
            "{} [{}] {}",
            span.name,
            span.kind,
            format_duration(span.duration())
        );
        if self.show_service {
            line.push_str(&format!(" @{}", span.service_name));
        }
        if span.status_code == "error" {
            line.push_str(" ERROR");
            if !span.status_message.is_empty() {
                line.push_str(&format!(" {:?}", span.status_message));
            }
        }
        if top {
            if let Some(parent) = &span.parent_span_id {
                line.push_str(&format!(" (parent {parent} not received)"));
            }
        }
        for link in &span.links {
            if link.trace_id == self.trace_id {
                let target = self
                    .by_id
                    .get(link.span_id.as_str())
                    .map_or(link.span_id.as_str(), |s| s.name.as_str());
                line.push_str(&format!(" (linked to {target})"));
            } else {
                line.push_str(&format!(
                    " (linked to span {} of trace {})",
                    link.span_id, link.trace_id
                ));
            }
        }
        let shown: Vec<String> = span
            .attributes
            .iter()
            .filter(|(key, _)| !is_noise(key))
            .map(|(key, value)| format!("{key}={}", format_value(value)))
            .collect();
        if !shown.is_empty() {
            line.push_str("  ");
            line.push_str(
                &shown
                    .iter()
                    .take(MAX_ATTRIBUTES)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(" "),
            );
            if shown.len() > MAX_ATTRIBUTES {
                line.push_str(&format!(" (+{} more)", shown.len() - MAX_ATTRIBUTES));
            }
        }
        line
    }
}

/// A value for one line of the tree: cut short, and quoted when it would not read as one
/// word.
fn format_value(value: &AttrValue) -> String {
    let text = value.to_string();
    let mut cut: String = text.chars().take(MAX_VALUE_CHARS).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    let plain = !cut.is_empty()
        && !cut
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '=');
    match value {
        AttrValue::String(_) | AttrValue::Other(_) if !plain => format!("{cut:?}"),
        _ => cut,
    }
}

/// A duration as a person reads it: `850 µs`, `12.3 ms`, `1.25 s`.
fn format_duration(duration: Duration) -> String {
    let micros = duration.as_micros();
    if micros < 1_000 {
        format!("{micros} µs")
    } else if micros < 1_000_000 {
        format!("{:.1} ms", duration.as_secs_f64() * 1e3)
    } else {
        format!("{:.2} s", duration.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Status};

    const TRACE: [u8; 16] = [
        0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31,
        0x9c,
    ];
    const TRACE_HEX: &str = "0af7651916cd43dd8448eb211c80319c";
    const T0: u64 = 1_700_000_000_000_000_000;

    fn kv(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue { value: Some(value) }),
            ..KeyValue::default()
        }
    }

    fn string(s: &str) -> any_value::Value {
        any_value::Value::StringValue(s.to_owned())
    }

    fn span_id(n: u8) -> Vec<u8> {
        vec![0, 0, 0, 0, 0, 0, 0, n]
    }

    /// A span of `TRACE` numbered `id`, under `parent`, from `start` to `end` µs after T0.
    fn span(
        id: u8,
        parent: Option<u8>,
        name: &str,
        kind: span::SpanKind,
        start: u64,
        end: u64,
    ) -> Span {
        Span {
            trace_id: TRACE.to_vec(),
            span_id: span_id(id),
            parent_span_id: parent.map(span_id).unwrap_or_default(),
            name: name.to_owned(),
            kind: kind as i32,
            start_time_unix_nano: T0 + start * 1_000,
            end_time_unix_nano: T0 + end * 1_000,
            ..Span::default()
        }
    }

    fn request(service: &str, spans: Vec<Span>) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", string(service))],
                    ..Resource::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            }],
        }
    }

    fn client() -> reqwest::Client {
        // No proxy: one configured in the environment must not sit in between.
        reqwest::Client::builder().no_proxy().build().unwrap()
    }

    async fn post(receiver: &OtlpReceiver, content_type: &str, body: Vec<u8>) -> reqwest::Response {
        client()
            .post(format!("{}/v1/traces", receiver.endpoint()))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap()
    }

    /// The trace of an approval: the API's server span with the decision under it, and
    /// the dispatcher's delivery linked to it with its HTTP call under it.
    fn approval() -> (ExportTraceServiceRequest, ExportTraceServiceRequest) {
        let mut server = span(1, None, "POST /alerts", span::SpanKind::Server, 0, 12_300);
        server.attributes = vec![
            kv("http.request.method", string("POST")),
            kv("http.response.status_code", any_value::Value::IntValue(201)),
            kv("code.file.path", string("src/api.rs")),
            kv("thread.id", any_value::Value::IntValue(7)),
        ];
        server.status = Some(Status {
            code: status::StatusCode::Ok as i32,
            ..Status::default()
        });
        let mut decide = span(2, Some(1), "decide", span::SpanKind::Internal, 1_000, 4_100);
        decide.attributes = vec![
            kv("alert.id", string("0190-abc")),
            kv("approved", any_value::Value::BoolValue(true)),
            kv("score", any_value::Value::DoubleValue(0.5)),
            kv(
                "tags",
                any_value::Value::ArrayValue(opentelemetry_proto::tonic::common::v1::ArrayValue {
                    values: vec![
                        AnyValue {
                            value: Some(string("a")),
                        },
                        AnyValue {
                            value: Some(any_value::Value::IntValue(2)),
                        },
                    ],
                }),
            ),
        ];
        let mut deliver = span(3, None, "deliver", span::SpanKind::Consumer, 20_000, 65_000);
        deliver.links = vec![span::Link {
            trace_id: TRACE.to_vec(),
            span_id: span_id(1),
            ..span::Link::default()
        }];
        let mut call = span(4, Some(3), "POST", span::SpanKind::Client, 21_000, 61_200);
        call.attributes = vec![kv("url.full", string("http://127.0.0.1:9000/hook"))];
        call.status = Some(Status {
            code: status::StatusCode::Error as i32,
            message: "503 from the destination".to_owned(),
        });
        (
            request("api", vec![decide, server]),
            request("dispatcher", vec![call, deliver]),
        )
    }

    #[tokio::test]
    async fn decodes_spans_posted_over_http() {
        let receiver = OtlpReceiver::start().await;
        let (api, dispatcher) = approval();
        for export in [api, dispatcher] {
            let response = post(&receiver, "application/x-protobuf", export.encode_to_vec()).await;
            assert_eq!(response.status(), 200);
            assert_eq!(response.headers()["content-type"], "application/x-protobuf");
            let body = response.bytes().await.unwrap();
            assert_eq!(
                ExportTraceServiceResponse::decode(body).unwrap(),
                ExportTraceServiceResponse::default()
            );
        }
        assert_eq!(receiver.requests(), 2);

        let spans = receiver
            .wait_for_spans(Duration::from_secs(5), |spans| spans.len() == 4)
            .await;
        let decide = spans.iter().find(|s| s.name == "decide").unwrap();
        assert_eq!(decide.service_name, "api");
        assert_eq!(decide.trace_id, TRACE_HEX);
        assert_eq!(decide.span_id, "0000000000000002");
        assert_eq!(decide.parent_span_id.as_deref(), Some("0000000000000001"));
        assert_eq!(decide.kind, "internal");
        assert_eq!(decide.start_unix_nanos, T0 + 1_000_000);
        assert_eq!(decide.duration(), Duration::from_micros(3_100));
        assert_eq!(
            decide.attributes["alert.id"],
            AttrValue::String("0190-abc".into())
        );
        assert_eq!(decide.attributes["approved"], AttrValue::Bool(true));
        assert_eq!(decide.attributes["score"], AttrValue::Double(0.5));
        assert_eq!(decide.attr_str("tags").as_deref(), Some("[a, 2]"));
        assert_eq!(decide.attr_str("missing"), None);
        assert_eq!(decide.status_code, "unset");

        let server = spans.iter().find(|s| s.name == "POST /alerts").unwrap();
        assert_eq!(
            (server.kind, server.parent_span_id.as_deref()),
            ("server", None)
        );
        assert_eq!(
            server.attr_str("http.response.status_code").as_deref(),
            Some("201")
        );
        assert_eq!(server.status_code, "ok");
        let deliver = spans.iter().find(|s| s.name == "deliver").unwrap();
        assert_eq!(deliver.service_name, "dispatcher");
        assert_eq!(
            deliver.links,
            [ReceivedLink {
                trace_id: TRACE_HEX.to_owned(),
                span_id: "0000000000000001".to_owned()
            }]
        );
        let call = spans.iter().find(|s| s.kind == "client").unwrap();
        assert_eq!(call.status_code, "error");
        assert_eq!(call.status_message, "503 from the destination");
    }

    #[tokio::test]
    async fn renders_a_trace_as_a_tree() {
        let receiver = OtlpReceiver::start().await;
        let (api, dispatcher) = approval();
        // Children and a linked span arriving before their parents change nothing.
        post(
            &receiver,
            "application/x-protobuf",
            dispatcher.encode_to_vec(),
        )
        .await;
        post(&receiver, "application/x-protobuf", api.encode_to_vec()).await;
        receiver
            .wait_for_spans(Duration::from_secs(5), |spans| spans.len() == 4)
            .await;
        let tree = receiver.render_tree(TRACE_HEX);
        let expected = "\
POST /alerts [server] 12.3 ms @api  http.request.method=POST http.response.status_code=201
  decide [internal] 3.1 ms @api  alert.id=0190-abc approved=true score=0.5 tags=\"[a, 2]\"
deliver [consumer] 45.0 ms @dispatcher (linked to POST /alerts)
  POST [client] 40.2 ms @dispatcher ERROR \"503 from the destination\"  url.full=http://127.0.0.1:9000/hook
";
        assert_eq!(tree, expected, "\n{tree}");
        assert_eq!(receiver.render_tree("00000000000000000000000000000000"), "");
    }

    #[test]
    fn a_span_whose_parent_is_missing_is_shown_at_the_top() {
        let spans = flatten(request(
            "dispatcher",
            vec![
                span(5, Some(9), "orphan", span::SpanKind::Producer, 0, 800),
                span(6, None, "root", span::SpanKind::Unspecified, 1, 2_500_000),
            ],
        ));
        assert_eq!(
            render(&spans, TRACE_HEX),
            "orphan [producer] 800 µs (parent 0000000000000009 not received)\n\
             root [unspecified] 2.50 s\n"
        );
    }

    #[tokio::test]
    async fn refuses_what_it_cannot_read() {
        let receiver = OtlpReceiver::start().await;
        let (api, _) = approval();
        let response = post(&receiver, "application/json", b"{}".to_vec()).await;
        assert_eq!(response.status(), 415);
        assert!(response
            .text()
            .await
            .unwrap()
            .contains("application/x-protobuf"));

        let gzipped = client()
            .post(receiver.traces_url())
            .header("content-type", "application/x-protobuf")
            .header("content-encoding", "gzip")
            .body(api.encode_to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(gzipped.status(), 415);

        let garbage = post(&receiver, "application/x-protobuf", vec![0xff; 16]).await;
        assert_eq!(garbage.status(), 400);
        let get = client().get(receiver.traces_url()).send().await.unwrap();
        assert_eq!(get.status(), 405);
        let elsewhere = client()
            .post(format!("{}/v1/metrics", receiver.endpoint()))
            .send()
            .await
            .unwrap();
        assert_eq!(elsewhere.status(), 404);

        assert_eq!(receiver.requests(), 0);
        assert!(receiver.spans().is_empty());
        let refused = receiver.refused();
        assert_eq!(refused.len(), 5, "{refused:?}");
        assert!(refused[0].starts_with("415 content type \"application/json\""));
        assert!(refused[4].starts_with("404 not found: POST /v1/metrics"));
        assert!(receiver.dump().contains("5 refused"));
    }

    #[tokio::test]
    async fn a_wait_that_times_out_shows_what_arrived() {
        let receiver = OtlpReceiver::start().await;
        let (api, _) = approval();
        post(&receiver, "application/x-protobuf", api.encode_to_vec()).await;
        let message = receiver
            .wait(Duration::from_millis(50), |spans| {
                spans.iter().any(|s| s.name == "deliver")
            })
            .await
            .unwrap_err();
        assert!(message.contains("did not arrive within 50ms"), "{message}");
        assert!(
            message.contains("1 export request(s), 2 span(s)"),
            "{message}"
        );
        assert!(message.contains("    decide [internal]"), "{message}");
    }

    #[tokio::test]
    async fn dropping_the_receiver_stops_the_server() {
        let receiver = OtlpReceiver::start().await;
        let url = receiver.traces_url();
        drop(receiver);
        // The abort lands at the task's next poll; the listener closes with it.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let sent = client()
                .post(&url)
                .header("content-type", "application/x-protobuf")
                .send()
                .await;
            if sent.is_err() {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "still serving");
            tokio::task::yield_now().await;
        }
    }
}
