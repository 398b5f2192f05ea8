//! Proof bundles: one alert's whole evidence with what shows it was not changed since a
//! checkpoint (its chain, the checkpoint's leaf for it, the inclusion proof to the
//! checkpoint's root, the checkpoint and its signature with the public key), as one JSON
//! document that [`check`] verifies with no database.
//!
//! A bundle is written in one canonical form (compact JSON, fields in a fixed order, hex
//! in lower case), and [`check`] refuses any other form: every byte of a bundle then
//! either carries a hashed or signed value or is fixed by the form, so a change to any
//! byte fails the check.

use outbox_core::evidence_chain::{
    genesis, hex, inclusion_proof, link, verify_inclusion, Checkpoint, Hash, Leaf,
};
use outbox_core::evidence_entries::{hex32, AlertFacts, EntryFacts};
use outbox_core::evidence_signing::PublicKey;
use outbox_store::evidence_chain as stored;
use outbox_store::StoreError;
use sqlx::PgPool;
use uuid::Uuid;

use crate::checkpoint::{checkpoint_of, unpack_leaves};
use crate::verify::state_agrees;

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

/// What a bundle proves, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proven {
    /// The alert.
    pub alert_id: Uuid,
    /// Entries whose chain verified.
    pub entries: usize,
    /// The checkpoint its first `entries` entries are under: number, time (micros), how
    /// many, and the signing key's id when signed.
    pub checkpoint: Option<(u64, i64, u64, Option<String>)>,
}

/// Checks a bundle with no database: canonical form, chain, state, leaf inclusion,
/// checkpoint signature (with a pinned key when `pinned` is not empty). Returns what it
/// proves, or the first thing that does not hold.
pub fn check(bytes: &[u8], pinned: &[PublicKey]) -> Result<Proven, String> {
    let bundle: Bundle = serde_json::from_slice(bytes).map_err(|e| format!("not a bundle: {e}"))?;
    if to_canonical(&bundle) != bytes {
        return Err(
            "the bundle is not in the form `evidence export` writes (was it edited?)".into(),
        );
    }
    if bundle.format != FORMAT {
        return Err(format!("unknown format `{}`", bundle.format));
    }
    let alert = bundle.alert.id;
    let mut head = genesis(&bundle.alert.record()).map_err(|e| e.to_string())?;
    let mut heads = Vec::with_capacity(bundle.entries.len());
    for (index, e) in bundle.entries.iter().enumerate() {
        head = link(&head, &e.entry.record()).map_err(|e| e.to_string())?;
        if head != e.head {
            return Err(format!(
                "alert {alert}, entry {}: does not match its chain: expected head {}, the \
                 bundle says {}",
                index + 1,
                hex(&head),
                hex(&e.head)
            ));
        }
        heads.push(head);
    }
    if let Some(state) = &bundle.state {
        let last = bundle.entries.iter().rev().find_map(|e| e.entry.to_state());
        if !last.is_some_and(|last| state_agrees(state, last)) {
            return Err(format!(
                "alert {alert} is {state}, but the last transition its chain records is {}",
                last.unwrap_or("none")
            ));
        }
    }
    let Some(cp) = &bundle.checkpoint else {
        return Ok(Proven {
            alert_id: alert,
            entries: heads.len(),
            checkpoint: None,
        });
    };
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
    let checkpoint = Checkpoint {
        seq: cp.seq,
        made_at_micros: cp.made_at_micros,
        size: cp.size,
        root: cp.root,
        previous: cp.previous,
    };
    match (&cp.key_id, &cp.signature, &cp.public_key) {
        (Some(key_id), Some(signature), Some(public)) => {
            let key = PublicKey::from_text(public).map_err(|e| e.to_string())?;
            if key.to_text() != *public {
                return Err("the public key is not in its canonical text".into());
            }
            if key.key_id() != key_id {
                return Err(format!(
                    "checkpoint {} names key {key_id}, but the bundle's public key is {}",
                    cp.seq,
                    key.key_id()
                ));
            }
            if !pinned.is_empty() && !pinned.iter().any(|p| p.key_id() == key.key_id()) {
                return Err(format!(
                    "checkpoint {} is signed by key {key_id}, which is not one of the keys given",
                    cp.seq
                ));
            }
            let signature = parse_hex(signature)
                .filter(|s| hex_bytes(s) == *signature)
                .ok_or("the signature is not lower-case hex")?;
            if !key.verifies(&checkpoint, &signature) {
                return Err(format!(
                    "checkpoint {}'s signature does not verify with key {key_id}",
                    cp.seq
                ));
            }
        }
        (None, None, None) if pinned.is_empty() => {}
        (None, None, None) => {
            return Err(format!(
                "checkpoint {} is unsigned, but keys were given to check it with",
                cp.seq
            ))
        }
        _ => return Err("the checkpoint's key id, signature and public key go together".into()),
    }
    Ok(Proven {
        alert_id: alert,
        entries: heads.len(),
        checkpoint: Some((cp.seq, cp.made_at_micros, cp.entries, cp.key_id.clone())),
    })
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
    use outbox_core::evidence_chain::merkle_root;
    use outbox_core::evidence_entries::EventFacts;
    use outbox_core::evidence_signing::CheckpointSigner;

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

    #[test]
    fn a_bundle_checks_and_fails_after_any_byte_of_it_is_changed() {
        let (signer, _) = CheckpointSigner::generate();
        let bytes = to_canonical(&bundle(&signer));
        let proven = check(&bytes, &[signer.public_key()]).unwrap();
        assert_eq!(proven.entries, 2);
        assert_eq!(proven.checkpoint.as_ref().map(|c| c.2), Some(2));
        for at in 0..bytes.len() {
            for replacement in [b' ', b'0', b'a', b'"', bytes[at] ^ 1] {
                if replacement == bytes[at] {
                    continue;
                }
                let mut changed = bytes.clone();
                changed[at] = replacement;
                assert!(
                    check(&changed, &[]).is_err(),
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
        assert!(check(&bytes, &[]).is_ok());
        let err = check(&bytes, &[signer.public_key()]).unwrap_err();
        assert!(err.contains("not one of the keys given"), "{err}");
    }
}
