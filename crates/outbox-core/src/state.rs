//! The alert lifecycle's vocabulary, typed: where an alert stands ([`AlertState`]), the
//! live queue's status ([`LiveStatus`]), where it comes to rest ([`Outcome`]), what an
//! attempt was and how it ended ([`AttemptKind`], [`AttemptOutcome`]), and what a
//! destination is and wants done with an uncertain send ([`DestinationKind`],
//! [`OnUncertain`], [`Ordering`], [`OnHeadFailed`], and an email destination's
//! [`SmtpTls`]), what a console account may do ([`OperatorRole`]), and where an
//! operator's bulk replay stands ([`BulkReplayState`]). A locale is [`crate::locale`]'s.
//!
//! Every type has one stable text form (`as_str`, `Display`, `FromStr`, `TryFrom<String>`
//! and, with the `sqlx` feature the store turns on, PostgreSQL's `text`: queries bind the
//! values and rows decode into them), and it is exactly the set of names
//! the database's CHECK constraints allow; the store's tests hold the two together. These
//! names are the only place a state is spelled in Rust: everything else matches on
//! variants, so a typo does not compile.

use std::fmt;
use std::str::FromStr;

/// A text value that is not one of the allowed names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{value}` (expected one of: {expected})")]
pub struct UnknownValue {
    /// What was being parsed, e.g. "state".
    pub what: &'static str,
    /// The text that did not match.
    pub value: String,
    /// The allowed names, comma separated.
    pub expected: &'static str,
}

/// PostgreSQL's `text` for a type with one stored name per value (`as_str`, and a
/// `FromStr` that reads it back), with the `sqlx` feature the store turns on: queries bind
/// the values and rows decode into them.
macro_rules! stored_as_text {
    ($name:ty) => {
        #[cfg(feature = "sqlx")]
        impl sqlx::Type<sqlx::Postgres> for $name {
            fn type_info() -> sqlx::postgres::PgTypeInfo {
                <&str as sqlx::Type<sqlx::Postgres>>::type_info()
            }

            fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
                <&str as sqlx::Type<sqlx::Postgres>>::compatible(ty)
            }
        }

        #[cfg(feature = "sqlx")]
        impl sqlx::postgres::PgHasArrayType for $name {
            fn array_type_info() -> sqlx::postgres::PgTypeInfo {
                <&str as sqlx::postgres::PgHasArrayType>::array_type_info()
            }
        }

        #[cfg(feature = "sqlx")]
        impl sqlx::Encode<'_, sqlx::Postgres> for $name {
            fn encode_by_ref(
                &self,
                buf: &mut sqlx::postgres::PgArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<sqlx::Postgres>>::encode(self.as_str(), buf)
            }
        }

        #[cfg(feature = "sqlx")]
        impl<'r> sqlx::Decode<'r, sqlx::Postgres> for $name {
            fn decode(
                value: sqlx::postgres::PgValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                Ok(<&str as sqlx::Decode<sqlx::Postgres>>::decode(value)?.parse()?)
            }
        }
    };
}

pub(crate) use stored_as_text;

