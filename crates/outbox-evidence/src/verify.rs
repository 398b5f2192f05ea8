//! Verification: each alert's chain recomputed from its rows with `outbox_core`'s
//! definition, its state held against its last transition, its stored payload against
//! its fingerprint, its heads found in every checkpoint that recorded it, its entries'
//! dates held to the checkpoints ([`crate::dating`]), and the checkpoints themselves (tree
//! root, chain of checkpoints, signature, coverage without gaps, and the tip).
//!
//! The rules an alert's entries are held to ([`next_link`], [`state_problem`]) are the
//! ones a bundle's check applies too. An alert that is gone although checkpoints record it
//! was deleted, and is named so.
//!
//! Every finding is a [`Problem`] naming the place (alert, entry and row, or checkpoint)
//! and what was expected against what is stored. Nothing here writes.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};
use outbox_core::evidence::chain::{genesis, hex, link, merkle_root, Hash, Leaf};
use outbox_core::evidence::entries::{AlertFacts, EntryFacts};
use outbox_core::evidence::signing::PublicKey;
use outbox_core::AlertState;
use outbox_store::evidence_chain::{self as stored, StoredChain, StoredCheckpoint};
use outbox_store::StoreError;
use sqlx::PgPool;
use uuid::Uuid;

use crate::checkpoint::{checkpoint_of, unpack_leaves};
use crate::dating::Dating;

/// Something that does not match.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// Where: `alert …, entry 3 (delivery_attempts row 42)`, `checkpoint 7`.
    pub place: String,
    /// What: expected against stored.
    pub what: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.place, self.what)
    }
}

fn problem(place: impl Into<String>, what: impl Into<String>) -> Problem {
    Problem {
        place: place.into(),
        what: what.into(),
    }
}

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
        match unpack_leaves(&checkpoint.leaves) {
            None => problems.push(problem(&place, "its leaves are not whole 56-byte leaves")),
            Some(leaves) => {
                if leaves.len() as i64 != checkpoint.size {
                    problems.push(problem(
                        &place,
                        format!(
                            "has {} leaves, its size says {}",
                            leaves.len(),
                            checkpoint.size
                        ),
                    ));
                }
                if leaves.windows(2).any(|w| w[0].alert_id >= w[1].alert_id) {
                    problems.push(problem(&place, "its leaves are not in alert id order"));
                }
                let hashes: Vec<Hash> = leaves.iter().map(Leaf::hash).collect();
                let root = merkle_root(&hashes);
                if root != checkpoint.root {
                    problems.push(problem(
                        &place,
                        format!(
                            "its leaves give root {}, the stored root is {}",
                            hex(&root),
                            hex(&checkpoint.root)
                        ),
                    ));
                }
            }
        }
    }
    match previous {
        Some(before) => {
            let expected = checkpoint_of(before).hash();
            if checkpoint.previous != expected {
                problems.push(problem(
                    &place,
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
                    &place,
                    format!(
                        "covers positions after {}, but checkpoint {} ended at {}",
                        checkpoint.covers_from, before.seq, before.covers_to
                    ),
                ));
            }
        }
        None if checkpoint.seq == 1 => {
            if checkpoint.previous != [0u8; 32] || checkpoint.covers_from != 0 {
                problems.push(problem(&place, "is the first, but chains from something"));
            }
        }
        None => problems.push(problem(
            format!("checkpoint {}", checkpoint.seq - 1),
            format!("is missing (checkpoint {} chains from it)", checkpoint.seq),
        )),
    }
    match (&checkpoint.key_id, &checkpoint.signature) {
        (Some(key_id), Some(signature)) => match trust.keys().iter().find(|k| k.key_id() == key_id)
        {
            None => problems.push(problem(
                &place,
                format!("is signed by key {key_id}, which is not a trusted key"),
            )),
            Some(key) if !key.verifies(&checkpoint_of(checkpoint), signature) => {
                problems.push(problem(
                    &place,
                    format!("its signature does not verify with key {key_id}"),
                ))
            }
            Some(_) => {}
        },
        _ if !trust.pinned.is_empty() => problems.push(problem(
            &place,
            "is unsigned, but keys were given to check signatures with",
        )),
        _ => {}
    }
    problems
}

/// The leaf of `alert` in these packed leaves (sorted by alert id), with its index.
pub fn find_leaf(packed: &[u8], alert: Uuid) -> Option<(usize, Leaf)> {
    let leaves = unpack_leaves(packed)?;
    let index = leaves.binary_search_by(|l| l.alert_id.cmp(&alert)).ok()?;
    Some((index, leaves[index]))
}

