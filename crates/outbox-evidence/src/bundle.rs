//! Proof bundles: one alert's whole evidence with what shows it was not changed since a
//! checkpoint (its chain, the checkpoint's leaf for it, the inclusion proof to the
//! checkpoint's root, the checkpoint and its signature with the public key), as one JSON
//! document that [`check`] verifies with no database.
//!
//! A bundle is written in one canonical form (compact JSON, fields in a fixed order, hex
//! in lower case), and [`check`] refuses any other form. Most bytes carry a hashed or
//! signed value or are fixed by the form; the rest are held to those (`state` to the
//! chain's last transition, `key_id` and `public_key` to the signature), so a change to
//! any one byte fails the check. What no byte can show, a check cannot either: entries
//! after the newest checkpoint are not anchored, and a bundle cut at an older checkpoint
//! still checks (docs/evidence-format.md says field by field).
//!
//! A bundle proves its alert's trail only under a checkpoint signed by a key the auditor
//! holds: a chain that holds together, an unsigned checkpoint or a signature by the key the
//! bundle carries can all be made by whoever writes the bundle. [`check`] refuses those
//! unless asked to say what they show ([`Trusting`], [`Standing`]).
//!
//! Since [`FORMAT`] v2 a bundle also carries every earlier checkpoint that recorded the
//! alert, each with its inclusion proof (so a chain rewritten since shows), and before
//! each checkpoint the ones it chains from back to the one its new entries must not be
//! dated before ([`crate::dating`]). A v1 bundle still checks, with a note of what it
//! cannot show.

use outbox_core::evidence::chain::{
    genesis, hex, inclusion_proof, verify_inclusion, Checkpoint, Hash, Leaf,
};
use outbox_core::evidence::entries::{hex32, AlertFacts, EntryFacts};
use outbox_core::evidence::signing::PublicKey;
use outbox_store::evidence_chain as stored;
use outbox_store::StoreError;
use sqlx::PgPool;
use uuid::Uuid;

use crate::dating::{self, Dating};
use crate::stored_form::{checkpoint_of, unpack_leaves};
use crate::verify::{next_link, state_problem};

/// What a bundle says it is: the format `export` writes.
pub const FORMAT: &str = "alert-outbox evidence bundle v2";

/// The format before earlier checkpoints and preceding checkpoints were carried; still
/// checked, saying what it cannot show.
pub const FORMAT_V1: &str = "alert-outbox evidence bundle v1";

/// One alert's evidence, self-contained.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    /// [`FORMAT`].
    pub format: String,
    /// The alert as its chain starts from it.
    pub alert: AlertFacts,
    /// Its entries in chain order, each with the head after it.
    pub entries: Vec<BundleEntry>,
    /// Where it rests (live status or outcome) when exported.
    pub state: Option<String>,
    /// The newest checkpoint its chain is under, if one is yet.
    pub checkpoint: Option<BundleCheckpoint>,
    /// (v2) Every earlier checkpoint that recorded the alert, oldest first; absent in v1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earlier_checkpoints: Option<Vec<BundleCheckpoint>>,
}

/// An entry and the head after it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleEntry {
    /// The entry's fields.
    pub entry: EntryFacts,
    /// The head after it.
    #[serde(with = "hex32")]
    pub head: Hash,
}

/// The checkpoint part of a bundle.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleCheckpoint {
    /// Its number.
    pub seq: u64,
    /// When it was made, microseconds since the epoch.
    pub made_at_micros: i64,
    /// Its tree's size.
    pub size: u64,
    /// Its tree's root.
    #[serde(with = "hex32")]
    pub root: Hash,
    /// The previous checkpoint's hash.
    #[serde(with = "hex32")]
    pub previous: Hash,
    /// How many of the alert's entries its leaf chains.
    pub entries: u64,
    /// The leaf's index in the tree.
    pub leaf_index: u64,
    /// The audit path from the leaf to the root.
    pub inclusion_proof: Vec<String>,
    /// The signing key's id, when signed.
    pub key_id: Option<String>,
    /// The signature (128 hex digits), when signed.
    pub signature: Option<String>,
    /// The signing key's public half (`ed25519-pub:…`), when signed.
    pub public_key: Option<String>,
    /// (v2) The checkpoints before this one, newest first, each hashing to the `previous`
    /// of the one after it, back to the one the entries this checkpoint is the first to
    /// cover must not be dated before (its floor, [`crate::dating`]); empty when there is
    /// none to hold them to (the first checkpoint, an alert the backfill chained, a
    /// checkpoint missing); absent in v1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preceding: Option<Vec<CheckpointHeader>>,
}

/// A checkpoint's hashed fields, without its leaves or signature: enough to hash it, and
/// so to show it is the one the checkpoint after it chains from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointHeader {
    /// Its number.
    pub seq: u64,
    /// When it was made, microseconds since the epoch.
    pub made_at_micros: i64,
    /// Its tree's size.
    pub size: u64,
    /// Its tree's root.
    #[serde(with = "hex32")]
    pub root: Hash,
    /// The hash of the checkpoint before it.
    #[serde(with = "hex32")]
    pub previous: Hash,
}

