//! `/mcp`: the MCP server over Streamable HTTP on the API's listener.
//!
//! Stateless, with JSON answers: every POST is one JSON-RPC message answered in its own
//! HTTP response, and no session is kept between requests, so deciders scaled
//! horizontally behind a load balancer need no session affinity, and a restarted decider
//! loses nothing a client holds. (MCP 2026-07-28 has no sessions at all; older clients are
//! served the same way, one request at a time.)
//!
//! Before the protocol sees a request, this module does what the rest of the API does:
//! a browser page's `Origin` must be one the operator allows (403 problem+json, see
//! `origin`), the bearer token of *this* request is authenticated (401 problem+json
//! otherwise), the body is bounded by the API's own limit (413 problem+json), anything but
//! a POST of JSON is refused as the API refuses it (405, 415 problem+json), a body that is
//! not JSON, or not JSON-RPC, gets the protocol's parse or invalid-request error with a
//! sentence saying which, and an `MCP-Protocol-Version` this server does not speak gets
//! 400 problem+json. The authenticated caller travels in the request's extensions, where
//! the tools find it (rmcp hands each handler the HTTP request's parts).
//!
//! What the protocol library still refuses on its own (an `Accept` without both media
//! types the transport requires, say) it answers in plain text without a `Content-Type`,
//! at times quoting a header back; such an answer is replaced by the API's problem for its
//! status, which quotes nothing.

use axum::body::Body;
use axum::extract::{FromRequestParts, Request};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ErrorCode, GetMeta, ProtocolVersion};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{json, Value};
use std::sync::Arc;

use super::OutboxMcp;
use crate::auth::Caller;
use crate::{body, AppState, Problem};

/// The Streamable HTTP transport serving [`OutboxMcp`], one request at a time.
pub(crate) type McpService = StreamableHttpService<OutboxMcp, NeverSessionManager>;

/// The transport for `state`'s API.
pub(crate) fn service(state: &AppState) -> McpService {
    let state = state.clone();
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(body::MAX_BODY_BYTES)
        // The Host check guards servers that trust whoever reaches them (DNS rebinding
        // against a local server). This one trusts no one without a bearer token, which a
        // rebinding page cannot attach, and it is reached under the operator's own names.
        .disable_allowed_hosts();
    StreamableHttpService::new(
        move || Ok(OutboxMcp::over_http(state.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// Serves one HTTP request to `/mcp`.
pub(crate) async fn serve(mut service: McpService, state: AppState, request: Request) -> Response {
    let (mut parts, request_body) = request.into_parts();
    if let Some(refusal) = state.mcp_allowed_origins.refusal(&parts.headers) {
        return refusal.into_response();
    }
    let caller = match Caller::from_request_parts(&mut parts, &state).await {
        Ok(caller) => caller,
        Err(problem) => return problem.into_response(),
    };
    let bytes = match axum::body::to_bytes(request_body, body::MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return body::too_large(format!(
                "the request body exceeds {} bytes",
                body::MAX_BODY_BYTES
            ))
            .into_response()
        }
    };
    if let Some(refusal) = not_a_json_post(&parts) {
        return refusal.into_response();
    }
    let message = match json_rpc_message(&bytes) {
        Ok(message) => message,
        Err(unreadable) => return unreadable.into_response(),
    };
    if let Some(refusal) = unspoken_protocol_version(&parts.headers, &message) {
        return refusal.into_response();
    }
    // The token has done its work; past here the protocol library holds the request's
    // parts, and its tracing must never meet the token.
    parts.headers.remove(header::AUTHORIZATION);
    parts.extensions.insert(caller);
    let request = Request::from_parts(parts, Body::from(bytes));
    match tower_service::Service::call(&mut service, request).await {
        Ok(response) => without_plain_text(response.into_response()),
        Err(never) => match never {},
    }
}

/// The API's problem for what only POSTs of JSON may be: there is no server-initiated
/// stream to GET and no session to DELETE.
fn not_a_json_post(parts: &axum::http::request::Parts) -> Option<Response> {
    if parts.method != Method::POST {
        let problem = Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Method not allowed",
            format!(
                "`/mcp` does not accept {}: send each JSON-RPC message as a POST; this \
                 server keeps no session and opens no stream",
                parts.method
            ),
        );
        let mut response = problem.into_response();
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return Some(response);
    }
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        let problem = Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "JSON required",
            "send the JSON-RPC message as `Content-Type: application/json`",
        );
        return Some(problem.into_response());
    }
    None
}

