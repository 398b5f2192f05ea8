//! Setting the system up: schema, tenants, tokens, destinations.

use anyhow::{bail, Context};
use outbox_core::sealing::SealingKeys;
use outbox_core::{duration, in_flight, redact, signing, DestinationKind, OnUncertain};
use outbox_store::destinations::{EmailApiSettings, EmailSettings, NewDestination};
use outbox_store::{tenants, PgPool};
use std::time::Duration;

use crate::credentials::{self, SecretSources};
use crate::secret_input;
use crate::table::Table;

/// Longest request timeout a destination may have.
const MAX_TIMEOUT: Duration = Duration::from_secs(300);

/// Applies migrations, waiting up to a minute for a database that is still starting.
pub(crate) async fn migrate(database_url: &str) -> anyhow::Result<()> {
    let pool =
        outbox_store::connect_with_retry(database_url, "outboxctl", 2, Duration::from_secs(60))
            .await?;
    outbox_store::MIGRATOR.run(&pool).await?;
    pool.close().await;
    eprintln!("schema is up to date");
    Ok(())
}

pub(crate) async fn create_tenant(
    pool: &PgPool,
    name: &str,
    time_zone: &str,
    tiers: Option<&str>,
) -> anyhow::Result<()> {
    let name = checked_name("tenant", name)?;
    outbox_core::renewal::time_zone(time_zone)?;
    let tiers = tiers.map(outbox_core::renewal::parse_tiers).transpose()?;
    let id = tenants::create(pool, name, time_zone, tiers.as_deref()).await?;
    println!("{id}");
    eprintln!("created tenant `{name}`");
    Ok(())
}

/// `destination add` flags.
#[derive(Debug, clap::Args)]
pub struct DestinationArgs {
    /// Owning tenant (name or id).
    #[arg(long, env = "OUTBOX_TENANT")]
    tenant: String,
    /// Unique name within the tenant; approvals refer to it.
    #[arg(long)]
    name: String,
    /// `webhook` (alerts are POSTed to --url) or `email` (alerts are mailed over SMTP).
    #[arg(long, default_value = "webhook")]
    kind: DestinationKind,
    /// Where alerts are POSTed (http or https); webhook destinations only.
    #[arg(long)]
    url: Option<String>,
    #[command(flatten)]
    email: Box<EmailArgs>,
    #[command(flatten)]
    email_api: Box<EmailApiArgs>,
    /// Standard Webhooks signing secret (`whsec_...`); repeat while rotating. Visible to
    /// other users in `ps`: prefer --secret-file or --secret-stdin.
    #[arg(long = "secret", value_name = "WHSEC")]
    secrets: Vec<String>,
    #[command(flatten)]
    secret_sources: SecretSources,
    /// Header carrying the notification id on every request.
    #[arg(long, default_value = "Idempotency-Key")]
    idempotency_header: String,
    /// How long the destination de-duplicates by that header (e.g. 24h). Omit when it
    /// does not de-duplicate.
    #[arg(long, value_parser = duration::parse_positive)]
    idempotency_retention: Option<Duration>,
    /// URL that answers whether the destination has an alert, with `{key}` for its id.
    #[arg(long)]
    lookup_url: Option<String>,
    /// What to do with an uncertain send nothing else can settle.
    #[arg(long, default_value = "hold")]
    on_uncertain: OnUncertain,
    /// Connect and total request timeout.
    #[arg(long, default_value = "10s", value_parser = duration::parse_positive)]
    timeout: Duration,
    /// Most of its alerts in `sending` at once, across every dispatcher: also the most
    /// alerts one crash can leave uncertain there. Default: 4 when nothing can settle an
    /// uncertain send by itself (no --lookup-url, no --idempotency-retention), else 16.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    max_in_flight: Option<u32>,
    /// Disable the destination automatically once every send to it has failed for this
    /// long (e.g. 24h, 2d), with the reason and an audit line; `never` to keep it on.
    #[arg(long, default_value = "24h", value_name = "DURATION|never", value_parser = parse_failing_window)]
    disable_after_failing: FailingWindow,
    /// Address ranges (CIDR, comma-separated) the URLs may point into although they are
    /// loopback, private, link-local, ...: for development, tests and demos only. The
    /// dispatcher needs the same ranges opened to deliver there.
    #[arg(long, env = "OUTBOX_ALLOW_PRIVATE", default_value = "", value_name = "CIDR,...", value_parser = outbox_egress::AllowList::parse)]
    allow_private: outbox_egress::AllowList,
}