/// Declares an enum of named values: `ALL`, `as_str`, `Display`, `FromStr`,
/// `TryFrom<String>` and snake_case serde, from one list of `Variant => "name"` pairs, so
/// the names cannot drift apart between the conversions.
macro_rules! named_values {
    (
        $(#[$meta:meta])*
        $name:ident, $what:literal, $expected:literal {
            $($(#[$vmeta:meta])* $variant:ident => $text:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The stable name, as stored and as shown to users.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownValue;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(UnknownValue {
                        what: $what,
                        value: s.to_owned(),
                        expected: $expected,
                    }),
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = UnknownValue;

            fn try_from(s: String) -> Result<Self, Self::Error> {
                s.parse()
            }
        }

        stored_as_text!($name);
    };
}

named_values! {
    /// Where an alert stands. `pending`, `sending` and `uncertain` are live (the alert has
    /// an outbox row, [`LiveStatus`]); the others are where an alert rests until an
    /// operator acts, or for good ([`Outcome`]).
    AlertState, "state", "pending, sending, accepted, uncertain, held, failed, superseded" {
        /// Approved and waiting for a dispatcher (first send or a scheduled retry).
        Pending => "pending",
        /// Claimed by a dispatcher: "attempt N started" is committed, the send may be under way.
        Sending => "sending",
        /// The destination confirmed receipt; its reference is kept.
        Accepted => "accepted",
        /// A send may or may not have arrived; resolved only by evidence.
        Uncertain => "uncertain",
        /// Uncertain with no safe automatic resolution: waits for an operator.
        Held => "held",
        /// Rejected by the destination, retries exhausted, or abandoned by an operator;
        /// the evidence says which.
        Failed => "failed",
        /// Replaced by a later revision before it was ever sent; never sent.
        Superseded => "superseded",
    }
}

impl AlertState {
    /// Live states keep a row in the outbox, which dispatchers work from.
    pub fn is_live(self) -> bool {
        self.live().is_some()
    }

    /// The live status this state is, if it is one.
    pub fn live(self) -> Option<LiveStatus> {
        match self {
            AlertState::Pending => Some(LiveStatus::Pending),
            AlertState::Sending => Some(LiveStatus::Sending),
            AlertState::Uncertain => Some(LiveStatus::Uncertain),
            AlertState::Accepted
            | AlertState::Held
            | AlertState::Failed
            | AlertState::Superseded => None,
        }
    }

    /// Whether an alert in this state agrees with the last transition its evidence chain
    /// records (a line's `to_state`). A claim of a pending row writes no line (its attempt
    /// row does, when it finishes), so a row being sent may follow a line that left it
    /// pending or uncertain; otherwise the state is the last transition's. The auditor's
    /// rule (`evidence verify`, a bundle's check), stated once.
    pub fn agrees_with_transition_to(self, last: AlertState) -> bool {
        self == last
            || (self == AlertState::Sending
                && matches!(last, AlertState::Pending | AlertState::Uncertain))
    }

    /// The outcome this state is, if the alert has come to rest.
    pub fn outcome(self) -> Option<Outcome> {
        match self {
            AlertState::Accepted => Some(Outcome::Accepted),
            AlertState::Held => Some(Outcome::Held),
            AlertState::Failed => Some(Outcome::Failed),
            AlertState::Superseded => Some(Outcome::Superseded),
            AlertState::Pending | AlertState::Sending | AlertState::Uncertain => None,
        }
    }
}

named_values! {
    /// The status of an alert's row in the live queue (`outbox.status`).
    LiveStatus, "live status", "pending, sending, uncertain" {
        /// Due for a send (first or retry) at its `next_attempt_at`.
        Pending => "pending",
        /// Held by a dispatcher under a lease and a fencing token.
        Sending => "sending",
        /// The last attempt may have arrived; due for settling at its `next_attempt_at`.
        Uncertain => "uncertain",
    }
}

impl From<LiveStatus> for AlertState {
    fn from(status: LiveStatus) -> Self {
        match status {
            LiveStatus::Pending => AlertState::Pending,
            LiveStatus::Sending => AlertState::Sending,
            LiveStatus::Uncertain => AlertState::Uncertain,
        }
    }
}

named_values! {
    /// Where an alert came to rest once it left the live queue (`alert_outcomes.outcome`).
    Outcome, "outcome", "accepted, held, failed, superseded" {
        /// The destination (or its lookup, or an operator's finding) confirmed it.
        Accepted => "accepted",
        /// Its last attempt's outcome is unknown and nothing automatic may settle it.
        Held => "held",
        /// Rejected, exhausted without an unknown attempt, or abandoned by an operator.
        Failed => "failed",
        /// Replaced by a revision before any attempt could have arrived.
        Superseded => "superseded",
    }
}

impl From<Outcome> for AlertState {
    fn from(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Accepted => AlertState::Accepted,
            Outcome::Held => AlertState::Held,
            Outcome::Failed => AlertState::Failed,
            Outcome::Superseded => AlertState::Superseded,
        }
    }
}

