//! The egress guard: every HTTP fetch the outbox makes (webhook sends, lookups by key, the
//! news poller) and every URL an operator sets goes through one check, so that a tenant's
//! URL cannot reach the machine itself, the private network or a cloud metadata service.
//!
//! Layout:
//! - `address`: which IP addresses are blocked and why ([`classify`], pure, unit-tested).
//! - [`AllowList`]: the ranges an operator opened on purpose (`OUTBOX_ALLOW_PRIVATE`).
//! - [`Guard`]: the check for a URL's host ([`Guard::check_url`] for IP literals,
//!   [`Guard::vet_url`] resolving names too) and the HTTP client built on it
//!   ([`Guard::client_builder`]).
//! - `resolve`: the DNS resolver the client uses: it resolves once, refuses the name when
//!   ANY of its addresses is blocked, and hands the connector only the vetted addresses,
//!   so a second resolution (DNS rebinding) never happens.
//! - [`DeliveryClient`] (`client`): the lean HTTP/1.1 client deliveries use, on the same
//!   resolver.
//! - [`tls`]: whom a TLS connection to a mail relay trusts (the public roots, or the
//!   destination's own CA) and the name its certificate must carry.
//!
//! A refusal is a [`Refused`] error; code that gets a `reqwest::Error` or a
//! [`RequestError`] finds it in the error's source chain with [`refusal_of`].

mod address;
mod client;
mod resolve;
pub mod tls;

pub use address::{classify, Blocked, Reason};
pub use client::{DeliveryClient, RequestBody, RequestError};
pub use resolve::{Lookup, SystemLookup};

use ipnet::IpNet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// The environment variable (and, on the binaries, `--allow-private`) naming the ranges
/// opened on purpose.
pub const ALLOW_PRIVATE_ENV: &str = "OUTBOX_ALLOW_PRIVATE";

/// Ranges opened on purpose: an address inside one is allowed whatever its kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList(Vec<IpNet>);

/// A bad `--allow-private` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a CIDR range (like 127.0.0.0/8 or ::1/128)")]
pub struct BadRange(String);

impl AllowList {
    /// Parses `CIDR,CIDR,...` (empty: nothing opened). A bare address is its own /32 or /128.
    pub fn parse(text: &str) -> Result<Self, BadRange> {
        text.split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(|part| {
                part.parse::<IpNet>()
                    .or_else(|_| part.parse::<IpAddr>().map(IpNet::from))
                    .map(|net| net.trunc())
                    .map_err(|_| BadRange(part.to_owned()))
            })
            .collect::<Result<_, _>>()
            .map(AllowList)
    }

    /// Whether `ip` lies in an opened range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The ranges, for logs (`127.0.0.0/8,10.0.0.0/8`).
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        parts.join(",")
    }

    /// Whether nothing is opened.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A destination the guard refuses: a configuration error, never a transport failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("destination address {addr} is not allowed: {why}")]
pub struct Refused {
    /// The address refused (one of the name's addresses).
    pub addr: IpAddr,
    /// What kind of address it is.
    pub why: Blocked,
}

/// Why a URL cannot be fetched at all.
#[derive(Debug, thiserror::Error)]
pub enum UrlError {
    /// Its host, or one of the addresses its name resolves to, is blocked.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// Not an http(s) URL with a host.
    #[error("not an http:// or https:// URL with a host")]
    NotHttp,
    /// The name does not resolve (from here, now).
    #[error("`{host}` does not resolve: {source}")]
    Unresolved {
        /// The name.
        host: String,
        /// The resolver's answer.
        source: std::io::Error,
    },
}

/// The egress check, shared by every client that fetches.
#[derive(Debug, Clone)]
pub struct Guard {
    allow: Arc<AllowList>,
    lookup: Arc<dyn Lookup>,
}

impl Default for Guard {
    fn default() -> Self {
        Guard::new(AllowList::default())
    }
}

impl Guard {
    /// A guard that opens `allow` and resolves names with the system's resolver.
    pub fn new(allow: AllowList) -> Self {
        Guard {
            allow: Arc::new(allow),
            lookup: Arc::new(SystemLookup),
        }
    }

    /// The same guard resolving names with `lookup` (for tests: a name with chosen
    /// addresses).
    pub fn with_lookup(mut self, lookup: Arc<dyn Lookup>) -> Self {
        self.lookup = lookup;
        self
    }

    /// The ranges this guard opens.
    pub fn allowed(&self) -> &AllowList {
        &self.allow
    }