/// The body as one JSON-RPC message (what it asks for is the server's business), or why
/// it is not one.
fn json_rpc_message(bytes: &[u8]) -> Result<ClientJsonRpcMessage, Unreadable> {
    match serde_json::from_slice::<Value>(bytes) {
        Err(err) => Err(Unreadable {
            code: ErrorCode::PARSE_ERROR,
            message: format!(
                "Parse error: the body is not valid JSON ({err}); send one JSON-RPC 2.0 message"
            ),
        }),
        Ok(value) => {
            serde_json::from_value::<ClientJsonRpcMessage>(value).map_err(|err| Unreadable {
                code: ErrorCode::INVALID_REQUEST,
                message: format!(
                    "Invalid Request: the body is JSON but not a JSON-RPC 2.0 message this \
                     server reads ({err}); send one request or notification, with \
                     \"jsonrpc\": \"2.0\", a method and its params"
                ),
            })
        }
    }
}

/// A body that is not one JSON-RPC message: the protocol's error code and a sentence
/// saying why, answered as the protocol's error.
#[derive(Debug)]
struct Unreadable {
    code: ErrorCode,
    message: String,
}

impl IntoResponse for Unreadable {
    fn into_response(self) -> Response {
        let document = json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": self.code.0, "message": self.message},
        });
        let mut response = (StatusCode::BAD_REQUEST, document.to_string()).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

/// The API's problem for an `MCP-Protocol-Version` header that names no version this
/// server speaks (the transport asks for `400 Bad Request`), or `None`. The rule is the
/// protocol library's own, which would answer in plain text quoting the header: an
/// `initialize` request and a request naming its version in `_meta` (2026-07-28 and
/// later) negotiate the version themselves and are left to it.
fn unspoken_protocol_version(
    headers: &axum::http::HeaderMap,
    message: &ClientJsonRpcMessage,
) -> Option<Problem> {
    let value = headers.get("mcp-protocol-version")?;
    let negotiates = match message {
        ClientJsonRpcMessage::Request(request) => {
            matches!(request.request, ClientRequest::InitializeRequest(_))
                || request.request.get_meta().protocol_version().is_some()
        }
        _ => false,
    };
    let text = value.to_str().ok();
    let spoken = text.is_some_and(|version| {
        negotiates
            || ProtocolVersion::KNOWN_VERSIONS
                .iter()
                .any(|known| known.as_str() == version)
    });
    if spoken {
        return None;
    }
    let versions: Vec<&str> = ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .map(ProtocolVersion::as_str)
        .collect();
    Some(Problem::new(
        StatusCode::BAD_REQUEST,
        "unsupported-protocol-version",
        "Unsupported MCP protocol version",
        format!(
            "the `MCP-Protocol-Version` header names no protocol version this server \
             speaks; send the version negotiated at initialization, one of {}",
            versions.join(", ")
        ),
    ))
}

