//! Opening an SMTP session with a relay, up to the answer to `EHLO`: a TCP connection to
//! the address the egress guard vetted, then the transport security the destination
//! requires, each step with its own error class (`connect`, `tls`, `greeting`).
//!
//! - `none`: plain text, for a relay on a trusted network.
//! - `tls` (implicit TLS, usually port 465): the handshake comes first, before the relay
//!   says anything.
//! - `starttls`: the relay greets in plain text and must offer `STARTTLS`; the session is
//!   upgraded before anything else is said (AUTH, the envelope, the message). A relay that
//!   does not offer it, or a handshake that fails, ends the attempt as not sent: there is
//!   no fallback to plain text, which would let anyone on the path strip the offer.
//!
//! The certificate is checked against the relay's configured name (or address), not the
//! address connected to, and against the public roots or the destination's own CA
//! ([`outbox_egress::tls::RelayTrust`]).

use lettre::transport::smtp::client::{
    AsyncSmtpConnection, AsyncTokioStream, Certificate, CertificateStore, TlsParameters,
};
use lettre::transport::smtp::extension::{ClientId, Extension};
use outbox_core::SmtpTls;
use outbox_egress::tls::{server_name, RelayTrust};
use rustls::pki_types::ServerName;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::classify::{Exchange, SmtpPhase};

/// The transport security of a destination's relay.
#[derive(Debug)]
pub(crate) enum Security {
    /// Plain text.
    None,
    /// Upgraded with `STARTTLS`, which the relay must offer.
    StartTls(Verified),
    /// TLS from the first byte.
    Implicit(Verified),
}

/// How the relay's certificate is verified.
#[derive(Debug)]
pub(crate) struct Verified {
    /// The name the certificate must carry.
    name: ServerName<'static>,
    /// What it must chain to.
    trust: RelayTrust,
}

impl Security {
    /// The security a destination stored (its mode, with its CA if any), for its relay
    /// `host`. An error is a configuration error.
    pub(crate) fn of(
        mode: SmtpTls,
        ca_pem: Option<&str>,
        host: &url::Host<String>,
    ) -> Result<Security, String> {
        let verified = || -> Result<Verified, String> {
            Ok(Verified {
                name: server_name(host)?,
                trust: RelayTrust::from_stored(ca_pem)
                    .map_err(|err| format!("the destination's CA {err}"))?,
            })
        };
        match mode {
            SmtpTls::None => Ok(Security::None),
            SmtpTls::Starttls => Ok(Security::StartTls(verified()?)),
            SmtpTls::Tls => Ok(Security::Implicit(verified()?)),
        }
    }
}

/// Connects to `addr`, secures the session as `security` requires and reads the greeting
/// and the answer to `EHLO`, all before `deadline`. An error says which step failed and
/// that nothing was sent (or is a configuration error).
pub(crate) async fn open(
    deadline: tokio::time::Instant,
    addr: SocketAddr,
    security: &Security,
    hello: &ClientId,
) -> Result<AsyncSmtpConnection, Exchange> {
    let stream = or_not_sent(
        deadline,
        SmtpPhase::Connect,
        TcpStream::connect(addr),
        |err| format!("connecting to {addr}: {err}"),
        &format!("connecting to {addr} timed out"),
    )
    .await?;
    let transport = match security {
        Security::Implicit(verified) => implicit_tls(deadline, stream, verified).await?,
        Security::None | Security::StartTls(_) => Box::new(stream),
    };
    let mut conn = or_not_sent(
        deadline,
        SmtpPhase::Greeting,
        AsyncSmtpConnection::connect_with_transport(transport, hello),
        |err| format!("SMTP greeting: {err}"),
        "SMTP greeting timed out",
    )
    .await?;
    if let Security::StartTls(verified) = security {
        start_tls(deadline, &mut conn, verified, hello).await?;
    }
    Ok(conn)
}

/// The TLS handshake that comes first with implicit TLS, before the relay says anything.
async fn implicit_tls(
    deadline: tokio::time::Instant,
    stream: TcpStream,
    verified: &Verified,
) -> Result<Box<dyn AsyncTokioStream>, Exchange> {
    let config = verified
        .trust
        .client_config()
        .map_err(|err| Exchange::Unsendable(format!("the TLS settings cannot be built: {err}")))?;
    let connector = tokio_rustls::TlsConnector::from(config);
    let tls = or_not_sent(
        deadline,
        SmtpPhase::Tls,
        connector.connect(verified.name.clone(), stream),
        |err| format!("TLS handshake with {}: {err}", verified.name.to_str()),
        "the TLS handshake timed out",
    )
    .await?;
    Ok(Box::new(ImplicitTls(tls)))
}

