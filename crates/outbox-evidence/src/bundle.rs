//! Proof bundles: one alert's whole evidence with what shows it was not changed since a
//! checkpoint (its chain, the checkpoint's leaf for it, the inclusion proof to the
//! checkpoint's root, the checkpoint and its signature with the public key), as one JSON
//! document that [`check`] verifies with no database.
//!
//! A bundle is written in one canonical form (compact JSON, fields in a fixed order, hex
//! in lower case), and [`check`] refuses any other form: every byte of a bundle then
//! either carries a hashed or signed value or is fixed by the form, so a change to any
//! byte fails the check.
//!
//! A bundle proves its alert's trail only under a checkpoint signed by a key the auditor
//! holds: a chain that holds together, an unsigned checkpoint or a signature by the key the
//! bundle carries can all be made by whoever writes the bundle. [`check`] refuses those
//! unless asked to say what they show ([`Trusting`], [`Standing`]).

use outbox_core::evidence_chain::{
    genesis, hex, inclusion_proof, verify_inclusion, Checkpoint, Hash, Leaf,
};
use outbox_core::evidence_entries::{hex32, AlertFacts, EntryFacts};
use outbox_core::evidence_signing::PublicKey;
use outbox_store::evidence_chain as stored;
use outbox_store::StoreError;
use sqlx::PgPool;
use uuid::Uuid;

use crate::checkpoint::{checkpoint_of, unpack_leaves};
use crate::verify::{next_link, state_problem};

/// What a bundle says it is.
pub const FORMAT: &str = "alert-outbox evidence bundle v1";

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
}

/// Builds the bundle of one alert.
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
    // The newest checkpoint covering any of its entries covers the longest prefix.
    let mut checkpoint = None;
    for pos in chain.entries.iter().rev().filter_map(|e| e.pos) {
        if let Some(c) = stored::checkpoint_covering(pool, pos).await? {
            checkpoint = Some(c);
            break;
        }
    }
    let checkpoint = match checkpoint {
        None => None,
        Some(c) => {
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
                Some(id) => stored::stored_keys(pool)
                    .await?
                    .into_iter()
                    .find(|(key_id, _)| key_id == id)
                    .map(|(_, text)| text),
            };
            let core = checkpoint_of(&c);
            Some(BundleCheckpoint {
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
            })
        }
    };
    Ok(Bundle {
        format: FORMAT.to_owned(),
        alert: chain.alert,
        entries,
        state: chain.state,
        checkpoint,
    })
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
}

/// Checks a bundle with no database, in steps: its canonical form, its chain (with the
/// rules `verify` applies: [`next_link`], [`state_problem`]), the leaf's inclusion under
/// the checkpoint's root, and the checkpoint's signature with a key the auditor trusts.
/// Returns what it shows, or the first thing that does not hold, which includes a bundle
/// that is not anchored under a checkpoint signed by one of `trusting.keys` unless
/// `trusting` accepts less.
pub fn check(bytes: &[u8], trusting: &Trusting) -> Result<Proven, String> {
    let bundle = parse_canonical(bytes)?;
    let heads = recompute_chain(&bundle)?;
    let alert = bundle.alert.id;
    let standing = match &bundle.checkpoint {
        None if trusting.allow_unanchored => Standing::NotCovered,
        None => {
            return Err(format!(
                "no checkpoint covers alert {alert}'s entries: the bundle is not anchored, \
                 and a chain that holds together proves nothing by itself (anyone can write \
                 one); export it again once a checkpoint covers it"
            ))
        }
        Some(cp) => {
            check_inclusion(alert, cp, &heads)?;
            signature_standing(cp, trusting)?
        }
    };
    Ok(Proven {
        alert_id: alert,
        entries: heads.len(),
        standing,
    })
}

/// The bundle in `bytes`, which must be in the one form `export` writes.
fn parse_canonical(bytes: &[u8]) -> Result<Bundle, String> {
    let bundle: Bundle = serde_json::from_slice(bytes).map_err(|e| format!("not a bundle: {e}"))?;
    if to_canonical(&bundle) != bytes {
        return Err(
            "the bundle is not in the form `evidence export` writes (was it edited?)".into(),
        );
    }
    if bundle.format != FORMAT {
        return Err(format!("unknown format `{}`", bundle.format));
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
    use outbox_core::evidence_chain::{link, merkle_root};
    use outbox_core::evidence_entries::EventFacts;
    use outbox_core::evidence_signing::CheckpointSigner;
    use std::io::Read;

    /// A bundle built by hand the way `export` builds one: an alert with two entries
    /// under a signed checkpoint of three leaves.
    fn bundle(signer: &CheckpointSigner) -> Bundle {
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
            let entry = event(line, to, 1_796_000_000_000_001 + i as i64);
            head = link(&head, &entry.record()).unwrap();
            entries.push(BundleEntry { entry, head });
        }
        let leaves = [
            Leaf {
                alert_id: Uuid::from_u128(1),
                entries: 1,
                head: [1; 32],
            },
            Leaf {
                alert_id: alert.id,
                entries: 2,
                head,
            },
            Leaf {
                alert_id: Uuid::from_u128(3),
                entries: 4,
                head: [3; 32],
            },
        ];
        let hashes: Vec<Hash> = leaves.iter().map(Leaf::hash).collect();
        let checkpoint = Checkpoint {
            seq: 5,
            made_at_micros: 1_796_000_060_000_000,
            size: 3,
            root: merkle_root(&hashes),
            previous: [4; 32],
        };
        Bundle {
            format: FORMAT.into(),
            alert,
            entries,
            state: Some("held".into()),
            checkpoint: Some(BundleCheckpoint {
                seq: 5,
                made_at_micros: checkpoint.made_at_micros,
                size: 3,
                root: checkpoint.root,
                previous: checkpoint.previous,
                entries: 2,
                leaf_index: 1,
                inclusion_proof: inclusion_proof(&hashes, 1)
                    .unwrap()
                    .iter()
                    .map(hex)
                    .collect(),
                key_id: Some(signer.key_id().to_owned()),
                signature: Some(hex_bytes(&signer.sign(&checkpoint))),
                public_key: Some(signer.public_key().to_text()),
            }),
        }
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
        let cp = unsigned.checkpoint.as_mut().unwrap();
        (cp.key_id, cp.signature, cp.public_key) = (None, None, None);
        let mut uncovered = bundle(&signer);
        uncovered.checkpoint = None;
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
}