impl CheckpointHeader {
    fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            seq: self.seq,
            made_at_micros: self.made_at_micros,
            size: self.size,
            root: self.root,
            previous: self.previous,
        }
    }
}

/// Builds the bundle of one alert: its chain, and every checkpoint that recorded it (the
/// newest in `checkpoint`, the others in `earlier_checkpoints`), each with the checkpoints
/// before it back to its dating floor.
pub async fn export(pool: &PgPool, alert_id: Uuid) -> Result<Bundle, StoreError> {
    let chain = stored::chain(pool, alert_id).await?;
    if chain.pruned.is_some() {
        return Err(StoreError::Refused(format!(
            "alert {alert_id} was pruned: its entries are gone, so there is nothing to bundle \
             (`evidence verify --alert` still checks its kept hashes)"
        )));
    }
    let entries: Vec<BundleEntry> = chain
        .entries
        .iter()
        .map(|e| {
            e.hash
                .map(|head| BundleEntry {
                    entry: e.facts.clone(),
                    head,
                })
                .ok_or_else(|| {
                    StoreError::Refused(format!(
                        "alert {alert_id}: {} is not chained yet",
                        e.place()
                    ))
                })
        })
        .collect::<Result<_, _>>()?;
    let mut conn = pool.acquire().await?;
    let dating = Dating::load(&mut conn).await?;
    let mut covering = Vec::new();
    for c in recording(&mut conn, alert_id, &chain).await? {
        let mut bundled = bundle_checkpoint(&mut conn, alert_id, &c).await?;
        bundled.preceding = Some(preceding(&mut conn, &dating, &chain, &c).await?);
        covering.push(bundled);
    }
    let checkpoint = covering.pop();
    Ok(Bundle {
        format: FORMAT.to_owned(),
        alert: chain.alert,
        entries,
        state: chain.state,
        checkpoint,
        earlier_checkpoints: Some(covering),
    })
}

/// The checkpoints that recorded the alert (by the index over leaves) or whose ranges hold
/// its entries, oldest first, with their leaves.
async fn recording(
    conn: &mut sqlx::PgConnection,
    alert_id: Uuid,
    chain: &stored::StoredChain,
) -> Result<Vec<stored::StoredCheckpoint>, StoreError> {
    let mut seqs: Vec<i64> = stored::checkpoints_with_leaf_for(&mut *conn, alert_id).await?;
    let mut found: Vec<stored::StoredCheckpoint> = Vec::new();
    for pos in chain.entries.iter().filter_map(|e| e.pos) {
        if found
            .iter()
            .any(|c| c.covers_from < pos && pos <= c.covers_to)
        {
            continue;
        }
        if let Some(c) = stored::checkpoint_covering(&mut *conn, pos).await? {
            seqs.push(c.seq);
            found.push(c);
        }
    }
    seqs.sort_unstable();
    seqs.dedup();
    let mut covering = Vec::with_capacity(seqs.len());
    for seq in seqs {
        match found.iter().position(|c| c.seq == seq) {
            Some(at) => covering.push(found.swap_remove(at)),
            None => covering.extend(stored::checkpoint(&mut *conn, seq).await?),
        }
    }
    Ok(covering)
}

/// Checkpoint `c` as a bundle carries it: the alert's leaf, its inclusion proof, the
/// signature and the key (`preceding` is left for the caller).
async fn bundle_checkpoint(
    conn: &mut sqlx::PgConnection,
    alert_id: Uuid,
    c: &stored::StoredCheckpoint,
) -> Result<BundleCheckpoint, StoreError> {
    let leaves = unpack_leaves(&c.leaves).ok_or_else(|| {
        StoreError::Inconsistent(format!("checkpoint {}'s leaves are not whole", c.seq))
    })?;
    let index = leaves
        .binary_search_by(|l| l.alert_id.cmp(&alert_id))
        .map_err(|_| {
            StoreError::Inconsistent(format!(
                "checkpoint {} covers alert {alert_id} but has no leaf for it \
                 (run `outboxctl evidence verify --alert {alert_id}`)",
                c.seq
            ))
        })?;
    let hashes: Vec<Hash> = leaves.iter().map(Leaf::hash).collect();
    let path = inclusion_proof(&hashes, index).unwrap_or_default();
    let key = match &c.key_id {
        None => None,
        Some(id) => stored::stored_keys(&mut *conn)
            .await?
            .into_iter()
            .find(|(key_id, _)| key_id == id)
            .map(|(_, text)| text),
    };
    let core = checkpoint_of(c);
    Ok(BundleCheckpoint {
        seq: core.seq,
        made_at_micros: core.made_at_micros,
        size: core.size,
        root: core.root,
        previous: core.previous,
        entries: leaves[index].entries,
        leaf_index: index as u64,
        inclusion_proof: path.iter().map(hex).collect(),
        key_id: c.key_id.clone(),
        signature: c.signature.as_ref().map(|s| hex_bytes(s)),
        public_key: key,
        preceding: None,
    })
}

