//! The HTTP side: one pooled keep-alive client behind the egress guard that never follows
//! redirects ([`outbox_egress::DeliveryClient`]), the request every attempt sends (same id,
//! key, payload bytes; fresh timestamp and signatures), and lookups by key. Each exchange,
//! from connecting to the last byte of the answer read, is bounded by the destination's
//! timeout.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{
    HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, LOCATION, RETRY_AFTER,
    USER_AGENT,
};
use hyper::Method;
use outbox_core::retry::parse_retry_after;
use outbox_core::signing;
use outbox_egress::tls::RelayTrust;
use outbox_egress::{DeliveryClient, RequestBody, RequestError};
use outbox_store::dispatch::ClaimedAlert;
use std::time::Duration;
use tokio::time::Instant;
use url::Url;

use crate::attempt_trace;
use crate::classify::Exchange;
use crate::prepared::{checked_url, request_target, Prepared};
use outbox_core::trace_context::TraceContext;
use outbox_egress::Guard;
use tracing::Instrument;

/// Longest part of an answer kept as evidence.
const EXCERPT_BYTES: usize = 512;
/// Largest answer body read (for the reference); the rest is ignored.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The Standard Webhooks headers' names, made once: a name given as text is copied into
/// a new buffer at every insert (three allocations a request); a clone of these copies
/// nothing.
static WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
static WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
static WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");

/// What every request says it comes from.
const USER_AGENT_VALUE: &str = concat!("alert-outbox/", env!("CARGO_PKG_VERSION"));

/// Builds the shared client: connects only to addresses the guard accepts, keep-alive
/// pool, no redirects, a connect timeout.
pub fn client(guard: &Guard, connect_timeout: Duration) -> DeliveryClient {
    DeliveryClient::new(guard, connect_timeout, &RelayTrust::PublicRoots)
}

/// Sends one attempt of `alert` to a vetted address: `body` (the stored payload's bytes,
/// or the stored rendered request body of an email API), signed with its destination's
/// keys, with its API key when it has one. `prepared` is what every request to the
/// destination shares ([`crate::prepared`]), or why none can be sent.
pub(crate) async fn send(
    http: &DeliveryClient,
    prepared: &Prepared,
    alert: &ClaimedAlert,
    body: Vec<u8>,
    trace: Option<&TraceContext>,
) -> Exchange {
    let parts = match prepared {
        Ok(parts) => parts,
        Err(refusal) => return refusal.clone(),
    };
    let id = alert.alert_id.to_string();
    let timestamp = chrono::Utc::now().timestamp();
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let id_value = HeaderValue::from_str(&id).expect("a uuid is a valid header value");
    headers.insert(parts.key_header.clone(), id_value.clone());
    headers.insert(WEBHOOK_ID.clone(), id_value);
    headers.insert(WEBHOOK_TIMESTAMP.clone(), HeaderValue::from(timestamp));
    if !parts.signing_keys.is_empty() {
        let signature = signing::signature_header(&parts.signing_keys, &id, timestamp, &body);
        headers.insert(
            WEBHOOK_SIGNATURE.clone(),
            HeaderValue::from_str(&signature).expect("base64 is a valid header value"),
        );
    }
    // The API key's authorization wins over the URL's credentials.
    if let Some(authorization) = parts.bearer.as_ref().or(parts.basic.as_ref()) {
        headers.insert(AUTHORIZATION, authorization.clone());
    }
    insert_trace_headers(&mut headers, trace);
    let span = attempt_trace::http_client_span(Method::POST.as_str(), &parts.url);
    let request = request(
        Method::POST,
        parts.uri.clone(),
        headers,
        Full::new(Bytes::from(body)),
    );
    exchange_in(http, alert, request, span).await
}