/// How long every send may fail before a destination is disabled: `None` for never.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailingWindow(pub Option<Duration>);

/// Reads `--disable-after-failing`: a positive duration, or `never`.
fn parse_failing_window(text: &str) -> Result<FailingWindow, String> {
    if text.trim() == "never" {
        return Ok(FailingWindow(None));
    }
    let window = duration::parse_positive(text.trim())
        .map_err(|err| format!("{err}; or `never` to keep the destination on"))?;
    if window > MAX_FAILING_WINDOW {
        return Err("at most 365d; or `never` to keep the destination on".to_owned());
    }
    Ok(FailingWindow(Some(window)))
}

/// Longest `--disable-after-failing` window (a year; `never` is the way to say longer).
const MAX_FAILING_WINDOW: Duration = Duration::from_secs(365 * 86_400);

/// `destination update` flags.
#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    /// Destination name.
    name: String,
    /// Owning tenant (name or id).
    #[arg(long, env = "OUTBOX_TENANT")]
    tenant: String,
    /// Disable the destination automatically once every send to it has failed for this
    /// long; `never` to keep it on.
    #[arg(long, value_name = "DURATION|never", value_parser = parse_failing_window)]
    disable_after_failing: Option<FailingWindow>,
}

/// `destination update`: changes the settings given, and says what they are now.
pub(crate) async fn update_destination(pool: &PgPool, args: UpdateArgs) -> anyhow::Result<()> {
    let Some(FailingWindow(window)) = args.disable_after_failing else {
        bail!("nothing to change: give --disable-after-failing DURATION|never");
    };
    let tenant = tenants::find(pool, &args.tenant).await?;
    if !outbox_store::health::set_disable_after_failing(pool, tenant.id, &args.name, window).await?
    {
        bail!(
            "tenant `{}` has no destination named `{}`",
            tenant.name,
            args.name
        );
    }
    eprintln!(
        "destination `{}`: {}",
        args.name,
        failing_window_text(window)
    );
    Ok(())
}

/// Sets a new destination's failing window, unless it is the column's default (24h).
async fn set_failing_window(
    conn: &mut outbox_store::PgConnection,
    tenant_id: uuid::Uuid,
    name: &str,
    window: FailingWindow,
) -> anyhow::Result<()> {
    if window.0 != Some(DEFAULT_FAILING_WINDOW) {
        outbox_store::health::set_disable_after_failing(&mut *conn, tenant_id, name, window.0)
            .await?;
    }
    Ok(())
}

/// The failing window a destination gets unless told otherwise (the column's default).
const DEFAULT_FAILING_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// What a failing window means, in words.
fn failing_window_text(window: Option<Duration>) -> String {
    match window {
        Some(window) => format!(
            "disabled automatically once every send has failed for {}",
            duration::format(window)
        ),
        None => "never disabled automatically".to_owned(),
    }
}

/// `destination add` flags for a webhook that is an HTTP email API: each alert is rendered
/// as email and written into the API's request body (with --from, --to and --locale).
#[derive(Debug, clap::Args)]
pub struct EmailApiArgs {
    /// Send each alert as the request body of an email API, rendered as email by a shipped
    /// body template: `email-api-resend` (Resend's `POST /emails`).
    #[arg(long, value_name = "NAME", conflicts_with = "body_template_file")]
    body_template: Option<String>,
    /// The same, with a body template of your own (a minijinja template writing a JSON
    /// object; every value is written as JSON).
    #[arg(long, value_name = "PATH")]
    body_template_file: Option<String>,
    /// File holding the API's key (its first line), sent as `Authorization: Bearer`.
    #[arg(long, value_name = "PATH", conflicts_with = "bearer_token_stdin")]
    bearer_token_file: Option<String>,
    /// Read the API's key from standard input (its first line).
    #[arg(long)]
    bearer_token_stdin: bool,
}

