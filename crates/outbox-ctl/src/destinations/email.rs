//! `destination add --kind email`: alerts mailed over SMTP. The relay's host is checked by
//! the egress guard as the dispatcher checks it before every send, the addresses parsed,
//! the password sealed like signing secrets.

use anyhow::{bail, Context};
use outbox_core::sealing::SealingKeys;
use outbox_core::{SmtpRelay, SmtpTls};
use outbox_store::destinations::{Delivery, EmailSettings, Mailing};
use outbox_store::{tenants, PgPool};

use super::args::{DestinationArgs, EmailArgs};
use super::create;
use crate::credentials;

/// Adds the email destination `name`.
pub(super) async fn add(
    pool: &PgPool,
    keys: &SealingKeys,
    args: DestinationArgs,
    name: String,
) -> anyhow::Result<()> {
    refuse_other_kinds_flags(&args)?;
    let email = &args.email;
    let Some(host) = email.smtp_host.as_deref() else {
        bail!("--kind email needs --smtp-host");
    };
    let (mut settings, password) = checked_settings(email, host)?;
    create::check_timeout(args.timeout)?;
    let guard = outbox_egress::Guard::new(args.allow_private.clone());
    let note = create::unresolved_note("--smtp-host", guard.vet_host(&settings.relay.host).await)?;

    let tenant = tenants::find(pool, &args.tenant).await?;
    // The sealed password is bound to the destination's id, so the id is drawn first.
    let id = outbox_store::destinations::new_id();
    settings.smtp_password = password.map(|password| credentials::stored_one(keys, id, &password));
    // Nothing settles an email destination's uncertain send but its policy: it has no
    // lookup and no de-duplication window (refused above), and the default bound says so.
    let delivery = Delivery::Email(settings);
    let new = create::new_destination(&args, tenant.id, &name, delivery, Vec::new());
    outbox_store::destinations::create_with_id(pool, id, &new).await?;
    let notes: Vec<String> = note.into_iter().collect();
    create::report(id, "email destination", &new, &tenant.name, &notes);
    Ok(())
}

/// Refuses the flags of webhooks and of email APIs: an email destination renders its own
/// message, and has no lookup, no key a relay de-duplicates by, and no signature.
fn refuse_other_kinds_flags(args: &DestinationArgs) -> anyhow::Result<()> {
    if args.email_api.any_given() {
        bail!("--body-template, --body-template-file and --bearer-token-* apply to webhook destinations only: an email destination renders its own message");
    }
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
    Ok(())
}

/// The relay at `host` and the relay's and the messages' settings from the flags,
/// checked, with the password as given (it is sealed once the destination's id is drawn).
fn checked_settings(
    email: &EmailArgs,
    host: &str,
) -> anyhow::Result<(EmailSettings, Option<String>)> {
    let Some(tls) = email.smtp_tls else {
        bail!("--kind email needs --smtp-tls none|starttls|tls");
    };
    let smtp_ca_pem = match &email.smtp_ca_file {
        None => None,
        Some(_) if tls == SmtpTls::None => {
            bail!("--smtp-ca-file needs --smtp-tls starttls or tls: without TLS there is no certificate to check")
        }
        Some(path) => Some(checked_ca_file(path)?),
    };
    if email.smtp_port == 0 {
        bail!("--smtp-port must be 1 to 65535");
    }
    let relay = SmtpRelay::new(host, email.smtp_port)
        .map_err(|err| anyhow::anyhow!("--smtp-host {err}"))?;
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
    let settings = EmailSettings {
        relay,
        smtp_tls: tls,
        smtp_username: email.smtp_user.clone(),
        smtp_password: None,
        smtp_ca_pem,
        mail: Mailing {
            from,
            to,
            locale: email.locale,
        },
    };
    Ok((settings, password))
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
pub(super) fn checked_recipients(to: &[String]) -> anyhow::Result<Vec<String>> {
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
