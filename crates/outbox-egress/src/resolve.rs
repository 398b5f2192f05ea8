//! Name resolution under the guard: one lookup, every address vetted, and only those
//! addresses handed to the connector.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::Name;

use crate::{with_port, Guard, ResolveError};

/// Resolves a host name to its addresses. The system's resolver in production; tests
/// inject names with chosen addresses.
pub trait Lookup: Send + Sync + std::fmt::Debug {
    /// The addresses of `name`.
    fn lookup<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;
}

/// The system's resolver (`getaddrinfo`, so `/etc/hosts` counts), as reqwest's default.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((name, 0)).await?;
            let mut ips: Vec<IpAddr> = addrs.map(|addr| addr.ip()).collect();
            ips.dedup();
            Ok(ips)
        })
    }
}

/// The resolver hook of both clients (reqwest's for fetches, hyper's for deliveries): the
/// connector gets only addresses the guard accepted.
#[derive(Clone, Debug)]
pub(crate) struct GuardedResolver(pub(crate) Guard);

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.0.clone();
        Box::pin(async move {
            match guard.resolve(name.as_str()).await {
                Ok(addrs) => Ok(Box::new(with_port(addrs).into_iter()) as reqwest::dns::Addrs),
                Err(ResolveError::Refused(refused)) => Err(Box::new(refused) as _),
                Err(ResolveError::Lookup(err)) => Err(Box::new(err) as _),
            }
        })
    }
}

/// What a resolution fails with, for the connector: the guard's refusal (found again
/// with [`crate::refusal_of`]) or the resolver's error.
type ResolveFailure = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Name> for GuardedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = ResolveFailure;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ResolveFailure>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ResolveFailure>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let guard = self.0.clone();
        Box::pin(async move {
            match guard.resolve(name.as_str()).await {
                Ok(addrs) => Ok(with_port(addrs).into_iter()),
                Err(ResolveError::Refused(refused)) => Err(Box::new(refused) as _),
                Err(ResolveError::Lookup(err)) => Err(Box::new(err) as _),
            }
        })
    }
}