impl EmailApiArgs {
    fn any_given(&self) -> bool {
        self.body_template.is_some()
            || self.body_template_file.is_some()
            || self.bearer_token_file.is_some()
            || self.bearer_token_stdin
    }

    /// The body template named or read from its file, compiled; `None` when not given.
    fn template(&self) -> anyhow::Result<Option<outbox_render::BodyTemplate>> {
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
    fn bearer_token(&self) -> anyhow::Result<Option<String>> {
        let Some((text, source)) = secret_input::read(
            "bearer-token",
            self.bearer_token_file.as_deref(),
            self.bearer_token_stdin,
        )?
        else {
            return Ok(None);
        };
        let token = secret_input::first_line(&text);
        if token.is_empty()
            || token.len() > 1024
            || token.chars().any(|c| c.is_control() || c == ' ')
        {
            bail!("{source} must hold a key of 1 to 1024 printable bytes without spaces on its first line");
        }
        Ok(Some(token.to_owned()))
    }
}

/// `destination add --kind email` flags.
#[derive(Debug, clap::Args)]
pub struct EmailArgs {
    /// SMTP relay host name or address.
    #[arg(long)]
    smtp_host: Option<String>,
    /// SMTP relay port.
    #[arg(long, default_value_t = 25)]
    smtp_port: u16,
    /// Transport security to the relay: `none` (a local relay), `starttls` or `tls`.
    #[arg(long, value_parser = ["none", "starttls", "tls"])]
    smtp_tls: Option<String>,
    /// PEM file of the CA the relay's certificate must chain to (a relay on a private
    /// PKI); without it the public roots are trusted. Stored with the destination.
    #[arg(long, value_name = "PATH")]
    smtp_ca_file: Option<String>,
    /// SMTP user name, when the relay wants AUTH.
    #[arg(long)]
    smtp_user: Option<String>,
    /// File holding the SMTP password (its first line).
    #[arg(long, value_name = "PATH")]
    smtp_password_file: Option<String>,
    /// Read the SMTP password from standard input (its first line).
    #[arg(long)]
    smtp_password_stdin: bool,
    /// Sender address; its domain names every Message-ID.
    #[arg(long, value_name = "ADDR")]
    from: Option<String>,
    /// Recipient address (repeatable).
    #[arg(long = "to", value_name = "ADDR")]
    to: Vec<String>,
    /// Language of the messages: `en` or `es` (English when absent).
    #[arg(long)]
    locale: Option<outbox_render::Locale>,
}

impl EmailArgs {
    fn any_given(&self) -> bool {
        self.smtp_host.is_some()
            || self.smtp_tls.is_some()
            || self.smtp_ca_file.is_some()
            || self.smtp_user.is_some()
            || self.smtp_password_file.is_some()
            || self.smtp_password_stdin
            || self.from.is_some()
            || !self.to.is_empty()
            || self.locale.is_some()
    }

    /// The password from its file or standard input, if one was given.
    fn password(&self) -> anyhow::Result<Option<String>> {
        if self.smtp_password_file.is_some() && self.smtp_password_stdin {
            bail!("give the SMTP password with --smtp-password-file or --smtp-password-stdin, not both")
        }
        let Some((text, source)) = secret_input::read(
            "smtp-password",
            self.smtp_password_file.as_deref(),
            self.smtp_password_stdin,
        )?
        else {
            return Ok(None);
        };
        let password = secret_input::first_line(&text);
        if password.is_empty() || password.len() > 1024 {
            bail!("{source} must hold a password of 1 to 1024 bytes on its first line");
        }
        Ok(Some(password.to_owned()))
    }
}

/// A sender's mail address as lettre parses it (`name@domain`, no display name).
fn checked_address(flag: &str, text: &str) -> anyhow::Result<String> {
    let address: lettre::Address = text
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("{flag} `{text}` is not a mail address (name@domain)"))?;
    Ok(address.to_string())
}

/// `--to` addresses by the rule every recipient follows (`name@domain`, no quoted local
/// part, no IP address; [`outbox_core::recipients`]), each at most once.
fn checked_recipients(to: &[String]) -> anyhow::Result<Vec<String>> {
    let addresses = outbox_core::recipients::recipients(to.iter().map(String::as_str))
        .map_err(|err| anyhow::anyhow!("--to: {err}"))?;
    Ok(addresses.iter().map(ToString::to_string).collect())
}