/// The checkpoints before `c`, newest first, back to its dating floor; none when it has
/// no floor, when the alert is one the rule spares, or when one of them is missing (the
/// chain back to the floor could not be shown).
async fn preceding(
    conn: &mut sqlx::PgConnection,
    dating: &Dating,
    chain: &stored::StoredChain,
    c: &stored::StoredCheckpoint,
) -> Result<Vec<CheckpointHeader>, StoreError> {
    let Some(floor) = dating.floor(&mut *conn, c.seq).await? else {
        return Ok(vec![]);
    };
    let created = chain.alert.created_at_micros;
    if floor
        .spare_created_before
        .is_some_and(|t| created < t.timestamp_micros())
    {
        return Ok(vec![]);
    }
    let count = c.seq - floor.seq;
    let before = stored::checkpoints_after(&mut *conn, floor.seq - 1, count, false).await?;
    let whole = before.len() as i64 == count
        && before
            .iter()
            .enumerate()
            .all(|(i, b)| b.seq == floor.seq + i as i64);
    if !whole {
        return Ok(vec![]);
    }
    Ok(before
        .iter()
        .rev()
        .map(|b| {
            let core = checkpoint_of(b);
            CheckpointHeader {
                seq: core.seq,
                made_at_micros: core.made_at_micros,
                size: core.size,
                root: core.root,
                previous: core.previous,
            }
        })
        .collect())
}

/// The bundle in its canonical form (what `export` writes, with a final newline).
pub fn to_canonical(bundle: &Bundle) -> Vec<u8> {
    let mut out = serde_json::to_vec(bundle).expect("a bundle always serialises");
    out.push(b'\n');
    out
}

/// The most a bundle may weigh: [`read`] stops there, and `evidence export` refuses to
/// write a larger one. An alert's trail is a few kilobytes per attempt; this leaves room
/// for thousands of attempts with their answers' excerpts.
pub const MAX_BUNDLE_BYTES: u64 = 64 * 1024 * 1024;

/// Reads a bundle from `reader`, at most [`MAX_BUNDLE_BYTES`] of it: a larger input is
/// refused after that many bytes, not read to its end.
pub fn read(reader: impl std::io::Read) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    reader.take(MAX_BUNDLE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_BUNDLE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "larger than {} MiB, more than any bundle `evidence export` writes",
                MAX_BUNDLE_BYTES / (1024 * 1024)
            ),
        ));
    }
    Ok(bytes)
}

/// What a check takes as proof. A bundle proves its alert's trail only when a checkpoint
/// signed by a key the auditor holds covers it; each flag below accepts less, and the
/// result says which ([`Standing`]).
#[derive(Debug, Clone, Default)]
pub struct Trusting {
    /// The keys the auditor trusts ([`crate::trusted_keys::auditor_keys`]).
    pub keys: Vec<PublicKey>,
    /// Accept a bundle no signed checkpoint covers (`--allow-unanchored`).
    pub allow_unanchored: bool,
    /// With no key given, check the signature with the bundle's own public key
    /// (`--trust-embedded-key`).
    pub trust_embedded_key: bool,
}

/// The checkpoint a bundle's first entries are under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnderCheckpoint {
    /// Its number.
    pub seq: u64,
    /// When it was made, microseconds since the epoch.
    pub made_at_micros: i64,
    /// How many of the alert's entries it covers.
    pub entries: u64,
    /// The id of the key that signed it, when signed.
    pub key_id: Option<String>,
}

/// How far a checked bundle is anchored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Under a checkpoint signed by one of the auditor's keys: the proof.
    Trusted(UnderCheckpoint),
    /// Under a checkpoint signed by the key inside the bundle, no key being given: whoever
    /// wrote the bundle may hold that key.
    EmbeddedKey(UnderCheckpoint),
    /// Under an unsigned checkpoint, which anyone can make: not anchored.
    Unsigned(UnderCheckpoint),
    /// Under no checkpoint: not anchored.
    NotCovered,
}

/// What a bundle shows, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proven {
    /// The alert.
    pub alert_id: Uuid,
    /// Entries whose chain verified.
    pub entries: usize,
    /// What anchors them.
    pub standing: Standing,
    /// What the bundle could not show, each a sentence (a v1 bundle's earlier checkpoints;
    /// entries not held to a checkpoint's time).
    pub notes: Vec<String>,
}

