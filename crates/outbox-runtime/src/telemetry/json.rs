//! JSON log lines with the trace they belong to: top-level `"trace_id"` and `"span_id"`
//! (lowercase hex) added to what the JSON formatter writes, when the event happens in a
//! span with an OpenTelemetry context, so that a log search leads to the trace and back.
//!
//! The ids are those of the current OpenTelemetry context, which the OpenTelemetry layer
//! attaches to the thread while a span is entered. Reading it takes no lock on the span's
//! data (asking the layer for a span's context from inside a log call could wait on a lock
//! the same thread holds) and needs no dispatcher lookup (which, inside an event, sees no
//! subscriber when a scoped one is set).

use opentelemetry::trace::TraceContextExt;
use std::fmt;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Wraps a JSON event formatter, adding the trace and span ids.
#[derive(Debug, Clone)]
pub(crate) struct WithTraceIds<F>(pub(crate) F);

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some(ids) = ids_for(ctx, event) else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        // The line is one JSON object: the ids go in before its closing brace.
        if let Some(end) = line.rfind('}') {
            line.insert_str(end, &ids);
        }
        writer.write_str(&line)
    }
}

/// `,"trace_id":"…","span_id":"…"` for an event in the current span, when that span has a
/// valid OpenTelemetry context.
fn ids_for<S, N>(ctx: &FmtContext<'_, S, N>, event: &Event<'_>) -> Option<String>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    // An event given another parent than the current span is not in the attached context.
    if !event.is_contextual() {
        let current = ctx.lookup_current()?.id();
        if event.parent() != Some(&current) {
            return None;
        }
    }
    opentelemetry::Context::map_current(|cx| {
        let span = cx.span();
        let context = span.span_context();
        context.is_valid().then(|| {
            format!(
                ",\"trace_id\":\"{:032x}\",\"span_id\":\"{:016x}\"",
                context.trace_id(),
                context.span_id()
            )
        })
    })
}
