//! Span export over OpenTelemetry (OTLP over HTTP with protobuf), configured only by the
//! standard `OTEL_*` variables and off unless an OTLP endpoint is given; the W3C trace
//! context helpers the decider and the dispatcher use; and the export's own figures for
//! `/metrics`.
//!
//! With export off, the OpenTelemetry layer is not installed at all and every function
//! here returns at once. With it on, spans leave the process on a thread of their own
//! through a bounded queue: export never slows or fails the product, it drops spans (and
//! counts them) instead.
//!
//! Layout: `config` (the environment read into settings), `export` (our span processor
//! and its export thread), `http_client` (the exporter's HTTP client), `ids` (the id
//! generator that lets a root span join an existing trace), `w3c` (a span's place in a W3C
//! trace), `json` (trace and span ids in JSON log lines).

mod config;
mod export;
mod http_client;
mod ids;
pub(crate) mod json;
#[cfg(test)]
mod tests;
mod w3c;

pub use opentelemetry::trace::SpanKind;
pub use opentelemetry::KeyValue;

use export::{Counters, QueueProcessor, EXPORT_TARGET};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanExporter};
use opentelemetry_sdk::Resource;
use outbox_core::trace_context::{TraceParent, TraceState};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Level, Metadata, Subscriber};
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::filter::Filtered;
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer as _;

/// The export pipeline of the process, once logging is set up with export on.
static ACTIVE: OnceLock<Pipeline> = OnceLock::new();

/// The instrumentation scope of our spans.
const SCOPE: &str = "alert-outbox";

/// Whether spans are exported (an OTLP endpoint is configured, export was not disabled,
/// and [`shutdown_tracing`] was not called yet).
pub fn enabled() -> bool {
    ACTIVE
        .get()
        .is_some_and(|pipeline| !pipeline.stopped.load(Ordering::Relaxed))
}

/// Exports what is queued and stops the export, waiting at most 3 s (spans not sent by
/// then are lost, and counted). Called once a binary's command has returned; spans ended
/// later are dropped.
pub fn shutdown_tracing() {
    let Some(pipeline) = ACTIVE.get() else {
        return;
    };
    if pipeline.stopped.swap(true, Ordering::Relaxed) {
        return;
    }
    if let Err(err) = pipeline.provider.shutdown_with_timeout(export::WAIT_LIMIT) {
        tracing::warn!(
            target: EXPORT_TARGET,
            "spans still queued at exit may not have been exported: {err}"
        );
    }
}

/// Appends the export's figures in the Prometheus text format: spans exported and
/// dropped (counters) and whether export is on (a gauge).
pub fn render_metrics(out: &mut String) {
    let (exported, dropped) = ACTIVE.get().map_or((0, 0), |pipeline| {
        (pipeline.counters.exported(), pipeline.counters.dropped())
    });
    render(out, exported, dropped, enabled());
}

fn render(out: &mut String, exported: u64, dropped: u64, enabled: bool) {
    let _ = writeln!(
        out,
        "# HELP outbox_trace_spans_exported_total Spans the OTLP collector accepted."
    );
    let _ = writeln!(out, "# TYPE outbox_trace_spans_exported_total counter");
    let _ = writeln!(out, "outbox_trace_spans_exported_total {exported}");
    let _ = writeln!(
        out,
        "# HELP outbox_trace_spans_dropped_total Spans not exported: the export queue was \
         full, or the collector failed or did not answer in time."
    );
    let _ = writeln!(out, "# TYPE outbox_trace_spans_dropped_total counter");
    let _ = writeln!(out, "outbox_trace_spans_dropped_total {dropped}");
    let _ = writeln!(
        out,
        "# HELP outbox_tracing_enabled 1 when spans are exported over OTLP."
    );
    let _ = writeln!(out, "# TYPE outbox_tracing_enabled gauge");
    let _ = writeln!(out, "outbox_tracing_enabled {}", u8::from(enabled));
}

/// Makes `span` a child of the caller's span (`parent`, with its `state`). Call it before
/// the span is entered or its context read: a started span keeps its place. Does nothing
/// while spans are not exported.
pub fn set_remote_parent(span: &tracing::Span, parent: &TraceParent, state: Option<&TraceState>) {
    if enabled() {
        w3c::set_remote_parent(span, parent, state);
    }
}

/// Starts `span` as a span of the trace `trace_id` without a parent (a root span of an
/// existing trace), linked to `link` (the span it follows, e.g. the approval's), and
/// answers its own context as a `traceparent` to send downstream. Call it before the span
/// is entered or its context read. `None` while spans are not exported, or when the span
/// was started already or is not recorded.
pub fn start_in_trace(
    span: &tracing::Span,
    trace_id: [u8; 16],
    link: Option<&TraceParent>,
) -> Option<TraceParent> {
    if !enabled() {
        return None;
    }
    w3c::start_in_trace(span, trace_id, link)
}

/// The span's own context (its trace, its span id as the parent, its sampled flag), which
/// starts the span if it was not yet; `None` while spans are not exported.
pub fn current_context(span: &tracing::Span) -> Option<TraceParent> {
    if !enabled() {
        return None;
    }
    w3c::current_context(span)
}

