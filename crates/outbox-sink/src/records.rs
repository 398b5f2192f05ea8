//! What the sink shows of its work, as its JSON routes list it: the record of each
//! delivery ([`Record`], with its [`Outcome`]) and of each message ([`MailRecord`]), and the
//! counters ([`Stats`], [`SmtpStats`]); and how a received trace header is shown
//! ([`trace_header`], [`INVALID_TRACE_HEADER`]).

use serde::Serialize;

use crate::signature::SignatureCheck;

/// What the sink did with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Applied, with a new receipt.
    Applied,
    /// The key was applied within the retention: answered with the original receipt,
    /// nothing applied.
    WireDuplicate,
    /// Refused by the fail rate; not applied.
    Failed,
    /// Answered with a scripted response; not applied.
    Scripted,
    /// The body exceeded the size limit; answered 413, not applied.
    TooLarge,
    /// A secret is configured and the signature is missing, wrong or stale: answered 401,
    /// not applied.
    Refused,
}

/// One request to a delivery path, as `GET /_sink/records` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Record {
    /// Position in arrival order, from 1 (restarts at `POST /_sink/reset`).
    pub seq: u64,
    /// Arrival time, RFC 3339.
    pub at: String,
    /// Request path.
    pub path: String,
    /// Idempotency key, when the header was present.
    pub key: Option<String>,
    /// Hex SHA-256 of the body; `None` when the body was too large to read.
    pub payload_sha256: Option<String>,
    /// Signature check result.
    pub signature: SignatureCheck,
    /// What the sink did.
    pub outcome: Outcome,
    /// Receipt given, for applied and wire-duplicate deliveries.
    pub receipt: Option<String>,
    /// Status answered; `None` when the response was dropped.
    pub status: Option<u16>,
    /// The connection was closed without a response.
    pub dropped: bool,
    /// The `Authorization` header's scheme and the SHA-256 of its credentials
    /// (`Bearer sha256:…`), so a test can check which key was sent without the sink
    /// keeping it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization: Option<String>,
    /// The `traceparent` header received (repeated headers joined with `, `), as written
    /// when it is printable ASCII of at most [`MAX_TRACE_HEADER_BYTES`], else
    /// [`INVALID_TRACE_HEADER`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<String>,
    /// The `tracestate` header received, shown as `trace_parent` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_state: Option<String>,
    /// The body as text (invalid UTF-8 replaced), with `--keep-bodies`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// Counters since start or the last reset, as `GET /stats` answers them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Requests to delivery paths.
    pub requests: u64,
    /// Distinct keys among applied deliveries.
    pub distinct_keys: u64,
    /// Deliveries applied.
    pub applied: u64,
    /// Deliveries answered with an earlier receipt without applying.
    pub wire_duplicates: u64,
    /// Applied deliveries whose key had been applied before: the duplicates a receiver
    /// without de-duplication actually suffers.
    pub effective_duplicates: u64,
    /// Deliveries refused by the fail rate.
    pub failed: u64,
    /// Deliveries answered by a scripted response.
    pub scripted: u64,
    /// Deliveries whose response was dropped.
    pub dropped: u64,
    /// Deliveries with an invalid, missing or stale signature while a secret is configured.
    pub bad_signatures: u64,
    /// Deliveries refused (401) for their signature; each is also a bad signature.
    pub refused: u64,
    /// Messages received over SMTP; only when the SMTP listener is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smtp: Option<SmtpStats>,
}

/// SMTP counters since start or the last reset, under `smtp` in `GET /stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SmtpStats {
    /// Messages accepted (dropped replies included): what the inbox holds.
    pub messages: u64,
    /// Distinct Message-IDs among them.
    pub distinct_message_ids: u64,
    /// Messages whose Message-ID was already in the inbox: the duplicates a reader sees.
    pub duplicate_message_ids: u64,
    /// Accepted messages whose final reply was dropped.
    pub dropped: u64,
    /// Messages refused after their data (scripted replies and the fail rate).
    pub refused: u64,
    /// Recipients refused by a scripted reply.
    pub refused_recipients: u64,
    /// Senders (`MAIL FROM`) refused by a scripted reply.
    pub refused_senders: u64,
    /// Messages over the size limit, answered 552.
    pub too_large: u64,
}

