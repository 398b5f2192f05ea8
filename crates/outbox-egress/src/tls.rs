//! Whom a TLS connection to a mail relay trusts (and, with the public roots, a webhook
//! destination: see `DeliveryClient`), and the name it checks.
//!
//! By default a relay's certificate must chain to the public web PKI (the Mozilla root
//! program, compiled in from `webpki-roots`, so a container without a CA bundle verifies
//! the same way). A destination may instead name its own CA (a relay on a private PKI):
//! then that CA alone is trusted for that relay, so one tenant's private CA never vouches
//! for anyone else's relay. There is no way to skip verification.
//!
//! The connection goes to an address the egress guard vetted, but the certificate is
//! checked against the relay's *name* as configured ([`server_name`]): connecting by
//! address never weakens what the certificate must prove.

use rustls::pki_types::pem::{PemObject, SectionKind};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use std::sync::Arc;

/// Largest CA file accepted (a few certificates fit in a few KiB).
pub const MAX_CA_PEM_BYTES: usize = 64 * 1024;

/// What a relay's certificate must chain to.
#[derive(Clone)]
pub enum RelayTrust {
    /// The public web PKI (Mozilla's root program).
    PublicRoots,
    /// Only the destination's own CA certificates.
    PrivateCa {
        /// The PEM text as stored (certificates only).
        pem: String,
        /// The certificates it holds.
        certs: Vec<CertificateDer<'static>>,
    },
}

impl std::fmt::Debug for RelayTrust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RelayTrust::PublicRoots => f.write_str("PublicRoots"),
            RelayTrust::PrivateCa { certs, .. } => write!(f, "PrivateCa({} certs)", certs.len()),
        }
    }
}

/// Why a CA file cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadCa {
    /// Larger than [`MAX_CA_PEM_BYTES`].
    #[error("is larger than {MAX_CA_PEM_BYTES} bytes")]
    TooLarge,
    /// Not PEM at all, or a section that does not decode.
    #[error("is not readable PEM: {0}")]
    Unreadable(String),
    /// A section other than a certificate (a private key above all) has no place here.
    #[error("holds a {0} section; it must hold CA certificates only")]
    NotACertificate(String),
    /// No `CERTIFICATE` section.
    #[error("holds no certificate")]
    NoCertificate,
    /// A certificate that cannot serve as a trust anchor.
    #[error("certificate {index} cannot be trusted as a CA: {reason}")]
    NotAnAnchor {
        /// Its position in the file, from 1.
        index: usize,
        /// Why.
        reason: String,
    },
}

impl RelayTrust {
    /// The trust a destination stored: its CA when it has one, else the public roots.
    pub fn from_stored(ca_pem: Option<&str>) -> Result<Self, BadCa> {
        match ca_pem {
            Some(pem) => Self::private_ca(pem),
            None => Ok(RelayTrust::PublicRoots),
        }
    }

    /// Trust in exactly the CA certificates of `pem`, checked: every section must be a
    /// certificate that can anchor a chain.
    pub fn private_ca(pem: &str) -> Result<Self, BadCa> {
        if pem.len() > MAX_CA_PEM_BYTES {
            return Err(BadCa::TooLarge);
        }
        let mut certs = Vec::new();
        for section in <(SectionKind, Vec<u8>)>::pem_slice_iter(pem.as_bytes()) {
            let (kind, der) = section.map_err(|err| BadCa::Unreadable(err.to_string()))?;
            if kind != SectionKind::Certificate {
                return Err(BadCa::NotACertificate(format!("{kind:?}")));
            }
            certs.push(CertificateDer::from(der));
        }
        if certs.is_empty() {
            return Err(BadCa::NoCertificate);
        }
        let mut store = RootCertStore::empty();
        for (i, cert) in certs.iter().enumerate() {
            store.add(cert.clone()).map_err(|err| BadCa::NotAnAnchor {
                index: i + 1,
                reason: err.to_string(),
            })?;
        }
        Ok(RelayTrust::PrivateCa {
            pem: pem.to_owned(),
            certs,
        })
    }

    /// The destination's own CA as PEM, when it has one.
    pub fn ca_pem(&self) -> Option<&str> {
        match self {
            RelayTrust::PublicRoots => None,
            RelayTrust::PrivateCa { pem, .. } => Some(pem),
        }
    }

    /// The anchors a certificate must chain to.
    pub fn root_store(&self) -> RootCertStore {
        match self {
            RelayTrust::PublicRoots => RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            },
            RelayTrust::PrivateCa { certs, .. } => {
                let mut store = RootCertStore::empty();
                // Checked when the trust was made.
                let _ = store.add_parsable_certificates(certs.iter().cloned());
                store
            }
        }
    }

    /// A TLS client configuration (TLS 1.2 and 1.3, ring) that verifies against this trust.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Ok(Arc::new(
            ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()?
                .with_root_certificates(self.root_store())
                .with_no_client_auth(),
        ))
    }
}

/// The name a relay's certificate must carry: its host name, or its address when the relay
/// is configured by address (then the certificate must list that address).
pub fn server_name(host: &url::Host<String>) -> Result<ServerName<'static>, String> {
    match host {
        url::Host::Domain(name) => ServerName::try_from(name.clone())
            .map_err(|_| format!("`{name}` is not a name a certificate can carry")),
        url::Host::Ipv4(ip) => Ok(ServerName::IpAddress(std::net::IpAddr::V4(*ip).into())),
        url::Host::Ipv6(ip) => Ok(ServerName::IpAddress(std::net::IpAddr::V6(*ip).into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_must_hold_certificates_only() {
        assert_eq!(
            RelayTrust::private_ca("").map(|_| ()),
            Err(BadCa::NoCertificate)
        );
        assert_eq!(
            RelayTrust::private_ca("hello").map(|_| ()),
            Err(BadCa::NoCertificate)
        );
        let key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        assert!(matches!(
            RelayTrust::private_ca(key),
            Err(BadCa::NotACertificate(_))
        ));
        let junk = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(matches!(
            RelayTrust::private_ca(junk),
            Err(BadCa::NotAnAnchor { index: 1, .. })
        ));
        assert_eq!(
            RelayTrust::private_ca(&"x".repeat(MAX_CA_PEM_BYTES + 1)).map(|_| ()),
            Err(BadCa::TooLarge)
        );
    }

    #[test]
    fn without_a_ca_the_public_roots_are_trusted() {
        let trust = RelayTrust::from_stored(None).expect("public roots");
        assert!(trust.ca_pem().is_none());
        assert!(trust.root_store().len() > 50);
        assert!(trust.client_config().is_ok());
    }

    #[test]
    fn the_name_checked_is_the_configured_host() {
        let name = server_name(&url::Host::Domain("relay.example.org".into())).expect("a name");
        assert_eq!(name.to_str(), "relay.example.org");
        let ip = server_name(&url::Host::Ipv4([127, 0, 0, 1].into())).expect("an address");
        assert!(matches!(ip, ServerName::IpAddress(_)));
    }
}