/// A finished span described after the fact, with explicit times: work measured before
/// the span it belongs under existed (the claim batch an attempt came from).
#[derive(Debug, Clone)]
pub struct ChildSpan<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its kind.
    pub kind: SpanKind,
    /// When the work started.
    pub start: SystemTime,
    /// When it ended (never before `start`: an earlier end is taken as `start`).
    pub end: SystemTime,
    /// Its attributes.
    pub attributes: Vec<KeyValue>,
}

/// Exports `child` as a finished child of `parent`. Does nothing while spans are not
/// exported or when `parent` is not recorded.
pub fn record_child_span(parent: &tracing::Span, child: ChildSpan<'_>) {
    let Some(pipeline) = ACTIVE.get().filter(|_| enabled()) else {
        return;
    };
    w3c::record_child_span(&pipeline.tracer, parent, child);
}

/// The OpenTelemetry layer as installed: info and above, blind to the export's own work.
pub(crate) type OtelLayer<S> = Filtered<OpenTelemetryLayer<S, SdkTracer>, ExportFilter, S>;

/// A tracer provider around our processor, and what the process keeps of it.
#[derive(Debug)]
pub(crate) struct Pipeline {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    counters: Arc<Counters>,
    stopped: AtomicBool,
}

impl Pipeline {
    /// Builds the provider (with `sampler` and `resource`) around `exporter`, and the
    /// layer that feeds it. `log_to`: see [`QueueProcessor::start`].
    pub(crate) fn build<S, E>(
        batch: config::BatchSettings,
        sampler: opentelemetry_sdk::trace::Sampler,
        resource: Resource,
        exporter: E,
        log_to: Option<tracing::Dispatch>,
    ) -> std::io::Result<(OtelLayer<S>, Pipeline)>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
        E: SpanExporter + 'static,
    {
        let counters = Arc::new(Counters::default());
        let processor = QueueProcessor::start(exporter, batch, counters.clone(), log_to)?;
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(sampler)
            .with_id_generator(ids::OverridableIds::default())
            .with_resource(resource)
            .build();
        let tracer = provider.tracer(SCOPE);
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer.clone())
            .with_filter(ExportFilter);
        let pipeline = Pipeline {
            provider,
            tracer,
            counters,
            stopped: AtomicBool::new(false),
        };
        Ok((layer, pipeline))
    }

    /// Makes this the process's pipeline (what [`enabled`] and the helpers use).
    pub(crate) fn install(self) {
        let _ = ACTIVE.set(self);
    }
}

/// The layer and pipeline the `OTEL_*` environment asks for (`None`: export off), and the
/// warnings to log once logging is set up. `service` names the service when the
/// environment does not.
pub(crate) fn from_env<S>(service: &str) -> (Option<(OtelLayer<S>, Pipeline)>, Vec<String>)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let config::Reading {
        settings,
        mut warnings,
    } = config::read(|name| std::env::var(name).ok());
    let Some(settings) = settings else {
        return (None, warnings);
    };
    let exporter = match otlp_exporter(&settings.endpoint, settings.timeout) {
        Ok(exporter) => exporter,
        Err(reason) => {
            warnings.push(format!("spans are not exported: {reason}"));
            return (None, warnings);
        }
    };
    let mut resource = Resource::builder();
    if !settings.service_named {
        resource = resource.with_service_name(service.to_owned());
    }
    match Pipeline::build(
        settings.batch,
        settings.sampling.sampler(),
        resource.build(),
        exporter,
        None,
    ) {
        Ok(built) => (Some(built), warnings),
        Err(err) => {
            warnings.push(format!("spans are not exported: no export thread: {err}"));
            (None, warnings)
        }
    }
}

/// The OTLP/HTTP protobuf exporter posting to `endpoint` with our HTTP client. It reads
/// the headers (`OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`) from the environment itself.
fn otlp_exporter(
    endpoint: &str,
    timeout: Duration,
) -> Result<opentelemetry_otlp::SpanExporter, String> {
    use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
    let client = http_client::CollectorClient::new(timeout)
        .map_err(|err| format!("no HTTP client for the collector: {err}"))?;
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .with_timeout(timeout)
        .build()
        .map_err(|err| err.to_string())
}

/// The OpenTelemetry layer's filter: our own spans at info and above (whatever
/// `RUST_LOG` says: it sets what is logged), and nothing else.
/// - No events: inside a span, an event would be exported as a span event with all its
///   fields, and log lines may quote what a destination answered or an error's text;
///   spans carry only the attributes chosen for them.
/// - Only our crates' spans: a library's long-lived span (an MCP session's, say) would
///   otherwise become the parent of every approval made under it, and the export
///   thread's own work (the HTTP stack under the exporter) would make spans to export.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExportFilter;

/// Whether spans at `target` are exported: the product's crates, never the export's own.
fn exported_target(target: &str) -> bool {
    (target.starts_with("outbox_") || target.starts_with("alert_outbox"))
        && !target.starts_with(EXPORT_TARGET)
}

impl<S> Filter<S> for ExportFilter {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        meta.is_span() && *meta.level() <= Level::INFO && exported_target(meta.target())
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if meta.is_span() && *meta.level() <= Level::INFO && exported_target(meta.target()) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::INFO)
    }
}