/// The text of a CA file that holds only certificates able to anchor a relay's chain.
fn checked_ca_file(path: &str) -> anyhow::Result<String> {
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(
            std::fs::File::open(path)
                .with_context(|| format!("--smtp-ca-file `{path}` cannot be read"))?,
            outbox_egress::tls::MAX_CA_PEM_BYTES as u64 + 1,
        ),
        &mut text,
    )
    .with_context(|| format!("--smtp-ca-file `{path}` is not readable text"))?;
    outbox_egress::tls::RelayTrust::private_ca(&text)
        .map_err(|err| anyhow::anyhow!("--smtp-ca-file `{path}` {err}"))?;
    Ok(text)
}

/// Adds an email destination: the relay checked by the egress guard like any URL, the
/// addresses parsed, the password sealed like signing secrets.
async fn add_email_destination(
    pool: &PgPool,
    keys: &SealingKeys,
    args: DestinationArgs,
    name: String,
) -> anyhow::Result<()> {
    let webhook_only = [
        ("--url", args.url.is_some()),
        ("--secret", !args.secrets.is_empty()),
        ("--lookup-url", args.lookup_url.is_some()),
        (
            "--idempotency-retention",
            args.idempotency_retention.is_some(),
        ),
    ];
    if let Some((flag, _)) = webhook_only.iter().find(|(_, given)| *given) {
        bail!("{flag} applies to webhook destinations only; an email destination has no lookup, no key a relay de-duplicates by, and no signature");
    }
    let email = &args.email;
    let Some(host) = email.smtp_host.as_deref().map(str::trim) else {
        bail!("--kind email needs --smtp-host");
    };
    let Some(tls) = email.smtp_tls.clone() else {
        bail!("--kind email needs --smtp-tls none|starttls|tls");
    };
    let smtp_ca_pem = match &email.smtp_ca_file {
        None => None,
        Some(_) if tls == "none" => {
            bail!("--smtp-ca-file needs --smtp-tls starttls or tls: without TLS there is no certificate to check")
        }
        Some(path) => Some(checked_ca_file(path)?),
    };
    if email.smtp_port == 0 {
        bail!("--smtp-port must be 1 to 65535");
    }
    let Some(from) = &email.from else {
        bail!("--kind email needs --from");
    };
    let from = checked_address("--from", from)?;
    if email.to.is_empty() {
        bail!("--kind email needs at least one --to");
    }
    let to = checked_recipients(&email.to)?;
    let password = email.password()?;
    if password.is_some() && email.smtp_user.is_none() {
        bail!("an SMTP password needs --smtp-user");
    }
    if let Some(user) = &email.smtp_user {
        if user.is_empty() || user.len() > 512 || user.chars().any(char::is_control) {
            bail!("--smtp-user must be 1 to 512 printable characters");
        }
    }
    if args.timeout > MAX_TIMEOUT {
        bail!("--timeout must be at most 300s");
    }
    // The relay is checked like a URL's host: `smtp://` is written with the same host
    // syntax (`[::1]` for IPv6) and vetted through an http form of it.
    let host_part = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    let relay = format!("smtp://{host_part}:{}", email.smtp_port);
    let parsed = url::Url::parse(&relay)
        .ok()
        .filter(|url| url.host_str().is_some_and(|h| !h.is_empty()) && url.path().is_empty())
        .ok_or_else(|| anyhow::anyhow!("--smtp-host `{host}` is not a host name or address"))?;
    let guard = outbox_egress::Guard::new(args.allow_private.clone());
    let note = check_http_url(
        &guard,
        "--smtp-host",
        &format!("http://{}:{}/", host_part, email.smtp_port),
    )
    .await?;

    // Nothing settles an email destination's uncertain send but its policy.
    let max_in_flight = args
        .max_in_flight
        .unwrap_or_else(|| in_flight::default_max_in_flight(false, false));
    let on_uncertain = args.on_uncertain;
    let tenant = tenants::find(pool, &args.tenant).await?;
    let id = outbox_store::destinations::new_id();
    let smtp_password = password
        .map(|password| credentials::stored_form(keys, id, &[password]))
        .and_then(|stored| stored.into_iter().next());
    // The destination and its failing window are written together.
    let mut tx = pool.begin().await?;
    outbox_store::destinations::create_email_with_id(
        &mut *tx,
        id,
        &NewDestination {
            tenant_id: tenant.id,
            name: name.clone(),
            url: parsed.to_string(),
            signing_secrets: Vec::new(),
            idempotency_header: args.idempotency_header,
            idempotency_retention: None,
            lookup_url_template: None,
            on_uncertain: args.on_uncertain,
            timeout: args.timeout,
            max_in_flight,
        },
        &EmailSettings {
            smtp_tls: tls,
            smtp_username: email.smtp_user.clone(),
            smtp_password,
            mail_from: from,
            mail_to: to,
            locale: email.locale.map(|locale| locale.code().to_owned()),
            smtp_ca_pem,
        },
    )
    .await?;
    set_failing_window(&mut tx, tenant.id, &name, args.disable_after_failing).await?;
    tx.commit().await?;
    println!("{id}");
    eprintln!(
        "added email destination `{name}` for tenant `{}`",
        tenant.name
    );
    eprintln!(
        "in flight: at most {max_in_flight} at once; {}",
        in_flight::crash_consequence(
            i32::try_from(max_in_flight).unwrap_or(i32::MAX),
            false,
            false,
            on_uncertain,
        )
    );
    if let Some(note) = note {
        eprintln!("note: {note}");
    }
    Ok(())
}

