//! The command line of `sink`, and the parsers that refuse bad values before anything runs.

use clap::Parser;
use hyper::header::HeaderName;
use hyper::StatusCode;
use outbox_runtime::http_server::ServerLimits;
use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use crate::smtp_reply::SmtpReply;

/// Command line of `sink`. Every flag can also come from a `SINK_*` environment variable,
/// so the same image serves tests (flags) and compose files (environment).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "sink",
    version,
    about = "A notification endpoint you control: records, de-duplicates, answers lookups, injects faults."
)]
pub struct SinkArgs {
    /// Address to listen on.
    #[arg(long, env = "SINK_LISTEN", default_value = "127.0.0.1:9000")]
    pub listen: SocketAddr,

    /// Request header that carries the idempotency key.
    #[arg(
        long,
        env = "SINK_IDEMPOTENCY_HEADER",
        default_value = "Idempotency-Key",
        value_parser = parse_header_name
    )]
    pub idempotency_header: HeaderName,

    /// De-duplicate by key for this long (e.g. `24h`). Without it every request is
    /// applied, and a repeated key is an effective duplicate.
    #[arg(long, env = "SINK_RETENTION", value_parser = humantime::parse_duration)]
    pub retention: Option<Duration>,

    /// Answer `GET /requests/{key}` with the receipt of an applied key.
    #[arg(long, env = "SINK_LOOKUP", value_parser = clap::builder::FalseyValueParser::new())]
    pub lookup: bool,

    /// Probability, in [0, 1], of applying a delivery and then closing the connection
    /// without answering.
    #[arg(long, env = "SINK_DROP_RESPONSE_RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub drop_response_rate: f64,

    /// Probability, in [0, 1], of refusing a delivery with `--fail-status`.
    #[arg(long, env = "SINK_FAIL_RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub fail_rate: f64,

    /// Status of a refused delivery (200 to 599).
    #[arg(long, env = "SINK_FAIL_STATUS", default_value = "503", value_parser = parse_status)]
    pub fail_status: StatusCode,

    /// Wait this long (e.g. `2s`) before answering an applied or duplicate delivery.
    #[arg(long, env = "SINK_LATENCY", value_parser = humantime::parse_duration)]
    pub latency: Option<Duration>,

    /// Seed of the fault draws, for reproducible runs. Without it a random seed is chosen
    /// and logged.
    #[arg(long, env = "SINK_SEED")]
    pub seed: Option<u64>,

    /// Signing secret (`whsec_...`) to verify Standard Webhooks signatures with. Repeat the
    /// flag (or separate with commas in `SINK_SECRET`) to accept several while rotating.
    #[arg(
        long = "secret",
        env = "SINK_SECRET",
        value_parser = parse_secret,
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub secrets: Vec<SigningSecret>,

    /// With `--secret`: refuse a request whose `webhook-timestamp` is further than this
    /// from the sink's clock, in either direction (a replay, or a forged future date).
    #[arg(long, env = "SINK_TIMESTAMP_TOLERANCE", default_value = "5m", value_parser = parse_timeout)]
    pub timestamp_tolerance: Duration,

    /// Close a connection whose request head is not complete this long after the connection
    /// (or after the head's first byte).
    #[arg(long, env = "SINK_HEADER_TIMEOUT", default_value = "10s", value_parser = parse_timeout)]
    pub header_timeout: Duration,

    /// Close a connection whose request body is not complete this long after its head.
    #[arg(long, env = "SINK_BODY_TIMEOUT", default_value = "30s", value_parser = parse_timeout)]
    pub body_timeout: Duration,

    /// Close a keep-alive connection that sends no request for this long.
    #[arg(long, env = "SINK_IDLE_TIMEOUT", default_value = "75s", value_parser = parse_timeout)]
    pub idle_timeout: Duration,

    /// Most client connections open at once. A new one past it takes the place of the
    /// longest-idle connection, or is closed at once when none is idle. The SMTP listener
    /// has a cap of its own, of the same size.
    #[arg(long, env = "SINK_MAX_CLIENT_CONNECTIONS", default_value = "512")]
    pub max_client_connections: NonZeroUsize,

    /// Most HTTP connections open at once from one client address (an IPv6 client's /64);
    /// past it, the client's own longest-idle connection makes room. Default: no cap of its
    /// own (the --max-client-connections), since a sink's clients are a few dispatchers,
    /// each with many connections.
    #[arg(long, env = "SINK_MAX_CLIENT_CONNECTIONS_PER_ADDRESS")]
    pub max_client_connections_per_address: Option<NonZeroUsize>,

    /// Also accept mail over plain SMTP on this address. Each SMTP command line must
    /// arrive within `--header-timeout` (the first after the greeting too; between
    /// messages within `--idle-timeout`), a message's data within `--body-timeout`.
    #[arg(long, env = "SINK_SMTP_LISTEN")]
    pub smtp_listen: Option<SocketAddr>,

    /// Also accept mail over implicit TLS (SMTPS, usually port 465) on this address: the TLS
    /// handshake comes first. Needs `--smtp-tls-cert` and `--smtp-tls-key`.
    #[arg(long, env = "SINK_SMTPS_LISTEN", requires_all = ["smtp_tls_cert", "smtp_tls_key"])]
    pub smtps_listen: Option<SocketAddr>,

    /// PEM file of the certificate chain (leaf first) the SMTP listeners present. With it
    /// (and `--smtp-tls-key`) `--smtp-listen` offers `STARTTLS`.
    #[arg(
        long,
        env = "SINK_SMTP_TLS_CERT",
        value_name = "PEM",
        requires = "smtp_tls_key"
    )]
    pub smtp_tls_cert: Option<PathBuf>,

    /// PEM file of the private key of `--smtp-tls-cert`.
    #[arg(
        long,
        env = "SINK_SMTP_TLS_KEY",
        value_name = "PEM",
        requires = "smtp_tls_cert"
    )]
    pub smtp_tls_key: Option<PathBuf>,

    /// Write each message received over SMTP to this folder as a `.eml` file (created if
    /// missing), named by arrival time and queue id.
    #[arg(long, env = "SINK_EML_DIR")]
    pub eml_dir: Option<PathBuf>,

    /// Keep each delivery's body (as text) in its record, to check what a sender wrote
    /// (an email API's request, in tests or while setting one up). Off by default, so
    /// memory stays flat under load.
    #[arg(long, env = "SINK_KEEP_BODIES", value_parser = clap::builder::FalseyValueParser::new())]
    pub keep_bodies: bool,

    /// `USER:PASSWORD` that SMTP clients must authenticate with (AUTH PLAIN or LOGIN)
    /// before `MAIL FROM`. Without it AUTH is not offered and not required. Given as a
    /// flag it is visible to every user of the machine (`ps`): prefer `SINK_SMTP_AUTH` or
    /// `--smtp-auth-file`.
    #[arg(long, env = "SINK_SMTP_AUTH", value_parser = parse_credentials, hide_env_values = true, conflicts_with = "smtp_auth_file")]
    pub smtp_auth: Option<SmtpCredentials>,

    /// A file whose first line is the `USER:PASSWORD` of `--smtp-auth`.
    #[arg(long, env = "SINK_SMTP_AUTH_FILE", value_name = "PATH")]
    pub smtp_auth_file: Option<PathBuf>,

    /// Largest message accepted over SMTP, in bytes; a larger one is answered 552.
    #[arg(long, env = "SINK_SMTP_MAX_MESSAGE_BYTES", default_value = "10485760")]
    pub smtp_max_message_bytes: NonZeroUsize,

    /// Probability, in [0, 1], of recording a message and then closing the connection
    /// without answering its final dot.
    #[arg(long, env = "SINK_SMTP_DROP_RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub smtp_drop_rate: f64,

    /// Probability, in [0, 1], of refusing a message after its data with
    /// `--smtp-fail-reply`.
    #[arg(long, env = "SINK_SMTP_FAIL_RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub smtp_fail_rate: f64,

    /// Reply to a message refused by `--smtp-fail-rate`: a 4xx or 5xx code and its text.
    #[arg(
        long,
        env = "SINK_SMTP_FAIL_REPLY",
        default_value = "451 4.3.0 try later"
    )]
    pub smtp_fail_reply: SmtpReply,

    /// Wait this long (e.g. `2s`) before answering the final dot of an accepted message.
    #[arg(long, env = "SINK_SMTP_LATENCY", value_parser = humantime::parse_duration)]
    pub smtp_latency: Option<Duration>,
}