named_values! {
    /// What a recorded attempt was (`delivery_attempts.kind`).
    AttemptKind, "attempt kind", "send, lookup" {
        /// The alert's request (or email) went, or may have gone, to the destination.
        Send => "send",
        /// A question to the destination's lookup about an uncertain send.
        Lookup => "lookup",
    }
}

named_values! {
    /// How a recorded attempt ended (`delivery_attempts.outcome`).
    AttemptOutcome, "attempt outcome",
        "accepted, rejected, not_processed, not_sent, uncertain, found, not_found" {
        /// The destination confirmed it.
        Accepted => "accepted",
        /// The destination refused it for good.
        Rejected => "rejected",
        /// The destination said it did not act on it (retry).
        NotProcessed => "not_processed",
        /// Nothing left this machine.
        NotSent => "not_sent",
        /// It may or may not have arrived (also: a lookup that settled nothing).
        Uncertain => "uncertain",
        /// A lookup found it at the destination.
        Found => "found",
        /// A lookup did not find it.
        NotFound => "not_found",
    }
}

named_values! {
    /// How a destination is reached (`destinations.kind`).
    #[derive(Default)]
    DestinationKind, "destination kind", "webhook, email" {
        /// A signed HTTP POST.
        #[default]
        Webhook => "webhook",
        /// An email through an SMTP relay.
        Email => "email",
    }
}

named_values! {
    /// What a destination wants done with a send whose outcome is unknown, when neither a
    /// lookup nor key de-duplication can settle it.
    #[derive(Default)]
    OnUncertain, "on-uncertain policy", "hold, retry" {
        /// Stop and wait for an operator to reconcile (the safe default).
        #[default]
        Hold => "hold",
        /// Send again and flag the alert as a possible duplicate.
        Retry => "retry",
    }
}

named_values! {
    /// How an email destination's connection to its relay is secured
    /// (`destinations.smtp_tls`).
    SmtpTls, "SMTP TLS mode", "none, starttls, tls" {
        /// Plain SMTP (a relay on this host or a private network).
        None => "none",
        /// Plain SMTP upgraded to TLS by `STARTTLS`, which the relay must offer.
        Starttls => "starttls",
        /// TLS from the first byte (SMTPS).
        Tls => "tls",
    }
}

named_values! {
    /// Whether a destination receives the alerts of one ordering key in approval order
    /// (`destinations.ordering`).
    #[derive(Default)]
    Ordering, "ordering", "none, per-key" {
        /// No order between alerts (a revision still waits for what it corrects).
        #[default]
        None => "none",
        /// The alerts of one ordering key form a lane: each is sent once the one before it
        /// has been released.
        #[serde(rename = "per-key")]
        PerKey => "per-key",
    }
}

named_values! {
    /// What an ordered destination's lane does when its head failed for good
    /// (`destinations.on_head_failed`).
    #[derive(Default)]
    OnHeadFailed, "on-head-failed policy", "block, skip" {
        /// The lane waits until an operator replays or resolves the head.
        #[default]
        Block => "block",
        /// The next alert of the lane goes; both alerts' evidence says so.
        Skip => "skip",
    }
}

named_values! {
    /// What a console account may do (`operator_accounts.role`).
    OperatorRole, "operator role", "viewer, operator" {
        /// Reads every page; cannot act.
        Viewer => "viewer",
        /// Reads and acts (replay, resolve, destinations, bulk replays).
        Operator => "operator",
    }
}