/// Upgrades a plain-text session with `STARTTLS`, which the relay must offer: without
/// it, nothing is sent in plain text.
async fn start_tls(
    deadline: tokio::time::Instant,
    conn: &mut AsyncSmtpConnection,
    verified: &Verified,
    hello: &ClientId,
) -> Result<(), Exchange> {
    if !conn.server_info().supports_feature(Extension::StartTls) {
        // Polite, and its outcome changes nothing.
        let _ = within(deadline, conn.quit()).await;
        return Err(Exchange::SmtpNotSent {
            phase: SmtpPhase::Tls,
            why: "the relay does not offer STARTTLS, which this destination requires; nothing was sent in plain text".to_owned(),
        });
    }
    let parameters = verified
        .lettre_parameters()
        .map_err(|err| Exchange::Unsendable(format!("the TLS settings cannot be built: {err}")))?;
    or_not_sent(
        deadline,
        SmtpPhase::Tls,
        conn.starttls(parameters, hello),
        |err| format!("STARTTLS with {}: {err}", verified.name.to_str()),
        "STARTTLS timed out",
    )
    .await
}

/// One step before the message data, unless `deadline` passes first: its failure, or the
/// deadline passing, ends the attempt as not sent in `phase` (`failed` and `timed_out`
/// say why).
pub(crate) async fn or_not_sent<T, E>(
    deadline: tokio::time::Instant,
    phase: SmtpPhase,
    step: impl Future<Output = Result<T, E>>,
    failed: impl FnOnce(E) -> String,
    timed_out: &str,
) -> Result<T, Exchange> {
    match within(deadline, step).await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(err)) => Err(Exchange::SmtpNotSent {
            phase,
            why: failed(err),
        }),
        Err(()) => Err(Exchange::SmtpNotSent {
            phase,
            why: timed_out.to_owned(),
        }),
    }
}

impl Verified {
    /// The same verification, in the form lettre's `STARTTLS` takes.
    fn lettre_parameters(&self) -> Result<TlsParameters, lettre::transport::smtp::Error> {
        let builder = TlsParameters::builder(self.name.to_str().into_owned());
        let builder = match self.trust.ca_pem() {
            None => builder.certificate_store(CertificateStore::WebpkiRoots),
            Some(pem) => builder
                .certificate_store(CertificateStore::None)
                .add_root_certificate(Certificate::from_pem(pem.as_bytes())?),
        };
        builder.build_rustls()
    }
}

/// A TLS session to the relay, in the form lettre drives a session over.
#[derive(Debug)]
struct ImplicitTls(tokio_rustls::client::TlsStream<TcpStream>);

impl AsyncRead for ImplicitTls {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for ImplicitTls {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

impl AsyncTokioStream for ImplicitTls {
    fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.0.get_ref().0.peer_addr()
    }
}

/// `step`, unless `deadline` passes first.
pub(crate) async fn within<T>(
    deadline: tokio::time::Instant,
    step: impl Future<Output = T>,
) -> Result<T, ()> {
    tokio::time::timeout_at(deadline, step)
        .await
        .map_err(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_modes_and_readable_cas_are_accepted() {
        let host = url::Host::Domain("relay.example.org".to_owned());
        assert!(matches!(
            Security::of(SmtpTls::None, None, &host),
            Ok(Security::None)
        ));
        assert!(matches!(
            Security::of(SmtpTls::Starttls, None, &host),
            Ok(Security::StartTls(_))
        ));
        assert!(matches!(
            Security::of(SmtpTls::Tls, None, &host),
            Ok(Security::Implicit(_))
        ));
        // A mode that is none of these never reaches here: it is no `SmtpTls`.
        assert!("ssl".parse::<SmtpTls>().is_err());
        let refused = Security::of(SmtpTls::Tls, Some("not a certificate"), &host)
            .expect_err("a CA that is not one is a configuration error");
        assert!(refused.contains("CA"), "{refused}");
    }
}
