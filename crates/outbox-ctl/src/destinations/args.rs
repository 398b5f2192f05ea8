//! `destination add`'s flags, every kind's on one command line, with the readers of those
//! that name files or standard input (signing secrets, an SMTP password, an email API's
//! key and body template).

use anyhow::{bail, Context};
use clap::builder::TypedValueParser;
use outbox_core::{
    duration, DestinationKind, Locale, OnHeadFailed, OnUncertain, Ordering, SmtpTls,
};
use std::time::Duration;

use super::failing_window::{parse_failing_window, FailingWindow};
use crate::credentials::SecretSources;
use crate::secret_input;

/// `destination add` flags.
#[derive(Debug, clap::Args)]
pub struct DestinationArgs {
    /// Owning tenant (name or id).
    #[arg(long, env = "OUTBOX_TENANT")]
    pub(super) tenant: String,
    /// Unique name within the tenant; approvals refer to it.
    #[arg(long)]
    pub(super) name: String,
    /// `webhook` (alerts are POSTed to --url) or `email` (alerts are mailed over SMTP).
    #[arg(long, default_value = "webhook")]
    pub(super) kind: DestinationKind,
    /// Where alerts are POSTed (http or https); webhook destinations only.
    #[arg(long)]
    pub(super) url: Option<String>,
    #[command(flatten)]
    pub(super) email: Box<EmailArgs>,
    #[command(flatten)]
    pub(super) email_api: Box<EmailApiArgs>,
    /// Standard Webhooks signing secret (`whsec_...`); repeat while rotating. Visible to
    /// other users in `ps`: prefer --secret-file or --secret-stdin.
    #[arg(long = "secret", value_name = "WHSEC")]
    pub(super) secrets: Vec<String>,
    #[command(flatten)]
    pub(super) secret_sources: SecretSources,
    /// Header carrying the notification id on every request.
    #[arg(long, default_value = "Idempotency-Key")]
    pub(super) idempotency_header: String,
    /// How long the destination de-duplicates by that header (e.g. 24h). Omit when it
    /// does not de-duplicate.
    #[arg(long, value_parser = duration::parse_positive)]
    pub(super) idempotency_retention: Option<Duration>,
    /// URL that answers whether the destination has an alert, with `{key}` for its id.
    #[arg(long)]
    pub(super) lookup_url: Option<String>,
    /// What to do with an uncertain send nothing else can settle.
    #[arg(long, default_value = "hold")]
    pub(super) on_uncertain: OnUncertain,
    /// Connect and total request timeout.
    #[arg(long, default_value = "10s", value_parser = duration::parse_positive)]
    pub(super) timeout: Duration,
    /// Most of its alerts in `sending` at once, across every dispatcher: also the most
    /// alerts one crash can leave uncertain there. Default: 4 when nothing can settle an
    /// uncertain send by itself (no --lookup-url, no --idempotency-retention), else 16.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(super) max_in_flight: Option<u32>,
    /// Disable the destination automatically once every send to it has failed for this
    /// long (e.g. 24h, 2d), with the reason and an audit line; `never` to keep it on.
    #[arg(long, default_value = "24h", value_name = "DURATION|never", value_parser = parse_failing_window)]
    pub(super) disable_after_failing: FailingWindow,
    /// `per-key`: deliver the alerts of one ordering key (the approval's `ordering_key`,
    /// else its subject) one at a time, in approval order; `none`: no order.
    #[arg(long, default_value = "none", value_name = "none|per-key")]
    pub(super) ordering: Ordering,
    /// With `--ordering per-key`, when a lane's head has failed for good: `block` keeps
    /// the lane waiting for an operator; `skip` lets the next alert go (both alerts'
    /// evidence says so).
    #[arg(long, default_value = "block", value_name = "block|skip")]
    pub(super) on_head_failed: OnHeadFailed,
    /// Address ranges (CIDR, comma-separated) the URLs may point into although they are
    /// loopback, private, link-local, ...: for development, tests and demos only. The
    /// dispatcher needs the same ranges opened to deliver there.
    #[arg(long, env = "OUTBOX_ALLOW_PRIVATE", default_value = "", value_name = "CIDR,...", value_parser = outbox_egress::AllowList::parse)]
    pub(super) allow_private: outbox_egress::AllowList,
}

impl DestinationArgs {
    /// The tenant and the destination's name, as given, for the audit log.
    pub(crate) fn audited(&self) -> (&str, &str) {
        (&self.tenant, &self.name)
    }

    /// The ordering settings given.
    pub(super) fn ordering(&self) -> outbox_store::lanes::OrderingSettings {
        outbox_store::lanes::OrderingSettings {
            ordering: self.ordering,
            on_head_failed: self.on_head_failed,
        }
    }
}

/// `destination add` flags for a webhook that is an HTTP email API: each alert is rendered
/// as email and written into the API's request body (with --from, --to and --locale).
#[derive(Debug, clap::Args)]
pub struct EmailApiArgs {
    /// Send each alert as the request body of an email API, rendered as email by a shipped
    /// body template: `email-api-resend` (Resend's `POST /emails`).
    #[arg(long, value_name = "NAME", conflicts_with = "body_template_file")]
    pub(super) body_template: Option<String>,
    /// The same, with a body template of your own (a minijinja template writing a JSON
    /// object; every value is written as JSON).
    #[arg(long, value_name = "PATH")]
    pub(super) body_template_file: Option<String>,
    /// File holding the API's key (its first line), sent as `Authorization: Bearer`.
    #[arg(long, value_name = "PATH", conflicts_with = "bearer_token_stdin")]
    pub(super) bearer_token_file: Option<String>,
    /// Read the API's key from standard input (its first line).
    #[arg(long)]
    pub(super) bearer_token_stdin: bool,
}