named_values! {
    /// Where an operator's bulk replay stands (`console_bulk_replays.state`).
    BulkReplayState, "bulk replay state", "running, stopped, done" {
        /// Its worker replays the next batch after its cursor.
        Running => "running",
        /// An operator stopped it; it resumes after its cursor when set running again.
        Stopped => "stopped",
        /// Every matching alert was handled.
        Done => "done",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trips<T>(all: &[T])
    where
        T: Copy + PartialEq + fmt::Debug + fmt::Display + FromStr + TryFrom<String>,
        <T as FromStr>::Err: fmt::Debug,
        <T as TryFrom<String>>::Error: fmt::Debug,
    {
        for value in all {
            let name = value.to_string();
            assert_eq!(name.parse::<T>().ok(), Some(*value), "{name}");
            assert_eq!(T::try_from(name.clone()).ok(), Some(*value), "{name}");
        }
    }

    #[test]
    fn every_value_round_trips_through_its_name() {
        round_trips(AlertState::ALL);
        round_trips(LiveStatus::ALL);
        round_trips(Outcome::ALL);
        round_trips(AttemptKind::ALL);
        round_trips(AttemptOutcome::ALL);
        round_trips(DestinationKind::ALL);
        round_trips(OnUncertain::ALL);
        round_trips(Ordering::ALL);
        round_trips(OnHeadFailed::ALL);
        round_trips(SmtpTls::ALL);
        round_trips(OperatorRole::ALL);
        round_trips(BulkReplayState::ALL);
    }

    #[test]
    fn every_state_is_either_live_or_an_outcome_and_converts_back() {
        for state in AlertState::ALL {
            match (state.live(), state.outcome()) {
                (Some(live), None) => assert_eq!(AlertState::from(live), *state),
                (None, Some(outcome)) => assert_eq!(AlertState::from(outcome), *state),
                other => panic!("{state}: {other:?}"),
            }
        }
        assert_eq!(
            AlertState::ALL.len(),
            LiveStatus::ALL.len() + Outcome::ALL.len()
        );
    }

    #[test]
    fn only_pending_sending_and_uncertain_are_live() {
        let live: Vec<_> = AlertState::ALL
            .iter()
            .copied()
            .filter(|s| s.is_live())
            .collect();
        assert_eq!(
            live,
            [
                AlertState::Pending,
                AlertState::Sending,
                AlertState::Uncertain
            ]
        );
    }

    #[test]
    fn unknown_names_name_the_choices() {
        let err = "delivered".parse::<AlertState>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown state `delivered` (expected one of: pending, sending, accepted, uncertain, held, failed, superseded)"
        );
        let err = "maybe".parse::<AttemptOutcome>().unwrap_err();
        assert!(err.to_string().contains("not_processed"), "{err}");
    }

    /// Each error lists every name; and every name is lowercase words joined by underscores
    /// or hyphens, so
    /// the store may write one into SQL as a literal (for a partial index's predicate)
    /// without quoting.
    #[test]
    fn the_expected_lists_name_every_value_in_lowercase_words() {
        fn check<T: Copy + fmt::Display + FromStr<Err = UnknownValue>>(all: &[T]) {
            let expected = "\u{0}".parse::<T>().err().map(|e| e.expected).unwrap_or("");
            let names: Vec<String> = all.iter().map(ToString::to_string).collect();
            assert_eq!(expected, names.join(", "));
            for name in &names {
                assert!(
                    !name.is_empty()
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'-'),
                    "{name}"
                );
            }
        }
        check(AlertState::ALL);
        check(LiveStatus::ALL);
        check(Outcome::ALL);
        check(AttemptKind::ALL);
        check(AttemptOutcome::ALL);
        check(DestinationKind::ALL);
        check(OnUncertain::ALL);
        check(Ordering::ALL);
        check(OnHeadFailed::ALL);
        check(SmtpTls::ALL);
        check(OperatorRole::ALL);
        check(BulkReplayState::ALL);
    }

    #[test]
    fn serde_names_are_the_stored_names() {
        for ordering in Ordering::ALL {
            assert_eq!(
                serde_json::to_value(ordering).unwrap(),
                serde_json::json!(ordering.as_str())
            );
        }
    }

    #[test]
    fn on_uncertain_defaults_to_hold() {
        assert_eq!(OnUncertain::default(), OnUncertain::Hold);
        assert_eq!("retry".parse::<OnUncertain>(), Ok(OnUncertain::Retry));
        assert!("maybe".parse::<OnUncertain>().is_err());
    }
}
