//! What every request to one webhook destination shares, prepared once per destination
//! and settings rather than once per attempt ([`PreparedDestinations`]): its URL parsed and
//! checked against the egress guard, the request target, the `Basic` authorization its URL's
//! credentials stand for, its idempotency header's name, its signing keys opened and
//! decoded, and its API key's header.
//!
//! Each attempt used to do all of this again: parsing and checking the URL alone was about
//! 3 % of the dispatcher's CPU in an HTTP drain, and opening the sealed secrets and the
//! header checks another 1.2 %
//! (docs/performance-log.md#item-21-a-destinations-request-parts-prepared-once).
//!
//! Every step is a function of the destination's stored settings, the process's sealing
//! keys and its egress guard, none of which changes while the process runs except the
//! settings, so an entry is kept with the exact stored values it was prepared from, and a
//! claim whose row carries any other value prepares it again: a request is built from what
//! the claim read, as before. A destination that cannot be prepared (a URL that does not
//! parse, a blocked address, a secret that does not open) is kept too, with the refusal
//! every attempt gets, in the order the checks always ran.

use base64::Engine;
use hyper::header::{HeaderName, HeaderValue};
use outbox_core::sealing::SealingKeys;
use outbox_core::signing;
use outbox_egress::{Guard, UrlError};
use outbox_store::dispatch::{ClaimedAlert, ClaimedDestination};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use url::Url;
use uuid::Uuid;

use crate::classify::Exchange;

/// One destination's request parts, or why none can be sent to it.
pub(crate) type Prepared = Result<RequestParts, Exchange>;

/// What every request to one destination carries. Its `Debug` leaves out the keys and
/// the authorizations.
pub(crate) struct RequestParts {
    /// The URL without its credentials (the client span names its host and port).
    pub(crate) url: Url,
    /// The request target.
    pub(crate) uri: hyper::Uri,
    /// `Basic` authorization from the URL's `user:password@`, if it had any.
    pub(crate) basic: Option<HeaderValue>,
    /// The header that carries the notification id.
    pub(crate) key_header: HeaderName,
    /// The signing keys, decoded (none: requests are not signed).
    pub(crate) signing_keys: Vec<Vec<u8>>,
    /// `Authorization: Bearer` with the destination's API key, marked sensitive.
    pub(crate) bearer: Option<HeaderValue>,
}

impl std::fmt::Debug for RequestParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestParts")
            .field("uri", &outbox_core::redact::url(&self.uri.to_string()))
            .field("basic", &self.basic.is_some())
            .field("key_header", &self.key_header)
            .field("signing_keys", &self.signing_keys.len())
            .field("bearer", &self.bearer.is_some())
            .finish_non_exhaustive()
    }
}

/// The destination's settings an entry was prepared from, as the claim that prepared it
/// read them. Every row of one claim shares that claim's settings, so a row usually
/// carries the very same ones; otherwise the stored values that go into a request are
/// compared.
struct Settings(Arc<ClaimedDestination>);

impl Settings {
    fn matches(&self, row: &ClaimedAlert) -> bool {
        let (was, now) = (&self.0, &row.destination);
        Arc::ptr_eq(was, now)
            || (was.url == now.url
                && was.idempotency_header == now.idempotency_header
                && was.signing_secrets == now.signing_secrets
                && was.bearer_token == now.bearer_token)
    }

    fn of(row: &ClaimedAlert) -> Self {
        Settings(row.destination.clone())
    }
}

/// The process's prepared destinations, by destination id: one entry each, replaced when
/// a claim carries other settings, kept for the process's life (one per destination it
/// has sent to).
#[derive(Default)]
pub(crate) struct PreparedDestinations {
    entries: Mutex<HashMap<Uuid, (Settings, Arc<Prepared>)>>,
}

impl std::fmt::Debug for PreparedDestinations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedDestinations")
            .field("destinations", &self.lock().len())
            .finish()
    }
}

