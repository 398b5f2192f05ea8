//! What one connection is doing, as its deadlines see it: the phase its socket, its
//! service and its request body report, and the wrappers that report it.

use super::ServerLimits;
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::service::Service;
use hyper::Request;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

/// What a connection is doing, as far as its deadlines are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
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
pub(super) struct Activity {
    phase: Mutex<Phase>,
    pub(super) changed: Notify,
    /// Chosen by the accept loop to make room for a new connection.
    making_room: AtomicBool,
}

impl Activity {
    pub(super) fn new(now: Instant) -> Self {
        Activity {
            phase: Mutex::new(Phase::Waiting {
                since: now,
                served: false,
            }),
            changed: Notify::new(),
            making_room: AtomicBool::new(false),
        }
    }

    /// Since when the connection has been waiting for a request, if it is.
    pub(super) fn idle_since(&self) -> Option<Instant> {
        match self.phase() {
            Phase::Waiting { since, .. } => Some(since),
            _ => None,
        }
    }

    pub(super) fn make_room(&self) {
        self.making_room.store(true, Ordering::Release);
        self.changed.notify_one();
    }

    pub(super) fn asked_to_make_room(&self) -> bool {
        self.making_room.load(Ordering::Acquire)
    }

    pub(super) fn update(&self, change: impl FnOnce(Phase) -> Phase) {
        let mut phase = self.phase.lock().unwrap_or_else(PoisonError::into_inner);
        let next = change(*phase);
        if next != *phase {
            *phase = next;
            drop(phase);
            self.changed.notify_one();
        }
    }

    pub(super) fn phase(&self) -> Phase {
        *self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes arrived: while waiting, they start a request head.
    pub(super) fn bytes_read(&self, now: Instant) {
        self.update(|phase| match phase {
            Phase::Waiting { .. } => Phase::ReadingHead { since: now },
            other => other,
        });
    }

    pub(super) fn request_started(&self, body_complete: bool, now: Instant) {
        self.update(|_| {
            if body_complete {
                Phase::Answering
            } else {
                Phase::ReadingBody { since: now }
            }
        });
    }

    pub(super) fn body_finished(&self) {
        self.update(|phase| match phase {
            Phase::ReadingBody { .. } => Phase::Answering,
            other => other,
        });
    }

    pub(super) fn request_finished(&self, now: Instant) {
        self.update(|_| Phase::Waiting {
            since: now,
            served: true,
        });
    }

    pub(super) fn deadline(&self, limits: &ServerLimits) -> Option<Instant> {
        Self::deadline_of(self.phase(), limits).map(|(_, deadline)| deadline)
    }

    /// The phase's name and deadline when that deadline has passed.
    pub(super) fn overdue(
        &self,
        limits: &ServerLimits,
        now: Instant,
    ) -> Option<(&'static str, Instant)> {
        Self::deadline_of(self.phase(), limits).filter(|(_, deadline)| *deadline <= now)
    }

    pub(super) fn deadline_of(
        phase: Phase,
        limits: &ServerLimits,
    ) -> Option<(&'static str, Instant)> {
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
pub(super) struct Watched {
    pub(super) stream: TcpStream,
    pub(super) activity: Arc<Activity>,
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
pub(super) struct Tracked<S> {
    pub(super) inner: S,
    pub(super) activity: Arc<Activity>,
    pub(super) peer: SocketAddr,
}

/// The address of the client at the other end of the connection, in every request's
/// extensions (the console counts failed sign-ins by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

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
pub(super) struct RequestFinished(Arc<Activity>);

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
    pub(super) fn finish(&mut self) {
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
