//! Checkpoints checked: each on its own (leaves, root, signature with a trusted key) and
//! against the one before it (its hash, coverage without gaps), a checkpoint's leaf held
//! to an alert's chain as it is now, the chain of checkpoints up to the newest, and the
//! tip row.

use outbox_core::evidence::chain::{hex, merkle_root, Hash, Leaf};
use outbox_core::evidence::signing::PublicKey;
use outbox_store::evidence_chain::{self as stored, StoredCheckpoint};
use outbox_store::StoreError;
use sqlx::PgPool;
use uuid::Uuid;

use super::{problem, Problem};
use crate::stored_form::{checkpoint_of, unpack_leaves};

/// The keys checkpoints are checked with.
#[derive(Debug, Clone, Default)]
pub struct Trust {
    /// Keys given by the auditor (`--public-key`): when any is given, only these count,
    /// and an unsigned checkpoint is a problem.
    pub pinned: Vec<PublicKey>,
    /// Keys as the database records them (used when none is pinned).
    pub stored: Vec<PublicKey>,
}

impl Trust {
    /// The trusted keys: pinned ones when given, else the stored ones.
    pub fn keys(&self) -> &[PublicKey] {
        if self.pinned.is_empty() {
            &self.stored
        } else {
            &self.pinned
        }
    }

    /// Reads the stored keys; `pinned` as given.
    pub async fn load(pool: &PgPool, pinned: Vec<PublicKey>) -> Result<Trust, StoreError> {
        let stored = stored::stored_keys(pool)
            .await?
            .into_iter()
            .filter_map(|(_, text)| PublicKey::from_text(&text).ok())
            .collect();
        Ok(Trust { pinned, stored })
    }
}

/// Checks one checkpoint on its own and against the one before it (`None` for the
/// first, or when the one before is missing). With leaves, the root is recomputed.
pub fn check_checkpoint(
    checkpoint: &StoredCheckpoint,
    previous: Option<&StoredCheckpoint>,
    with_leaves: bool,
    trust: &Trust,
) -> Vec<Problem> {
    let place = format!("checkpoint {}", checkpoint.seq);
    let mut problems = Vec::new();
    if with_leaves {
        problems.extend(tree_problems(checkpoint, &place));
    }
    problems.extend(link_problems(checkpoint, previous, &place));
    problems.extend(signature_problem(checkpoint, trust, &place));
    problems
}

/// A checkpoint's leaves against its header: whole leaves, as many as its size says, in
/// alert id order, and the root they give.
fn tree_problems(checkpoint: &StoredCheckpoint, place: &str) -> Vec<Problem> {
    let Some(leaves) = unpack_leaves(&checkpoint.leaves) else {
        return vec![problem(place, "its leaves are not whole 56-byte leaves")];
    };
    let mut problems = Vec::new();
    if leaves.len() as i64 != checkpoint.size {
        problems.push(problem(
            place,
            format!(
                "has {} leaves, its size says {}",
                leaves.len(),
                checkpoint.size
            ),
        ));
    }
    if leaves.windows(2).any(|w| w[0].alert_id >= w[1].alert_id) {
        problems.push(problem(place, "its leaves are not in alert id order"));
    }
    let hashes: Vec<Hash> = leaves.iter().map(Leaf::hash).collect();
    let root = merkle_root(&hashes);
    if root != checkpoint.root {
        problems.push(problem(
            place,
            format!(
                "its leaves give root {}, the stored root is {}",
                hex(&root),
                hex(&checkpoint.root)
            ),
        ));
    }
    problems
}

/// A checkpoint against the one before it: it chains from that one's hash and covers the
/// positions right after that one's; the first chains from nothing, and any other without
/// one before it names that one missing.
fn link_problems(
    checkpoint: &StoredCheckpoint,
    previous: Option<&StoredCheckpoint>,
    place: &str,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    match previous {
        Some(before) => {
            let expected = checkpoint_of(before).hash();
            if checkpoint.previous != expected {
                problems.push(problem(
                    place,
                    format!(
                        "chains from {}, but checkpoint {} hashes to {}",
                        hex(&checkpoint.previous),
                        before.seq,
                        hex(&expected)
                    ),
                ));
            }
            if checkpoint.covers_from != before.covers_to {
                problems.push(problem(
                    place,
                    format!(
                        "covers positions after {}, but checkpoint {} ended at {}",
                        checkpoint.covers_from, before.seq, before.covers_to
                    ),
                ));
            }
        }
        None if checkpoint.seq == 1 => {
            if checkpoint.previous != [0u8; 32] || checkpoint.covers_from != 0 {
                problems.push(problem(place, "is the first, but chains from something"));
            }
        }
        None => problems.push(problem(
            format!("checkpoint {}", checkpoint.seq - 1),
            format!("is missing (checkpoint {} chains from it)", checkpoint.seq),
        )),
    }
    problems
}

