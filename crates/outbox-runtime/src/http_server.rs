//! The HTTP/1.1 server every listening process uses (the approval API, its metrics, the
//! dispatcher's metrics, the sink), hardened against slow and idle clients.
//!
//! Each connection is watched by its own task, which knows what the connection is doing:
//!
//! - waiting for a request: the first request must start and its head must be complete
//!   within [`ServerLimits::header_timeout`] of the connection; between requests a
//!   keep-alive connection may stay silent for [`ServerLimits::idle_timeout`];
//! - reading a request head: from its first byte, the head must be complete within
//!   `header_timeout` (a client trickling header bytes gains nothing);
//! - reading a request body: from the end of the head, the body must be complete within
//!   [`ServerLimits::body_timeout`];
//! - answering: no limit, the handler decides (the sink's latency fault waits on purpose).
//!
//! A connection past its deadline is closed without an answer. At most
//! [`ServerLimits::max_connections`] connections are open at once; past that, a new
//! connection is closed as soon as it is accepted rather than queued. When the shutdown
//! future resolves, no connection is accepted any more, idle ones close, and the requests
//! in progress are answered before [`serve`] returns.
//!
//! The watch is done here rather than with hyper's header-read timeout alone because
//! hyper counts that timeout from the end of the previous response, which would close
//! healthy keep-alive connections as soon as they sit idle for the (short) header timeout.
//! hyper's timer is still installed, as a backstop at `idle_timeout + header_timeout`.

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::Service;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Any error a service or a body may end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long clients may take, and how many may be connected at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// From the connection (or from the first byte of a later request) to the end of the
    /// request head.
    pub header_timeout: Duration,
    /// From the end of the request head to the end of its body.
    pub body_timeout: Duration,
    /// How long a keep-alive connection may wait, silent, for its next request.
    pub idle_timeout: Duration,
    /// Most connections open at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
}

impl ServerLimits {
    /// Default [`ServerLimits::header_timeout`].
    pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default [`ServerLimits::body_timeout`].
    pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
    /// Default [`ServerLimits::idle_timeout`]: longer than the dispatcher keeps an idle
    /// connection in its pool (60 s), so that the client, not the server, closes idle
    /// connections and a request never races a server-side close.
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(75);
    /// Default [`ServerLimits::max_connections`]: well under the usual limit of 1024 open
    /// files, which the process also needs for its database connections.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            header_timeout: Self::DEFAULT_HEADER_TIMEOUT,
            body_timeout: Self::DEFAULT_BODY_TIMEOUT,
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Serves `service` on `listener` within `limits` until `shutdown` resolves, then answers
/// the requests in progress and returns once every connection is closed.
///
/// The service may end a request with an error: the connection is then closed without an
/// answer (the sink's dropped-response fault relies on this).
pub async fn serve<S, B>(
    listener: TcpListener,
    limits: ServerLimits,
    service: S,
    shutdown: impl Future<Output = ()> + Send,
) where
    S: Service<Request<RequestBody>, Response = Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (stop, stopped) = watch::channel(());
    let mut connections = JoinSet::new();
    let mut turned_away = TurnedAway::default();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match Arc::clone(&permits).try_acquire_owned() {
                    Ok(permit) => {
                        connections.spawn(connection(
                            stream,
                            peer,
                            limits,
                            service.clone(),
                            stopped.clone(),
                            permit,
                        ));
                    }
                    // Dropping the stream closes it: a client past the cap learns at once
                    // instead of waiting in a queue that a slow client could fill.
                    Err(_) => turned_away.count(limits.max_connections),
                },
                Err(err) => {
                    // Usually out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %err, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            // Reaps finished connections so the set does not grow with every client.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    tracing::info!(
        open_connections = connections.len(),
        "stopping; finishing open requests"
    );
    let _ = stop.send(());
    while connections.join_next().await.is_some() {}
}

/// Connections closed for lack of room, reported at most every ten seconds so that a
/// flood does not become a flood of log lines too.
#[derive(Debug, Default)]
struct TurnedAway {
    since_report: u64,
    last_report: Option<Instant>,
}

impl TurnedAway {
    const REPORT_EVERY: Duration = Duration::from_secs(10);