impl EmailApiArgs {
    pub(super) fn any_given(&self) -> bool {
        self.body_template.is_some()
            || self.body_template_file.is_some()
            || self.bearer_token_file.is_some()
            || self.bearer_token_stdin
    }

    /// The body template named or read from its file, compiled; `None` when not given.
    pub(super) fn template(&self) -> anyhow::Result<Option<outbox_render::BodyTemplate>> {
        if let Some(name) = &self.body_template {
            return Ok(Some(
                outbox_render::BodyTemplate::builtin(name).context("--body-template")?,
            ));
        }
        let Some(path) = &self.body_template_file else {
            return Ok(None);
        };
        let text = std::fs::read(path)
            .with_context(|| format!("--body-template-file `{path}` cannot be read"))?;
        let text = String::from_utf8(text)
            .map_err(|_| anyhow::anyhow!("--body-template-file `{path}` is not UTF-8 text"))?;
        let template = outbox_render::BodyTemplate::from_file_text(&text)
            .with_context(|| format!("--body-template-file `{path}`"))?;
        Ok(Some(template))
    }

    /// The API key from its file or standard input, if one was given.
    pub(super) fn bearer_token(&self) -> anyhow::Result<Option<String>> {
        secret_input::first_line(
            "bearer-token",
            self.bearer_token_file.as_deref(),
            self.bearer_token_stdin,
            (
                "a key of 1 to 1024 printable bytes without spaces",
                |token| {
                    !token.is_empty()
                        && token.len() <= 1024
                        && !token.chars().any(|c| c.is_control() || c == ' ')
                },
            ),
        )
    }
}

/// `destination add --kind email` flags.
#[derive(Debug, clap::Args)]
pub struct EmailArgs {
    /// SMTP relay host name or address.
    #[arg(long)]
    pub(super) smtp_host: Option<String>,
    /// SMTP relay port.
    #[arg(long, default_value_t = 25)]
    pub(super) smtp_port: u16,
    /// Transport security to the relay: `none` (a local relay), `starttls` or `tls`.
    #[arg(long, value_parser = smtp_tls_names())]
    pub(super) smtp_tls: Option<SmtpTls>,
    /// PEM file of the CA the relay's certificate must chain to (a relay on a private
    /// PKI); without it the public roots are trusted. Stored with the destination.
    #[arg(long, value_name = "PATH")]
    pub(super) smtp_ca_file: Option<String>,
    /// SMTP user name, when the relay wants AUTH.
    #[arg(long)]
    pub(super) smtp_user: Option<String>,
    /// File holding the SMTP password (its first line).
    #[arg(long, value_name = "PATH")]
    pub(super) smtp_password_file: Option<String>,
    /// Read the SMTP password from standard input (its first line).
    #[arg(long)]
    pub(super) smtp_password_stdin: bool,
    /// Sender address; its domain names every Message-ID.
    #[arg(long, value_name = "ADDR")]
    pub(super) from: Option<String>,
    /// Recipient address (repeatable).
    #[arg(long = "to", value_name = "ADDR")]
    pub(super) to: Vec<String>,
    /// Language of the messages: `en` or `es` (English when absent).
    #[arg(long)]
    pub(super) locale: Option<Locale>,
}

/// `--smtp-tls`: one of [`SmtpTls`]'s names, which the help lists.
fn smtp_tls_names() -> impl TypedValueParser<Value = SmtpTls> {
    clap::builder::PossibleValuesParser::new(SmtpTls::ALL.iter().map(|tls| tls.as_str()))
        .try_map(|name| name.parse::<SmtpTls>())
}

impl EmailArgs {
    /// Whether any of these flags was given: the relay's or the messages'.
    pub(super) fn any_given(&self) -> bool {
        self.smtp_given() || self.from.is_some() || !self.to.is_empty() || self.locale.is_some()
    }

    /// Whether a flag of the relay itself (not of the messages) was given.
    pub(super) fn smtp_given(&self) -> bool {
        self.smtp_host.is_some()
            || self.smtp_tls.is_some()
            || self.smtp_ca_file.is_some()
            || self.smtp_user.is_some()
            || self.smtp_password_file.is_some()
            || self.smtp_password_stdin
    }

    /// The password from its file or standard input, if one was given.
    pub(super) fn password(&self) -> anyhow::Result<Option<String>> {
        if self.smtp_password_file.is_some() && self.smtp_password_stdin {
            bail!("give the SMTP password with --smtp-password-file or --smtp-password-stdin, not both")
        }
        secret_input::first_line(
            "smtp-password",
            self.smtp_password_file.as_deref(),
            self.smtp_password_stdin,
            ("a password of 1 to 1024 bytes", |password| {
                !password.is_empty() && password.len() <= 1024
            }),
        )
    }
}
