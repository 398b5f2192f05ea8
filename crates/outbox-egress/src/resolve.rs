//! Name resolution under the guard: one lookup, every address vetted, and only those
//! addresses handed to the connector.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;

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

/// reqwest's resolver hook: the connector gets only addresses the guard accepted.
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
