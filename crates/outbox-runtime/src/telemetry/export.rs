//! Our span processor and the thread that exports its batches: a finished span is pushed
//! into a bounded queue without waiting, and a dedicated thread sends the queue to the
//! collector in batches, each within a deadline.
//!
//! It replaces the SDK's batch processor because that one cannot say how many spans it
//! dropped, and an operator must see (in `/metrics`) when traces have holes. A span is
//! dropped, and counted, when the queue is full, when its export fails or takes too long,
//! or when it ends after shutdown; the product never waits for the collector.
//!
//! The thread logs with the target [`EXPORT_TARGET`], which the OpenTelemetry layer does
//! not see, and runs in a context where telemetry is suppressed, so that exporting never
//! produces spans to export.

use super::config::BatchSettings;
use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The log target of the export thread, left out of the spans.
pub(crate) const EXPORT_TARGET: &str = "outbox_runtime::telemetry::export";

/// Longest a flush or a shutdown waits for the export thread.
pub(crate) const WAIT_LIMIT: Duration = Duration::from_secs(3);

/// Spans exported and dropped since the process started.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    exported: AtomicU64,
    dropped: AtomicU64,
}

impl Counters {
    /// Spans the collector accepted.
    pub(crate) fn exported(&self) -> u64 {
        self.exported.load(Ordering::Relaxed)
    }

    /// Spans lost on the way.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn add_exported(&self, n: usize) {
        self.exported.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn add_dropped(&self, n: usize) {
        self.dropped.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// What the processor asks of the export thread, beside spans.
enum Control {
    /// The resource the provider was built with, for the exporter.
    Resource(Resource),
    /// Export what is queued now, then answer.
    Flush(std_mpsc::SyncSender<()>),
    /// Export what is queued within the deadline, stop the exporter, answer and end.
    Shutdown {
        deadline: Instant,
        done: std_mpsc::SyncSender<()>,
    },
}

/// The span processor: a bounded queue in front of the export thread.
#[derive(Debug)]
pub(crate) struct QueueProcessor {
    spans: mpsc::Sender<SpanData>,
    control: mpsc::UnboundedSender<Control>,
    counters: Arc<Counters>,
    shut_down: AtomicBool,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Control::Resource(_) => "Resource",
            Control::Flush(_) => "Flush",
            Control::Shutdown { .. } => "Shutdown",
        })
    }
}

impl QueueProcessor {
    /// Starts the export thread (`otlp-export`) around `exporter`. `log_to` is the
    /// subscriber the thread logs to (the global one when `None`; tests give their own).
    pub(crate) fn start<E: SpanExporter + 'static>(
        exporter: E,
        settings: BatchSettings,
        counters: Arc<Counters>,
        log_to: Option<tracing::Dispatch>,
    ) -> std::io::Result<QueueProcessor> {
        let (spans, queue) = mpsc::channel(settings.max_queue_size.max(1));
        let (control, orders) = mpsc::unbounded_channel();
        let thread = ExportThread {
            exporter,
            settings,
            counters: counters.clone(),
            queue,
            orders,
            failing: false,
        };
        std::thread::Builder::new()
            .name("otlp-export".to_owned())
            .spawn(move || thread.run(log_to))?;
        Ok(QueueProcessor {
            spans,
            control,
            counters,
            shut_down: AtomicBool::new(false),
        })
    }

    /// Sends `control` and waits for its answer until `limit`.
    fn ask(
        &self,
        make: impl FnOnce(std_mpsc::SyncSender<()>) -> Control,
        limit: Duration,
    ) -> OTelSdkResult {
        let (done, answer) = std_mpsc::sync_channel(1);
        self.control
            .send(make(done))
            .map_err(|_| OTelSdkError::InternalFailure("the export thread is gone".to_owned()))?;
        match answer.recv_timeout(limit) {
            Ok(()) => Ok(()),
            Err(std_mpsc::RecvTimeoutError::Timeout) => Err(OTelSdkError::Timeout(limit)),
            Err(std_mpsc::RecvTimeoutError::Disconnected) => Err(OTelSdkError::InternalFailure(
                "the export thread is gone".to_owned(),
            )),
        }
    }
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        // Never waits: a full queue (or a stopped thread) loses the span, counted.
        if self.spans.try_send(span).is_err() {
            self.counters.add_dropped(1);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        if self.shut_down.load(Ordering::Relaxed) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        self.ask(Control::Flush, WAIT_LIMIT)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        if self.shut_down.swap(true, Ordering::Relaxed) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        let limit = timeout.min(WAIT_LIMIT);
        let deadline = Instant::now() + limit;
        self.ask(|done| Control::Shutdown { deadline, done }, limit)
    }

    fn set_resource(&mut self, resource: &Resource) {
        // The exporter lives on the export thread; it gets the resource before any span,
        // since orders are read before spans there.
        let _ = self.control.send(Control::Resource(resource.clone()));
    }
}

