//! Which header may carry the notification id (`--idempotency-header`): a plain header
//! name that is not one of the headers that frame the request or the connection, nor one
//! that carries credentials, nor one the dispatcher sets itself. `Host: <uuid>` or
//! `Content-Length: <uuid>` would corrupt the request, or smuggle a second one through a
//! proxy; `Expect` and `Content-Encoding` change how the body is sent or read; and
//! `Authorization: <uuid>` or `Cookie: <uuid>` would present the id as the dispatcher's
//! credentials (replacing an email API's key, or read by a receiver's auth layer, which
//! may log or reject it).

/// Why a header name cannot carry the notification id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderNameError {
    /// Empty, too long, or not made of letters, digits and `-`.
    #[error("`{0}` is not a header name (1 to 100 letters, digits and `-`)")]
    Malformed(String),
    /// A header that frames the request or the connection, carries credentials, or that
    /// the dispatcher sets.
    #[error("`{0}` cannot carry the notification id: {1}")]
    Reserved(String, &'static str),
}

/// Headers that frame the message or manage the connection (hop-by-hop).
const FRAMING: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "expect",
    "content-encoding",
];

/// Headers that carry credentials.
const CREDENTIALS: &[&str] = &["authorization", "cookie"];

/// Checks a header name given for the notification id.
pub fn check_idempotency_header(name: &str) -> Result<(), HeaderNameError> {
    let well_formed = !name.is_empty()
        && name.len() <= 100
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !well_formed {
        return Err(HeaderNameError::Malformed(name.to_owned()));
    }
    let lower = name.to_ascii_lowercase();
    let reserved = |why| Err(HeaderNameError::Reserved(name.to_owned(), why));
    if FRAMING.contains(&lower.as_str()) {
        return reserved("it frames the request or manages the connection");
    }
    if CREDENTIALS.contains(&lower.as_str()) {
        return reserved("it carries credentials");
    }
    if lower.starts_with("proxy-") {
        return reserved("proxy headers are for the connection to a proxy");
    }
    if lower == "content-type"
        || lower.starts_with("webhook-")
        || lower == "traceparent"
        || lower == "tracestate"
    {
        return reserved("the dispatcher sets it on every request");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_names_are_accepted() {
        for name in [
            "Idempotency-Key",
            "X-Request-Id",
            "X-Idempotency-Key",
            "Dedup",
        ] {
            assert_eq!(check_idempotency_header(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn framing_hop_by_hop_credential_and_own_headers_are_refused_in_any_case() {
        for name in [
            "Host",
            "content-length",
            "Transfer-Encoding",
            "CONNECTION",
            "Keep-Alive",
            "Upgrade",
            "TE",
            "Trailer",
            "Expect",
            "content-encoding",
            "Authorization",
            "COOKIE",
            "Proxy-Authorization",
            "Proxy-Connection",
            "Content-Type",
            "webhook-id",
            "Webhook-Signature",
            "webhook-timestamp",
            "traceparent",
            "TraceState",
        ] {
            assert!(
                matches!(
                    check_idempotency_header(name),
                    Err(HeaderNameError::Reserved(..))
                ),
                "{name}"
            );
        }
    }

    #[test]
    fn malformed_names_are_refused() {
        for name in ["", "Bad Header", "X:Y", "Key\r\nHost", &"a".repeat(101)] {
            assert!(
                matches!(
                    check_idempotency_header(name),
                    Err(HeaderNameError::Malformed(_))
                ),
                "{name:?}"
            );
        }
    }
}
