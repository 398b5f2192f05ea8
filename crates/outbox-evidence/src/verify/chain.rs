//! One alert's chain recomputed from its rows: each link from the alert's genesis, the
//! positions rising, and its state held against the last transition the chain records.

use outbox_core::evidence::chain::{genesis, Hash};
use outbox_store::evidence_chain::{PrunedChain, StoredChain, StoredEntry};

use super::rules::{next_link, state_problem};
use super::{problem, Problem};

/// One alert's chain, recomputed.
#[derive(Debug, Clone)]
pub struct ChainCheck {
    /// How many entries the chain has (for a pruned alert: had).
    pub entries: usize,
    /// Each entry's position and the head after it, as far as the chain verified.
    pub heads: Vec<(Option<i64>, Hash)>,
    /// What did not match (the first broken link ends the recomputation).
    pub problems: Vec<Problem>,
    /// Whether the alert was pruned (its entries' hashes are all that is left).
    pub pruned: bool,
}

/// Recomputes one alert's chain from its rows and holds its state against it.
pub fn check_chain(chain: &StoredChain) -> ChainCheck {
    if let Some(pruned) = &chain.pruned {
        return pruned_check(chain, pruned);
    }
    let (heads, broken) = relink(chain);
    let mut problems: Vec<Problem> = broken.into_iter().collect();
    // A state is held to the transitions of a chain that holds together, not to a part.
    if problems.is_empty() {
        let entries = chain.entries.iter().map(|e| &e.facts);
        let name = |index: usize| chain.entries[index].place();
        if let Some(what) = state_problem(chain.state.as_deref(), entries, name) {
            problems.push(problem(format!("alert {}", chain.alert.id), what));
        }
    }
    ChainCheck {
        entries: chain.entries.len(),
        heads,
        problems,
        pruned: false,
    }
}

/// A pruned alert: the positions and heads retention kept are its chain, and it may have
/// no entries again.
fn pruned_check(chain: &StoredChain, pruned: &PrunedChain) -> ChainCheck {
    let mut problems = Vec::new();
    if !chain.entries.is_empty() {
        problems.push(problem(
            format!("alert {}", chain.alert.id),
            "was pruned, yet has entries again",
        ));
    }
    ChainCheck {
        entries: pruned.entries.len(),
        heads: pruned
            .entries
            .iter()
            .map(|(pos, hash)| (Some(*pos), *hash))
            .collect(),
        problems,
        pruned: true,
    }
}

/// The heads the chain's entries give, linked one after another from the alert's genesis,
/// as far as they hold together, and the problem that ended it there, if one did.
fn relink(chain: &StoredChain) -> (Vec<(Option<i64>, Hash)>, Option<Problem>) {
    let alert = chain.alert.id;
    let mut heads = Vec::with_capacity(chain.entries.len());
    let mut head = match genesis(&chain.alert.record()) {
        Ok(head) => head,
        Err(err) => {
            return (
                heads,
                Some(problem(format!("alert {alert}"), err.to_string())),
            )
        }
    };
    let mut last_pos = None;
    for (index, entry) in chain.entries.iter().enumerate() {
        match entry_link(chain, &head, last_pos, entry) {
            Ok((pos, next)) => {
                (head, last_pos) = (next, Some(pos));
                heads.push((Some(pos), head));
            }
            Err(what) => {
                let place = format!("alert {alert}, entry {} ({})", index + 1, entry.place());
                return (heads, Some(problem(place, what)));
            }
        }
    }
    (heads, None)
}

/// One entry linked after `head`: its position (after the entry before it, `last_pos`)
/// and the head after it, or what is wrong with it, said without its place.
fn entry_link(
    chain: &StoredChain,
    head: &Hash,
    last_pos: Option<i64>,
    entry: &StoredEntry,
) -> Result<(i64, Hash), String> {
    let (Some(pos), Some(stored)) = (entry.pos, entry.hash) else {
        return Err(
            "carries no chain hash: it was never linked (written with the chain \
                    switched off, or by hand)"
                .to_owned(),
        );
    };
    if last_pos.is_some_and(|last| last >= pos) {
        return Err(format!(
            "its chain position {pos} repeats an earlier entry's"
        ));
    }
    Ok((pos, next_link(&chain.alert, head, &entry.facts, &stored)?))
}
