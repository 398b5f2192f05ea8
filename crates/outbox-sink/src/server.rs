//! HTTP plumbing: the routes and the body reader with its size limit, served by the
//! shared hardened server (`outbox_runtime::http_server`: deadlines for slow clients, a cap
//! on connections, keep-alive, graceful shutdown).
//!
//! Plain hyper rather than a framework, for one fault: a dropped response must close the
//! connection without writing a byte. A service that returns `Err` makes hyper do exactly
//! that, which a framework that always turns errors into responses cannot.

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use outbox_runtime::http_server::{self, RequestBody, ServerLimits};
use serde_json::json;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

use crate::faults::FaultPatch;
use crate::json::json_response;
use crate::state::deliveries::{Action, RecordedHeaders};
use crate::state::Sink;

/// Largest request body read.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How much of an oversized body is read and discarded before answering 413. Reading it
/// keeps the connection usable, and the client sees the 413 rather than a reset while it
/// is still sending; beyond this the connection is simply closed after the answer.
const MAX_DRAINED_BYTES: usize = 64 * 1024 * 1024;

/// Why a request gets no response at all: hyper closes the connection instead.
#[derive(Debug, thiserror::Error)]
enum NoResponse {
    /// The drop-response fault.
    #[error("response dropped on purpose")]
    Dropped,
    /// The client went away or broke the framing while sending the body.
    #[error("reading the request body: {0}")]
    Body(String),
}

/// Serves until `shutdown` resolves, then lets each connection finish the request in
/// progress and waits for all of them.
pub(crate) async fn run(
    listener: TcpListener,
    sink: Arc<Sink>,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let service = service_fn(move |request| {
        let sink = Arc::clone(&sink);
        async move { route(&sink, request).await }
    });
    http_server::serve(listener, limits, service, shutdown).await;
    tracing::info!("sink stopped");
}

async fn route(
    sink: &Sink,
    request: Request<RequestBody>,
) -> Result<Response<Full<Bytes>>, NoResponse> {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let query = request.uri().query().map(str::to_owned);

    if method == Method::POST && !path.starts_with("/_sink/") {
        return deliver(sink, request, path).await;
    }
    let response = match (method, path.as_str()) {
        (Method::GET, "/stats") => json_response(StatusCode::OK, &sink.stats()),
        (Method::GET, "/_sink/records") => {
            let key = query.as_deref().and_then(|q| query_param(q, "key"));
            json_response(StatusCode::OK, &sink.records(key.as_deref()))
        }
        (Method::GET, "/_sink/messages") => {
            let message_id = query.as_deref().and_then(|q| query_param(q, "message_id"));
            json_response(StatusCode::OK, &sink.messages(message_id.as_deref()))
        }
        (Method::POST, "/_sink/faults") => {
            let body = match read_body(request.into_body()).await? {
                Body::Complete(body) => body,
                Body::TooLarge => return Ok(too_large()),
            };
            match serde_json::from_slice::<FaultPatch>(&body)
                .map_err(|err| err.to_string())
                .and_then(|patch| sink.patch_faults(patch))
            {
                Ok(faults) => {
                    tracing::info!(?faults, "faults changed");
                    json_response(StatusCode::OK, &faults)
                }
                Err(err) => json_response(StatusCode::BAD_REQUEST, &json!({ "error": err })),
            }
        }
        (Method::DELETE, "/_sink/faults") => {
            tracing::info!("faults cleared");
            json_response(StatusCode::OK, &sink.clear_faults())
        }
        (Method::POST, "/_sink/reset") => {
            sink.reset();
            tracing::info!("records and counters reset");
            json_response(StatusCode::OK, &json!({ "reset": true }))
        }
        (Method::GET, path) if sink.lookup_enabled() => match path.strip_prefix("/requests/") {
            Some(key) => {
                let key = percent_decode(key, false);
                match sink.receipt_of(&key) {
                    Some(receipt) => {
                        json_response(StatusCode::OK, &json!({ "id": receipt, "key": key }))
                    }
                    None => not_found(),
                }
            }
            None => not_found(),
        },
        _ => not_found(),
    };
    Ok(response)
}

