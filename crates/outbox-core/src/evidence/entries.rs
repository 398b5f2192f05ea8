//! What the chain records of an alert and of each kind of evidence entry: the fields, in
//! their order, that [`chain`](crate::evidence::chain) encodes. The database
//! links each entry as it is inserted (migration `20261209000001` writes these same
//! records in SQL); verification rebuilds them here from the rows read back, so a field
//! changed, added or dropped in either place shows as a mismatch on the first run.
//!
//! Three kinds:
//! - `alert` (the chain's start): id, tenant, subject, occurrence, destination, revision,
//!   payload fingerprint, reason, approval time and approver. Nothing retention prunes.
//! - `event` (an `alert_events` line: approvals, claims of uncertain rows, operators'
//!   actions, sweeps): time, from and to state, attempt, actor, line.
//! - `attempt` (a `delivery_attempts` row, with the evidence line folded into it).

use uuid::Uuid;

use crate::evidence::chain::{Record, Value};
use crate::AttemptKind;

/// An alert as its chain starts from it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AlertFacts {
    /// The alert (notification) id.
    pub id: Uuid,
    /// Its tenant.
    pub tenant: Uuid,
    /// What it is about.
    pub subject: String,
    /// Which occurrence of the subject.
    pub occurrence: String,
    /// Where it goes.
    pub destination: Uuid,
    /// Its revision number.
    pub revision: i32,
    /// SHA-256 of the payload's bytes as sent.
    #[serde(with = "hex32")]
    pub payload_sha256: [u8; 32],
    /// Why a revision was made.
    pub reason: Option<String>,
    /// Approval time, microseconds since the epoch.
    pub created_at_micros: i64,
    /// Who approved it.
    pub created_by: String,
}

impl AlertFacts {
    /// The chain's record of the alert.
    pub fn record(&self) -> Record<'_> {
        Record {
            kind: "alert",
            fields: vec![
                ("id", Value::Bytes(self.id.as_bytes())),
                ("tenant", Value::Bytes(self.tenant.as_bytes())),
                ("subject", Value::Text(&self.subject)),
                ("occurrence", Value::Text(&self.occurrence)),
                ("destination", Value::Bytes(self.destination.as_bytes())),
                ("revision", Value::Int(self.revision.into())),
                ("payload_sha256", Value::Bytes(&self.payload_sha256)),
                ("reason", text(self.reason.as_deref())),
                ("created_at", Value::TimeMicros(self.created_at_micros)),
                ("created_by", Value::Text(&self.created_by)),
            ],
        }
    }
}

/// One evidence entry: a line of `alert_events` or a `delivery_attempts` row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EntryFacts {
    /// An evidence line.
    Event(EventFacts),
    /// An attempt (or lookup) row.
    Attempt(AttemptFacts),
}

impl EntryFacts {
    /// The chain's record of the entry.
    pub fn record(&self) -> Record<'_> {
        match self {
            EntryFacts::Event(event) => event.record(),
            EntryFacts::Attempt(attempt) => attempt.record(),
        }
    }

    /// The state the entry moved the alert to, if it is a transition.
    pub fn to_state(&self) -> Option<&str> {
        match self {
            EntryFacts::Event(event) => Some(&event.to_state),
            EntryFacts::Attempt(attempt) => attempt.to_state.as_deref(),
        }
    }

    /// When it was recorded (an attempt: when it finished), microseconds since the epoch.
    pub fn at_micros(&self) -> i64 {
        match self {
            EntryFacts::Event(event) => event.at_micros,
            EntryFacts::Attempt(attempt) => attempt.finished_at_micros,
        }
    }
}

/// A line of `alert_events`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EventFacts {
    /// When, microseconds since the epoch.
    pub at_micros: i64,
    /// State before.
    pub from_state: Option<String>,
    /// State after.
    pub to_state: String,
    /// The attempt it concerns.
    pub attempt: Option<i32>,
    /// Who.
    pub actor: String,
    /// What happened.
    pub line: String,
}

impl EventFacts {
    fn record(&self) -> Record<'_> {
        Record {
            kind: "event",
            fields: vec![
                ("at", Value::TimeMicros(self.at_micros)),
                ("from_state", text(self.from_state.as_deref())),
                ("to_state", Value::Text(&self.to_state)),
                ("attempt", int(self.attempt)),
                ("actor", Value::Text(&self.actor)),
                ("line", Value::Text(&self.line)),
            ],
        }
    }
}

/// A `delivery_attempts` row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AttemptFacts {
    /// Attempt number.
    pub attempt: i32,
    /// A send or a lookup.
    pub attempt_kind: AttemptKind,
    /// The dispatcher that made it.
    pub worker: String,
    /// The lease's fencing token.
    pub fencing_token: i64,
    /// Start, microseconds since the epoch.
    pub started_at_micros: i64,
    /// Finish, microseconds since the epoch.
    pub finished_at_micros: i64,
    /// The idempotency key sent.
    pub idempotency_key: String,
    /// Fingerprint of the bytes sent.
    #[serde(with = "hex32")]
    pub payload_sha256: [u8; 32],
    /// What the destination's answer meant.
    pub outcome: String,
    /// The answer's status.
    pub http_status: Option<i16>,
    /// The destination's reference.
    pub destination_reference: Option<String>,
    /// Error class.
    pub error_class: Option<String>,
    /// Start of the answer's body.
    pub response_excerpt: Option<String>,
    /// The state the attempt led to, when it is a transition.
    pub to_state: Option<String>,
    /// Its evidence line.
    pub line: Option<String>,
}