/// Checks a bundle with no database, in steps: its canonical form, its chain (with the
/// rules `verify` applies: [`next_link`], [`state_problem`]), then each checkpoint that
/// recorded the alert, oldest first: the leaf's inclusion under its root (the chain's head
/// after as many entries as the leaf records), its signature with a key the auditor trusts,
/// and the dates of the entries it is the first to cover against the checkpoint before it
/// ([`crate::dating`]). Returns what it shows, or the first thing that does not hold, which
/// includes a bundle that is not anchored under checkpoints signed by one of
/// `trusting.keys` unless `trusting` accepts less.
pub fn check(bytes: &[u8], trusting: &Trusting) -> Result<Proven, String> {
    let bundle = parse_canonical(bytes)?;
    let heads = recompute_chain(&bundle)?;
    let alert = bundle.alert.id;
    let mut notes = Vec::new();
    let earlier = match &bundle.earlier_checkpoints {
        Some(earlier) => earlier.as_slice(),
        None => {
            notes.push(format!(
                "this bundle ({FORMAT_V1}) carries only the newest checkpoint that recorded \
                 the alert: it cannot show that earlier checkpoints recorded the same chain, \
                 nor hold its entries to the checkpoints before theirs; export it again, or \
                 run `evidence verify --alert {alert}`"
            ));
            &[]
        }
    };
    let standing = match &bundle.checkpoint {
        None if !earlier.is_empty() => {
            return Err("the bundle has earlier checkpoints but no newest one".into())
        }
        None if trusting.allow_unanchored => Standing::NotCovered,
        None => {
            return Err(format!(
                "no checkpoint covers alert {alert}'s entries: the bundle is not anchored, \
                 and a chain that holds together proves nothing by itself (anyone can write \
                 one); export it again once a checkpoint covers it"
            ))
        }
        Some(newest) => {
            let recorded: Vec<&BundleCheckpoint> = earlier.iter().chain([newest]).collect();
            weakest_standing(&bundle, &recorded, &heads, trusting, &mut notes)?
        }
    };
    Ok(Proven {
        alert_id: alert,
        entries: heads.len(),
        standing,
        notes,
    })
}

/// The checkpoints that recorded the alert, oldest first, each held in turn: it records
/// the alert with more entries than the one before it, its leaf is included under its root,
/// its signature stands, and the entries it is the first to cover are dated after its
/// floor (or a note says it cannot show that). Returns the weakest standing among them.
fn weakest_standing(
    bundle: &Bundle,
    recorded: &[&BundleCheckpoint],
    heads: &[Hash],
    trusting: &Trusting,
    notes: &mut Vec<String>,
) -> Result<Standing, String> {
    let mut weakest = None;
    let mut covered_before = 0;
    let mut seq_before = 0;
    for cp in recorded {
        if cp.seq <= seq_before || cp.entries <= covered_before {
            return Err(format!(
                "checkpoint {} comes after checkpoint {seq_before} in the bundle, but records \
                 {} of the alert's entries where that one recorded {}: each later checkpoint \
                 records it with more",
                cp.seq, cp.entries, covered_before
            ));
        }
        check_inclusion(bundle.alert.id, cp, heads)?;
        let standing = signature_standing(cp, trusting)?;
        if weakest.as_ref().is_none_or(|w| rank(&standing) <= rank(w)) {
            weakest = Some(standing);
        }
        notes.extend(check_dates(bundle, cp, covered_before)?);
        (seq_before, covered_before) = (cp.seq, cp.entries);
    }
    Ok(weakest.expect("at least the newest checkpoint"))
}

/// How much a standing proves, to find the weakest of a bundle's checkpoints (the newest
/// wins a tie).
fn rank(standing: &Standing) -> u8 {
    match standing {
        Standing::NotCovered => 0,
        Standing::Unsigned(_) => 1,
        Standing::EmbeddedKey(_) => 2,
        Standing::Trusted(_) => 3,
    }
}

/// The entries checkpoint `cp` is the first to cover (after the `covered_before` the
/// checkpoint before it in the bundle recorded) held to its floor: the last of its
/// preceding checkpoints, each shown by its hash to be the one the next chains from. A note
/// when it carries none.
fn check_dates(
    bundle: &Bundle,
    cp: &BundleCheckpoint,
    covered_before: u64,
) -> Result<Option<String>, String> {
    let Some(preceding) = &cp.preceding else {
        return Ok(None);
    };
    let mut chains_from = (cp.seq, cp.previous);
    for header in preceding {
        let (seq, previous) = chains_from;
        if header.seq + 1 != seq || header.checkpoint().hash() != previous {
            return Err(format!(
                "the checkpoint the bundle gives as checkpoint {} is not the one checkpoint \
                 {seq} chains from",
                header.seq
            ));
        }
        chains_from = (header.seq, header.previous);
    }
    let (first, last) = (covered_before + 1, cp.entries);
    let Some(floor) = preceding.last() else {
        return Ok((cp.seq > 1).then(|| {
            format!(
                "entries {first} to {last}, first under checkpoint {}, were not held to the \
                 time of a checkpoint before it: the bundle carries none (an alert the \
                 backfill chained, or a checkpoint missing)",
                cp.seq
            )
        }));
    };
    let first_index = usize::try_from(covered_before).unwrap_or(usize::MAX);
    let last_index = usize::try_from(cp.entries).unwrap_or(usize::MAX);
    for (index, e) in bundle
        .entries
        .iter()
        .enumerate()
        .take(last_index)
        .skip(first_index)
    {
        let at = e.entry.at_micros();
        if !dating::allowed(at, floor.made_at_micros) {
            let floor_seq = i64::try_from(floor.seq).unwrap_or(i64::MAX);
            return Err(format!(
                "alert {}, entry {}: {}",
                bundle.alert.id,
                index + 1,
                dating::backdated_what(at, floor_seq, floor.made_at_micros)
            ));
        }
    }
    Ok(None)
}

