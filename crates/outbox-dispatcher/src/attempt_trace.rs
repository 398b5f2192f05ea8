//! A claim's place in its alert's trace: the consumer span of the attempt, the
//! `traceparent` it sends, and its child spans (the claim batch it came from, the
//! exchange, the lookup, the settle).
//!
//! An attempt belongs to its approval's trace but is not the approval span's child: it
//! may run days later, long after the approval span ended, so by the messaging
//! conventions it is linked to it instead, as a span of the same trace without a parent.
//! What it sends downstream is that trace with the attempt's own span as the parent, so
//! the destination's spans join the trace under the attempt that reached them, and each
//! attempt (a retry, a resend after a crash, a replay) sends its own span id. With spans
//! not exported, the attempt still sends the approval's trace with a fresh span id.
//!
//! Attributes say who, where and how it ended (tenant, destination, attempt number,
//! outcome, error class, HTTP status); never the payload, a URL (which may carry a
//! token), a recipient or a secret.

use crate::classify::Exchange;
use outbox_core::trace_context::TraceContext;
use outbox_core::SmtpRelay;
use outbox_runtime::telemetry;
use outbox_store::dispatch::{AttemptRecord, ClaimedAlert};
use std::time::SystemTime;
use tracing::Span;

/// One claim statement, for the child span each attempt it claimed gets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimBatch {
    /// When the statement was sent.
    pub(crate) started: SystemTime,
    /// When its answer came back.
    pub(crate) finished: SystemTime,
    /// How many rows it claimed.
    pub(crate) rows: usize,
}

/// The span a claim is worked in, and the context its requests send (`None` for an alert
/// approved before trace context was kept: then nothing is sent).
pub(crate) fn attempt_span(
    row: &ClaimedAlert,
    worker: &str,
    batch: ClaimBatch,
) -> (Span, Option<TraceContext>) {
    let approval = TraceContext::from_stored(row.traceparent.as_deref(), row.tracestate.as_deref());
    if !telemetry::enabled() {
        // The log lines' span, as it always was; the context still travels.
        let span = tracing::info_span!(
            "alert",
            alert_id = %row.alert_id,
            attempt = row.attempts,
            worker = %worker
        );
        let sent = approval.map(|approval| TraceContext {
            parent: approval.parent.with_new_span(),
            state: approval.state,
        });
        return (span, sent);
    }
    let span = tracing::info_span!(
        "alert",
        alert_id = %row.alert_id,
        attempt = row.attempts,
        worker = %worker,
        otel.name = "process outbox",
        otel.kind = "consumer",
        otel.status_code = tracing::field::Empty,
        messaging.system = "alert-outbox",
        messaging.operation.type = "process",
        messaging.destination.name = "outbox",
        messaging.message.id = %row.alert_id,
        outbox.tenant_id = %row.tenant_id,
        outbox.destination = %row.destination.name,
        outbox.destination_kind = row.destination.kind.as_str(),
        outbox.attempt = row.attempts,
        outbox.claimed_from = row.claimed_from.as_str(),
        outbox.outcome = tracing::field::Empty,
        error.type = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
    );
    let Some(approval) = approval else {
        return (span, None);
    };
    // Started here, before the span is first entered: entering would start it in a
    // trace of its own. A span the sampler left out has no context of its own to send.
    let sent = telemetry::start_in_trace(&span, approval.parent.trace_id, Some(&approval.parent))
        .unwrap_or_else(|| approval.parent.with_new_span());
    telemetry::record_child_span(
        &span,
        telemetry::ChildSpan {
            name: "claim outbox",
            kind: telemetry::SpanKind::Internal,
            start: batch.started,
            end: batch.finished,
            attributes: vec![
                telemetry::KeyValue::new("outbox.claim.rows", batch.rows as i64),
                telemetry::KeyValue::new("messaging.operation.type", "receive"),
            ],
        },
    );
    (
        span,
        Some(TraceContext {
            parent: sent,
            state: approval.state,
        }),
    )
}

