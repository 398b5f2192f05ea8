//! Alert states and destination policies, with their stable text forms (the same strings
//! the database's CHECK constraints allow).

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

/// Where an alert stands. `pending`, `sending` and `uncertain` are live (the alert has an
/// outbox row); the others are where an alert rests until an operator acts, or for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertState {
    /// Approved and waiting for a dispatcher (first send or a scheduled retry).
    Pending,
    /// Claimed by a dispatcher: "attempt N started" is committed, the send may be under way.
    Sending,
    /// The destination confirmed receipt; its reference is kept.
    Accepted,
    /// A send may or may not have arrived; resolved only by evidence.
    Uncertain,
    /// Uncertain with no safe automatic resolution: waits for an operator.
    Held,
    /// Rejected by the destination, or retries exhausted; the evidence says which.
    Failed,
    /// Replaced by a later revision before it was ever sent; never sent.
    Superseded,
}

impl AlertState {
    /// Every state, in lifecycle order.
    pub const ALL: [AlertState; 7] = [
        AlertState::Pending,
        AlertState::Sending,
        AlertState::Accepted,
        AlertState::Uncertain,
        AlertState::Held,
        AlertState::Failed,
        AlertState::Superseded,
    ];

    /// The stable name, as stored and as shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Pending => "pending",
            AlertState::Sending => "sending",
            AlertState::Accepted => "accepted",
            AlertState::Uncertain => "uncertain",
            AlertState::Held => "held",
            AlertState::Failed => "failed",
            AlertState::Superseded => "superseded",
        }
    }

    /// Live states keep a row in the outbox, which dispatchers work from.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            AlertState::Pending | AlertState::Sending | AlertState::Uncertain
        )
    }
}

impl fmt::Display for AlertState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AlertState {
    type Err = UnknownValue;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AlertState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownValue {
                what: "state",
                value: s.to_owned(),
                expected: "pending, sending, accepted, uncertain, held, failed, superseded",
            })
    }
}

/// What a destination wants done with a send whose outcome is unknown, when neither a
/// lookup nor key de-duplication can settle it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnUncertain {
    /// Stop and wait for an operator to reconcile (the safe default).
    #[default]
    Hold,
    /// Send again and flag the alert as a possible duplicate.
    Retry,
}

impl OnUncertain {
    /// The stable name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            OnUncertain::Hold => "hold",
            OnUncertain::Retry => "retry",
        }
    }
}

impl fmt::Display for OnUncertain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OnUncertain {
    type Err = UnknownValue;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "hold" => Ok(OnUncertain::Hold),
            "retry" => Ok(OnUncertain::Retry),
            _ => Err(UnknownValue {
                what: "on-uncertain policy",
                value: s.to_owned(),
                expected: "hold, retry",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_through_their_names() {
        for state in AlertState::ALL {
            assert_eq!(state.as_str().parse::<AlertState>(), Ok(state));
        }
    }

    #[test]
    fn only_pending_sending_and_uncertain_are_live() {
        let live: Vec<_> = AlertState::ALL
            .into_iter()
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
    fn unknown_state_names_the_choices() {
        let err = "delivered".parse::<AlertState>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown state `delivered` (expected one of: pending, sending, accepted, uncertain, held, failed, superseded)"
        );
    }

    #[test]
    fn on_uncertain_defaults_to_hold() {
        assert_eq!(OnUncertain::default(), OnUncertain::Hold);
        assert_eq!("retry".parse::<OnUncertain>(), Ok(OnUncertain::Retry));
        assert!("maybe".parse::<OnUncertain>().is_err());
    }
}
