//! Which IP addresses are not on the public internet, and why. Pure functions, no I/O.
//!
//! An address is blocked when it is loopback, private, link-local, unique-local, shared
//! (carrier-grade NAT), multicast, unspecified, broadcast, documentation, benchmarking,
//! reserved or "this network", or when it is an IPv6 form that carries such an IPv4
//! address inside it (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo): a connection to
//! `::ffff:127.0.0.1` reaches 127.0.0.1.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is not a public one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16.
    Private,
    /// 169.254.0.0/16, fe80::/10.
    LinkLocal,
    /// fc00::/7.
    UniqueLocal,
    /// fec0::/10, deprecated but still routed by some stacks.
    SiteLocal,
    /// 100.64.0.0/10.
    SharedAddressSpace,
    /// 224.0.0.0/4, ff00::/8.
    Multicast,
    /// 0.0.0.0, ::.
    Unspecified,
    /// 255.255.255.255.
    Broadcast,
    /// 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32, 3fff::/20.
    Documentation,
    /// 198.18.0.0/15, 2001:2::/48.
    Benchmarking,
    /// 0.0.0.0/8 (other than 0.0.0.0 itself).
    ThisNetwork,
    /// 240.0.0.0/4, 192.0.0.0/24, IPv6 outside global unicast, 64:ff9b:1::/48, ...
    Reserved,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::Loopback => "loopback",
            Reason::Private => "private",
            Reason::LinkLocal => "link-local",
            Reason::UniqueLocal => "unique-local",
            Reason::SiteLocal => "site-local",
            Reason::SharedAddressSpace => "shared address space (carrier-grade NAT)",
            Reason::Multicast => "multicast",
            Reason::Unspecified => "unspecified",
            Reason::Broadcast => "broadcast",
            Reason::Documentation => "documentation",
            Reason::Benchmarking => "benchmarking",
            Reason::ThisNetwork => "\"this network\"",
            Reason::Reserved => "reserved",
        })
    }
}

/// A blocked address: why, and through which IPv4 address when an IPv6 form carries one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    /// The kind of address it is (or carries).
    pub reason: Reason,
    /// The embedded IPv4 address and the form that carries it, e.g. (127.0.0.1, "IPv4-mapped").
    pub via: Option<(Ipv4Addr, &'static str)>,
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.via {
            None => write!(f, "{}", self.reason),
            Some((v4, form)) => write!(f, "{} ({form} form of {v4})", self.reason),
        }
    }
}

/// Whether `ip` is blocked, and why; `None` for a public address.
pub fn classify(ip: IpAddr) -> Option<Blocked> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4).map(|reason| Blocked { reason, via: None }),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    u128::from(ip) & mask == u128::from(net) & mask
}

/// IPv4 special-purpose ranges (the IANA registry's non-global ones).
pub fn classify_v4(ip: Ipv4Addr) -> Option<Reason> {
    let ranges: [([u8; 4], u32, Reason); 17] = [
        ([0, 0, 0, 0], 32, Reason::Unspecified),
        ([255, 255, 255, 255], 32, Reason::Broadcast),
        ([0, 0, 0, 0], 8, Reason::ThisNetwork),
        ([10, 0, 0, 0], 8, Reason::Private),
        ([100, 64, 0, 0], 10, Reason::SharedAddressSpace),
        ([127, 0, 0, 0], 8, Reason::Loopback),
        ([169, 254, 0, 0], 16, Reason::LinkLocal),
        ([172, 16, 0, 0], 12, Reason::Private),
        ([192, 0, 0, 0], 24, Reason::Reserved),
        ([192, 0, 2, 0], 24, Reason::Documentation),
        ([192, 88, 99, 0], 24, Reason::Reserved),
        ([192, 168, 0, 0], 16, Reason::Private),
        ([198, 18, 0, 0], 15, Reason::Benchmarking),
        ([198, 51, 100, 0], 24, Reason::Documentation),
        ([203, 0, 113, 0], 24, Reason::Documentation),
        ([224, 0, 0, 0], 4, Reason::Multicast),
        ([240, 0, 0, 0], 4, Reason::Reserved),
    ];
    ranges
        .iter()
        .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
        .map(|(_, _, reason)| *reason)
}

/// IPv6: its own special ranges, then the forms that carry an IPv4 address, then anything
/// outside global unicast (2000::/3).
fn classify_v6(ip: Ipv6Addr) -> Option<Blocked> {
    let plain = |reason| Some(Blocked { reason, via: None });
    if ip.is_unspecified() {
        return plain(Reason::Unspecified);
    }
    if ip.is_loopback() {
        return plain(Reason::Loopback);
    }
    if let Some(decided) = classify_carrying_v4(ip) {
        return decided;
    }
    if let Some((_, _, reason)) = V6_RANGES
        .iter()
        .find(|(net, prefix, _)| in_v6(ip, *net, *prefix))
    {
        return plain(*reason);
    }
    // Only 2000::/3 is allocated for global unicast (64:ff9b::/96 was handled above).
    if !in_v6(ip, Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3) {
        return plain(Reason::Reserved);
    }
    None
}

