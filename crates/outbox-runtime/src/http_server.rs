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
//! A connection past its deadline is closed without an answer.
//!
//! Room is shared the way nginx shares it when its connections run out: idle connections
//! (waiting for a first request, or kept alive between requests) are the ones given up.
//! At most [`ServerLimits::max_connections`] connections are open at once, and at most
//! [`ServerLimits::max_connections_per_client`] from one client (an IPv4 address or an
//! IPv6 /64, see [`ClientKey`]). A connection that would pass either cap closes the
//! longest-idle connection that counts against it (the client's own, for the client's
//! cap) and takes its place; only when every such connection is busy reading or answering
//! a request is the new one closed as soon as it is accepted, rather than queued. So idle
//! connections, however many and however often they re-request just inside the idle
//! timeout, cannot keep a newcomer out; and one client cannot hold more than its share.
//! A connection chosen to make room is shut down gracefully: a request that reached it in
//! that instant is still answered.
//!
//! When the shutdown future resolves, no connection is accepted any more, idle ones close,
//! and the requests in progress are answered before [`serve`] returns.
//!
//! The watch is done here rather than with hyper's header-read timeout alone because
//! hyper counts that timeout from the end of the previous response, which would close
//! healthy keep-alive connections as soon as they sit idle for the (short) header timeout.
//! hyper's timer is still installed, as a backstop at `idle_timeout + header_timeout`.
//!
//! Layout: this file holds the accept loop and the watch over one connection; `room` holds
//! the table of open connections, the caps and the choice of whom to close for room;
//! `activity` holds a connection's phase and the socket, service and body wrappers that
//! report it.

mod activity;
mod room;

use activity::{Tracked, Watched};
use hyper::body::Body;
use hyper::server::conn::http1;
use hyper::service::Service;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use room::{Crowding, Place, Registry};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

pub use activity::{PeerAddr, RequestBody};
pub use outbox_core::client_key::ClientKey;

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
    /// Most connections open at once. A connection past it takes the place of the
    /// longest-idle one, or is closed as soon as it is accepted when none is idle.
    pub max_connections: usize,
    /// Most connections open at once from one client ([`ClientKey`]): past it, a new
    /// connection takes the place of the client's own longest-idle one, or is closed.
    /// Behind a reverse proxy every connection comes from the proxy: set it to
    /// `max_connections` there, and limit clients at the proxy.
    pub max_connections_per_client: usize,
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
    /// Default [`ServerLimits::max_connections_per_client`]: an eighth of the total, so
    /// that it takes eight clients to fill the server even before idle ones make room.
    pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 64;
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            header_timeout: Self::DEFAULT_HEADER_TIMEOUT,
            body_timeout: Self::DEFAULT_BODY_TIMEOUT,
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            max_connections_per_client: Self::DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
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
    let registry = Arc::new(Registry::default());
    let (stop, stopped) = watch::channel(());
    let mut connections = JoinSet::new();
    let mut crowding = Crowding::default();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let client = ClientKey::of(peer.ip());
                    match registry.admit(client, &limits, Instant::now()) {
                        Ok(admitted) => {
                            if admitted.made_room {
                                crowding.made_room();
                            }
                            connections.spawn(connection(
                                stream,
                                peer,
                                limits,
                                service.clone(),
                                stopped.clone(),
                                admitted.place,
                            ));
                        }
                        // Dropping the stream closes it: a client past the cap learns at
                        // once instead of waiting in a queue that a slow client could fill.
                        Err(cap) => crowding.refused(cap),
                    }
                    crowding.report(&limits);
                }
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