impl SinkArgs {
    /// Reads `--smtp-auth-file` into `smtp_auth`; the error says which file and why, never
    /// the file's content.
    pub fn read_secret_files(&mut self) -> Result<(), String> {
        if let Some(path) = &self.smtp_auth_file {
            let line = outbox_runtime::read_secret_file(path)?;
            let credentials = parse_credentials(&line)
                .map_err(|why| format!("--smtp-auth-file {}: {why}", path.display()))?;
            self.smtp_auth = Some(credentials);
        }
        Ok(())
    }
}

/// The user name and password SMTP clients must authenticate with. Its `Debug` never shows
/// the password, so the parsed arguments can be logged.
#[derive(Clone, PartialEq, Eq)]
pub struct SmtpCredentials {
    /// User name.
    pub user: String,
    password: String,
}

impl SmtpCredentials {
    /// Whether `user` and `password` are these credentials.
    pub fn accepts(&self, user: &str, password: &str) -> bool {
        // Compared in full whatever the first difference, so timing tells nothing.
        let same = |a: &str, b: &str| {
            a.len() == b.len()
                && a.bytes()
                    .zip(b.bytes())
                    .fold(0u8, |acc, (x, y)| acc | (x ^ y))
                    == 0
        };
        same(user, &self.user) & same(password, &self.password)
    }
}