    fn count(&mut self, max_connections: usize) {
        self.since_report += 1;
        let now = Instant::now();
        if self
            .last_report
            .is_none_or(|last| now.duration_since(last) >= Self::REPORT_EVERY)
        {
            tracing::warn!(
                max_connections,
                closed = self.since_report,
                "connection limit reached; closing new connections"
            );
            self.since_report = 0;
            self.last_report = Some(now);
        }
    }
}

/// Serves one connection, closing it when it overstays a deadline (see the module doc).
async fn connection<S, B>(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    limits: ServerLimits,
    service: S,
    mut stopped: watch::Receiver<()>,
    _permit: OwnedSemaphorePermit,
) where
    S: Service<Request<RequestBody>, Response = Response<B>> + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    // Small answers must not wait for Nagle's algorithm.
    let _ = stream.set_nodelay(true);
    let activity = Arc::new(Activity::new(Instant::now()));
    let io = TokioIo::new(Watched {
        stream,
        activity: Arc::clone(&activity),
    });
    let tracked = Tracked {
        inner: service,
        activity: Arc::clone(&activity),
        peer,
    };
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout + limits.header_timeout)
        .keep_alive(true)
        .serve_connection(io, tracked);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        // Registered before the deadline is read, so a change in between is not missed.
        let changed = activity.changed.notified();
        let deadline = activity.deadline(&limits);
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(err) = result {
                    // Clients that go away, and the sink's dropped responses, end here:
                    // not worth a warning.
                    tracing::debug!(%peer, error = %err, "connection closed with an error");
                }
                return;
            }
            () = sleep_until(deadline) => {
                if let Some((phase, deadline)) = activity.overdue(&limits, Instant::now()) {
                    tracing::debug!(%peer, phase, ?deadline, "closing a connection past its deadline");
                    return;
                }
            }
            () = changed => {}
            // Either a stop signal or the sender gone: both mean stop.
            _ = stopped.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// What a connection is doing, as far as its deadlines are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the first byte of a request; `served` once a request was answered.
    Waiting { since: Instant, served: bool },
    /// Part of a request head has arrived.
    ReadingHead { since: Instant },
    /// The head is complete, the body is not.
    ReadingBody { since: Instant },
    /// The request is complete; the service is answering.
    Answering,
}

/// A connection's phase, shared by its socket, its service and its watch.
#[derive(Debug)]
struct Activity {
    phase: Mutex<Phase>,
    changed: Notify,
}

impl Activity {
    fn new(now: Instant) -> Self {
        Activity {
            phase: Mutex::new(Phase::Waiting {
                since: now,
                served: false,
            }),
            changed: Notify::new(),
        }
    }

    fn update(&self, change: impl FnOnce(Phase) -> Phase) {
        let mut phase = self.phase.lock().unwrap_or_else(PoisonError::into_inner);
        let next = change(*phase);
        if next != *phase {
            *phase = next;
            drop(phase);
            self.changed.notify_one();
        }
    }

    fn phase(&self) -> Phase {
        *self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes arrived: while waiting, they start a request head.
    fn bytes_read(&self, now: Instant) {
        self.update(|phase| match phase {
            Phase::Waiting { .. } => Phase::ReadingHead { since: now },
            other => other,
        });
    }

    fn request_started(&self, body_complete: bool, now: Instant) {
        self.update(|_| {
            if body_complete {
                Phase::Answering
            } else {
                Phase::ReadingBody { since: now }
            }
        });
    }

    fn body_finished(&self) {
        self.update(|phase| match phase {
            Phase::ReadingBody { .. } => Phase::Answering,
            other => other,
        });
    }

    fn request_finished(&self, now: Instant) {
        self.update(|_| Phase::Waiting {
            since: now,
            served: true,
        });
    }

    fn deadline(&self, limits: &ServerLimits) -> Option<Instant> {
        Self::deadline_of(self.phase(), limits).map(|(_, deadline)| deadline)
    }

    /// The phase's name and deadline when that deadline has passed.
    fn overdue(&self, limits: &ServerLimits, now: Instant) -> Option<(&'static str, Instant)> {
        Self::deadline_of(self.phase(), limits).filter(|(_, deadline)| *deadline <= now)
    }

    fn deadline_of(phase: Phase, limits: &ServerLimits) -> Option<(&'static str, Instant)> {
        match phase {
            Phase::Waiting {
                since,
                served: false,
            } => Some(("first request", since + limits.header_timeout)),
            Phase::Waiting {
                since,
                served: true,
            } => Some(("keep-alive idle", since + limits.idle_timeout)),
            Phase::ReadingHead { since } => Some(("request head", since + limits.header_timeout)),
            Phase::ReadingBody { since } => Some(("request body", since + limits.body_timeout)),
            Phase::Answering => None,
        }
    }
}

/// The socket, telling the connection's [`Activity`] when bytes arrive.
#[derive(Debug)]
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.bytes_read(Instant::now());
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// The service, telling the connection's [`Activity`] when a request starts and ends.
#[derive(Debug)]
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
    peer: std::net::SocketAddr,
}