/// `response`, or when the protocol library refused the request in plain text, the API's
/// problem for its status instead: the library's text may quote the request's headers.
fn without_plain_text(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if is_json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let problem = match status {
        StatusCode::NOT_ACCEPTABLE => Problem::new(
            status,
            "not-acceptable",
            "Not acceptable",
            "send `Accept: application/json, text/event-stream`: a client of MCP's \
             Streamable HTTP transport accepts both (this server answers JSON)",
        ),
        status if status.is_server_error() => Problem::internal(),
        status => Problem::new(
            status,
            "mcp-transport-refused",
            "Refused by the MCP transport",
            "the MCP transport refused this request: it does not follow the Streamable \
             HTTP transport of the protocol version it names",
        ),
    };
    problem.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_code(body: &[u8]) -> Option<StatusCode> {
        json_rpc_message(body)
            .err()
            .map(|unreadable| unreadable.into_response().status())
    }

    fn message(text: &str) -> ClientJsonRpcMessage {
        json_rpc_message(text.as_bytes()).unwrap_or_else(|_| panic!("{text}"))
    }

    fn version_refused(version: &[u8], body: &str) -> bool {
        let mut headers = axum::http::HeaderMap::new();
        let value = HeaderValue::from_bytes(version).unwrap_or(HeaderValue::from_static(""));
        headers.insert("mcp-protocol-version", value);
        unspoken_protocol_version(&headers, &message(body)).is_some()
    }

    #[test]
    fn a_protocol_version_is_refused_as_the_library_would_without_quoting_it() {
        let list = r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#;
        assert!(!version_refused(b"2025-06-18", list));
        assert!(!version_refused(b"2026-07-28", list));
        assert!(version_refused(b"2099-01-01", list));
        assert!(version_refused(b"\xff", list));
        // Initialize and a version in `_meta` negotiate for themselves.
        let initialize = r#"{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2099-01-01", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}}"#;
        assert!(!version_refused(b"2099-01-01", initialize));
        let with_meta = r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}}}"#;
        assert!(!version_refused(b"2099-01-01", with_meta));
        assert!(version_refused(b"\xff", with_meta));
        let notification = r#"{"jsonrpc": "2.0", "method": "notifications/initialized"}"#;
        assert!(version_refused(b"2099-01-01", notification));
        let mut headers = axum::http::HeaderMap::new();
        headers.insert("mcp-protocol-version", HeaderValue::from_static("<marker>"));
        let problem = unspoken_protocol_version(&headers, &message(list));
        let document = problem.map(|p| p.document()).unwrap_or_default();
        assert_eq!(document["type"], "/problems/unsupported-protocol-version");
        assert!(!document.to_string().contains("marker"), "{document}");
    }

    #[tokio::test]
    async fn the_librarys_plain_text_refusals_become_problems() {
        let plain = |status: StatusCode| {
            let mut response = (
                status,
                "Bad Request: Unsupported MCP-Protocol-Version: <marker>",
            )
                .into_response();
            response.headers_mut().remove(header::CONTENT_TYPE);
            without_plain_text(response)
        };
        for (status, kind) in [
            (StatusCode::NOT_ACCEPTABLE, "not-acceptable"),
            (StatusCode::BAD_REQUEST, "mcp-transport-refused"),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        ] {
            let response = plain(status);
            assert_eq!(response.status(), status);
            assert_eq!(
                response.headers()[header::CONTENT_TYPE],
                "application/problem+json"
            );
            let body = axum::body::to_bytes(response.into_body(), 4096)
                .await
                .unwrap_or_default();
            let document: Value = serde_json::from_slice(&body).unwrap_or_default();
            assert_eq!(document["type"], format!("/problems/{kind}"), "{document}");
            assert!(!document.to_string().contains("marker"), "{document}");
        }
        // JSON answers, errors included, are the protocol's and stay as they are.
        let mut json = (StatusCode::BAD_REQUEST, "{}").into_response();
        json.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        assert_eq!(
            without_plain_text(json).headers()[header::CONTENT_TYPE],
            "application/json"
        );
        let ok = (StatusCode::ACCEPTED, "").into_response();
        assert_eq!(without_plain_text(ok).status(), StatusCode::ACCEPTED);
    }

    #[test]
    fn only_a_json_rpc_message_reaches_the_protocol() {
        assert_eq!(error_code(b"{not json"), Some(StatusCode::BAD_REQUEST));
        assert_eq!(
            error_code(br#"{"hello": 1}"#),
            Some(StatusCode::BAD_REQUEST)
        );
        assert_eq!(
            error_code(br#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#),
            None
        );
    }
}