    /// Refuses a blocked address unless the allow-list opens it.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), Refused> {
        if self.allow.contains(ip) {
            return Ok(());
        }
        match classify(ip) {
            Some(why) => Err(Refused { addr: ip, why }),
            None => Ok(()),
        }
    }

    /// Refuses the set if any address in it is refused: a name with one public and one
    /// private address could be made to connect to the private one.
    pub fn check_all(&self, addrs: &[IpAddr]) -> Result<(), Refused> {
        addrs.iter().try_for_each(|ip| self.check_ip(*ip))
    }

    /// Checks a URL's host when it is an IP literal, in any spelling the URL parser
    /// accepts (`2130706433`, `0x7f000001`, `127.1`, `[::ffff:127.0.0.1]` all parse to
    /// the address they mean). A literal never reaches the resolver, so this check must run
    /// before every request; names are checked by the client's resolver.
    pub fn check_url(&self, url: &url::Url) -> Result<(), UrlError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(UrlError::NotHttp);
        }
        match url.host() {
            Some(host) => Ok(self.check_literal(&host)?),
            None => Err(UrlError::NotHttp),
        }
    }

    /// Refuses `host` when it is a blocked address; a name passes (its addresses are
    /// checked when it is resolved).
    fn check_literal<S: AsRef<str>>(&self, host: &url::Host<S>) -> Result<(), Refused> {
        match host {
            url::Host::Ipv4(ip) => self.check_ip(IpAddr::V4(*ip)),
            url::Host::Ipv6(ip) => self.check_ip(IpAddr::V6(*ip)),
            url::Host::Domain(_) => Ok(()),
        }
    }

    /// Checks a URL the way a fetch would: the literal, or every address its name resolves
    /// to. For checking a URL when it is set (`outboxctl destination add`).
    pub async fn vet_url(&self, url: &url::Url) -> Result<(), UrlError> {
        self.check_url(url)?;
        match url.host() {
            Some(host) => self.vet_host(&host).await,
            None => Err(UrlError::NotHttp),
        }
    }

    /// Checks a host the way a connection would: the literal, or every address its name
    /// resolves to. For checking a host that is no URL's when it is set (an email
    /// destination's relay).
    pub async fn vet_host<S: AsRef<str>>(&self, host: &url::Host<S>) -> Result<(), UrlError> {
        self.check_literal(host)?;
        if let url::Host::Domain(name) = host {
            let name = name.as_ref();
            self.resolve(name).await.map_err(|err| match err {
                ResolveError::Refused(refused) => UrlError::Refused(refused),
                ResolveError::Lookup(source) => UrlError::Unresolved {
                    host: name.to_owned(),
                    source,
                },
            })?;
        }
        Ok(())
    }

    /// Resolves `name` once and vets every address.
    async fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, ResolveError> {
        let addrs = self
            .lookup
            .lookup(name)
            .await
            .map_err(ResolveError::Lookup)?;
        if addrs.is_empty() {
            return Err(ResolveError::Lookup(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no addresses",
            )));
        }
        self.check_all(&addrs)?;
        Ok(addrs)
    }

    /// A client builder that connects only to vetted addresses, follows no redirects,
    /// sends no `Referer` and ignores proxy settings from the environment (a proxy would
    /// resolve the name itself, past the guard). Callers add their timeouts.
    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            .dns_resolver(Arc::new(resolve::GuardedResolver(self.clone())))
            .redirect(reqwest::redirect::Policy::none())
            .referer(false)
            .no_proxy()
            .pool_idle_timeout(Duration::from_secs(60))
    }
}

/// What a resolution can end in.
#[derive(Debug, thiserror::Error)]
enum ResolveError {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error(transparent)]
    Lookup(std::io::Error),
}

/// The guard's refusal inside an error's source chain (a `reqwest::Error` from a client
/// built by [`Guard::client_builder`], or a [`DeliveryClient`]'s [`RequestError`]), if
/// that is what it is.
pub fn refusal_of(err: &(dyn std::error::Error + 'static)) -> Option<Refused> {
    let mut current = Some(err);
    while let Some(err) = current {
        if let Some(refused) = err.downcast_ref::<Refused>() {
            return Some(refused.clone());
        }
        current = err.source();
    }
    None
}

/// The addresses a vetted name resolved to, with the port the connector will use.
fn with_port(addrs: Vec<IpAddr>) -> Vec<SocketAddr> {
    addrs.into_iter().map(|ip| SocketAddr::new(ip, 0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_lists_parse_cidrs_and_bare_addresses() {
        let allow = AllowList::parse("127.0.0.0/8, ::1, 10.1.2.3/16").unwrap();
        assert_eq!(allow.describe(), "127.0.0.0/8,::1/128,10.1.0.0/16");
        assert!(allow.contains("127.0.0.2".parse().unwrap()));
        assert!(allow.contains("10.1.200.1".parse().unwrap()));
        assert!(!allow.contains("10.2.0.1".parse().unwrap()));
        assert!(AllowList::parse("").unwrap().is_empty());
        assert_eq!(
            AllowList::parse("127.0.0.0/8,localhost")
                .unwrap_err()
                .to_string(),
            "`localhost` is not a CIDR range (like 127.0.0.0/8 or ::1/128)"
        );
    }

    #[test]
    fn the_allow_list_opens_exactly_its_ranges() {
        let guard = Guard::new(AllowList::parse("127.0.0.0/8").unwrap());
        assert!(guard.check_ip("127.0.0.1".parse().unwrap()).is_ok());
        // Not the other spellings' ranges, nor other private ranges.
        for other in ["::1", "::ffff:127.0.0.1", "10.0.0.1", "169.254.169.254"] {
            assert!(guard.check_ip(other.parse().unwrap()).is_err(), "{other}");
        }
        assert_eq!(
            Guard::default()
                .check_ip("127.0.0.1".parse().unwrap())
                .unwrap_err()
                .to_string(),
            "destination address 127.0.0.1 is not allowed: loopback"
        );
    }

    #[test]
    fn every_spelling_of_a_loopback_literal_is_refused() {
        let guard = Guard::default();
        for spelling in [
            "http://127.0.0.1/hook",
            "http://2130706433/hook",
            "http://0x7f000001/hook",
            "http://017700000001/hook",
            "http://127.1/hook",
            "http://0.0.0.0/hook",
            "http://[::1]/hook",
            "http://[::ffff:127.0.0.1]/hook",
            "https://169.254.169.254/latest/meta-data/",
        ] {
            let url = url::Url::parse(spelling).unwrap();
            assert!(
                matches!(guard.check_url(&url), Err(UrlError::Refused(_))),
                "{spelling}"
            );
        }
        let public = url::Url::parse("https://8.8.8.8/hook").unwrap();
        assert!(guard.check_url(&public).is_ok());
    }
}
