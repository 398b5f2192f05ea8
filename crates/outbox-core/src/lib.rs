//! Domain types of the alert outbox. No I/O lives here, so everything is unit-tested plainly.
//!
//! Layout:
//! - [`state`]: the lifecycle's vocabulary, typed: an alert's state ([`AlertState`]), the
//!   live queue's status ([`LiveStatus`]), where it comes to rest ([`Outcome`]), attempts
//!   ([`AttemptKind`], [`AttemptOutcome`]), destinations ([`DestinationKind`],
//!   [`OnUncertain`], [`Ordering`], [`OnHeadFailed`], [`SmtpTls`]), console accounts
//!   ([`OperatorRole`]) and operators' bulk replays ([`BulkReplayState`]).
//! - [`locale`]: the languages alert email is written in ([`Locale`]), as stored and as
//!   configured.
//! - [`in_flight`]: a destination's in-flight bound (its crash blast radius): defaults and
//!   what it means for an operator.
//! - [`identity`]: what makes two approvals the same alert, and the input limits
//!   ([`MAX_IDENTITY_FIELD_BYTES`], [`MAX_PAYLOAD_BYTES`]); a payload that passed them is a
//!   [`CheckedPayload`].
//! - [`json_limits`]: how deeply a payload may nest and how large its numbers may be
//!   ([`MAX_PAYLOAD_DEPTH`]), checked on the text before anything parses it.
//! - [`untrusted`]: showing text others wrote on a terminal without letting it act on
//!   the terminal (control, escape and bidirectional characters shown as escapes).
//! - [`token`]: API tokens (generated here, only their hash is ever stored).
//! - [`password`]: operator passwords (generated here, stored as argon2id hashes).
//! - [`signing`]: Standard Webhooks signing secrets (`whsec_...`).
//! - [`sealing`]: signing secrets encrypted at rest under named keys (`OUTBOX_SECRET_KEYS`).
//! - [`redact`]: credentials in URLs hidden before they are shown.
//! - [`watchlist_query`]: watchlist queries (terms, phrases, exclusions) and matching.
//! - [`renewal`]: contract renewal tiers, counted in the tenant's time zone.
//! - [`retry`]: backoff schedule with full jitter, `Retry-After`.
//! - [`duration`]: human durations (`10s`, `24h`, `30d`) as used on the command line.
//! - [`recipients`]: which mail addresses an email alert may go to (no quoted local
//!   parts, no IP address domains, at most [`recipients::MAX_RECIPIENTS`]).
//! - [`relay`]: an email destination's SMTP relay ([`SmtpRelay`]), host and port, shown as
//!   `smtp://host:port`.
//! - [`headers`]: which header may carry the notification id (no framing or hop-by-hop).
//! - [`trace_context`]: W3C `traceparent` and `tracestate` read strictly (a broken one is
//!   ignored, as the recommendation says), and the context an alert keeps and its attempts
//!   send on (`TraceContext`).
//! - [`client_key`]: who a client is for per-client limits (an IPv4 address, an IPv6 /64).
//! - [`evidence`]: the evidence chain's definition: its arithmetic (`chain`), what it
//!   records of each entry (`entries`), checkpoints as signed notes (`note`) and their
//!   Ed25519 signatures (`signing`).

pub mod client_key;
pub mod duration;
pub mod evidence;
pub mod headers;
pub mod identity;
pub mod in_flight;
pub mod json_limits;
pub mod locale;
pub mod password;
pub mod recipients;
pub mod redact;
pub mod relay;
pub mod renewal;
pub mod retry;
pub mod sealing;
pub mod state;
pub mod token;
pub mod trace_context;
pub mod untrusted;
pub mod watchlist_query;

pub use identity::{
    check_ordering_key, CheckedPayload, CheckedPayloadBuf, IdentityError, PayloadError,
    MAX_IDENTITY_FIELD_BYTES, MAX_ORDERING_KEY_BYTES, MAX_PAYLOAD_BYTES, MAX_REASON_BYTES,
};
pub use json_limits::{JsonLimitError, MAX_PAYLOAD_DEPTH};
pub use locale::{Locale, UnknownLocale};
pub use recipients::RecipientError;
pub use relay::{BadRelayHost, SmtpRelay};
pub use state::{
    AlertState, AttemptKind, AttemptOutcome, BulkReplayState, DestinationKind, LiveStatus,
    OnHeadFailed, OnUncertain, OperatorRole, Ordering, Outcome, SmtpTls, UnknownValue,
};
pub use token::{ApiToken, TokenHash};
pub mod signing;