/// The export thread's state.
struct ExportThread<E> {
    exporter: E,
    settings: BatchSettings,
    counters: Arc<Counters>,
    queue: mpsc::Receiver<SpanData>,
    orders: mpsc::UnboundedReceiver<Control>,
    /// Whether the last export failed (so that a failure is logged once, not per batch).
    failing: bool,
}

impl<E: SpanExporter> ExportThread<E> {
    fn run(self, log_to: Option<tracing::Dispatch>) {
        let _log = log_to.map(|dispatch| tracing::dispatcher::set_default(&dispatch));
        // Anything the exporter's libraries trace on this thread is not recorded: spans
        // about exporting spans would feed themselves.
        let _suppressed = Context::enter_telemetry_suppressed_scope();
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(err) => {
                tracing::warn!(
                    target: EXPORT_TARGET,
                    "spans are not exported: no runtime for the export thread: {err}"
                );
                return;
            }
        };
        runtime.block_on(self.serve());
        // A DNS lookup stuck in the blocking pool must not hold the thread at exit.
        runtime.shutdown_background();
    }

    async fn serve(mut self) {
        let mut batch: Vec<SpanData> = Vec::new();
        // When the oldest span of the batch has waited long enough.
        let mut due: Option<Instant> = None;
        loop {
            tokio::select! {
                biased;
                order = self.orders.recv() => match order {
                    Some(Control::Resource(resource)) => self.exporter.set_resource(&resource),
                    Some(Control::Flush(done)) => {
                        self.drain(&mut batch, None).await;
                        due = None;
                        let _ = done.send(());
                    }
                    Some(Control::Shutdown { deadline, done }) => {
                        self.queue.close();
                        self.drain(&mut batch, Some(deadline)).await;
                        let left = deadline.saturating_duration_since(Instant::now());
                        let _ = self.exporter.shutdown_with_timeout(left);
                        let _ = done.send(());
                        return;
                    }
                    // The processor is gone without a shutdown (its provider was dropped).
                    None => {
                        self.queue.close();
                        let deadline = Instant::now() + WAIT_LIMIT;
                        self.drain(&mut batch, Some(deadline)).await;
                        return;
                    }
                },
                span = self.queue.recv() => match span {
                    Some(span) => {
                        if batch.is_empty() {
                            due = Some(Instant::now() + self.settings.schedule_delay);
                        }
                        batch.push(span);
                        if batch.len() >= self.settings.max_export_batch_size {
                            self.export(std::mem::take(&mut batch), None).await;
                            due = None;
                        }
                    }
                    None => {
                        let deadline = Instant::now() + WAIT_LIMIT;
                        self.drain(&mut batch, Some(deadline)).await;
                        return;
                    }
                },
                () = sleep_until(due), if due.is_some() => {
                    self.export(std::mem::take(&mut batch), None).await;
                    due = None;
                }
            }
        }
    }

    /// Exports `batch` and everything queued now, in batches, each by `deadline` if given.
    async fn drain(&mut self, batch: &mut Vec<SpanData>, deadline: Option<Instant>) {
        while let Ok(span) = self.queue.try_recv() {
            batch.push(span);
            if batch.len() >= self.settings.max_export_batch_size {
                self.export(std::mem::take(batch), deadline).await;
            }
        }
        if !batch.is_empty() {
            self.export(std::mem::take(batch), deadline).await;
        }
    }

    /// Exports one batch within the export timeout (and `deadline`); counts its spans as
    /// exported or dropped.
    async fn export(&mut self, batch: Vec<SpanData>, deadline: Option<Instant>) {
        let spans = batch.len();
        let mut limit = self.settings.export_timeout;
        if let Some(deadline) = deadline {
            limit = limit.min(deadline.saturating_duration_since(Instant::now()));
        }
        if limit.is_zero() {
            self.failed(
                spans,
                "no time was left before the process stopped".to_owned(),
            );
            return;
        }
        match tokio::time::timeout(limit, self.exporter.export(batch)).await {
            Ok(Ok(())) => {
                self.counters.add_exported(spans);
                if self.failing {
                    self.failing = false;
                    tracing::info!(target: EXPORT_TARGET, "span export to the collector works again");
                }
            }
            Ok(Err(err)) => self.failed(spans, err.to_string()),
            Err(_) => self.failed(
                spans,
                format!(
                    "the collector did not answer within {}ms",
                    limit.as_millis()
                ),
            ),
        }
    }

    fn failed(&mut self, spans: usize, reason: String) {
        self.counters.add_dropped(spans);
        if !self.failing {
            self.failing = true;
            let reason = reason.replace(['\r', '\n'], " ");
            tracing::warn!(
                target: EXPORT_TARGET,
                "span export to the collector fails, spans are dropped until it works again: \
                 {reason}"
            );
        }
    }
}

/// Waits until `due` (never, without one; the branch is disabled then).
async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}
