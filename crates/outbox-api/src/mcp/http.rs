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
//! a POST of JSON is refused as the API refuses it (405, 415 problem+json), and a body that
//! is not JSON, or not JSON-RPC, gets the protocol's parse or invalid-request error with a
//! sentence saying which. The authenticated caller travels in the request's extensions,
//! where the tools find it (rmcp hands each handler the HTTP request's parts).

use axum::body::Body;
use axum::extract::{FromRequestParts, Request};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::model::{ClientJsonRpcMessage, ErrorCode};
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
    if let Some(refusal) = unreadable_json_rpc(&bytes) {
        return refusal;
    }
    // The token has done its work; past here the protocol library holds the request's
    // parts, and its tracing must never meet the token.
    parts.headers.remove(header::AUTHORIZATION);
    parts.extensions.insert(caller);
    let request = Request::from_parts(parts, Body::from(bytes));
    match tower_service::Service::call(&mut service, request).await {
        Ok(response) => response.into_response(),
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

/// The protocol's error for a body that is not one JSON-RPC message, or `None` when it is
/// one (what it asks for is the server's business).
fn unreadable_json_rpc(bytes: &[u8]) -> Option<Response> {
    let (code, message) = match serde_json::from_slice::<Value>(bytes) {
        Err(err) => (
            ErrorCode::PARSE_ERROR,
            format!(
                "Parse error: the body is not valid JSON ({err}); send one JSON-RPC 2.0 message"
            ),
        ),
        Ok(value) => match serde_json::from_value::<ClientJsonRpcMessage>(value) {
            Ok(_) => return None,
            Err(err) => (
                ErrorCode::INVALID_REQUEST,
                format!(
                    "Invalid Request: the body is JSON but not a JSON-RPC 2.0 message this \
                     server reads ({err}); send one request or notification, with \
                     \"jsonrpc\": \"2.0\", a method and its params"
                ),
            ),
        },
    };
    let document = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": code.0, "message": message},
    });
    let mut response = (StatusCode::BAD_REQUEST, document.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_code(body: &[u8]) -> Option<StatusCode> {
        unreadable_json_rpc(body).map(|response| response.status())
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
