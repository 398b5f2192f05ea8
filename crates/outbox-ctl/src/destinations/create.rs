//! The steps every kind of destination is added by: its URLs vetted by the egress guard,
//! its settings written in one transaction with its failing window and ordering, the
//! report of what was added.

use anyhow::{bail, Context};
use outbox_core::in_flight;
use outbox_store::destinations::{EmailApiSettings, EmailSettings, NewDestination};
use outbox_store::PgPool;
use std::time::Duration;
use uuid::Uuid;

use super::args::DestinationArgs;
use super::failing_window::set_failing_window;

/// Longest request timeout a destination may have.
const MAX_TIMEOUT: Duration = Duration::from_secs(300);

/// Refuses a `--timeout` over [`MAX_TIMEOUT`].
pub(super) fn check_timeout(timeout: Duration) -> anyhow::Result<()> {
    if timeout > MAX_TIMEOUT {
        bail!("--timeout must be at most 300s");
    }
    Ok(())
}

/// An http(s) URL whose host the egress guard accepts, checked the way the dispatcher
/// checks it before every send: the literal address in any spelling, or every address the
/// name resolves to now. A name that does not resolve from here is accepted, with a note
/// to show once the destination is added (the dispatcher may see other DNS); it is checked
/// again on every send.
pub(super) async fn check_http_url(
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

/// The settings every kind stores, from the flags: the in-flight bound as given, or the
/// default for what can settle an uncertain send (a lookup, a de-duplication window).
pub(super) fn new_destination(
    args: &DestinationArgs,
    tenant_id: Uuid,
    name: &str,
    url: String,
    signing_secrets: Vec<String>,
) -> NewDestination {
    let (has_lookup, has_dedup_window) = (
        args.lookup_url.is_some(),
        args.idempotency_retention.is_some(),
    );
    NewDestination {
        tenant_id,
        name: name.to_owned(),
        url,
        signing_secrets,
        idempotency_header: args.idempotency_header.clone(),
        idempotency_retention: args.idempotency_retention,
        lookup_url_template: args.lookup_url.clone(),
        on_uncertain: args.on_uncertain,
        timeout: args.timeout,
        max_in_flight: args
            .max_in_flight
            .unwrap_or_else(|| in_flight::default_max_in_flight(has_lookup, has_dedup_window)),
    }
}

/// What a destination's kind stores beside the settings every kind has.
#[derive(Debug)]
pub(super) enum KindSettings {
    /// A plain webhook: nothing more.
    Webhook,
    /// Mailed over SMTP.
    Email(EmailSettings),
    /// A webhook that is an HTTP email API.
    EmailApi(EmailApiSettings),
}

/// Writes the destination `id` with its kind's settings, and the failing window and the
/// ordering `args` give, together.
pub(super) async fn create(
    pool: &PgPool,
    id: Uuid,
    new: &NewDestination,
    kind: &KindSettings,
    args: &DestinationArgs,
) -> anyhow::Result<()> {
    use outbox_store::destinations as store;
    let mut tx = pool.begin().await?;
    match kind {
        KindSettings::Webhook => store::create_with_id(&mut *tx, id, new).await?,
        KindSettings::Email(email) => store::create_email_with_id(&mut *tx, id, new, email).await?,
        KindSettings::EmailApi(api) => {
            store::create_email_api_with_id(&mut *tx, id, new, api).await?
        }
    };
    set_failing_window(
        &mut tx,
        new.tenant_id,
        &new.name,
        args.disable_after_failing,
    )
    .await?;
    outbox_store::lanes::set_new_destination_ordering(&mut tx, id, args.ordering()).await?;
    tx.commit().await?;
    Ok(())
}

/// Says what was added: its id alone on stdout; on stderr which `what` (a destination, an
/// email destination) for which tenant, what its in-flight bound means, and `notes`.
pub(super) fn report(id: Uuid, what: &str, new: &NewDestination, tenant: &str, notes: &[String]) {
    println!("{id}");
    eprintln!("added {what} `{}` for tenant `{tenant}`", new.name);
    eprintln!(
        "in flight: at most {} at once; {}",
        new.max_in_flight,
        in_flight::crash_consequence(
            i32::try_from(new.max_in_flight).unwrap_or(i32::MAX),
            new.lookup_url_template.is_some(),
            new.idempotency_retention.is_some(),
            new.on_uncertain,
        )
    );
    for note in notes {
        eprintln!("note: {note}");
    }
}