impl fmt::Debug for SmtpCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmtpCredentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

fn parse_credentials(value: &str) -> Result<SmtpCredentials, String> {
    match value.split_once(':') {
        Some((user, password)) if !user.is_empty() && !password.is_empty() => Ok(SmtpCredentials {
            user: user.to_owned(),
            password: password.to_owned(),
        }),
        _ => Err("expected USER:PASSWORD, both not empty".to_owned()),
    }
}

impl SinkArgs {
    /// The connection limits of the server.
    pub fn server_limits(&self) -> ServerLimits {
        ServerLimits {
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_client_connections.get(),
            max_connections_per_client: self
                .max_client_connections_per_address
                .unwrap_or(self.max_client_connections)
                .get(),
        }
    }
}

/// The key bytes of a `whsec_...` secret. Its `Debug` never shows them, so the parsed
/// arguments can be logged.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningSecret(Vec<u8>);

impl SigningSecret {
    /// The HMAC key.
    pub fn key(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningSecret(..)")
    }
}

fn parse_secret(value: &str) -> Result<SigningSecret, String> {
    outbox_core::signing::decode_secret(value)
        .map(SigningSecret)
        .map_err(|err| err.to_string())
}

/// A duration that is not zero: a zero timeout would refuse everything.
fn parse_timeout(value: &str) -> Result<Duration, String> {
    outbox_core::duration::parse_positive(value).map_err(|err| err.to_string())
}

fn parse_header_name(value: &str) -> Result<HeaderName, String> {
    HeaderName::from_bytes(value.as_bytes()).map_err(|_| format!("`{value}` is not a header name"))
}

/// A probability: a finite number from 0 to 1.
pub(crate) fn parse_rate(value: &str) -> Result<f64, String> {
    let rate: f64 = value
        .trim()
        .parse()
        .map_err(|_| format!("`{value}` is not a number"))?;
    check_rate(rate)
}

pub(crate) fn check_rate(rate: f64) -> Result<f64, String> {
    // The negated form also refuses NaN.
    if !(0.0..=1.0).contains(&rate) {
        return Err(format!("a rate must be from 0 to 1, not {rate}"));
    }
    Ok(rate)
}

fn parse_status(value: &str) -> Result<StatusCode, String> {
    let code: u16 = value
        .trim()
        .parse()
        .map_err(|_| format!("`{value}` is not a status code"))?;
    check_status(code)
}