/// The bundle in `bytes`, which must be in one form `export` writes: [`FORMAT`], or
/// [`FORMAT_V1`] without the fields v2 added.
fn parse_canonical(bytes: &[u8]) -> Result<Bundle, String> {
    let bundle: Bundle = serde_json::from_slice(bytes).map_err(|e| format!("not a bundle: {e}"))?;
    if to_canonical(&bundle) != bytes {
        return Err(
            "the bundle is not in the form `evidence export` writes (was it edited?)".into(),
        );
    }
    let v2 = match bundle.format.as_str() {
        FORMAT => true,
        FORMAT_V1 => false,
        other => return Err(format!("unknown format `{other}`")),
    };
    let checkpoints = bundle
        .checkpoint
        .iter()
        .chain(bundle.earlier_checkpoints.iter().flatten());
    let fields_agree = bundle.earlier_checkpoints.is_some() == v2
        && checkpoints.clone().all(|c| c.preceding.is_some() == v2);
    if !fields_agree {
        return Err(format!(
            "the bundle's fields are not those of its format `{}` (`earlier_checkpoints` and \
             each checkpoint's `preceding` are in v2 only, and there always)",
            bundle.format
        ));
    }
    Ok(bundle)
}

/// The head after each entry, recomputed from the alert's record and held to the bundle's,
/// and the alert's state held to its last transition.
fn recompute_chain(bundle: &Bundle) -> Result<Vec<Hash>, String> {
    let alert = &bundle.alert;
    let mut head = genesis(&alert.record()).map_err(|e| e.to_string())?;
    let mut heads = Vec::with_capacity(bundle.entries.len());
    for (index, e) in bundle.entries.iter().enumerate() {
        head = next_link(alert, &head, &e.entry, &e.head)
            .map_err(|what| format!("alert {}, entry {}: {what}", alert.id, index + 1))?;
        heads.push(head);
    }
    let entries = bundle.entries.iter().map(|e| &e.entry);
    let name = |index: usize| format!("entry {}", index + 1);
    match state_problem(bundle.state.as_deref(), entries, name) {
        Some(what) => Err(format!("alert {} {what}", alert.id)),
        None => Ok(heads),
    }
}

/// The alert's leaf (its id, the entries the checkpoint covers, the head after them)
/// under the checkpoint's root, by the inclusion proof.
fn check_inclusion(alert: Uuid, cp: &BundleCheckpoint, heads: &[Hash]) -> Result<(), String> {
    let covered = usize::try_from(cp.entries).unwrap_or(usize::MAX);
    if covered == 0 || covered > heads.len() {
        return Err(format!(
            "checkpoint {} says it covers {} entries; the bundle has {}",
            cp.seq,
            cp.entries,
            heads.len()
        ));
    }
    let leaf = Leaf {
        alert_id: alert,
        entries: cp.entries,
        head: heads[covered - 1],
    };
    let path: Vec<Hash> = cp
        .inclusion_proof
        .iter()
        .map(|h| hex32::parse(h).filter(|p| hex(p) == *h))
        .collect::<Option<_>>()
        .ok_or("the inclusion proof holds something other than 64 lower-case hex digits")?;
    if !verify_inclusion(&leaf.hash(), cp.leaf_index, cp.size, &path, &cp.root) {
        return Err(format!(
            "the alert's head after {} entries is not under checkpoint {}'s root (the \
             inclusion proof fails)",
            cp.entries, cp.seq
        ));
    }
    Ok(())
}

