//! The rules an alert's entries and state are held to, written once: `verify` applies
//! them to the database's rows, and a bundle's check (`crate::bundle`) to a bundle's.

use outbox_core::evidence::chain::{hex, link, Hash};
use outbox_core::evidence::entries::{AlertFacts, EntryFacts};
use outbox_core::AlertState;

/// Whether an alert's state, as stored or as a bundle says, agrees with the last
/// transition its chain records ([`AlertState::agrees_with_transition_to`]); a text that
/// is no state agrees with nothing.
pub fn state_agrees(state: &str, last_transition: &str) -> bool {
    match (
        state.parse::<AlertState>(),
        last_transition.parse::<AlertState>(),
    ) {
        (Ok(state), Ok(last)) => state.agrees_with_transition_to(last),
        _ => false,
    }
}

/// One entry's link, recomputed: the head its fields give after `head` must be the head
/// recorded beside it, and an attempt's payload fingerprint must be the alert's (an
/// attempt records what was sent, and an alert's payload never changes: a correction is
/// another alert). `verify` and a bundle's check both hold entries to this; the problem is
/// said without its place, which the caller knows.
pub fn next_link(
    alert: &AlertFacts,
    head: &Hash,
    entry: &EntryFacts,
    recorded: &Hash,
) -> Result<Hash, String> {
    let next = link(head, &entry.record()).map_err(|err| err.to_string())?;
    if next != *recorded {
        return Err(format!(
            "does not match its chain: its fields and the entry before it give head {}, the \
             stored head is {}",
            hex(&next),
            hex(recorded)
        ));
    }
    if let EntryFacts::Attempt(attempt) = entry {
        if attempt.payload_sha256 != alert.payload_sha256 {
            return Err(format!(
                "records payload fingerprint {}, but the alert's payload is {}",
                hex(&attempt.payload_sha256),
                hex(&alert.payload_sha256)
            ));
        }
    }
    Ok(next)
}

/// An alert's state (its live status or outcome) held against the last transition its
/// entries record, in chain order ([`state_agrees`]); `name` names an entry by its index
/// for the message. `verify` and a bundle's check both hold alerts to this.
pub fn state_problem<'a>(
    state: Option<&str>,
    entries: impl IntoIterator<Item = &'a EntryFacts>,
    name: impl Fn(usize) -> String,
) -> Option<String> {
    let last = entries
        .into_iter()
        .enumerate()
        .filter_map(|(index, e)| e.to_state().map(|to| (index, to)))
        .last();
    match (state, last) {
        (None, _) => Some("has neither a live outbox row nor an outcome".to_owned()),
        (Some(state), None) => Some(format!("is {state}, but its chain records no transition")),
        (Some(state), Some((index, last))) if !state_agrees(state, last) => Some(format!(
            "is {state}, but the last transition its chain records is to {last} ({})",
            name(index)
        )),
        _ => None,
    }
}