pub(crate) async fn add_destination(
    pool: &PgPool,
    keys: &SealingKeys,
    mut args: DestinationArgs,
) -> anyhow::Result<()> {
    let name = checked_name("destination", &args.name)?.to_owned();
    if args.kind == DestinationKind::Email {
        if args.email_api.any_given() {
            bail!("--body-template, --body-template-file and --bearer-token-* apply to webhook destinations only: an email destination renders its own message");
        }
        return add_email_destination(pool, keys, args, name).await;
    }
    let body_template = args.email_api.template()?;
    let smtp_given = args.email.smtp_host.is_some()
        || args.email.smtp_tls.is_some()
        || args.email.smtp_user.is_some()
        || args.email.smtp_password_file.is_some()
        || args.email.smtp_password_stdin;
    if smtp_given || (body_template.is_none() && args.email.any_given()) {
        bail!("--smtp-* apply to --kind email destinations only, and --from, --to and --locale to those and to webhooks with a --body-template");
    }
    if body_template.is_none() && args.email_api.any_given() {
        bail!("--bearer-token-file and --bearer-token-stdin apply to webhooks with a --body-template (an email API's key)");
    }
    if args.email_api.bearer_token_stdin && args.secret_sources.reads_stdin() {
        bail!("--bearer-token-stdin and --secret-stdin cannot both read standard input");
    }
    let email_api = match &body_template {
        Some(template) => Some(email_api_settings(&args, template)?),
        None => None,
    };
    let Some(url) = args.url.clone() else {
        bail!("a webhook destination needs --url");
    };
    let guard = outbox_egress::Guard::new(args.allow_private.clone());
    let mut notes = Vec::new();
    notes.extend(check_http_url(&guard, "--url", &url).await?);
    if let Some(template) = &args.lookup_url {
        if !template.contains("{key}") {
            bail!("--lookup-url must contain `{{key}}` where the notification id goes");
        }
        notes.extend(
            check_http_url(&guard, "--lookup-url", &template.replace("{key}", "key")).await?,
        );
    }
    for secret in &args.secrets {
        signing::decode_secret(secret).context("--secret")?;
    }
    args.secrets.extend(args.secret_sources.read()?);
    if args.secrets.len() > 4 {
        bail!("at most 4 signing secrets at once (one per rotation step)");
    }
    outbox_core::headers::check_idempotency_header(&args.idempotency_header)
        .context("--idempotency-header")?;
    if args.timeout > MAX_TIMEOUT {
        bail!("--timeout must be at most 300s");
    }

    let bearer_token = args.email_api.bearer_token()?;

    let tenant = tenants::find(pool, &args.tenant).await?;
    // Sealed secrets are bound to the destination's id, so the id is drawn first.
    let id = outbox_store::destinations::new_id();
    let signing_secrets = credentials::stored_form(keys, id, &args.secrets);
    let (has_lookup, has_dedup_window, on_uncertain) = (
        args.lookup_url.is_some(),
        args.idempotency_retention.is_some(),
        args.on_uncertain,
    );
    let max_in_flight = args
        .max_in_flight
        .unwrap_or_else(|| in_flight::default_max_in_flight(has_lookup, has_dedup_window));
    let new = NewDestination {
        tenant_id: tenant.id,
        name: name.clone(),
        url,
        signing_secrets,
        idempotency_header: args.idempotency_header,
        idempotency_retention: args.idempotency_retention,
        lookup_url_template: args.lookup_url,
        on_uncertain: args.on_uncertain,
        timeout: args.timeout,
        max_in_flight,
    };
    // The destination and its failing window are written together.
    let mut tx = pool.begin().await?;
    match email_api {
        Some(mut api) => {
            api.bearer_token = bearer_token
                .map(|token| credentials::stored_form(keys, id, &[token]))
                .and_then(|stored| stored.into_iter().next());
            outbox_store::destinations::create_email_api_with_id(&mut *tx, id, &new, &api).await?;
        }
        None => {
            outbox_store::destinations::create_with_id(&mut *tx, id, &new).await?;
        }
    }
    set_failing_window(&mut tx, tenant.id, &name, args.disable_after_failing).await?;
    tx.commit().await?;
    println!("{id}");
    eprintln!("added destination `{name}` for tenant `{}`", tenant.name);
    eprintln!(
        "in flight: at most {max_in_flight} at once; {}",
        in_flight::crash_consequence(
            i32::try_from(max_in_flight).unwrap_or(i32::MAX),
            has_lookup,
            has_dedup_window,
            on_uncertain,
        )
    );
    for note in notes {
        eprintln!("note: {note}");
    }
    Ok(())
}

