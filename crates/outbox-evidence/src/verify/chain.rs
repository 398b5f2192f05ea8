//! One alert's chain recomputed from its rows: each link from the alert's genesis, the
//! positions rising, and its state held against the last transition the chain records.

use outbox_core::evidence_chain::{genesis, Hash};
use outbox_store::evidence_chain::StoredChain;

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
    let alert = chain.alert.id;
    let mut problems = Vec::new();
    let mut heads = Vec::with_capacity(chain.entries.len());
    if let Some(pruned) = &chain.pruned {
        if !chain.entries.is_empty() {
            problems.push(problem(
                format!("alert {alert}"),
                "was pruned, yet has entries again",
            ));
        }
        heads.extend(pruned.entries.iter().map(|(pos, hash)| (Some(*pos), *hash)));
        return ChainCheck {
            entries: pruned.entries.len(),
            heads,
            problems,
            pruned: true,
        };
    }
    let mut head = match genesis(&chain.alert.record()) {
        Ok(head) => head,
        Err(err) => {
            problems.push(problem(format!("alert {alert}"), err.to_string()));
            return ChainCheck {
                entries: chain.entries.len(),
                heads,
                problems,
                pruned: false,
            };
        }
    };
    let mut last_pos = None;
    for (index, entry) in chain.entries.iter().enumerate() {
        let place = format!("alert {alert}, entry {} ({})", index + 1, entry.place());
        let (Some(pos), Some(stored)) = (entry.pos, entry.hash) else {
            problems.push(problem(
                place,
                "carries no chain hash: it was never linked (written with the chain \
                 switched off, or by hand)",
            ));
            break;
        };
        if last_pos.is_some_and(|last| last >= pos) {
            problems.push(problem(
                place,
                format!("its chain position {pos} repeats an earlier entry's"),
            ));
            break;
        }
        last_pos = Some(pos);
        head = match next_link(&chain.alert, &head, &entry.facts, &stored) {
            Ok(next) => next,
            Err(what) => {
                problems.push(problem(place, what));
                break;
            }
        };
        heads.push((Some(pos), head));
    }
    if problems.is_empty() {
        let entries = chain.entries.iter().map(|e| &e.facts);
        let name = |index: usize| chain.entries[index].place();
        if let Some(what) = state_problem(chain.state.as_deref(), entries, name) {
            problems.push(problem(format!("alert {alert}"), what));
        }
    }
    ChainCheck {
        entries: chain.entries.len(),
        heads,
        problems,
        pruned: false,
    }
}