/// A checkpoint's signature: by a trusted key, and verifying with it; an unsigned
/// checkpoint is a problem only when the auditor gave keys to check with.
fn signature_problem(checkpoint: &StoredCheckpoint, trust: &Trust, place: &str) -> Option<Problem> {
    let what = match (&checkpoint.key_id, &checkpoint.signature) {
        (Some(key_id), Some(signature)) => {
            match trust.keys().iter().find(|k| k.key_id() == key_id) {
                None => format!("is signed by key {key_id}, which is not a trusted key"),
                Some(key) if !key.verifies(&checkpoint_of(checkpoint), signature) => {
                    format!("its signature does not verify with key {key_id}")
                }
                Some(_) => return None,
            }
        }
        _ if !trust.pinned.is_empty() => {
            "is unsigned, but keys were given to check signatures with".to_owned()
        }
        _ => return None,
    };
    Some(problem(place, what))
}

/// The leaf of `alert` in these packed leaves (sorted by alert id), with its index.
pub fn find_leaf(packed: &[u8], alert: Uuid) -> Option<(usize, Leaf)> {
    let leaves = unpack_leaves(packed)?;
    let index = leaves.binary_search_by(|l| l.alert_id.cmp(&alert)).ok()?;
    Some((index, leaves[index]))
}

/// Whether checkpoint `c` agrees with the alert's chain as it is now (`heads`: each
/// entry's position and the head after it): its leaf's head is the chain's head after as
/// many entries as the leaf records, and the last of those lies in its range with the next
/// after it. Returns how many entries it covers, or what disagrees.
pub fn leaf_agrees(
    alert_id: Uuid,
    c: &StoredCheckpoint,
    heads: &[(Option<i64>, Hash)],
) -> Result<usize, String> {
    let Some((_, leaf)) = find_leaf(&c.leaves, alert_id) else {
        return Err(format!(
            "covers entries of alert {alert_id} but has no leaf for it"
        ));
    };
    let recorded = format!(
        "recorded alert {alert_id} with {} entries and head {}",
        leaf.entries,
        hex(&leaf.head)
    );
    let n = usize::try_from(leaf.entries).unwrap_or(usize::MAX);
    let Some((pos, head)) = n.checked_sub(1).and_then(|last| heads.get(last)) else {
        return Err(format!(
            "{recorded}; its chain now holds {} entries",
            heads.len()
        ));
    };
    if *head != leaf.head {
        return Err(format!(
            "{recorded}; its entries now give head {} after {n} entries (its chain was \
             rewritten)",
            hex(head)
        ));
    }
    let in_range = |p: &Option<i64>| p.is_some_and(|p| c.covers_from < p && p <= c.covers_to);
    let next_after = heads
        .get(n)
        .is_none_or(|(next, _)| next.is_none_or(|p| p > c.covers_to));
    if !in_range(pos) || !next_after {
        return Err(format!(
            "{recorded}, the last of them in positions {} to {}; its entries now place entry \
             {n} at position {} (their positions were rewritten)",
            c.covers_from + 1,
            c.covers_to,
            pos.map_or("none".to_owned(), |p| p.to_string())
        ));
    }
    Ok(n)
}

/// Checks the chain of checkpoints after `from` (without their leaves: links, coverage,
/// signatures) up to the newest, and the tip.
pub(super) async fn check_checkpoints_from(
    pool: &PgPool,
    from: i64,
    trust: &Trust,
) -> Result<Vec<Problem>, StoreError> {
    let mut problems = Vec::new();
    let mut previous = stored::checkpoints_after(pool, from - 1, 1, false)
        .await?
        .pop();
    let mut after = from;
    loop {
        let page = stored::checkpoints_after(pool, after, 500, false).await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for c in page {
            let before = previous.as_ref().filter(|p| p.seq == c.seq - 1);
            problems.extend(check_checkpoint(&c, before, false, trust));
            previous = Some(c);
        }
    }
    problems.extend(check_tip(pool, previous.as_ref()).await?);
    Ok(problems)
}

/// Holds the newest stored checkpoint against the tip row.
pub(super) async fn check_tip(
    pool: &PgPool,
    newest: Option<&StoredCheckpoint>,
) -> Result<Vec<Problem>, StoreError> {
    let tip = stored::checkpoint_tip(pool).await?;
    Ok(match (tip, newest) {
        (None, None) => vec![],
        (Some((seq, hash)), Some(newest))
            if seq == newest.seq && hash == checkpoint_of(newest).hash() =>
        {
            vec![]
        }
        (Some((seq, hash)), newest) => vec![problem(
            format!("checkpoint {seq}"),
            format!(
                "is missing or changed: the tip records checkpoint {seq} with hash {}, the \
                 newest stored is {}",
                hex(&hash),
                newest.map_or("none".to_owned(), |n| format!(
                    "checkpoint {} with hash {}",
                    n.seq,
                    hex(&checkpoint_of(n).hash())
                ))
            ),
        )],
        (None, Some(newest)) => vec![problem(
            format!("checkpoint {}", newest.seq),
            "exists, but the tip records no checkpoint",
        )],
    })
}