impl PreparedDestinations {
    /// The request parts of `row`'s destination as `row` states its settings.
    pub(crate) fn of(
        &self,
        guard: &Guard,
        keys: &SealingKeys,
        row: &ClaimedAlert,
    ) -> Arc<Prepared> {
        if let Some((settings, prepared)) = self.lock().get(&row.destination.id) {
            if settings.matches(row) {
                return prepared.clone();
            }
        }
        // Prepared outside the lock: opening sealed secrets is the slow part.
        let prepared = Arc::new(prepare(guard, keys, row));
        self.lock()
            .insert(row.destination.id, (Settings::of(row), prepared.clone()));
        prepared
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, (Settings, Arc<Prepared>)>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Prepares `row`'s destination: the checks in the order each attempt made them.
fn prepare(guard: &Guard, keys: &SealingKeys, row: &ClaimedAlert) -> Prepared {
    let Some(url) = row.destination.url.as_deref() else {
        return Err(Exchange::Unsendable(
            "the destination has no URL to POST to".to_owned(),
        ));
    };
    let mut url = checked_url(guard, url)?;
    // The same rule as when the destination was added, in case the row was written by
    // other means: a framing header would corrupt the request.
    if let Err(err) =
        outbox_core::headers::check_idempotency_header(&row.destination.idempotency_header)
    {
        return Err(Exchange::Unsendable(format!("idempotency header: {err}")));
    }
    let Ok(key_header) = HeaderName::from_bytes(row.destination.idempotency_header.as_bytes())
    else {
        return Err(Exchange::Unsendable(format!(
            "idempotency header `{}` is not a valid header name",
            row.destination.idempotency_header
        )));
    };
    // A secret that does not open (key missing or wrong, value altered or copied from
    // another destination) is a configuration error: nothing is sent unsigned.
    let signing_keys = row
        .destination
        .signing_secrets
        .iter()
        .map(|stored| {
            let secret = keys
                .open(row.destination.id, stored)
                .map_err(|err| format!("a signing secret of the destination: {err}"))?;
            signing::decode_secret(&secret)
                .map_err(|_| "a signing secret of the destination is malformed".to_owned())
        })
        .collect::<Result<Vec<_>, String>>()
        .map_err(Exchange::Unsendable)?;
    let bearer = match &row.destination.bearer_token {
        None => None,
        // Like a signing secret: one that does not open is a configuration error.
        Some(stored) => {
            let token = keys.open(row.destination.id, stored).map_err(|err| {
                Exchange::Unsendable(format!("the API key of the destination: {err}"))
            })?;
            let Ok(mut value) = HeaderValue::from_str(&format!("Bearer {token}")) else {
                return Err(Exchange::Unsendable(
                    "the API key of the destination is not a valid header value".into(),
                ));
            };
            value.set_sensitive(true);
            Some(value)
        }
    };
    let (uri, basic) = request_target(&mut url)?;
    Ok(RequestParts {
        url,
        uri,
        basic,
        key_header,
        signing_keys,
        bearer,
    })
}

/// Parses a URL and checks an IP-literal host against the guard (literals never reach
/// the client's resolver, which checks names).
pub(crate) fn checked_url(guard: &Guard, text: &str) -> Result<Url, Exchange> {
    let url = Url::parse(text)
        .map_err(|err| Exchange::Unsendable(format!("the URL does not parse: {err}")))?;
    match guard.check_url(&url) {
        Ok(()) => Ok(url),
        Err(UrlError::Refused(refused)) => Err(Exchange::Blocked(refused.to_string())),
        Err(err) => Err(Exchange::Unsendable(err.to_string())),
    }
}

/// The request target of `url` without its `user:password@`, and the `Basic`
/// authorization those stood for: credentials travel in that header, never in the
/// request's target.
pub(crate) fn request_target(url: &mut Url) -> Result<(hyper::Uri, Option<HeaderValue>), Exchange> {
    let basic = basic_credentials(url);
    let uri = hyper::Uri::try_from(url.as_str())
        .map_err(|err| Exchange::Unsendable(format!("the URL cannot be sent: {err}")))?;
    Ok((uri, basic))
}

/// Takes `user:password@` out of `url`, as the `Basic` authorization it stands for
/// (percent-decoded, as browsers and curl read it).
fn basic_credentials(url: &mut Url) -> Option<HeaderValue> {
    if url.username().is_empty() && url.password().is_none() {
        return None;
    }
    let decode = |text: &str| percent_encoding::percent_decode_str(text).collect::<Vec<u8>>();
    let mut pair = decode(url.username());
    pair.push(b':');
    pair.extend(url.password().map(decode).unwrap_or_default());
    let _ = url.set_username("");
    let _ = url.set_password(None);
    let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
    let mut value =
        HeaderValue::from_str(&format!("Basic {encoded}")).expect("base64 is a valid header value");
    value.set_sensitive(true);
    Some(value)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

    use super::*;
    use crate::judge::tests::claim;

    /// A signing secret as stored without sealing keys: 32 bytes, base64, `whsec_`.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn parts(prepared: &Prepared) -> &RequestParts {
        prepared.as_ref().unwrap()
    }

    fn refusal(prepared: &Prepared) -> &Exchange {
        prepared.as_ref().unwrap_err()
    }

    #[test]
    fn a_destination_is_prepared_once_until_a_claim_states_other_settings() {
        let destinations = PreparedDestinations::default();
        let (guard, keys) = (Guard::default(), SealingKeys::default());
        let mut row = claim();
        Arc::make_mut(&mut row.destination).signing_secrets = vec![SECRET.to_owned()];
        let first = destinations.of(&guard, &keys, &row);
        assert!(Arc::ptr_eq(&first, &destinations.of(&guard, &keys, &row)));
        assert_eq!(parts(&first).uri, "https://hooks.example/x");

        // The URL changed: the next claim's requests go to the new one.
        Arc::make_mut(&mut row.destination).url = Some("https://hooks.example/y".to_owned());
        let moved = destinations.of(&guard, &keys, &row);
        assert_eq!(parts(&moved).uri, "https://hooks.example/y");

        // A rotation added a secret: the requests are signed with both.
        Arc::make_mut(&mut row.destination)
            .signing_secrets
            .push(SECRET.replace('M', "N"));
        assert_eq!(
            parts(&destinations.of(&guard, &keys, &row))
                .signing_keys
                .len(),
            2
        );

        // Another destination has an entry of its own.
        let mut other = claim();
        Arc::make_mut(&mut other.destination).id = Uuid::from_u128(1);
        assert!(parts(&destinations.of(&guard, &keys, &other))
            .signing_keys
            .is_empty());
        assert_eq!(
            parts(&destinations.of(&guard, &keys, &row))
                .signing_keys
                .len(),
            2
        );
    }

    #[test]
    fn a_destination_that_cannot_be_sent_to_is_refused_as_each_attempt_was() {
        let destinations = PreparedDestinations::default();
        let (guard, keys) = (Guard::default(), SealingKeys::default());
        let refused = |change: &dyn Fn(&mut ClaimedAlert)| {
            let mut row = claim();
            change(&mut row);
            refusal(&destinations.of(&guard, &keys, &row)).clone()
        };
        assert!(matches!(
            refused(&|row| Arc::make_mut(&mut row.destination).url = Some("not a url".to_owned())),
            Exchange::Unsendable(why) if why.starts_with("the URL does not parse")
        ));
        // An address literal the guard keeps closed never reaches the resolver.
        assert!(matches!(
            refused(&|row| Arc::make_mut(&mut row.destination).url =
                Some("http://10.1.2.3/hook".to_owned())),
            Exchange::Blocked(_)
        ));
        assert!(matches!(
            refused(&|row| Arc::make_mut(&mut row.destination).idempotency_header = "Content-Length".to_owned()),
            Exchange::Unsendable(why) if why.starts_with("idempotency header")
        ));
        assert!(matches!(
            refused(&|row| Arc::make_mut(&mut row.destination).signing_secrets = vec!["whsec_short".to_owned()]),
            Exchange::Unsendable(why) if why == "a signing secret of the destination is malformed"
        ));
        // The first failing check is the one named, as before: the URL is checked first.
        assert!(matches!(
            refused(&|row| {
                Arc::make_mut(&mut row.destination).url = Some("not a url".to_owned());
                Arc::make_mut(&mut row.destination).signing_secrets = vec!["whsec_short".to_owned()];
            }),
            Exchange::Unsendable(why) if why.starts_with("the URL does not parse")
        ));
    }

    #[test]
    fn credentials_in_the_url_become_a_basic_authorization_the_api_key_overrides() {
        let destinations = PreparedDestinations::default();
        let (guard, keys) = (Guard::default(), SealingKeys::default());
        let mut row = claim();
        Arc::make_mut(&mut row.destination).url =
            Some("https://ops%40acme:p%3Ass@hooks.example/x".to_owned());
        let prepared = destinations.of(&guard, &keys, &row);
        let with_url_credentials = parts(&prepared);
        assert_eq!(with_url_credentials.uri, "https://hooks.example/x");
        // base64 of `ops@acme:p:ss`, percent-decoded.
        assert_eq!(
            with_url_credentials.basic.as_ref().unwrap(),
            "Basic b3BzQGFjbWU6cDpzcw=="
        );
        assert!(with_url_credentials.bearer.is_none());

        Arc::make_mut(&mut row.destination).bearer_token = Some("key-1".to_owned());
        let prepared = destinations.of(&guard, &keys, &row);
        assert_eq!(parts(&prepared).bearer.as_ref().unwrap(), "Bearer key-1");
        assert!(parts(&prepared).bearer.as_ref().unwrap().is_sensitive());
        // Neither the authorizations nor the URL's credentials show in a debug print.
        let printed = format!("{prepared:?} {destinations:?}");
        for secret in ["key-1", "b3BzQGFjbWU6cDpzcw==", "p%3Ass", "ops%40acme"] {
            assert!(!printed.contains(secret), "{printed}");
        }
    }
}