/// The IPv6 forms that carry an IPv4 address, where the IPv4 address decides: `None` when
/// `ip` is none of them, else the decision.
fn classify_carrying_v4(ip: Ipv6Addr) -> Option<Option<Blocked>> {
    let bits = u128::from(ip);
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    let carried = |v4: Ipv4Addr, form: &'static str| {
        classify_v4(v4).map(|reason| Blocked {
            reason,
            via: Some((v4, form)),
        })
    };
    if in_v6(ip, Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96) {
        return Some(carried(low32, "IPv4-mapped"));
    }
    if in_v6(ip, Ipv6Addr::UNSPECIFIED, 96) {
        // IPv4-compatible (deprecated): nothing legitimate uses it any more.
        let reserved = Blocked {
            reason: Reason::Reserved,
            via: None,
        };
        return Some(carried(low32, "IPv4-compatible").or(Some(reserved)));
    }
    if in_v6(ip, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96) {
        return Some(carried(low32, "NAT64"));
    }
    if in_v6(ip, Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48) {
        // Local-use NAT64: by definition a site's own translator.
        return Some(Some(Blocked {
            reason: Reason::Reserved,
            via: None,
        }));
    }
    if in_v6(ip, Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16) {
        let v4 = Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32);
        return Some(carried(v4, "6to4"));
    }
    if in_v6(ip, Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32) {
        // Teredo: the server's address in bits 32..64, the client's (inverted) at the end.
        let server = Ipv4Addr::from(((bits >> 64) & 0xffff_ffff) as u32);
        let client = Ipv4Addr::from(!((bits & 0xffff_ffff) as u32));
        return Some(carried(server, "Teredo server").or_else(|| carried(client, "Teredo client")));
    }
    None
}

/// IPv6's own special ranges (checked after the forms that carry an IPv4 address).
const V6_RANGES: [(Ipv6Addr, u32, Reason); 7] = [
    (
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0),
        10,
        Reason::LinkLocal,
    ),
    (
        Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0),
        10,
        Reason::SiteLocal,
    ),
    (
        Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
        7,
        Reason::UniqueLocal,
    ),
    (
        Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0),
        8,
        Reason::Multicast,
    ),
    (
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
        32,
        Reason::Documentation,
    ),
    (
        Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0),
        20,
        Reason::Documentation,
    ),
    (
        Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0),
        48,
        Reason::Benchmarking,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn why(text: &str) -> Option<String> {
        classify(text.parse().expect("an address")).map(|b| b.to_string())
    }

    #[test]
    fn public_addresses_pass() {
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "198.20.0.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:0808:0808::1",
        ] {
            assert_eq!(why(public), None, "{public}");
        }
    }

    #[test]
    fn every_ipv4_special_range_is_blocked_with_its_name() {
        for (address, reason) in [
            ("127.0.0.1", "loopback"),
            ("127.255.255.254", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("100.64.0.1", "shared address space (carrier-grade NAT)"),
            (
                "100.127.255.255",
                "shared address space (carrier-grade NAT)",
            ),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "\"this network\""),
            ("255.255.255.255", "broadcast"),
            ("192.0.2.10", "documentation"),
            ("198.51.100.10", "documentation"),
            ("203.0.113.10", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.255", "benchmarking"),
            ("240.0.0.1", "reserved"),
            ("192.0.0.8", "reserved"),
        ] {
            assert_eq!(why(address).as_deref(), Some(reason), "{address}");
        }
    }

    #[test]
    fn every_ipv6_special_range_is_blocked_with_its_name() {
        for (address, reason) in [
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("fc00::1", "unique-local"),
            ("fd12:3456::1", "unique-local"),
            ("ff02::1", "multicast"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("2001:2::1", "benchmarking"),
            ("64:ff9b:1::a00:1", "reserved"),
            ("100::1", "reserved"),
            ("4000::1", "reserved"),
        ] {
            assert_eq!(why(address).as_deref(), Some(reason), "{address}");
        }
    }

    #[test]
    fn ipv6_forms_carrying_a_blocked_ipv4_address_are_blocked() {
        for (address, reason) in [
            (
                "::ffff:127.0.0.1",
                "loopback (IPv4-mapped form of 127.0.0.1)",
            ),
            ("::ffff:7f00:1", "loopback (IPv4-mapped form of 127.0.0.1)"),
            (
                "::ffff:169.254.169.254",
                "link-local (IPv4-mapped form of 169.254.169.254)",
            ),
            ("::ffff:10.0.0.1", "private (IPv4-mapped form of 10.0.0.1)"),
            (
                "::127.0.0.1",
                "loopback (IPv4-compatible form of 127.0.0.1)",
            ),
            ("::8.8.8.8", "reserved"),
            ("64:ff9b::127.0.0.1", "loopback (NAT64 form of 127.0.0.1)"),
            (
                "64:ff9b::a9fe:a9fe",
                "link-local (NAT64 form of 169.254.169.254)",
            ),
            ("2002:7f00:0001::1", "loopback (6to4 form of 127.0.0.1)"),
            ("2002:c0a8:0101::1", "private (6to4 form of 192.168.1.1)"),
            // Teredo: server 10.0.0.1; client 127.0.0.1 stored inverted.
            (
                "2001:0:a00:1::1",
                "private (Teredo server form of 10.0.0.1)",
            ),
            (
                "2001:0:808:808:0:0:80ff:fffe",
                "loopback (Teredo client form of 127.0.0.1)",
            ),
        ] {
            assert_eq!(why(address).as_deref(), Some(reason), "{address}");
        }
    }
}
