//! An email destination's SMTP relay ([`SmtpRelay`]): a host and a port, stored in
//! columns of their own (`destinations.smtp_host`, `smtp_port`) and shown to operators as
//! `smtp://host:port`.

use std::fmt;

/// Where an email destination's messages are handed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmtpRelay {
    /// The relay's name or address. An address is parsed in every spelling a URL accepts
    /// (`127.1`, `0x7f000001`, `[::ffff:127.0.0.1]`), so the egress guard judges the
    /// address meant, not the text.
    pub host: url::Host<String>,
    /// Its TCP port.
    pub port: u16,
}

/// A relay host that is neither a host name nor an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a host name or address")]
pub struct BadRelayHost(pub String);

impl SmtpRelay {
    /// The relay at `host` and `port`: `host` a name, an IPv4 address, or an IPv6 address
    /// with or without its brackets; surrounding spaces are ignored.
    pub fn new(host: &str, port: u16) -> Result<SmtpRelay, BadRelayHost> {
        let text = host.trim();
        let bracketed = if text.contains(':') && !text.starts_with('[') {
            format!("[{text}]")
        } else {
            text.to_owned()
        };
        let parsed = url::Host::parse(&bracketed).map_err(|_| BadRelayHost(text.to_owned()))?;
        Ok(SmtpRelay { host: parsed, port })
    }

    /// The host as stored (`smtp_host`): the name, or the address (IPv6 without brackets).
    /// [`SmtpRelay::new`] reads it back.
    pub fn stored_host(&self) -> String {
        match &self.host {
            url::Host::Ipv6(ip) => ip.to_string(),
            other => other.to_string(),
        }
    }
}

/// The relay listening at `addr`.
impl From<std::net::SocketAddr> for SmtpRelay {
    fn from(addr: std::net::SocketAddr) -> Self {
        let host = match addr.ip() {
            std::net::IpAddr::V4(ip) => url::Host::Ipv4(ip),
            std::net::IpAddr::V6(ip) => url::Host::Ipv6(ip),
        };
        SmtpRelay {
            host,
            port: addr.port(),
        }
    }
}

/// `smtp://host:port`, as listings show the relay (an IPv6 address in brackets).
impl fmt::Display for SmtpRelay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "smtp://{}:{}", self.host, self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses_read_back_from_their_stored_form() {
        for (given, stored, shown) in [
            (
                "relay.example.org",
                "relay.example.org",
                "smtp://relay.example.org:25",
            ),
            (" 127.0.0.1 ", "127.0.0.1", "smtp://127.0.0.1:25"),
            ("127.1", "127.0.0.1", "smtp://127.0.0.1:25"),
            ("::1", "::1", "smtp://[::1]:25"),
            ("[::1]", "::1", "smtp://[::1]:25"),
        ] {
            let relay = SmtpRelay::new(given, 25).unwrap();
            assert_eq!(relay.stored_host(), stored, "{given}");
            assert_eq!(relay.to_string(), shown, "{given}");
            assert_eq!(SmtpRelay::new(&relay.stored_host(), 25), Ok(relay));
        }
    }

    #[test]
    fn a_socket_address_is_its_relay() {
        let relay = SmtpRelay::from("[::1]:2525".parse::<std::net::SocketAddr>().unwrap());
        assert_eq!(relay, SmtpRelay::new("::1", 2525).unwrap());
    }

    #[test]
    fn what_is_no_host_is_refused() {
        for bad in [
            "",
            " ",
            "a b",
            "relay.example/x",
            "user@relay.example",
            "[::1",
        ] {
            let err = SmtpRelay::new(bad, 25).unwrap_err();
            assert!(
                err.to_string().contains("not a host name"),
                "{bad:?}: {err}"
            );
        }
    }
}
