//! Trace context on the way in: the `traceparent` and `tracestate` a request came with
//! (read strictly; a broken header is ignored and a new trace started, never refused),
//! the server span of each request and the producer span of each approval, and the context
//! an approval stores with its alert.
//!
//! The stored context is the approval span's when spans are exported (so the delivery
//! attempts link to it), else the caller's own (so the destination still joins the
//! caller's trace), else a new trace: every alert approved through the API has one, and
//! every attempt sends it.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use outbox_core::trace_context::{TraceContext, TraceParent, TraceState};
use outbox_runtime::telemetry;
use tracing::Span;

/// The W3C trace context a request came with, if it was well formed.
#[derive(Debug, Clone, Default)]
pub(crate) struct IncomingTrace(pub(crate) Option<TraceContext>);

impl IncomingTrace {
    /// Reads `traceparent` (one value; two are as broken as a malformed one) and
    /// `tracestate` (its values form one list). A `tracestate` is only kept with a valid
    /// `traceparent`, as the recommendation says.
    pub(crate) fn from_headers(headers: &HeaderMap) -> IncomingTrace {
        let mut parents = headers.get_all("traceparent").iter();
        let parent = match (parents.next(), parents.next()) {
            (Some(value), None) => value.to_str().ok().and_then(TraceParent::parse),
            _ => None,
        };
        let Some(parent) = parent else {
            return IncomingTrace(None);
        };
        let states: Vec<&str> = headers
            .get_all("tracestate")
            .iter()
            .map(|value| value.to_str())
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        let state = if states.is_empty() {
            None
        } else {
            TraceState::parse(states)
        };
        IncomingTrace(Some(TraceContext { parent, state }))
    }

    /// Whether the caller sent a trace other than `stored_trace_id` (hex): then a repeated
    /// approval says, in the alert's evidence, that the alert keeps its first trace.
    pub(crate) fn differs_from(&self, stored_trace_id: Option<&str>) -> Option<&TraceContext> {
        let given = self.0.as_ref()?;
        (stored_trace_id != Some(given.trace_id_hex().as_str())).then_some(given)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for IncomingTrace {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        // The request span's middleware read it already; a route served without it reads
        // the headers itself.
        Ok(parts
            .extensions
            .get::<IncomingTrace>()
            .cloned()
            .unwrap_or_else(|| IncomingTrace::from_headers(&parts.headers)))
    }
}

/// The server span of one request, by the HTTP server conventions (the route template,
/// never the query, headers or body, which carry tokens and payloads), a child of the
/// caller's span when it sent one. `Span::none()` when spans are not exported, so a
/// request costs nothing more then.
pub(crate) fn request_span(
    method: &axum::http::Method,
    route: &str,
    path: &str,
    incoming: &IncomingTrace,
) -> Span {
    if !telemetry::enabled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        "http request",
        otel.name = %format!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = %method,
        http.route = route,
        url.path = path,
        url.scheme = "http",
        http.response.status_code = tracing::field::Empty,
    );
    if let Some(caller) = &incoming.0 {
        telemetry::set_remote_parent(&span, &caller.parent, caller.state.as_ref());
    }
    span
}

/// Records a request's answer on its span; a 5xx marks the span as an error (a 4xx is
/// the client's, not the server's, by the conventions).
pub(crate) fn record_status(span: &Span, status: u16) {
    span.record("http.response.status_code", status);
    if status >= 500 {
        span.record("otel.status_code", "ERROR");
    }
}

/// The producer span of an approval or a revision (`operation`), by the messaging
/// conventions: the outbox is the destination and the alert id, recorded once known, the
/// message id. Outside a request span (the MCP server over stdio, or a tool call run on
/// another task), the caller's context, if any, is its parent.
pub(crate) fn approval_span(
    operation: &'static str,
    tenant: uuid::Uuid,
    destination: Option<&str>,
    incoming: &IncomingTrace,
) -> Span {
    if !telemetry::enabled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        "approval",
        otel.name = %format!("{operation} outbox"),
        otel.kind = "producer",
        messaging.system = "alert-outbox",
        messaging.operation.type = "send",
        messaging.operation.name = operation,
        messaging.destination.name = "outbox",
        messaging.message.id = tracing::field::Empty,
        outbox.tenant_id = %tenant,
        outbox.destination = destination,
        outbox.approval = tracing::field::Empty,
    );
    if telemetry::current_context(&Span::current()).is_none() {
        if let Some(caller) = &incoming.0 {
            telemetry::set_remote_parent(&span, &caller.parent, caller.state.as_ref());
        }
    }
    span
}

/// The context an approval made under `span` stores with its alert: the approval span's
/// when spans are exported, else the caller's, else a new trace (not sampled: nothing of
/// ours was recorded). The caller's `tracestate` travels on in every case.
pub(crate) fn context_to_store(span: &Span, incoming: &IncomingTrace) -> TraceContext {
    let state = incoming.0.as_ref().and_then(|caller| caller.state.clone());
    let parent = telemetry::current_context(span)
        .or_else(|| incoming.0.as_ref().map(|caller| caller.parent))
        .unwrap_or_else(|| TraceParent::new_trace(false));
    TraceContext { parent, state }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use axum::http::HeaderValue;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn a_valid_context_is_read_with_its_state() {
        let incoming = IncomingTrace::from_headers(&headers(&[
            ("traceparent", PARENT),
            ("tracestate", "congo=t61rcWkgMzE"),
            ("tracestate", "rojo=00f067aa0ba902b7"),
        ]));
        let context = incoming.0.unwrap();
        assert_eq!(context.parent.to_string(), PARENT);
        assert_eq!(
            context.state.unwrap().as_str(),
            "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
        );
    }

    #[test]
    fn a_broken_or_repeated_traceparent_starts_a_new_trace() {
        for pairs in [
            vec![("traceparent", "00-zz")],
            vec![("traceparent", PARENT), ("traceparent", PARENT)],
            vec![("tracestate", "congo=t61rcWkgMzE")],
        ] {
            let incoming = IncomingTrace::from_headers(&headers(&pairs));
            assert!(incoming.0.is_none(), "{pairs:?}");
            let stored = context_to_store(&Span::none(), &incoming);
            assert_ne!(stored.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
            assert!(!stored.parent.sampled());
        }
    }

    #[test]
    fn a_broken_tracestate_leaves_a_good_traceparent() {
        let incoming = IncomingTrace::from_headers(&headers(&[
            ("traceparent", PARENT),
            ("tracestate", "Bad Key=1"),
        ]));
        let context = incoming.0.unwrap();
        assert_eq!(context.parent.to_string(), PARENT);
        assert!(context.state.is_none());
    }

    #[test]
    fn without_exported_spans_the_callers_context_is_stored() {
        let incoming = IncomingTrace::from_headers(&headers(&[("traceparent", PARENT)]));
        assert_eq!(
            context_to_store(&Span::none(), &incoming)
                .parent
                .to_string(),
            PARENT
        );
        assert!(incoming
            .differs_from(Some("4bf92f3577b34da6a3ce929d0e0e4736"))
            .is_none());
        assert!(incoming
            .differs_from(Some("0af7651916cd43dd8448eb211c80319c"))
            .is_some());
        assert!(IncomingTrace(None).differs_from(None).is_none());
    }
}
