//! Who a client is, for limits that count per client: an IPv4 address, or an IPv6
//! address's /64. The server's connection caps and the console's sign-in limits both count
//! by it, so that an IPv6 client cannot draw a fresh allowance for every address of its
//! network.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The client a connection counts against: an IPv4 address, or the /64 network of an IPv6
/// address (a single host is usually given a whole /64, so keying on the full address
/// would give it 2^64 allowances). An IPv4 address written as IPv6 (`::ffff:a.b.c.d`)
/// counts as that IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientKey {
    /// An IPv4 client.
    V4(Ipv4Addr),
    /// An IPv6 client's /64: its address's first 64 bits.
    V6Network(u64),
}

impl ClientKey {
    /// The key of a client at `address`.
    pub fn of(address: IpAddr) -> Self {
        match address {
            IpAddr::V4(v4) => ClientKey::V4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => ClientKey::V4(v4),
                None => ClientKey::V6Network((v6.to_bits() >> 64) as u64),
            },
        }
    }
}

impl std::fmt::Display for ClientKey {
    /// `192.0.2.7`, or `2001:db8:1:2::/64`: also valid PostgreSQL `inet` text.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientKey::V4(v4) => write!(f, "{v4}"),
            ClientKey::V6Network(network) => {
                let address = Ipv6Addr::from_bits(u128::from(*network) << 64);
                write!(f, "{address}/64")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(address: &str) -> ClientKey {
        ClientKey::of(address.parse().unwrap())
    }

    #[test]
    fn ipv6_clients_are_one_client_per_64() {
        assert_eq!(
            key("2001:db8:1:2::1"),
            key("2001:db8:1:2:ffff:ffff:ffff:ffff")
        );
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::ffff:192.0.2.7"), key("192.0.2.7"));
        assert_ne!(key("192.0.2.7"), key("192.0.2.8"));
        assert_eq!(key("2001:db8:1:2::1").to_string(), "2001:db8:1:2::/64");
        assert_eq!(key("::ffff:192.0.2.7").to_string(), "192.0.2.7");
    }
}