/// Adds the attempt's `traceparent` (and `tracestate`) to a request's headers.
fn insert_trace_headers(headers: &mut HeaderMap, trace: Option<&TraceContext>) {
    for (name, value) in attempt_trace::trace_headers(trace) {
        // Always valid (printable ASCII, read strictly); a value that were not would be
        // left out rather than fail the delivery.
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
}

/// Asks the destination whether it has `alert` (its lookup URL with the key filled in).
pub async fn lookup(
    http: &DeliveryClient,
    guard: &Guard,
    alert: &ClaimedAlert,
    template: &str,
    trace: Option<&TraceContext>,
) -> Exchange {
    let url = match checked_url(
        guard,
        &template.replace("{key}", &alert.alert_id.to_string()),
    ) {
        Ok(url) => url,
        Err(refusal) => return refusal,
    };
    let mut headers = HeaderMap::new();
    insert_trace_headers(&mut headers, trace);
    traced_exchange(http, alert, Method::GET, url, headers, Full::default()).await
}

/// One request about `alert` to `url` (a lookup), inside the request's client span.
async fn traced_exchange(
    http: &DeliveryClient,
    alert: &ClaimedAlert,
    method: Method,
    mut url: Url,
    mut headers: HeaderMap,
    body: RequestBody,
) -> Exchange {
    let span = attempt_trace::http_client_span(method.as_str(), &url);
    let (uri, basic) = match request_target(&mut url) {
        Ok(target) => target,
        Err(unsendable) => return unsendable,
    };
    if let Some(basic) = basic {
        if !headers.contains_key(AUTHORIZATION) {
            headers.insert(AUTHORIZATION, basic);
        }
    }
    exchange_in(http, alert, request(method, uri, headers, body), span).await
}

/// The exchange of `request` inside `span`, which records how it ended.
async fn exchange_in(
    http: &DeliveryClient,
    alert: &ClaimedAlert,
    request: hyper::Request<RequestBody>,
    span: tracing::Span,
) -> Exchange {
    let answer = exchange(
        http,
        request,
        timeout_of(alert),
        alert.destination.reference_header.as_deref(),
    )
    .instrument(span.clone())
    .await;
    attempt_trace::record_exchange(&span, &answer);
    answer
}

fn timeout_of(alert: &ClaimedAlert) -> Duration {
    Duration::from_millis(u64::try_from(alert.destination.timeout_ms).unwrap_or(10_000))
}

/// The request to `uri`, with the user agent, `Accept: */*` (what the requests always
/// said) and `headers` set.
fn request(
    method: Method,
    uri: hyper::Uri,
    mut headers: HeaderMap,
    body: RequestBody,
) -> hyper::Request<RequestBody> {
    headers.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
    headers.insert(ACCEPT, HeaderValue::from_static("*/*"));
    let mut request = hyper::Request::new(body);
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    request
}

/// One exchange, connecting included, within `timeout`: the answer's status, the headers
/// that matter and the start of its body; or why there is none.
async fn exchange(
    http: &DeliveryClient,
    request: hyper::Request<RequestBody>,
    timeout: Duration,
    reference_header: Option<&str>,
) -> Exchange {
    let deadline = Instant::now() + timeout;
    let response = match tokio::time::timeout_at(deadline, http.request(request)).await {
        Ok(Ok(response)) => response,
        Ok(Err(err)) => return transport_failure(&err),
        Err(_) => {
            return Exchange::TimedOut(format!(
                "timed out: no answer within {}",
                humantime::format_duration(timeout)
            ))
        }
    };
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let retry_after = header(RETRY_AFTER.as_str())
        .and_then(|v| parse_retry_after(&v, chrono::Utc::now().timestamp()));
    let location = header(LOCATION.as_str());
    let header_reference = reference_header.and_then(header);
    // The status is what counts; a body that fails to arrive (or to arrive in time) only
    // costs the reference.
    let body = read_limited(response.into_body(), deadline).await;
    let reference = header_reference.or_else(|| {
        serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| match &v["id"] {
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
    });
    let excerpt = String::from_utf8_lossy(&body[..body.len().min(EXCERPT_BYTES)])
        .trim()
        .to_owned();
    Exchange::Answered {
        status,
        retry_after,
        reference,
        location,
        excerpt,
    }
}

/// The answer's body up to [`MAX_ANSWER_BYTES`], as much of it as arrives by `deadline`.
async fn read_limited(mut body: hyper::body::Incoming, deadline: Instant) -> Vec<u8> {
    let mut read = Vec::new();
    while let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline, body.frame()).await {
        if let Ok(chunk) = frame.into_data() {
            read.extend_from_slice(&chunk);
            if read.len() >= MAX_ANSWER_BYTES {
                break;
            }
        }
    }
    read
}

fn transport_failure(err: &RequestError) -> Exchange {
    // A refusal by the guard's resolver: the name resolves to a blocked address.
    if let Some(refused) = outbox_egress::refusal_of(err) {
        return Exchange::Blocked(refused.to_string());
    }
    // The source chain says what failed ("connection refused", "dns error", ...). The
    // URL is left out: it is known from the destination, and may carry credentials.
    // Failing to connect (the connect timeout included) means nothing was sent; anything
    // else may have happened after the request left.
    let connect = err.is_connect();
    let mut why = if connect {
        "could not connect".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        why.push_str(": ");
        why.push_str(&cause.to_string());
        source = cause.source();
    }
    if connect {
        Exchange::NotConnected(why)
    } else {
        Exchange::Broken(why)
    }
}