/// The address of the client at the other end of the connection, in every request's
/// extensions (the console counts failed sign-ins by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub std::net::SocketAddr);

impl<S> Service<Request<Incoming>> for Tracked<S>
where
    S: Service<Request<RequestBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let body_complete = request.body().is_end_stream();
        self.activity.request_started(body_complete, Instant::now());
        let finished = RequestFinished(Arc::clone(&self.activity));
        let mut request = request.map(|body| RequestBody {
            inner: body,
            activity: (!body_complete).then(|| Arc::clone(&self.activity)),
        });
        request.extensions_mut().insert(PeerAddr(self.peer));
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            drop(finished);
            answer
        })
    }
}

/// Marks the request answered when dropped: when the answer is ready, or when the
/// connection goes away first.
#[derive(Debug)]
struct RequestFinished(Arc<Activity>);

impl Drop for RequestFinished {
    fn drop(&mut self) {
        self.0.request_finished(Instant::now());
    }
}

/// A request's body. It tells the connection's watch when it is complete (or abandoned),
/// which ends the body deadline.
#[derive(Debug)]
pub struct RequestBody {
    inner: Incoming,
    /// Until the body is complete.
    activity: Option<Arc<Activity>>,
}

impl RequestBody {
    fn finish(&mut self) {
        if let Some(activity) = self.activity.take() {
            activity.body_finished();
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        let ended = match &polled {
            Poll::Ready(None | Some(Err(_))) => true,
            Poll::Ready(Some(Ok(_))) => this.inner.is_end_stream(),
            Poll::Pending => false,
        };
        if ended {
            this.finish();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ServerLimits {
        ServerLimits {
            header_timeout: Duration::from_secs(1),
            body_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(3),
            max_connections: 1,
        }
    }

    #[test]
    fn each_phase_has_its_own_deadline() {
        let limits = limits();
        let start = Instant::now();
        let at = |millis| start + Duration::from_millis(millis);
        let activity = Activity::new(start);
        assert_eq!(
            activity.deadline(&limits),
            Some(start + limits.header_timeout)
        );
        // The first byte of a head starts that head's own deadline; later bytes of the same
        // head do not extend it.
        activity.bytes_read(at(500));
        assert_eq!(
            activity.deadline(&limits),
            Some(at(500) + limits.header_timeout)
        );
        activity.bytes_read(at(800));
        assert_eq!(
            activity.deadline(&limits),
            Some(at(500) + limits.header_timeout)
        );
        assert_eq!(
            activity.overdue(&limits, at(1500)),
            Some(("request head", at(1500)))
        );

        activity.request_started(false, at(900));
        assert_eq!(
            activity.deadline(&limits),
            Some(at(900) + limits.body_timeout)
        );
        // Body bytes do not restart anything.
        activity.bytes_read(at(1000));
        assert_eq!(
            activity.deadline(&limits),
            Some(at(900) + limits.body_timeout)
        );
        activity.body_finished();
        assert_eq!(activity.deadline(&limits), None);
        activity.request_finished(at(5000));
        assert_eq!(
            activity.deadline(&limits),
            Some(at(5000) + limits.idle_timeout)
        );
        assert_eq!(activity.overdue(&limits, at(7999)), None);
        assert_eq!(
            activity.overdue(&limits, at(8000)),
            Some(("keep-alive idle", at(8000)))
        );
    }

    #[test]
    fn a_request_without_a_body_is_answered_without_a_deadline() {
        let limits = limits();
        let start = Instant::now();
        let activity = Activity::new(start);
        activity.bytes_read(start);
        activity.request_started(true, start);
        assert_eq!(activity.deadline(&limits), None);
        // A body finishing late (dropped after the answer) changes nothing.
        activity.request_finished(start);
        activity.body_finished();
        assert_eq!(
            activity.deadline(&limits),
            Some(start + limits.idle_timeout)
        );
    }
}