/// What `verify --alert` found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AlertReport {
    /// The alert.
    pub alert_id: Uuid,
    /// Entries in its chain.
    pub entries: usize,
    /// The newest checkpoint its chain was found under: number, time, entries covered.
    pub checkpoint: Option<(i64, DateTime<Utc>, usize)>,
    /// Whether the alert was pruned.
    pub pruned: bool,
    /// Everything that does not match; empty when the alert verifies.
    pub problems: Vec<Problem>,
}

/// Verifies one alert: its chain, its state, its stored payload against its fingerprint,
/// every checkpoint that ever recorded it or whose range holds one of its entries (leaf,
/// root, signature), the dating of its entries ([`crate::dating`]) and, with `to_tip`, the
/// chain of checkpoints from the first of those to the newest and its tip (a page view
/// leaves that walk out). `Err(UnknownAlert)` when there is no such alert.
pub async fn verify_alert(
    pool: &PgPool,
    alert_id: Uuid,
    trust: &Trust,
    to_tip: bool,
) -> Result<AlertReport, StoreError> {
    let chain = match stored::chain(pool, alert_id).await {
        Err(StoreError::UnknownAlert(_)) => return deleted_alert(pool, alert_id).await,
        chain => chain?,
    };
    let check = check_chain(&chain);
    let mut problems = check.problems.clone();
    let mut conn = pool.acquire().await?;
    problems.extend(payload_problems(&mut conn, &[alert_id]).await?);

    let covering = covering_checkpoints(&mut conn, alert_id, &check.heads).await?;
    let mut newest_covered = None;
    for c in covering.values() {
        match leaf_agrees(alert_id, c, &check.heads) {
            Ok(covered) => newest_covered = Some((c.seq, c.made_at, covered)),
            Err(what) => problems.push(problem(format!("checkpoint {}", c.seq), what)),
        }
        let before = if c.seq > 1 {
            stored::checkpoints_after(&mut *conn, c.seq - 2, 1, false)
                .await?
                .pop()
        } else {
            None
        };
        let before = before.filter(|b| b.seq == c.seq - 1);
        problems.extend(check_checkpoint(c, before.as_ref(), true, trust));
    }
    // From the first covering checkpoint on, the chain of checkpoints up to the tip.
    if let Some(first) = covering.keys().next().copied().filter(|_| to_tip) {
        problems.extend(check_checkpoints_from(pool, first, trust).await?);
    }
    let ranges: Vec<(i64, i64, i64)> = covering
        .values()
        .map(|c| (c.seq, c.covers_from, c.covers_to))
        .collect();
    let newest = stored::newest_checkpoint(&mut *conn).await?;
    let dating = Dating::load(&mut conn).await?;
    problems.extend(
        dating
            .chain_problems(&mut conn, &chain, &ranges, newest.map(|n| n.covers_to))
            .await?,
    );
    Ok(AlertReport {
        alert_id,
        entries: check.entries,
        checkpoint: newest_covered,
        pruned: check.pruned,
        problems,
    })
}