/// Serves one connection, closing it when it overstays a deadline (see the module doc).
async fn connection<S, B>(
    stream: TcpStream,
    peer: SocketAddr,
    limits: ServerLimits,
    service: S,
    mut stopped: watch::Receiver<()>,
    place: Place,
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
    let activity = Arc::clone(&place.activity);
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
        if activity.asked_to_make_room() && !stopping {
            // Idle when chosen: hyper closes it at once, or answers the request that
            // arrived in that instant first.
            tracing::debug!(%peer, "closing an idle connection to make room for a new one");
            stopping = true;
            conn.as_mut().graceful_shutdown();
        }
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

#[cfg(test)]
mod tests {
    use super::activity::*;
    use super::room::*;
    use super::*;

    fn limits() -> ServerLimits {
        ServerLimits {
            header_timeout: Duration::from_secs(1),
            body_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(3),
            max_connections: 1,
            max_connections_per_client: 1,
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

    fn key(address: &str) -> ClientKey {
        ClientKey::of(address.parse().unwrap())
    }

    fn caps(total: usize, per_client: usize) -> ServerLimits {
        ServerLimits {
            max_connections: total,
            max_connections_per_client: per_client,
            ..limits()
        }
    }

    fn counted(registry: &Registry) -> (usize, usize) {
        let table = registry.table.lock().unwrap();
        (table.counted, table.open.len())
    }

    #[test]
    fn at_the_cap_the_longest_idle_connection_makes_room_and_a_busy_one_never_does() {
        let registry = Arc::new(Registry::default());
        let limits = caps(3, 3);
        let start = Instant::now();
        let at = |millis| start + Duration::from_millis(millis);
        let a = registry.admit(key("192.0.2.1"), &limits, at(0)).unwrap();
        let b = registry.admit(key("192.0.2.2"), &limits, at(0)).unwrap();
        let c = registry.admit(key("192.0.2.3"), &limits, at(0)).unwrap();
        assert!(!a.made_room && !b.made_room && !c.made_room);
        // a is answering; b was served and went idle at 200 ms, c at 100 ms.
        a.place.activity.request_started(true, at(50));
        b.place.activity.request_finished(at(200));
        c.place.activity.request_finished(at(100));

        let d = registry.admit(key("192.0.2.4"), &limits, at(300)).unwrap();
        assert!(d.made_room);
        assert!(c.place.activity.asked_to_make_room(), "c was idle longest");
        assert!(!b.place.activity.asked_to_make_room());
        // c still holds its socket until it ends, but no longer counts.
        assert_eq!(counted(&registry), (3, 4));
        drop(c);
        assert_eq!(counted(&registry), (3, 3));

        // b goes next, then nobody is idle: a newcomer is refused.
        d.place.activity.request_started(false, at(300));
        let e = registry.admit(key("192.0.2.5"), &limits, at(400)).unwrap();
        assert!(b.place.activity.asked_to_make_room());
        e.place.activity.bytes_read(at(400));
        assert_eq!(
            registry
                .admit(key("192.0.2.6"), &limits, at(500))
                .unwrap_err(),
            Cap::Server
        );
        assert!(!a.place.activity.asked_to_make_room());
    }

    #[test]
    fn a_client_at_its_cap_gives_up_its_own_idle_connection_not_anothers() {
        let registry = Arc::new(Registry::default());
        let limits = caps(10, 2);
        let start = Instant::now();
        let other = registry.admit(key("192.0.2.9"), &limits, start).unwrap();
        let first = registry.admit(key("192.0.2.1"), &limits, start).unwrap();
        let second = registry
            .admit(key("192.0.2.1"), &limits, start + Duration::from_millis(10))
            .unwrap();
        let third = registry
            .admit(key("192.0.2.1"), &limits, start + Duration::from_millis(20))
            .unwrap();
        assert!(third.made_room);
        assert!(first.place.activity.asked_to_make_room());
        assert!(!other.place.activity.asked_to_make_room());
        assert!(!second.place.activity.asked_to_make_room());
        // With the client's connections all busy, its next one is refused while the
        // server has room.
        second.place.activity.bytes_read(start);
        third.place.activity.bytes_read(start);
        assert_eq!(
            registry
                .admit(key("192.0.2.1"), &limits, start)
                .unwrap_err(),
            Cap::Client
        );
        assert!(registry.admit(key("192.0.2.2"), &limits, start).is_ok());
    }
}