/// An email API's settings from the flags: the sender (a mail address, optionally with a
/// display name, `Acme Alerts <alerts@acme.example>`), the recipients, the locale, and the
/// body template, tried out on a sample renewal alert so a template that names a value it
/// will not get, or writes no JSON object, is refused now rather than at the first send.
fn email_api_settings(
    args: &DestinationArgs,
    template: &outbox_render::BodyTemplate,
) -> anyhow::Result<EmailApiSettings> {
    let email = &args.email;
    let Some(from) = email.from.as_deref().map(str::trim) else {
        bail!("a --body-template needs --from: the sender the API is asked to mail from");
    };
    if from.parse::<lettre::message::Mailbox>().is_err() || from.len() > 512 {
        bail!("--from `{from}` is not a mail address (name@domain, or Name <name@domain>)");
    }
    if email.to.is_empty() {
        bail!("a --body-template needs at least one --to: the recipients the API is asked to mail");
    }
    if email.to.len() > 50 {
        bail!("at most 50 --to recipients for an email API");
    }
    let to = checked_recipients(&email.to)?;
    let locale = email.locale.unwrap_or(outbox_render::Locale::En);
    let flag = if args.email_api.body_template.is_some() {
        "--body-template"
    } else {
        "--body-template-file"
    };
    template
        .try_out(locale, from, &to)
        .with_context(|| format!("{flag} does not render a sample alert"))?;
    Ok(EmailApiSettings {
        body_template: template.name().to_owned(),
        body_template_text: (template.name() == "file").then(|| template.source().to_owned()),
        mail_from: from.to_owned(),
        mail_to: to,
        locale: email.locale.map(|locale| locale.code().to_owned()),
        bearer_token: None,
    })
}

/// A name as operators type it: trimmed, 1 to 200 bytes, no control characters.
pub(crate) fn checked_name<'a>(what: &str, name: &'a str) -> anyhow::Result<&'a str> {
    let name = name.trim();
    if name.is_empty() || name.len() > 200 || name.chars().any(char::is_control) {
        bail!("a {what} name must be 1 to 200 printable characters");
    }
    Ok(name)
}