impl AttemptFacts {
    fn record(&self) -> Record<'_> {
        Record {
            kind: "attempt",
            fields: vec![
                ("attempt", Value::Int(self.attempt.into())),
                ("kind", Value::Text(self.attempt_kind.as_str())),
                ("worker", Value::Text(&self.worker)),
                ("fencing_token", Value::Int(self.fencing_token)),
                ("started_at", Value::TimeMicros(self.started_at_micros)),
                ("finished_at", Value::TimeMicros(self.finished_at_micros)),
                ("idempotency_key", Value::Text(&self.idempotency_key)),
                ("payload_sha256", Value::Bytes(&self.payload_sha256)),
                ("outcome", Value::Text(&self.outcome)),
                ("http_status", int(self.http_status)),
                (
                    "destination_reference",
                    text(self.destination_reference.as_deref()),
                ),
                ("error_class", text(self.error_class.as_deref())),
                ("response_excerpt", text(self.response_excerpt.as_deref())),
                ("to_state", text(self.to_state.as_deref())),
                ("line", text(self.line.as_deref())),
            ],
        }
    }
}

fn text(value: Option<&str>) -> Value<'_> {
    value.map_or(Value::Null, Value::Text)
}

fn int<'a>(value: Option<impl Into<i64>>) -> Value<'a> {
    value.map_or(Value::Null, |n| Value::Int(n.into()))
}

/// 32-byte digests as lowercase hex in JSON.
pub mod hex32 {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the hex form.
    pub fn serialize<S: Serializer>(bytes: &[u8; 32], out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(&crate::evidence::chain::hex(bytes))
    }

    /// Reads the hex form (64 hex digits).
    pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<[u8; 32], D::Error> {
        let text = String::deserialize(input)?;
        parse(&text).ok_or_else(|| serde::de::Error::custom("expected 64 hex digits"))
    }

    /// 64 hex digits as 32 bytes.
    pub fn parse(text: &str) -> Option<[u8; 32]> {
        if text.len() != 64 || !text.is_ascii() {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::chain::{genesis, hex, link};

    fn alert() -> AlertFacts {
        AlertFacts {
            id: Uuid::parse_str("01890a5d-ac96-774b-bcce-b302099a8057").unwrap(),
            tenant: Uuid::parse_str("7d444840-9dc0-11d1-b245-5ffdce74fad2").unwrap(),
            subject: "contract:ACME-2024-001".into(),
            occurrence: "renewal-2027-01-31:notice-30d".into(),
            destination: Uuid::parse_str("9b2d6a8e-3f0c-4d6e-8f7a-1c2b3d4e5f60").unwrap(),
            revision: 0,
            payload_sha256: [0x11; 32],
            reason: None,
            created_at_micros: 1_796_000_000_123_456,
            created_by: "monitor:contracts".into(),
        }
    }

    /// The documentation's vectors (docs/evidence-format.md), computed independently of this
    /// code: an alert's first head, then an approval line chained on it.
    #[test]
    fn the_documented_vectors_hold() {
        let start = genesis(&alert().record()).unwrap();
        let approval = EntryFacts::Event(EventFacts {
            at_micros: 1_796_000_000_223_456,
            from_state: None,
            to_state: "pending".into(),
            attempt: None,
            actor: "monitor:contracts".into(),
            line: "approved: renewal in 30 days".into(),
        });
        let head = link(&start, &approval.record()).unwrap();
        let attempt = EntryFacts::Attempt(AttemptFacts {
            attempt: 1,
            attempt_kind: AttemptKind::Send,
            worker: "dispatcher-a".into(),
            fencing_token: 42,
            started_at_micros: 1_796_000_001_000_000,
            finished_at_micros: 1_796_000_001_250_000,
            idempotency_key: "01890a5d-ac96-774b-bcce-b302099a8057".into(),
            payload_sha256: [0x11; 32],
            outcome: "accepted".into(),
            http_status: Some(200),
            destination_reference: Some("msg_1".into()),
            error_class: None,
            response_excerpt: None,
            to_state: Some("accepted".into()),
            line: Some("attempt 1 accepted (HTTP 200)".into()),
        });
        let after = link(&head, &attempt.record()).unwrap();
        assert_eq!(
            [hex(&start), hex(&head), hex(&after)],
            [VECTOR_ALERT, VECTOR_APPROVAL, VECTOR_ATTEMPT]
        );
    }

    const VECTOR_ALERT: &str = "2275f58e5400011ce33738fa408576be8da8167bbba4451afeb104064428dc7e";
    const VECTOR_APPROVAL: &str =
        "fe33cdb7048998c8e6dfc2a479cf989e8aeb58fddcfb3c6fd180e8531552312f";
    const VECTOR_ATTEMPT: &str = "359ec171054b1f90410e71bad578eabd428868ad47ca3dc8360a7f4c06f06db4";

    #[test]
    fn hex_digests_round_trip_and_refuse_other_lengths() {
        let bytes = [0xab; 32];
        assert_eq!(hex32::parse(&hex(&bytes)), Some(bytes));
        assert_eq!(hex32::parse("ab"), None);
        assert_eq!(hex32::parse(&"zz".repeat(32)), None);
    }
}