/// `POST` to any path outside `/_sink/`: a delivery.
async fn deliver(
    sink: &Sink,
    request: Request<RequestBody>,
    path: String,
) -> Result<Response<Full<Bytes>>, NoResponse> {
    let (parts, body) = request.into_parts();
    let key = sink.key_of(&parts.headers);
    let recorded = RecordedHeaders::of(&parts.headers);
    let body = match read_body(body).await? {
        Body::Complete(body) => body,
        Body::TooLarge => {
            sink.record_too_large(&path, key, recorded);
            tracing::info!(path, outcome = "too_large", "delivery");
            return Ok(too_large());
        }
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        });
    let signature = sink.check_signature(&parts.headers, &body, now);
    match sink.decide(&path, key, &body, signature, recorded) {
        Action::Respond(response) => {
            tracing::info!(
                path,
                status = response.status().as_u16(),
                ?signature,
                "delivery refused"
            );
            Ok(response)
        }
        Action::Acknowledge {
            receipt,
            delay,
            drop,
        } => {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            tracing::info!(
                path,
                receipt,
                dropped = drop,
                ?signature,
                "delivery acknowledged"
            );
            if drop {
                Err(NoResponse::Dropped)
            } else {
                Ok(json_response(StatusCode::OK, &json!({ "id": receipt })))
            }
        }
    }
}

enum Body {
    Complete(Bytes),
    TooLarge,
}

/// Reads a body up to [`MAX_BODY_BYTES`]; past that, discards the rest (up to
/// [`MAX_DRAINED_BYTES`]) and reports it too large.
async fn read_body(mut body: RequestBody) -> Result<Body, NoResponse> {
    let mut collected = BytesMut::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| NoResponse::Body(err.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        seen = seen.saturating_add(data.len());
        if seen > MAX_DRAINED_BYTES {
            break;
        }
        if seen <= MAX_BODY_BYTES {
            collected.extend_from_slice(&data);
        }
    }
    if seen > MAX_BODY_BYTES {
        Ok(Body::TooLarge)
    } else {
        Ok(Body::Complete(collected.freeze()))
    }
}

fn too_large() -> Response<Full<Bytes>> {
    json_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        &json!({ "error": format!("the body exceeds {MAX_BODY_BYTES} bytes") }),
    )
}

fn not_found() -> Response<Full<Bytes>> {
    json_response(StatusCode::NOT_FOUND, &json!({ "error": "not found" }))
}

/// The decoded value of the first `name` parameter of a query string.
fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k, true) == name).then(|| percent_decode(v, true))
    })
}

/// Decodes `%XX` escapes (and `+` as a space in query strings). A malformed escape is kept
/// as written; bytes that are not UTF-8 become U+FFFD.
fn percent_decode(input: &str, plus_as_space: bool) -> String {
    fn hex(byte: u8) -> Option<u8> {
        match byte {
            b'0'..=b'9' => Some(byte - b'0'),
            b'a'..=b'f' => Some(byte - b'a' + 10),
            b'A'..=b'F' => Some(byte - b'A' + 10),
            _ => None,
        }
    }
    let bytes = input.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let escaped = bytes
                    .get(i + 1)
                    .copied()
                    .and_then(hex)
                    .zip(bytes.get(i + 2).copied().and_then(hex));
                if let Some((high, low)) = escaped {
                    out.push(high << 4 | low);
                    i += 3;
                    continue;
                }
                out.push(b'%');
            }
            b'+' if plus_as_space => out.push(b' '),
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_percent_escapes() {
        assert_eq!(percent_decode("a%2Fb%20c", false), "a/b c");
        assert_eq!(percent_decode("a+b", false), "a+b");
        assert_eq!(percent_decode("a+b", true), "a b");
        assert_eq!(percent_decode("100%", false), "100%");
        assert_eq!(percent_decode("%zz%4", false), "%zz%4");
        assert_eq!(percent_decode("caf%C3%A9", false), "café");
    }

    #[test]
    fn finds_query_parameters() {
        assert_eq!(query_param("key=a%3Ab&x=1", "key").as_deref(), Some("a:b"));
        assert_eq!(query_param("x=1&key=", "key").as_deref(), Some(""));
        assert_eq!(query_param("x=1", "key"), None);
        assert_eq!(query_param("key", "key").as_deref(), Some(""));
    }
}
