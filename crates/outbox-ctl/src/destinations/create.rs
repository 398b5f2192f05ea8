//! The steps every kind of destination is added by: its URLs and hosts vetted by the
//! egress guard, its settings gathered into one `NewDestination` (written by one INSERT),
//! the report of what was added.

use anyhow::{bail, Context};
use outbox_core::in_flight;
use outbox_egress::UrlError;
use outbox_store::destinations::{Delivery, NewDestination};
use std::time::Duration;
use uuid::Uuid;

use super::args::DestinationArgs;

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
/// name resolves to now. With the note to show once the destination is added when the name
/// does not resolve from here ([`unresolved_note`]).
pub(super) async fn check_http_url(
    guard: &outbox_egress::Guard,
    flag: &str,
    text: &str,
) -> anyhow::Result<Option<String>> {
    let url = url::Url::parse(text).with_context(|| format!("{flag} `{text}` is not a URL"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        bail!("{flag} must be an http:// or https:// URL with a host");
    }
    unresolved_note(flag, guard.vet_url(&url).await)
}

/// What the egress guard said of `flag`'s host: refused is an error; a name that does not
/// resolve from here is accepted, with a note to show once the destination is added (the
/// dispatcher may see other DNS, and checks the addresses again before every send).
pub(super) fn unresolved_note(
    flag: &str,
    vetted: Result<(), UrlError>,
) -> anyhow::Result<Option<String>> {
    match vetted {
        Ok(()) => Ok(None),
        Err(UrlError::Unresolved { host, .. }) => Ok(Some(format!(
            "{flag} host `{host}` does not resolve from here; the dispatcher checks its addresses before every send"
        ))),
        Err(err) => Err(anyhow::Error::new(err).context(flag.to_owned())),
    }
}

/// What `destination add` creates from the flags: `delivery` and the settings every kind
/// has (the in-flight bound as given, or the default for what can settle an uncertain
/// send: a lookup, a de-duplication window), its ordering and its failing window.
pub(super) fn new_destination(
    args: &DestinationArgs,
    tenant_id: Uuid,
    name: &str,
    delivery: Delivery,
    signing_secrets: Vec<String>,
) -> NewDestination {
    let (has_lookup, has_dedup_window) = (
        args.lookup_url.is_some(),
        args.idempotency_retention.is_some(),
    );
    NewDestination {
        tenant_id,
        name: name.to_owned(),
        delivery,
        signing_secrets,
        idempotency_header: args.idempotency_header.clone(),
        idempotency_retention: args.idempotency_retention,
        lookup_url_template: args.lookup_url.clone(),
        on_uncertain: args.on_uncertain,
        timeout: args.timeout,
        max_in_flight: args
            .max_in_flight
            .unwrap_or_else(|| in_flight::default_max_in_flight(has_lookup, has_dedup_window)),
        ordering: args.ordering(),
        disable_after_failing: args.disable_after_failing.0,
    }
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
