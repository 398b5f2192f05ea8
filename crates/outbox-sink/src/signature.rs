//! Standard Webhooks signatures: how a delivery's signature is checked against the
//! configured secrets and the timestamp tolerance, and what the check found.

use hyper::header::HeaderMap;
use serde::Serialize;
use std::time::Duration;

/// The result of checking a delivery's Standard Webhooks signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SignatureCheck {
    /// A signature matches one of the secrets.
    Valid,
    /// Signature headers are there but none matches (or the timestamp is not an integer).
    Invalid,
    /// A secret is configured but the signature headers are absent.
    Missing,
    /// A signature matches, but `webhook-timestamp` is outside the tolerance: a replay of
    /// an old request, or a forged date.
    Stale,
    /// No secret is configured, or the body was never read.
    Unchecked,
}

impl SignatureCheck {
    /// Why a delivery with this signature is refused.
    pub(crate) fn refusal(self) -> &'static str {
        match self {
            SignatureCheck::Missing => {
                "the webhook-id, webhook-timestamp and webhook-signature headers are required"
            }
            SignatureCheck::Stale => "webhook-timestamp is outside the tolerance",
            SignatureCheck::Invalid | SignatureCheck::Valid | SignatureCheck::Unchecked => {
                "no signature matches"
            }
        }
    }

    /// Whether a delivery with this signature is refused (with a secret configured).
    pub(crate) fn is_bad(self) -> bool {
        matches!(
            self,
            SignatureCheck::Invalid | SignatureCheck::Missing | SignatureCheck::Stale
        )
    }
}

/// Checks the Standard Webhooks signature of a request against `keys`, and its timestamp
/// against `tolerance` around `now` (seconds since the epoch). Without keys nothing is
/// checked.
pub(crate) fn check(
    keys: &[Vec<u8>],
    tolerance: Duration,
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
) -> SignatureCheck {
    if keys.is_empty() {
        return SignatureCheck::Unchecked;
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (Some(id), Some(timestamp), Some(signature)) = (
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
    ) else {
        return SignatureCheck::Missing;
    };
    let Ok(timestamp) = timestamp.trim().parse::<i64>() else {
        return SignatureCheck::Invalid;
    };
    if !outbox_core::signing::verify(keys, id, timestamp, body, signature) {
        return SignatureCheck::Invalid;
    }
    let tolerance = i64::try_from(tolerance.as_secs()).unwrap_or(i64::MAX);
    if now.abs_diff(timestamp) > tolerance.unsigned_abs() {
        return SignatureCheck::Stale;
    }
    SignatureCheck::Valid
}
