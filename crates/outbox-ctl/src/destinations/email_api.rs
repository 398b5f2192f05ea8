//! A webhook that is an HTTP email API (`destination add --body-template`): its sender,
//! recipients and locale, and the body template tried out before anything is stored.

use anyhow::{bail, Context};
use outbox_store::destinations::{EmailApiSettings, Mailing};

use super::args::DestinationArgs;
use super::email::checked_recipients;

/// An email API's settings from the flags: the sender (a mail address, optionally with a
/// display name, `Acme Alerts <alerts@acme.example>`), the recipients, the locale, and the
/// body template, tried out on a sample renewal alert so a template that names a value it
/// will not get, or writes no JSON object, is refused now rather than at the first send.
/// The API's key is added once the destination's id is drawn (it is sealed with it).
pub(super) fn settings(
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
    let locale = email.locale.unwrap_or(outbox_core::Locale::En);
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
        bearer_token: None,
        mail: Mailing {
            from: from.to_owned(),
            to,
            locale: email.locale,
        },
    })
}
