//! What the checker is given besides the database: what each webhook sink and each SMTP
//! inbox recorded, and what the destination behind it can do.

/// What a sink can do, which decides which duplicates it may show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// De-duplicates by key (within a retention window).
    Idempotent,
    /// Answers lookups by key.
    Lookup,
    /// Neither; the destination's policy is `hold`.
    PlainHold,
    /// Neither; the destination's policy is `retry` (duplicates allowed, if flagged).
    PlainRetry,
}

impl Capability {
    /// Whether the destination neither de-duplicates nor answers lookups, so that a resend
    /// reaches it as a second delivery.
    pub(crate) fn is_plain(self) -> bool {
        matches!(self, Capability::PlainHold | Capability::PlainRetry)
    }
}

/// One request as the sink recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkRecord {
    /// The idempotency key (the notification id), if the request had one.
    pub key: Option<String>,
    /// Hex SHA-256 of the body.
    pub payload_sha256: Option<String>,
    /// `applied`, `wire_duplicate`, `failed`, `scripted`, ...
    pub outcome: String,
}

/// A sink and its records.
#[derive(Debug, Clone)]
pub struct Sink {
    /// The destination name it serves.
    pub destination: String,
    /// What it can do.
    pub capability: Capability,
    /// Everything it recorded, in its arrival order (`/_sink/records`): the ordered lanes
    /// are judged by it.
    pub records: Vec<SinkRecord>,
}

/// One message as an SMTP inbox recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxMessage {
    /// Its `Message-ID`, without angle brackets.
    pub message_id: Option<String>,
    /// Its `X-Alert-Id` header.
    pub alert_id: Option<String>,
    /// Hex SHA-256 of the message data as received.
    pub sha256: String,
}

/// An SMTP inbox serving one email destination, and what it holds.
#[derive(Debug, Clone)]
pub struct Inbox {
    /// The email destination's name.
    pub destination: String,
    /// Its policy for uncertain sends: [`Capability::PlainHold`] or
    /// [`Capability::PlainRetry`] (SMTP offers neither a lookup nor a key window).
    pub capability: Capability,
    /// Every message it received for that destination, in arrival order.
    pub messages: Vec<InboxMessage>,
}
