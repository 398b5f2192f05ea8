//! What the SMTP server takes from the sink's command line: the deadlines, the limits, the
//! credentials clients must give, the `.eml` folder, and the certificate (read here).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{SinkArgs, SmtpCredentials};

/// What the SMTP server needs from the sink's configuration.
#[derive(Debug, Clone)]
pub(crate) struct SmtpConfig {
    /// For each command line (and each reply to be read by the client).
    pub command_timeout: Duration,
    /// For a client silent between two messages.
    pub idle_timeout: Duration,
    /// For a message's data, from the `354`.
    pub data_timeout: Duration,
    pub max_connections: usize,
    pub max_message_bytes: usize,
    pub credentials: Option<SmtpCredentials>,
    pub eml_dir: Option<PathBuf>,
    /// The certificate offered over `STARTTLS` and on the implicit-TLS listener.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl SmtpConfig {
    pub(crate) fn from_args(args: &SinkArgs, tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        SmtpConfig {
            tls,
            command_timeout: args.header_timeout,
            idle_timeout: args.idle_timeout,
            data_timeout: args.body_timeout,
            max_connections: args.max_client_connections.get(),
            max_message_bytes: args.smtp_max_message_bytes.get(),
            credentials: args.smtp_auth.clone(),
            eml_dir: args.eml_dir.clone(),
        }
    }

    /// Beyond this much data the connection is closed rather than the rest read and
    /// discarded.
    pub(super) fn max_drained_bytes(&self) -> usize {
        self.max_message_bytes.saturating_mul(4)
    }
}

/// The TLS side of the SMTP listeners, from `--smtp-tls-cert` and `--smtp-tls-key`; `None`
/// without them. A file that cannot be read or used is an error: the sink does not start.
pub(crate) fn tls_config(args: &SinkArgs) -> io::Result<Option<Arc<rustls::ServerConfig>>> {
    let (Some(cert), Some(key)) = (&args.smtp_tls_cert, &args.smtp_tls_key) else {
        return Ok(None);
    };
    let refused = |what: &str, path: &PathBuf, err: String| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {}: {err}", path.display()),
        )
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|err| refused("--smtp-tls-cert", cert, err.to_string()))?;
    if chain.is_empty() {
        return Err(refused(
            "--smtp-tls-cert",
            cert,
            "holds no certificate".into(),
        ));
    }
    let key_der = PrivateKeyDer::from_pem_file(key)
        .map_err(|err| refused("--smtp-tls-key", key, err.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|config| {
            config
                .with_no_client_auth()
                .with_single_cert(chain, key_der)
        })
        .map_err(|err| refused("--smtp-tls-cert", cert, err.to_string()))?;
    Ok(Some(Arc::new(config)))
}
