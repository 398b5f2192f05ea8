//! The tracer's id generator: random ids, except that a root span started while
//! [`ForcedTraceId`] is held on the same thread gets the trace id it names.
//!
//! This exists to put a delivery attempt in its approval's trace without making it the
//! approval span's child (the approval ended long before; the attempt links to it
//! instead): tracing-opentelemetry can give a span a parent, but not a root span a trace
//! id, and the SDK draws a root span's trace id from the generator.

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use std::cell::Cell;

thread_local! {
    /// The trace id the next root span started on this thread gets.
    static FORCED: Cell<Option<TraceId>> = const { Cell::new(None) };
}

/// Random ids, or the forced trace id once.
#[derive(Debug, Default)]
pub(crate) struct OverridableIds {
    random: RandomIdGenerator,
}

impl IdGenerator for OverridableIds {
    fn new_trace_id(&self) -> TraceId {
        FORCED
            .with(Cell::take)
            .unwrap_or_else(|| self.random.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        self.random.new_span_id()
    }
}

/// While held, the next root span started on this thread belongs to the given trace;
/// dropped, the override is gone whether or not it was used.
#[derive(Debug)]
pub(crate) struct ForcedTraceId(());

impl ForcedTraceId {
    pub(crate) fn set(trace_id: TraceId) -> ForcedTraceId {
        FORCED.with(|forced| forced.set(Some(trace_id)));
        ForcedTraceId(())
    }
}

impl Drop for ForcedTraceId {
    fn drop(&mut self) {
        FORCED.with(|forced| forced.set(None));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forced_id_is_used_once_and_only_while_held() {
        let ids = OverridableIds::default();
        let forced = TraceId::from_bytes([7; 16]);
        {
            let _guard = ForcedTraceId::set(forced);
            assert_eq!(ids.new_trace_id(), forced);
            assert_ne!(ids.new_trace_id(), forced, "used once");
        }
        {
            let _guard = ForcedTraceId::set(forced);
        }
        assert_ne!(ids.new_trace_id(), forced, "gone once dropped");
        assert_ne!(ids.new_span_id(), SpanId::INVALID);
    }
}