/// Every checkpoint that has a leaf for the alert (through the index over leaves, so a
/// chain rewritten under fresh positions still meets the checkpoints that recorded it
/// before), and every one whose range holds one of its entries' positions, by number, with
/// their leaves.
async fn covering_checkpoints(
    conn: &mut sqlx::PgConnection,
    alert_id: Uuid,
    heads: &[(Option<i64>, Hash)],
) -> Result<BTreeMap<i64, StoredCheckpoint>, StoreError> {
    let mut covering: BTreeMap<i64, StoredCheckpoint> = BTreeMap::new();
    for seq in stored::checkpoints_with_leaf_for(&mut *conn, alert_id).await? {
        if let Some(c) = stored::checkpoint(&mut *conn, seq).await? {
            covering.insert(c.seq, c);
        }
    }
    for pos in heads.iter().filter_map(|(pos, _)| *pos) {
        if covering
            .values()
            .any(|c| c.covers_from < pos && pos <= c.covers_to)
        {
            continue;
        }
        if let Some(c) = stored::checkpoint_covering(&mut *conn, pos).await? {
            covering.insert(c.seq, c);
        }
    }
    Ok(covering)
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

/// The stored payloads of these alerts that are not the approved ones, as problems.
async fn payload_problems(
    conn: &mut sqlx::PgConnection,
    alert_ids: &[Uuid],
) -> Result<Vec<Problem>, StoreError> {
    Ok(stored::altered_payloads(conn, alert_ids)
        .await?
        .into_iter()
        .map(|(alert, stored, approved)| {
            problem(
                format!("alert {alert}"),
                format!(
                    "its stored payload is not the approved one: SHA-256 {}, approved {}",
                    hex(&stored),
                    hex(&approved)
                ),
            )
        })
        .collect())
}

/// An alert the database does not have: `Err(UnknownAlert)` when no checkpoint records it
/// either, else a report naming the checkpoints that do (it was deleted).
async fn deleted_alert(pool: &PgPool, alert_id: Uuid) -> Result<AlertReport, StoreError> {
    let mut recording = Vec::new();
    // Each checkpoint the index names is read (one at a time) to find the leaf itself.
    for seq in stored::checkpoints_with_leaf_for(pool, alert_id).await? {
        if let Some(c) = stored::checkpoint(pool, seq).await? {
            if find_leaf(&c.leaves, alert_id).is_some() {
                recording.push(seq);
            }
        }
    }
    if recording.is_empty() {
        return Err(StoreError::UnknownAlert(alert_id));
    }
    Ok(AlertReport {
        alert_id,
        entries: 0,
        checkpoint: None,
        pruned: false,
        problems: vec![problem(
            format!("alert {alert_id}"),
            format!(
                "is not in the database, but {}: it was deleted",
                record_it(&recording)
            ),
        )],
    })
}

/// "checkpoint 3 records it", "checkpoints 3 to 5 record it", "checkpoints 3, 7 record it".
fn record_it(seqs: &[i64]) -> String {
    match seqs {
        [one] => format!("checkpoint {one} records it"),
        [first, .., last] if seqs.windows(2).all(|w| w[1] == w[0] + 1) => {
            format!("checkpoints {first} to {last} record it")
        }
        _ => format!(
            "checkpoints {} record it",
            seqs.iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Checks the chain of checkpoints after `from` (without their leaves: links, coverage,
/// signatures) up to the newest, and the tip.
async fn check_checkpoints_from(
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
async fn check_tip(
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

/// A checkpoint's number and hash kept outside the database (a log line, an earlier
/// bundle, a note): the database must still hold that checkpoint, unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    /// The checkpoint's number.
    pub seq: i64,
    /// Its hash.
    pub hash: Hash,
}

impl fmt::Display for Anchor {
    /// `N:HASH`, as `--checkpoint` and `--continue-after` read it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.seq, hex(&self.hash))
    }
}

impl std::str::FromStr for Anchor {
    type Err = String;

    /// `N:HASH`, as the `evidence checkpoint made` log line gives them.
    fn from_str(text: &str) -> Result<Anchor, String> {
        let (seq, hash) = text
            .split_once(':')
            .ok_or_else(|| "expected NUMBER:HASH (a checkpoint's number and hash)".to_owned())?;
        let seq = seq
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| "a checkpoint's number is a positive integer".to_owned())?;
        let hash = outbox_core::evidence::entries::hex32::parse(hash)
            .ok_or_else(|| "a checkpoint's hash is 64 hex digits".to_owned())?;
        Ok(Anchor { seq, hash })
    }
}

/// Holds the database's checkpoints to anchors kept elsewhere.
pub async fn check_anchors(pool: &PgPool, anchors: &[Anchor]) -> Result<Vec<Problem>, StoreError> {
    let mut problems = Vec::new();
    for anchor in anchors {
        let place = format!("checkpoint {}", anchor.seq);
        let stored = stored::checkpoints_after(pool, anchor.seq - 1, 1, false)
            .await?
            .pop()
            .filter(|c| c.seq == anchor.seq);
        match stored {
            None => problems.push(problem(
                place,
                format!(
                    "is missing, though it was made with hash {}",
                    hex(&anchor.hash)
                ),
            )),
            Some(c) if checkpoint_of(&c).hash() != anchor.hash => problems.push(problem(
                place,
                format!(
                    "was made with hash {}, the stored one hashes to {}",
                    hex(&anchor.hash),
                    hex(&checkpoint_of(&c).hash())
                ),
            )),
            Some(_) => {}
        }
    }
    Ok(problems)
}

/// What a walk found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct WalkSummary {
    /// Alerts whose chains were recomputed.
    pub alerts: u64,
    /// Entries recomputed.
    pub entries: u64,
    /// Checkpoints checked with their leaves.
    pub checkpoints: u64,
    /// The newest checkpoint: number, time, last position covered.
    pub newest_checkpoint: Option<(i64, DateTime<Utc>, i64)>,
    /// Entries after the newest checkpoint (verified by their chains only, so far).
    pub entries_not_checkpointed: u64,
    /// Problems found, the first [`MAX_LISTED`] of them.
    pub problems: Vec<Problem>,
    /// How many problems in all.
    pub problem_count: u64,
}

/// How many problems a walk lists (it counts them all).
pub const MAX_LISTED: usize = 200;

impl WalkSummary {
    fn add(&mut self, found: impl IntoIterator<Item = Problem>) {
        for p in found {
            self.problem_count += 1;
            if self.problems.len() < MAX_LISTED {
                self.problems.push(p);
            }
        }
    }
}

/// Alerts per statement of a walk.
const WALK_PAGE: i64 = 500;

/// Walks everything (`since: None`) or what changed since a time: the checkpoints (each
/// with its leaves, root and signature, chained without gaps, each leaf held against the
/// heads the entries of its range give now, and the tip), and every alert's chain
/// (`since`: the alerts under those checkpoints and those changed after the newest). In
/// bounded memory: one checkpoint's leaves and one page of alerts at a time. `progress`
/// is told `(done, total)` in alerts as the walk goes.
pub async fn verify_walk(
    pool: &PgPool,
    since: Option<DateTime<Utc>>,
    trust: &Trust,
    mut progress: impl FnMut(u64, u64),
) -> Result<WalkSummary, StoreError> {
    let mut summary = WalkSummary::default();
    let first = match since {
        None => Some(1),
        Some(at) => stored::first_checkpoint_since(pool, at).await?,
    };
    let mut previous = match first {
        Some(first) if first > 1 => stored::checkpoints_after(pool, first - 2, 1, false)
            .await?
            .pop()
            .filter(|c| c.seq == first - 1),
        _ => None,
    };
    let mut covered_to = previous.as_ref().map_or(0, |p| p.covers_to);
    let mut after = first.map_or(i64::MAX, |f| f - 1);
    let total = match since {
        None => stored::alert_count(pool).await?.unsigned_abs(),
        Some(_) => 0,
    };
    let mut conn = pool.acquire().await?;
    let dating = Dating::load(&mut conn).await?;
    loop {
        let Some(c) = stored::checkpoints_after(&mut *conn, after, 1, true)
            .await?
            .pop()
        else {
            break;
        };
        after = c.seq;
        summary.checkpoints += 1;
        let before = previous.as_ref().filter(|p| p.seq == c.seq - 1);
        summary.add(check_checkpoint(&c, before, true, trust));
        // Each leaf against what the entries of its range give now (stored heads; the
        // alerts' own walk recomputes those).
        let recorded = unpack_leaves(&c.leaves).unwrap_or_default();
        let now = leaves_now(&mut conn, &c, &recorded).await?;
        summary.add(compare_leaves(c.seq, &recorded, &now));
        // Its entries held to the checkpoint before it ([`crate::dating`]).
        let dated = dating.range_problems(&mut conn, c.seq, c.covers_from, Some(c.covers_to));
        summary.add(dated.await?);
        if since.is_some() {
            let ids: Vec<Uuid> = recorded.iter().map(|l| l.alert_id).collect();
            let range = Some((c.covers_from, c.covers_to));
            for page in ids.chunks(WALK_PAGE as usize) {
                walk_page(&mut conn, page, range, &mut summary).await?;
                progress(summary.alerts, summary.alerts);
            }
        }
        covered_to = c.covers_to;
        summary.newest_checkpoint = Some((c.seq, c.made_at, c.covers_to));
        previous = Some(c);
    }
    summary.add(check_tip(pool, previous.as_ref()).await?);
    // The entries after the newest checkpoint, held to it (or to the newest before it that
    // covered all that was issued).
    summary.add(
        dating
            .range_problems(&mut conn, i64::MAX, covered_to, None)
            .await?,
    );

    match since {
        None => {
            let mut after = Uuid::nil();
            loop {
                let page = stored::alert_ids_after(&mut *conn, after, WALK_PAGE).await?;
                let Some(last) = page.last() else { break };
                after = *last;
                walk_page(&mut conn, &page, None, &mut summary).await?;
                progress(summary.alerts, total);
            }
        }
        Some(_) => {
            let tail = stored::alerts_with_entries_after(&mut *conn, covered_to).await?;
            for page in tail.chunks(WALK_PAGE as usize) {
                walk_page(&mut conn, page, None, &mut summary).await?;
                progress(summary.alerts, summary.alerts);
            }
        }
    }
    summary.entries_not_checkpointed = stored::entries_after(&mut *conn, covered_to)
        .await?
        .unsigned_abs();
    Ok(summary)
}

/// The leaves checkpoint `c`'s range gives now: from the entries, and for alerts pruned
/// since, from the positions and hashes retention kept.
async fn leaves_now(
    conn: &mut sqlx::PgConnection,
    c: &StoredCheckpoint,
    recorded: &[Leaf],
) -> Result<Vec<(Uuid, i64, Hash)>, StoreError> {
    let mut now = stored::leaves_between(conn, c.covers_from, c.covers_to).await?;
    let live: std::collections::HashSet<Uuid> = now.iter().map(|(alert, _, _)| *alert).collect();
    let gone: Vec<Uuid> = recorded
        .iter()
        .map(|l| l.alert_id)
        .filter(|alert| !live.contains(alert))
        .collect();
    if gone.is_empty() {
        return Ok(now);
    }
    for (alert, chain) in stored::pruned_chains(&mut *conn, &gone).await? {
        let covered: Vec<&(i64, Hash)> = chain
            .entries
            .iter()
            .filter(|(pos, _)| *pos <= c.covers_to)
            .collect();
        let in_range = covered.iter().any(|(pos, _)| *pos > c.covers_from);
        if let (true, Some((_, head))) = (in_range, covered.last()) {
            now.push((alert, covered.len() as i64, *head));
        }
    }
    now.sort_by_key(|(alert, _, _)| *alert);
    Ok(now)
}

/// Recomputes these alerts' chains, and holds their stored payloads to their
/// fingerprints, into `summary`. With `last_in` (positions after the first, up to the
/// second), only the alerts whose newest entry lies there: a walk of several checkpoints
/// meets an alert under each one that covers an entry of it, and checks and counts it once,
/// under the one that covers its newest entry (or in the tail after the newest checkpoint,
/// walked without `last_in`).
async fn walk_page(
    conn: &mut sqlx::PgConnection,
    ids: &[Uuid],
    last_in: Option<(i64, i64)>,
    summary: &mut WalkSummary,
) -> Result<(), StoreError> {
    let mut walked = Vec::with_capacity(ids.len());
    for chain in stored::chains(&mut *conn, ids).await? {
        if let Some((after, up_to)) = last_in {
            if !newest_position(&chain).is_some_and(|pos| after < pos && pos <= up_to) {
                continue;
            }
        }
        let check = check_chain(&chain);
        summary.alerts += 1;
        summary.entries += check.entries as u64;
        summary.add(check.problems);
        walked.push(chain.alert.id);
    }
    summary.add(payload_problems(conn, &walked).await?);
    Ok(())
}

/// The position of an alert's newest chained entry (for a pruned alert, of the newest
/// entry retention kept).
fn newest_position(chain: &StoredChain) -> Option<i64> {
    let kept = chain
        .pruned
        .iter()
        .flat_map(|p| p.entries.iter().map(|(pos, _)| *pos));
    chain.entries.iter().filter_map(|e| e.pos).chain(kept).max()
}

/// A checkpoint's recorded leaves against the leaves its range gives now, both in alert id
/// order: every difference named.
fn compare_leaves(seq: i64, recorded: &[Leaf], now: &[(Uuid, i64, Hash)]) -> Vec<Problem> {
    let place = format!("checkpoint {seq}");
    let mut problems = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < recorded.len() || j < now.len() {
        match (recorded.get(i), now.get(j)) {
            (Some(r), Some((alert, entries, head))) if r.alert_id == *alert => {
                if r.entries != entries.unsigned_abs() || r.head != *head {
                    problems.push(problem(
                        &place,
                        format!(
                            "recorded alert {alert} with {} entries and head {}; its entries \
                             now give {entries} entries and head {}",
                            r.entries,
                            hex(&r.head),
                            hex(head)
                        ),
                    ));
                }
                i += 1;
                j += 1;
            }
            (Some(r), other) if other.is_none_or(|(alert, _, _)| r.alert_id < *alert) => {
                problems.push(problem(
                    &place,
                    format!(
                        "recorded alert {} with {} entries, but no entry of that alert is in \
                         its range any more",
                        r.alert_id, r.entries
                    ),
                ));
                i += 1;
            }
            (_, Some((alert, entries, _))) => {
                problems.push(problem(
                    &place,
                    format!(
                        "has no leaf for alert {alert}, yet {entries} of its entries reach into \
                         its range (an entry inserted afterwards with an old position?)"
                    ),
                ));
                j += 1;
            }
            (None, None) => break,
            (Some(_), None) => unreachable!("handled above"),
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_being_sent_may_follow_a_line_that_left_it_pending_or_uncertain() {
        assert!(state_agrees("sending", "pending"));
        assert!(state_agrees("sending", "uncertain"));
        assert!(state_agrees("held", "held"));
        assert!(!state_agrees("accepted", "held"));
        assert!(!state_agrees("pending", "sending"));
        // Texts that are no state agree with nothing, not even themselves.
        assert!(!state_agrees("delivered", "delivered"));
    }

    #[test]
    fn the_checkpoints_recording_a_deleted_alert_are_named_as_a_range_or_a_list() {
        assert_eq!(record_it(&[4]), "checkpoint 4 records it");
        assert_eq!(record_it(&[4, 5, 6]), "checkpoints 4 to 6 record it");
        assert_eq!(record_it(&[4, 7]), "checkpoints 4, 7 record it");
    }

    #[test]
    fn leaves_compare_by_alert_and_name_every_difference() {
        let a = Uuid::from_u128(1);
        let b = Uuid::from_u128(2);
        let c = Uuid::from_u128(3);
        let leaf = |alert_id, entries, head| Leaf {
            alert_id,
            entries,
            head,
        };
        let recorded = [leaf(a, 2, [1; 32]), leaf(b, 1, [2; 32])];
        assert!(compare_leaves(1, &recorded, &[(a, 2, [1; 32]), (b, 1, [2; 32])]).is_empty());
        let found = compare_leaves(1, &recorded, &[(a, 3, [9; 32]), (c, 1, [3; 32])]);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].what.contains("with 2 entries"), "{found:?}");
        assert!(found[1].what.contains(&b.to_string()), "{found:?}");
        assert!(found[2].what.contains("has no leaf"), "{found:?}");
    }

    #[test]
    fn a_checkpoints_leaf_must_be_the_chains_head_after_its_entries_inside_its_range() {
        let alert = Uuid::from_u128(7);
        let checkpoint = |entries, head| StoredCheckpoint {
            seq: 1,
            made_at: DateTime::from_timestamp(1_796_000_000, 0).unwrap(),
            covers_from: 10,
            covers_to: 20,
            size: 1,
            root: [0; 32],
            previous: [0; 32],
            leaves: Leaf {
                alert_id: alert,
                entries,
                head,
            }
            .data()
            .to_vec(),
            key_id: None,
            signature: None,
        };
        let heads = [
            (Some(11), [1; 32]),
            (Some(15), [2; 32]),
            (Some(25), [3; 32]),
        ];
        assert_eq!(leaf_agrees(alert, &checkpoint(2, [2; 32]), &heads), Ok(2));
        // Another head after as many entries: the chain was rewritten since.
        let err = leaf_agrees(alert, &checkpoint(2, [9; 32]), &heads).unwrap_err();
        assert!(err.contains("its chain was rewritten"), "{err}");
        // The same heads under other positions: moved out of the checkpoint's range.
        let moved = [
            (Some(31), [1; 32]),
            (Some(32), [2; 32]),
            (Some(33), [3; 32]),
        ];
        let err = leaf_agrees(alert, &checkpoint(2, [2; 32]), &moved).unwrap_err();
        assert!(err.contains("positions were rewritten"), "{err}");
        // An entry of its range that the leaf does not count.
        let err = leaf_agrees(alert, &checkpoint(1, [1; 32]), &heads).unwrap_err();
        assert!(err.contains("positions were rewritten"), "{err}");
        // More entries than the chain holds now.
        let err = leaf_agrees(alert, &checkpoint(4, [2; 32]), &heads).unwrap_err();
        assert!(err.contains("its chain now holds 3 entries"), "{err}");
        assert!(leaf_agrees(Uuid::from_u128(8), &checkpoint(2, [2; 32]), &heads).is_err());
    }
}