/// An http(s) URL whose host the egress guard accepts, checked the way the dispatcher
/// checks it before every send: the literal address in any spelling, or every address the
/// name resolves to now. A name that does not resolve from here is accepted, with a note
/// to show once the destination is added (the dispatcher may see other DNS); it is checked
/// again on every send.
async fn check_http_url(
    guard: &outbox_egress::Guard,
    flag: &str,
    text: &str,
) -> anyhow::Result<Option<String>> {
    let url = url::Url::parse(text).with_context(|| format!("{flag} `{text}` is not a URL"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        bail!("{flag} must be an http:// or https:// URL with a host");
    }
    match guard.vet_url(&url).await {
        Ok(()) => Ok(None),
        Err(outbox_egress::UrlError::Unresolved { host, .. }) => Ok(Some(format!(
            "{flag} host `{host}` does not resolve from here; the dispatcher checks its addresses before every send"
        ))),
        Err(err) => Err(anyhow::Error::new(err).context(flag.to_owned())),
    }
}

pub(crate) async fn list_destinations(
    pool: &PgPool,
    tenant: Option<&str>,
    json: bool,
) -> anyhow::Result<()> {
    let tenant_id = match tenant {
        Some(tenant) => Some(tenants::find(pool, tenant).await?.id),
        None => None,
    };
    let destinations = listed_destinations(pool, tenant_id).await?;
    if json {
        for destination in &destinations {
            println!("{}", outbox_core::untrusted::to_json_line(destination)?);
        }
        return Ok(());
    }
    let destinations_off: Vec<(String, String, String)> = destinations
        .iter()
        .filter(|d| !d.enabled)
        .map(|d| {
            (
                d.tenant.clone(),
                d.name.clone(),
                d.disabled_reason.clone().unwrap_or_default(),
            )
        })
        .collect();
    let mut table = Table::new([
        "TENANT",
        "NAME",
        "KIND",
        "URL",
        "DEDUP",
        "LOOKUP",
        "ON UNCERTAIN",
        "TIMEOUT",
        "MAX IN FLIGHT",
        "A CRASH LEAVES AT MOST",
        "SECRETS",
        "ENABLED",
        "AUTO-DISABLE",
        "RECIPIENTS",
    ]);
    for d in destinations {
        let dedup = match d.idempotency_retention_secs {
            Some(secs) => format!(
                "{} for {}",
                d.idempotency_header,
                duration::format(Duration::from_secs(secs.unsigned_abs()))
            ),
            None => "no".to_owned(),
        };
        let secrets = secrets_cell(&d);
        let recipients = if d.mail_to.is_empty() {
            "-".to_owned()
        } else {
            d.mail_to.join(",")
        };
        let secrets = if d.kind == DestinationKind::Email {
            if d.smtp_password_set {
                "smtp password"
            } else {
                "none"
            }
            .to_owned()
        } else if d.bearer_token_set {
            format!("{secrets} + api key")
        } else {
            secrets
        };
        let kind = match &d.body_template {
            Some(template) => format!("{} ({template})", d.kind),
            None => d.kind.to_string(),
        };
        table.row([
            d.tenant,
            d.name,
            kind,
            d.url,
            dedup,
            if d.lookup_url_template.is_some() {
                "yes"
            } else {
                "no"
            }
            .to_owned(),
            d.on_uncertain.to_string(),
            duration::format(Duration::from_millis(d.timeout_ms.unsigned_abs().into())),
            d.max_in_flight.to_string(),
            format!(
                "{} uncertain, {}",
                d.max_in_flight,
                in_flight::settled_by(
                    d.lookup_url_template.is_some(),
                    d.idempotency_retention_secs.is_some(),
                    d.on_uncertain
                )
            ),
            secrets,
            if d.enabled { "yes" } else { "no" }.to_owned(),
            match d.disable_after_failing_secs {
                Some(secs) => format!(
                    "after {} failing",
                    duration::format(Duration::from_secs(secs.unsigned_abs()))
                ),
                None => "never".to_owned(),
            },
            recipients,
        ]);
    }
    print!("{table}");
    // Why each disabled one is off, below the table (a reason is a sentence).
    for d in destinations_off {
        println!("{}/{} is disabled: {}", d.0, d.1, d.2);
    }
    Ok(())
}

/// Destinations as operators see them: credentials in URLs hidden, the in-flight bound
/// explained.
async fn listed_destinations(
    pool: &PgPool,
    tenant_id: Option<uuid::Uuid>,
) -> anyhow::Result<Vec<outbox_store::destinations::DestinationSummary>> {
    let mut destinations = outbox_store::destinations::list(pool, tenant_id).await?;
    for d in &mut destinations {
        d.url = redact::url(&d.url);
        d.lookup_url_template = d.lookup_url_template.as_deref().map(redact::url);
        d.crash_bound = in_flight::crash_consequence(
            d.max_in_flight,
            d.lookup_url_template.is_some(),
            d.idempotency_retention_secs.is_some(),
            d.on_uncertain,
        );
    }
    Ok(destinations)
}

/// `outboxctl destination show NAME --tenant T`: one destination, a line per setting.
pub(crate) async fn show_destination(
    pool: &PgPool,
    tenant: &str,
    name: &str,
    json: bool,
) -> anyhow::Result<()> {
    let tenant = tenants::find(pool, tenant).await?;
    let Some(d) = listed_destinations(pool, Some(tenant.id))
        .await?
        .into_iter()
        .find(|d| d.name == name)
    else {
        bail!("tenant `{}` has no destination `{name}`", tenant.name);
    };
    if json {
        println!("{}", outbox_core::untrusted::to_json_line(&d)?);
        return Ok(());
    }
    let dedup = match d.idempotency_retention_secs {
        Some(secs) => format!(
            "{} for {}",
            d.idempotency_header,
            duration::format(Duration::from_secs(secs.unsigned_abs()))
        ),
        None => "no".to_owned(),
    };
    let mut lines = vec![
        ("id", d.id.to_string()),
        ("tenant", d.tenant.clone()),
        ("name", d.name.clone()),
        ("kind", d.kind.to_string()),
        ("url", d.url.clone()),
        ("de-duplication", dedup),
        (
            "lookup",
            d.lookup_url_template
                .clone()
                .unwrap_or_else(|| "no".to_owned()),
        ),
        ("on uncertain", d.on_uncertain.to_string()),
        (
            "timeout",
            duration::format(Duration::from_millis(d.timeout_ms.unsigned_abs().into())),
        ),
        (
            "max in flight",
            format!("{} ({})", d.max_in_flight, d.crash_bound),
        ),
        ("enabled", if d.enabled { "yes" } else { "no" }.to_owned()),
    ];
    if !d.mail_to.is_empty() {
        lines.push(("recipients", d.mail_to.join(",")));
    }
    for (label, value) in lines {
        println!(
            "{:<16}{}",
            format!("{label}:"),
            outbox_core::untrusted::visible(&value)
        );
    }
    Ok(())
}

/// `1`, `1 sealed`, `1 + 1 until 2026-12-01 10:00`: current secrets, how many are
/// encrypted at rest, and the replaced ones still signing during a rotation's overlap.
fn secrets_cell(d: &outbox_store::destinations::DestinationSummary) -> String {
    let total = d.signing_secret_count + d.retiring_secret_count;
    let mut cell = d.signing_secret_count.to_string();
    if let Some(until) = d.retiring_until {
        cell.push_str(&format!(
            " + {} until {}",
            d.retiring_secret_count,
            until.format("%Y-%m-%d %H:%M")
        ));
    }
    if total > 0 && d.sealed_secret_count == total {
        cell.push_str(" sealed");
    } else if d.sealed_secret_count > 0 {
        cell.push_str(&format!(" ({} sealed)", d.sealed_secret_count));
    }
    cell
}

impl DestinationArgs {
    /// The tenant and the destination's name, as given, for the audit log.
    pub(crate) fn audited(&self) -> (&str, &str) {
        (&self.tenant, &self.name)
    }
}

impl UpdateArgs {
    /// The tenant and the destination's name, as given, for the audit log.
    pub(crate) fn audited(&self) -> (&str, &str) {
        (&self.tenant, &self.name)
    }
}