/// Records how an attempt ended on the attempt's span (the current one).
pub(crate) fn record_attempt(record: &AttemptRecord) {
    let span = Span::current();
    span.record("outbox.outcome", record.outcome.as_str());
    // The conventions' `error.type`: our class of the failure, else the status code that
    // refused the attempt.
    let refused_with = record
        .http_status
        .filter(|status| *status >= 400)
        .map(|status| status.to_string());
    if let Some(error) = record.error_class.clone().or(refused_with) {
        span.record("error.type", error.as_str());
        span.record("otel.status_code", "ERROR");
    }
    if let Some(status) = record.http_status {
        span.record("http.response.status_code", i64::from(status));
    }
}

/// A child span of the current attempt (`Span::none()` when spans are not exported, so
/// that a delivery costs nothing more then).
pub(crate) fn step_span(name: &'static str) -> Span {
    if telemetry::enabled() {
        tracing::info_span!("step", otel.name = name, otel.kind = "internal")
    } else {
        Span::none()
    }
}

/// The client span of one HTTP request to a destination (`method`: `POST` for a send,
/// `GET` for a lookup): where it went by host and port only.
pub(crate) fn http_client_span(method: &str, url: &url::Url) -> Span {
    if !telemetry::enabled() {
        return Span::none();
    }
    tracing::info_span!(
        "http request",
        otel.name = method,
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        http.request.method = method,
        server.address = url.host_str().unwrap_or_default(),
        server.port = url.port_or_known_default().map(i64::from),
        url.scheme = url.scheme(),
        http.response.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// The client span of one SMTP dialogue with a relay (`relay`: its host and port), with
/// a child span per phase (`step_span`).
pub(crate) fn smtp_client_span(relay: Option<SmtpRelay>) -> Span {
    if !telemetry::enabled() {
        return Span::none();
    }
    let (host, port) = relay.map_or((String::new(), None), |relay| {
        (relay.host.to_string(), Some(i64::from(relay.port)))
    });
    tracing::info_span!(
        "smtp dialogue",
        otel.name = "smtp send",
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        network.protocol.name = "smtp",
        server.address = %host,
        server.port = port,
        error.type = tracing::field::Empty,
    )
}

/// Records what an exchange came to on its client span: the status of an answer, else
/// the kind of failure (never its text, which may quote the destination).
pub(crate) fn record_exchange(span: &Span, exchange: &Exchange) {
    let error = match exchange {
        Exchange::Answered { status, .. } => {
            span.record("http.response.status_code", i64::from(*status));
            // By the HTTP client conventions, a refusing status is its own error type.
            (*status >= 400).then(|| status.to_string())
        }
        Exchange::NotConnected(_) => Some("not_connected".to_owned()),
        Exchange::TimedOut(_) => Some("timeout".to_owned()),
        Exchange::Broken(_) => Some("broken".to_owned()),
        Exchange::Unsendable(_) => Some("unsendable".to_owned()),
        Exchange::Blocked(_) => Some("blocked".to_owned()),
        Exchange::Altered(_) => Some("altered".to_owned()),
        Exchange::SmtpAccepted { .. } => None,
        Exchange::SmtpRefused { code, .. } => Some(code.to_string()),
        Exchange::SmtpNotSent { .. } => Some("smtp_not_sent".to_owned()),
    };
    if let Some(error) = error {
        span.record("error.type", error.as_str());
        span.record("otel.status_code", "ERROR");
    }
}

/// The headers a request to a destination carries for `trace`: `traceparent`, and
/// `tracestate` when the caller sent one. Both were read strictly (printable ASCII, no
/// separator a header could be split at), so they are always valid header values.
pub(crate) fn trace_headers(trace: Option<&TraceContext>) -> Vec<(&'static str, String)> {
    let Some(trace) = trace else {
        return Vec::new();
    };
    let mut headers = vec![("traceparent", trace.parent.to_string())];
    if let Some(state) = &trace.state {
        headers.push(("tracestate", state.as_str().to_owned()));
    }
    headers
}