/// The checkpoint's signature checked with a key the auditor trusts (or, when
/// `trusting` says so, with the bundle's own key), and what that makes of the bundle.
fn signature_standing(cp: &BundleCheckpoint, trusting: &Trusting) -> Result<Standing, String> {
    let under = UnderCheckpoint {
        seq: cp.seq,
        made_at_micros: cp.made_at_micros,
        entries: cp.entries,
        key_id: cp.key_id.clone(),
    };
    let checkpoint = Checkpoint {
        seq: cp.seq,
        made_at_micros: cp.made_at_micros,
        size: cp.size,
        root: cp.root,
        previous: cp.previous,
    };
    let (key_id, signature, public) = match (&cp.key_id, &cp.signature, &cp.public_key) {
        (Some(key_id), Some(signature), Some(public)) => (key_id, signature, public),
        (None, None, None) if trusting.allow_unanchored => return Ok(Standing::Unsigned(under)),
        (None, None, None) => {
            return Err(format!(
                "checkpoint {} is unsigned: anyone can make an unsigned checkpoint, so it \
                 anchors nothing",
                cp.seq
            ))
        }
        _ => return Err("the checkpoint's key id, signature and public key go together".into()),
    };
    let embedded = PublicKey::from_text(public).map_err(|e| e.to_string())?;
    if embedded.to_text() != *public {
        return Err("the public key is not in its canonical text".into());
    }
    if embedded.key_id() != key_id {
        return Err(format!(
            "checkpoint {} names key {key_id}, but the bundle's public key is {}",
            cp.seq,
            embedded.key_id()
        ));
    }
    let signature = parse_hex(signature)
        .filter(|s| hex_bytes(s) == *signature)
        .ok_or("the signature is not lower-case hex")?;
    // The auditor's own key checks the signature, never the bundle's copy of it: two keys
    // may share an id (eight bytes of a hash).
    let (key, standing) = if !trusting.keys.is_empty() {
        let key = trusting
            .keys
            .iter()
            .find(|k| k.key_id() == key_id)
            .ok_or_else(|| {
                format!(
                    "checkpoint {} is signed by key {key_id}, which is not one of the keys given",
                    cp.seq
                )
            })?;
        (key, Standing::Trusted(under))
    } else if trusting.trust_embedded_key {
        (&embedded, Standing::EmbeddedKey(under))
    } else {
        return Err(format!(
            "no key was given to check checkpoint {}'s signature with (--public-key, or {}): \
             the key inside the bundle proves nothing, since whoever wrote the bundle chose it",
            cp.seq,
            crate::trusted_keys::PUBLIC_KEYS_VARIABLE
        ));
    };
    if !key.verifies(&checkpoint, &signature) {
        return Err(format!(
            "checkpoint {}'s signature does not verify with key {key_id}",
            cp.seq
        ));
    }
    Ok(standing)
}

