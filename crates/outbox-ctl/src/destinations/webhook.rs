//! `destination add --kind webhook`: alerts POSTed to a URL, signed; an HTTP email API's
//! too, with a body template (`email_api`). The URLs are checked by the egress guard, the
//! signing secrets and the API's key sealed.

use anyhow::{bail, Context};
use outbox_core::sealing::SealingKeys;
use outbox_core::signing;
use outbox_store::destinations::Delivery;
use outbox_store::{tenants, PgPool};

use super::args::DestinationArgs;
use super::create;
use super::email_api;
use crate::credentials;

/// Adds the webhook destination `name`.
pub(super) async fn add(
    pool: &PgPool,
    keys: &SealingKeys,
    mut args: DestinationArgs,
    name: String,
) -> anyhow::Result<()> {
    let body_template = args.email_api.template()?;
    refuse_other_kinds_flags(&args, body_template.is_some())?;
    let email_api = match &body_template {
        Some(template) => Some(email_api::settings(&args, template)?),
        None => None,
    };
    let Some(url) = args.url.clone() else {
        bail!("a webhook destination needs --url");
    };
    let notes = checked_urls(&args, &url).await?;
    read_signing_secrets(&mut args)?;
    outbox_core::headers::check_idempotency_header(&args.idempotency_header)
        .context("--idempotency-header")?;
    create::check_timeout(args.timeout)?;
    let bearer_token = args.email_api.bearer_token()?;

    let tenant = tenants::find(pool, &args.tenant).await?;
    // Sealed secrets are bound to the destination's id, so the id is drawn first.
    let id = outbox_store::destinations::new_id();
    let signing_secrets = credentials::stored_form(keys, id, &args.secrets);
    let delivery = match email_api {
        Some(mut api) => {
            api.bearer_token = bearer_token.map(|token| credentials::stored_one(keys, id, &token));
            Delivery::EmailApi { url, api }
        }
        None => Delivery::Webhook { url },
    };
    let new = create::new_destination(&args, tenant.id, &name, delivery, signing_secrets);
    outbox_store::destinations::create_with_id(pool, id, &new).await?;
    create::report(id, "destination", &new, &tenant.name, &notes);
    Ok(())
}

/// Refuses the flags of email destinations (the relay's; the messages' unless this is an
/// email API), an email API's key without its body template, and two readers of standard
/// input.
fn refuse_other_kinds_flags(args: &DestinationArgs, email_api: bool) -> anyhow::Result<()> {
    if args.email.smtp_given() || (!email_api && args.email.any_given()) {
        bail!("--smtp-* apply to --kind email destinations only, and --from, --to and --locale to those and to webhooks with a --body-template");
    }
    if !email_api && args.email_api.any_given() {
        bail!("--bearer-token-file and --bearer-token-stdin apply to webhooks with a --body-template (an email API's key)");
    }
    if args.email_api.bearer_token_stdin && args.secret_sources.reads_stdin() {
        bail!("--bearer-token-stdin and --secret-stdin cannot both read standard input");
    }
    Ok(())
}

/// `--url` and `--lookup-url` checked by the egress guard; the notes to show for hosts
/// that do not resolve from here.
async fn checked_urls(args: &DestinationArgs, url: &str) -> anyhow::Result<Vec<String>> {
    let guard = outbox_egress::Guard::new(args.allow_private.clone());
    let mut notes = Vec::new();
    notes.extend(create::check_http_url(&guard, "--url", url).await?);
    if let Some(template) = &args.lookup_url {
        if !template.contains("{key}") {
            bail!("--lookup-url must contain `{{key}}` where the notification id goes");
        }
        notes.extend(
            create::check_http_url(&guard, "--lookup-url", &template.replace("{key}", "key"))
                .await?,
        );
    }
    Ok(notes)
}

/// Checks the `--secret`s, then adds those of `--secret-file` and `--secret-stdin`: at most
/// four in all.
fn read_signing_secrets(args: &mut DestinationArgs) -> anyhow::Result<()> {
    for secret in &args.secrets {
        signing::decode_secret(secret).context("--secret")?;
    }
    args.secrets.extend(args.secret_sources.read()?);
    if args.secrets.len() > 4 {
        bail!("at most 4 signing secrets at once (one per rotation step)");
    }
    Ok(())
}
