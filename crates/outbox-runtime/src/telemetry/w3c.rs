//! A tracing span's place in a W3C trace: given a remote parent, started in an existing
//! trace without a parent, read back as a `traceparent`, and given finished children
//! measured before it existed. These work on whatever subscriber the span belongs to;
//! the public functions in [`super`] call them only while spans are exported.

use super::ids::ForcedTraceId;
use super::ChildSpan;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId,
    TraceState as OtelTraceState, Tracer as _,
};
use opentelemetry::Context;
use opentelemetry_sdk::trace::SdkTracer;
use outbox_core::trace_context::{TraceParent, TraceState};
use std::str::FromStr;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The remote span context of `parent` (and the caller's `state`, when OpenTelemetry reads
/// it the same way: else none, the header still travels as the caller sent it).
fn remote(parent: &TraceParent, state: Option<&TraceState>) -> SpanContext {
    let state = state
        .and_then(|state| OtelTraceState::from_str(state.as_str()).ok())
        .unwrap_or_default();
    SpanContext::new(
        TraceId::from_bytes(parent.trace_id),
        SpanId::from_bytes(parent.parent_id),
        TraceFlags::new(parent.flags),
        true,
        state,
    )
}

/// `context` as a `traceparent` (its own span as the parent), when valid.
fn to_traceparent(context: &SpanContext) -> Option<TraceParent> {
    context.is_valid().then(|| TraceParent {
        trace_id: context.trace_id().to_bytes(),
        parent_id: context.span_id().to_bytes(),
        flags: context.trace_flags().to_u8(),
    })
}

pub(crate) fn set_remote_parent(
    span: &tracing::Span,
    parent: &TraceParent,
    state: Option<&TraceState>,
) {
    // Refused only for a span already started or not recorded: it keeps its place.
    let _ = span.set_parent(Context::new().with_remote_span_context(remote(parent, state)));
}

pub(crate) fn start_in_trace(
    span: &tracing::Span,
    trace_id: [u8; 16],
    link: Option<&TraceParent>,
) -> Option<TraceParent> {
    let trace_id = TraceId::from_bytes(trace_id);
    if trace_id == TraceId::INVALID {
        return None;
    }
    // An empty parent context makes it a root span, whatever span is current here.
    span.set_parent(Context::new()).ok()?;
    if let Some(link) = link {
        span.add_link(remote(link, None));
    }
    let context = {
        let _forced = ForcedTraceId::set(trace_id);
        // The layer starts the span on first access to its context, on this thread.
        span.context()
    };
    let started = context.span().span_context().clone();
    (started.trace_id() == trace_id)
        .then(|| to_traceparent(&started))
        .flatten()
}

pub(crate) fn current_context(span: &tracing::Span) -> Option<TraceParent> {
    to_traceparent(span.context().span().span_context())
}

pub(crate) fn record_child_span(tracer: &SdkTracer, parent: &tracing::Span, child: ChildSpan<'_>) {
    let parent = parent.context();
    if !parent.span().span_context().is_valid() {
        return;
    }
    let mut span = tracer
        .span_builder(child.name.to_owned())
        .with_kind(child.kind)
        .with_start_time(child.start)
        .with_attributes(child.attributes)
        .start_with_context(tracer, &parent);
    span.end_with_timestamp(child.end.max(child.start));
}