fn hex_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::evidence::chain::{link, merkle_root};
    use outbox_core::evidence::entries::EventFacts;
    use outbox_core::evidence::signing::CheckpointSigner;
    use std::io::Read;

    /// When the bundle's entries are dated, microseconds since the epoch.
    const FIRST_ENTRY_AT: i64 = 1_796_000_000_000_001;

    /// A bundle built by hand the way `export` builds one: an alert with two entries, the
    /// first recorded by signed checkpoint 3 (one leaf of two), both by signed checkpoint 5
    /// (one of three); each carries the checkpoint before it, made at `floor_made` (for
    /// checkpoint 5) or a minute before the first entry (for checkpoint 3).
    fn bundle_with_floor(signer: &CheckpointSigner, floor_made: i64) -> Bundle {
        let alert = AlertFacts {
            id: Uuid::from_u128(2),
            tenant: Uuid::from_u128(10),
            subject: "contract:ACME".into(),
            occurrence: "renewal:30d".into(),
            destination: Uuid::from_u128(20),
            revision: 0,
            payload_sha256: [7; 32],
            reason: None,
            created_at_micros: 1_796_000_000_000_000,
            created_by: "monitor:contracts".into(),
        };
        let event = |line: &str, to: &str, at| {
            EntryFacts::Event(EventFacts {
                at_micros: at,
                from_state: None,
                to_state: to.into(),
                attempt: None,
                actor: "operator:ana".into(),
                line: line.into(),
            })
        };
        let mut head = genesis(&alert.record()).unwrap();
        let mut entries = Vec::new();
        for (i, (line, to)) in [("approved", "pending"), ("held by ana", "held")]
            .iter()
            .enumerate()
        {
            let entry = event(line, to, FIRST_ENTRY_AT + i as i64 * 60_000_000);
            head = link(&head, &entry.record()).unwrap();
            entries.push(BundleEntry { entry, head });
        }
        let header = |seq, made_at_micros, previous| CheckpointHeader {
            seq,
            made_at_micros,
            size: 0,
            root: merkle_root(&[]),
            previous,
        };
        let two = header(2, FIRST_ENTRY_AT - 60_000_000, [1; 32]);
        let three = covering(
            signer,
            3,
            FIRST_ENTRY_AT + 30_000_000,
            two.checkpoint().hash(),
            &[
                (alert.id, 1, entries[0].head),
                (Uuid::from_u128(3), 4, [3; 32]),
            ],
            0,
            vec![two],
        );
        let four = header(4, floor_made, three_hash(&three));
        let five = covering(
            signer,
            5,
            floor_made + 60_000_000,
            four.checkpoint().hash(),
            &[
                (Uuid::from_u128(1), 1, [1; 32]),
                (alert.id, 2, entries[1].head),
                (Uuid::from_u128(3), 5, [3; 32]),
            ],
            1,
            vec![four],
        );
        Bundle {
            format: FORMAT.into(),
            alert,
            entries,
            state: Some("held".into()),
            checkpoint: Some(five),
            earlier_checkpoints: Some(vec![three]),
        }
    }

    /// A signed checkpoint over `leaves` as a bundle carries it, for the leaf at `index`.
    fn covering(
        signer: &CheckpointSigner,
        seq: u64,
        made_at_micros: i64,
        previous: Hash,
        leaves: &[(Uuid, u64, Hash)],
        index: usize,
        preceding: Vec<CheckpointHeader>,
    ) -> BundleCheckpoint {
        let hashes: Vec<Hash> = leaves
            .iter()
            .map(|&(alert_id, entries, head)| {
                Leaf {
                    alert_id,
                    entries,
                    head,
                }
                .hash()
            })
            .collect();
        let checkpoint = Checkpoint {
            seq,
            made_at_micros,
            size: leaves.len() as u64,
            root: merkle_root(&hashes),
            previous,
        };
        BundleCheckpoint {
            seq,
            made_at_micros,
            size: checkpoint.size,
            root: checkpoint.root,
            previous,
            entries: leaves[index].1,
            leaf_index: index as u64,
            inclusion_proof: inclusion_proof(&hashes, index)
                .unwrap()
                .iter()
                .map(hex)
                .collect(),
            key_id: Some(signer.key_id().to_owned()),
            signature: Some(hex_bytes(&signer.sign(&checkpoint))),
            public_key: Some(signer.public_key().to_text()),
            preceding: Some(preceding),
        }
    }

    fn three_hash(cp: &BundleCheckpoint) -> Hash {
        Checkpoint {
            seq: cp.seq,
            made_at_micros: cp.made_at_micros,
            size: cp.size,
            root: cp.root,
            previous: cp.previous,
        }
        .hash()
    }

    /// [`bundle_with_floor`] whose checkpoint 4 was made a minute after the second entry.
    fn bundle(signer: &CheckpointSigner) -> Bundle {
        bundle_with_floor(signer, FIRST_ENTRY_AT + 120_000_000)
    }

    /// Trusting the signer's key only.
    fn trusting(signer: &CheckpointSigner) -> Trusting {
        Trusting {
            keys: vec![signer.public_key()],
            ..Trusting::default()
        }
    }

    /// Accepting everything short of a broken bundle.
    fn accepting_less() -> Trusting {
        Trusting {
            keys: vec![],
            allow_unanchored: true,
            trust_embedded_key: true,
        }
    }

    #[test]
    fn a_bundle_checks_and_fails_after_any_byte_of_it_is_changed() {
        let (signer, _) = CheckpointSigner::generate();
        let bytes = to_canonical(&bundle(&signer));
        let proven = check(&bytes, &trusting(&signer)).unwrap();
        assert_eq!(proven.entries, 2);
        assert!(proven.notes.is_empty(), "{proven:?}");
        let Standing::Trusted(under) = proven.standing else {
            panic!("{proven:?}")
        };
        assert_eq!((under.seq, under.entries), (5, 2));
        for at in 0..bytes.len() {
            for replacement in [b' ', b'0', b'a', b'"', bytes[at] ^ 1] {
                if replacement == bytes[at] {
                    continue;
                }
                let mut changed = bytes.clone();
                changed[at] = replacement;
                assert!(
                    check(&changed, &accepting_less()).is_err(),
                    "byte {at} changed to {replacement:?} still checks"
                );
            }
        }
    }

    #[test]
    fn a_bundle_signed_by_another_key_fails_against_the_pinned_one() {
        let (signer, _) = CheckpointSigner::generate();
        let (other, _) = CheckpointSigner::generate();
        let bytes = to_canonical(&bundle(&other));
        let err = check(&bytes, &trusting(&signer)).unwrap_err();
        assert!(err.contains("not one of the keys given"), "{err}");
        // Even with its own key told to be trusted, the auditor's key decides.
        let both = Trusting {
            trust_embedded_key: true,
            ..trusting(&signer)
        };
        assert!(check(&bytes, &both).is_err());
    }

    #[test]
    fn without_a_key_given_the_bundles_own_key_proves_nothing_unless_asked() {
        let (forger, _) = CheckpointSigner::generate();
        let bytes = to_canonical(&bundle(&forger));
        let err = check(&bytes, &Trusting::default()).unwrap_err();
        assert!(err.contains("no key was given"), "{err}");
        let embedded = Trusting {
            trust_embedded_key: true,
            ..Trusting::default()
        };
        let proven = check(&bytes, &embedded).unwrap();
        assert!(
            matches!(proven.standing, Standing::EmbeddedKey(_)),
            "{proven:?}"
        );
    }

    #[test]
    fn a_bundle_under_no_signed_checkpoint_proves_nothing_unless_asked() {
        let (signer, _) = CheckpointSigner::generate();
        let mut unsigned = bundle(&signer);
        unsigned.earlier_checkpoints = Some(vec![]);
        let cp = unsigned.checkpoint.as_mut().unwrap();
        (cp.key_id, cp.signature, cp.public_key) = (None, None, None);
        let mut uncovered = bundle(&signer);
        uncovered.checkpoint = None;
        uncovered.earlier_checkpoints = Some(vec![]);
        let allowed = Trusting {
            allow_unanchored: true,
            ..trusting(&signer)
        };
        for (bundle, needle, standing) in [
            (unsigned, "is unsigned", "Unsigned"),
            (uncovered, "not anchored", "NotCovered"),
        ] {
            let bytes = to_canonical(&bundle);
            let err = check(&bytes, &trusting(&signer)).unwrap_err();
            assert!(err.contains(needle), "{err}");
            let proven = check(&bytes, &allowed).unwrap();
            assert!(
                format!("{:?}", proven.standing).starts_with(standing),
                "{proven:?}"
            );
        }
    }

    #[test]
    fn a_bundle_is_read_up_to_its_cap_and_no_further() {
        let at_cap = std::io::repeat(b' ').take(MAX_BUNDLE_BYTES);
        assert_eq!(read(at_cap).unwrap().len() as u64, MAX_BUNDLE_BYTES);
        // An endless input: refused once past the cap, not read to an end it lacks.
        let err = read(std::io::repeat(b' ')).unwrap_err();
        assert!(err.to_string().contains("larger than 64 MiB"), "{err}");
    }

    #[test]
    fn an_earlier_checkpoint_that_recorded_another_head_fails_the_check() {
        // The chain was rewritten after checkpoint 3 recorded its first entry: checkpoint 5
        // agrees with the chain as it is, checkpoint 3 does not.
        let (signer, _) = CheckpointSigner::generate();
        let mut rewritten = bundle(&signer);
        let three = &rewritten.earlier_checkpoints.as_ref().unwrap()[0];
        let two = three.preceding.clone().unwrap();
        let old = covering(
            &signer,
            3,
            three.made_at_micros,
            three.previous,
            &[
                (Uuid::from_u128(2), 1, [9; 32]),
                (Uuid::from_u128(3), 4, [3; 32]),
            ],
            0,
            two,
        );
        rewritten.earlier_checkpoints = Some(vec![old]);
        let err = check(&to_canonical(&rewritten), &trusting(&signer)).unwrap_err();
        assert!(
            err.contains("after 1 entries is not under checkpoint 3's root"),
            "{err}"
        );
    }

    #[test]
    fn an_entry_dated_before_the_checkpoint_before_its_own_fails_the_check() {
        let (signer, _) = CheckpointSigner::generate();
        // Entry 2 (dated a minute after entry 1) is first under checkpoint 5, so written
        // after checkpoint 4 was made: checkpoint 4 made 5 minutes later is the limit.
        let second = FIRST_ENTRY_AT + 60_000_000;
        let limit = bundle_with_floor(&signer, second + 300_000_000);
        assert!(check(&to_canonical(&limit), &trusting(&signer)).is_ok());
        let late = bundle_with_floor(&signer, second + 300_000_001);
        let err = check(&to_canonical(&late), &trusting(&signer)).unwrap_err();
        assert!(
            err.contains("entry 2: is dated") && err.contains("before checkpoint 4 was made"),
            "{err}"
        );
        // Without the checkpoint before it, nothing holds the entry's date: said so.
        let mut bare = late.clone();
        bare.checkpoint.as_mut().unwrap().preceding = Some(vec![]);
        let proven = check(&to_canonical(&bare), &trusting(&signer)).unwrap();
        assert!(
            proven.notes[0].contains("entries 2 to 2, first under checkpoint 5, were not held"),
            "{proven:?}"
        );
        // A checkpoint 4 that is not the one checkpoint 5 chains from proves nothing.
        let mut other = late;
        let four = &mut other
            .checkpoint
            .as_mut()
            .unwrap()
            .preceding
            .as_mut()
            .unwrap()[0];
        four.made_at_micros = second;
        let err = check(&to_canonical(&other), &trusting(&signer)).unwrap_err();
        assert!(
            err.contains("is not the one checkpoint 5 chains from"),
            "{err}"
        );
    }

    #[test]
    fn a_v1_bundle_still_checks_and_says_what_it_cannot_show() {
        let (signer, _) = CheckpointSigner::generate();
        let mut v1 = bundle(&signer);
        v1.format = FORMAT_V1.into();
        v1.earlier_checkpoints = None;
        v1.checkpoint.as_mut().unwrap().preceding = None;
        let bytes = to_canonical(&v1);
        assert!(!String::from_utf8_lossy(&bytes).contains("preceding"));
        let proven = check(&bytes, &trusting(&signer)).unwrap();
        assert!(
            matches!(proven.standing, Standing::Trusted(_)),
            "{proven:?}"
        );
        assert!(
            proven.notes[0]
                .contains("cannot show that earlier checkpoints recorded the same chain"),
            "{proven:?}"
        );
        // Each format with its own fields only.
        let mut mixed = v1.clone();
        mixed.earlier_checkpoints = Some(vec![]);
        let err = check(&to_canonical(&mixed), &trusting(&signer)).unwrap_err();
        assert!(err.contains("not those of its format"), "{err}");
        let mut v2_without = bundle(&signer);
        v2_without.earlier_checkpoints = None;
        assert!(check(&to_canonical(&v2_without), &trusting(&signer)).is_err());
    }
}