/// A message accepted over SMTP (even when the reply to its final dot was dropped), as
/// `GET /_sink/messages` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MailRecord {
    /// Position in arrival order, from 1 (restarts at `POST /_sink/reset`).
    pub seq: u64,
    /// Arrival time, RFC 3339.
    pub at: String,
    /// Queue id given in the `250` reply (or that would have been, when dropped).
    pub queue_id: String,
    /// `Message-ID` header, without angle brackets.
    pub message_id: Option<String>,
    /// Envelope sender (`MAIL FROM`), empty for a null sender.
    pub mail_from: String,
    /// Envelope recipients (`RCPT TO`) accepted, in order.
    pub rcpt_to: Vec<String>,
    /// `Subject` header, RFC 2047 encoded words decoded.
    pub subject: Option<String>,
    /// `To` header, unfolded, as written: who the message says it is for, beside the
    /// envelope's `rcpt_to`, who actually received it.
    pub to: Option<String>,
    /// `X-Alert-Id` header.
    pub alert_id: Option<String>,
    /// Size of the message data in bytes (after dot-unstuffing, with its final CRLF).
    pub size: u64,
    /// Hex SHA-256 of the message data: header section and body, exactly as received,
    /// less the `Traceparent` and `Tracestate` fields at its top (a sender sets them anew
    /// on every attempt; the rest of a resend is the same bytes).
    pub sha256: String,
    /// Hex SHA-256 of the body alone (after the blank line that ends the headers).
    pub body_sha256: String,
    /// User the client authenticated as, when AUTH is configured.
    pub authenticated_as: Option<String>,
    /// How the session was encrypted: `starttls`, `tls` (implicit), or `null` for plain
    /// text.
    pub tls: Option<String>,
    /// The connection was closed without answering the final dot.
    pub dropped: bool,
    /// Name of the `.eml` file in `--eml-dir`, when one was written.
    pub eml_file: Option<String>,
    /// The `Traceparent` header field, unfolded, shown as a delivery's `trace_parent` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<String>,
}

/// What a record shows in place of a trace header that is not printable ASCII or is longer
/// than [`MAX_TRACE_HEADER_BYTES`].
pub const INVALID_TRACE_HEADER: &str = "<invalid>";

/// Longest trace header value a record shows as written.
pub const MAX_TRACE_HEADER_BYTES: usize = 512;

/// A received trace header's value as a record shows it: as written when every byte is
/// printable ASCII (space to `~`) and there are at most [`MAX_TRACE_HEADER_BYTES`], else
/// [`INVALID_TRACE_HEADER`]. The marker rather than the bytes keeps the JSON plain while
/// still saying that something else arrived, which is what tests look for: no CR, LF,
/// control byte or oversized value may ever reach a destination's headers.
pub(crate) fn trace_header(value: &[u8]) -> String {
    let printable = value.iter().all(|b| (b' '..=b'~').contains(b));
    if printable && value.len() <= MAX_TRACE_HEADER_BYTES {
        // Printable ASCII is UTF-8.
        String::from_utf8_lossy(value).into_owned()
    } else {
        INVALID_TRACE_HEADER.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_headers_are_kept_only_when_printable_and_short() {
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert_eq!(trace_header(parent.as_bytes()), parent);
        assert_eq!(trace_header(b""), "");
        for junk in [
            &b"00-abc\r\nX-Injected: 1"[..],
            b"00-abc\tdef",
            b"00-\xff",
            b"\x7f",
            "café".as_bytes(),
        ] {
            assert_eq!(trace_header(junk), INVALID_TRACE_HEADER, "{junk:?}");
        }
        let longest = "a".repeat(MAX_TRACE_HEADER_BYTES);
        assert_eq!(trace_header(longest.as_bytes()), longest);
        let longer = "a".repeat(MAX_TRACE_HEADER_BYTES + 1);
        assert_eq!(trace_header(longer.as_bytes()), INVALID_TRACE_HEADER);
    }
}