/// A status a response can end with. Informational (1xx) statuses are not final answers,
/// so they are refused along with anything beyond 599.
pub(crate) fn check_status(code: u16) -> Result<StatusCode, String> {
    if !(200..=599).contains(&code) {
        return Err(format!("a status must be from 200 to 599, not {code}"));
    }
    StatusCode::from_u16(code).map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_must_be_probabilities() {
        assert_eq!(parse_rate("0"), Ok(0.0));
        assert_eq!(parse_rate("0.25"), Ok(0.25));
        assert_eq!(parse_rate("1"), Ok(1.0));
        assert!(parse_rate("1.5").is_err());
        assert!(parse_rate("-0.1").is_err());
        assert!(parse_rate("NaN").is_err());
        assert!(parse_rate("often").is_err());
    }

    #[test]
    fn statuses_must_be_final() {
        assert_eq!(check_status(429), Ok(StatusCode::TOO_MANY_REQUESTS));
        assert!(check_status(101).is_err());
        assert!(check_status(600).is_err());
    }

    #[test]
    fn defaults_and_flags() {
        let args = SinkArgs::try_parse_from(["sink"]).unwrap();
        assert_eq!(args.listen, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(args.idempotency_header, "idempotency-key");
        assert_eq!(args.fail_status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(!args.lookup);
        assert!(args.retention.is_none());
        assert_eq!(args.timestamp_tolerance, Duration::from_secs(300));
        // A sink's clients are a few dispatchers with many connections each: no cap per
        // address beyond the total.
        assert_eq!(
            args.server_limits(),
            ServerLimits {
                max_connections_per_client: ServerLimits::DEFAULT_MAX_CONNECTIONS,
                ..ServerLimits::default()
            }
        );

        let args = SinkArgs::try_parse_from([
            "sink",
            "--retention",
            "1h",
            "--latency",
            "250ms",
            "--lookup",
            "--fail-rate",
            "0.5",
            "--secret",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        ])
        .unwrap();
        assert_eq!(args.retention, Some(Duration::from_secs(3600)));
        assert_eq!(args.latency, Some(Duration::from_millis(250)));
        assert!(args.lookup);
        assert_eq!(args.fail_rate, 0.5);
        assert_eq!(args.secrets.len(), 1);
        assert_eq!(format!("{:?}", args.secrets[0]), "SigningSecret(..)");

        assert!(SinkArgs::try_parse_from(["sink", "--drop-response-rate", "2"]).is_err());
        assert!(SinkArgs::try_parse_from(["sink", "--secret", "nope"]).is_err());
        assert!(SinkArgs::try_parse_from(["sink", "--retention", "soon"]).is_err());
        assert!(SinkArgs::try_parse_from(["sink", "--header-timeout", "0s"]).is_err());
        assert!(SinkArgs::try_parse_from(["sink", "--max-client-connections", "0"]).is_err());
        assert!(SinkArgs::try_parse_from(["sink", "--timestamp-tolerance", "0s"]).is_err());
    }

    #[test]
    fn smtp_credentials_are_read_from_their_file() {
        let dir = std::env::temp_dir().join(format!("sink-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("auth");
        std::fs::write(&file, "relay:s3cr:et\n").unwrap();
        let mut args = SinkArgs::try_parse_from([
            "sink".as_ref(),
            "--smtp-auth-file".as_ref(),
            file.as_os_str(),
        ])
        .unwrap();
        assert!(args.smtp_auth.is_none(), "read only when asked");
        args.read_secret_files().unwrap();
        assert!(args.smtp_auth.unwrap().accepts("relay", "s3cr:et"));

        std::fs::write(&file, "no-colon\n").unwrap();
        let mut args = SinkArgs::try_parse_from([
            "sink".as_ref(),
            "--smtp-auth-file".as_ref(),
            file.as_os_str(),
        ])
        .unwrap();
        let err = args.read_secret_files().unwrap_err();
        assert!(
            err.contains("USER:PASSWORD") && !err.contains("no-colon"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn smtp_flags() {
        let args = SinkArgs::try_parse_from(["sink"]).unwrap();
        assert!(args.smtp_listen.is_none() && args.smtp_auth.is_none());
        assert_eq!(args.smtp_max_message_bytes.get(), 10 * 1024 * 1024);
        assert_eq!(args.smtp_fail_reply.line(), "451 4.3.0 try later");

        let args = SinkArgs::try_parse_from([
            "sink",
            "--smtp-listen",
            "127.0.0.1:2525",
            "--smtp-auth",
            "relay:s3cr:et",
            "--smtp-fail-reply",
            "550 5.1.1 no such user",
            "--smtp-drop-rate",
            "0.1",
        ])
        .unwrap();
        let credentials = args.smtp_auth.unwrap();
        assert!(credentials.accepts("relay", "s3cr:et"));
        assert!(!credentials.accepts("relay", "s3cr:e"));
        assert!(!credentials.accepts("relay", "s3cr:eT"));
        assert!(!format!("{credentials:?}").contains("s3cr"));
        assert_eq!(args.smtp_fail_reply.code(), 550);

        assert!(SinkArgs::try_parse_from(["sink", "--smtp-auth", "nopassword"]).is_err());
        assert!(SinkArgs::try_parse_from(["sink", "--smtp-auth", ":pw"]).is_err());
        assert!(SinkArgs::try_parse_from([
            "sink",
            "--smtp-auth",
            "relay:pw",
            "--smtp-auth-file",
            "auth"
        ])
        .is_err());
        assert!(SinkArgs::try_parse_from(["sink", "--smtp-fail-reply", "250 ok"]).is_err());
        assert!(SinkArgs::try_parse_from(["sink", "--smtp-fail-rate", "1.1"]).is_err());
        assert!(SinkArgs::try_parse_from(["sink", "--smtp-max-message-bytes", "0"]).is_err());
        assert!(SinkArgs::try_parse_from(["sink", "--smtps-listen", "127.0.0.1:4650"]).is_err());
        assert!(SinkArgs::try_parse_from(["sink", "--smtp-tls-cert", "cert.pem"]).is_err());
        let args = SinkArgs::try_parse_from([
            "sink",
            "--smtps-listen",
            "127.0.0.1:4650",
            "--smtp-tls-cert",
            "cert.pem",
            "--smtp-tls-key",
            "key.pem",
        ])
        .unwrap();
        assert!(args.smtps_listen.is_some());
    }
}
