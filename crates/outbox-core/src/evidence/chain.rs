//! The evidence chain's arithmetic, defined once: how an evidence entry is encoded
//! canonically, how each alert's entries chain into a running hash, and how the chain
//! heads of many alerts go into a Merkle tree whose root a checkpoint signs, with the
//! inclusion proofs that show one alert's head is under a root.
//!
//! Pure: the store maps its rows (the approval line, attempts, events, operators'
//! actions, the outcome) to [`Record`]s, and a verifier in any language can follow the
//! same steps from the documentation's test vectors.
//!
//! **Canonical encoding of a record** (version 1). The bytes, in order:
//! - the magic `aoe1` (4 bytes);
//! - the record's kind: its length as one byte, then its ASCII bytes;
//! - the number of fields, two bytes big-endian;
//! - each field in the record's order: its name (length as one byte, then ASCII bytes),
//!   one type byte, and the value:
//!   - `0` null: nothing follows;
//!   - `1` text: the length as four bytes big-endian, then the exact UTF-8 bytes as
//!     stored (no normalisation: what is stored is what is proven);
//!   - `2` integer: eight bytes, big-endian two's complement;
//!   - `3` time: microseconds since 1970-01-01T00:00:00Z as an integer (PostgreSQL's
//!     precision, so a timestamp read back encodes as it was written);
//!   - `4` bytes: the length as four bytes big-endian, then the bytes.
//!
//! Names and kinds are at most 255 ASCII bytes, and a record has at most 65,535 fields;
//! [`Record::encode`] refuses anything else rather than encode it ambiguously.
//!
//! **The chain of one alert.** `head_0 = SHA-256("alert-outbox evidence chain v1" || 0x00
//! || encode(alert))`, where `alert` is the record of the alert itself (its identity and
//! payload fingerprint); then `head_n = SHA-256(head_(n-1) || encode(entry_n))` for its
//! entries in their order.
//!
//! **Checkpoints.** The leaves are the chain heads that changed since the previous
//! checkpoint, in alert id order; each leaf's data is the alert id (16 bytes), the number
//! of entries it chains (eight bytes big-endian) and its head (32 bytes). The tree is RFC
//! 9162's (section 2.1): a leaf hashes as `SHA-256(0x00 || data)`, a node as
//! `SHA-256(0x01 || left || right)`, split at the largest power of two smaller than the
//! number of leaves, and the empty tree is `SHA-256()`. Inclusion proofs are its audit
//! paths, verified as its section 2.1.3.2 says. A checkpoint ([`Checkpoint`]) commits to
//! its number, time, tree size and root and to the previous checkpoint's hash; those bytes
//! are what its signature signs.

use sha2::{Digest, Sha256};
use uuid::Uuid;

/// A SHA-256 digest.
pub type Hash = [u8; 32];

/// What the first link of every alert's chain starts from, before the alert's record.
pub const CHAIN_DOMAIN: &[u8] = b"alert-outbox evidence chain v1";

/// The magic every encoded record starts with (version 1 of the encoding).
const MAGIC: &[u8; 4] = b"aoe1";

/// One field's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value<'a> {
    /// Absent (SQL `NULL`).
    Null,
    /// Text, as stored.
    Text(&'a str),
    /// An integer.
    Int(i64),
    /// A point in time, in microseconds since the Unix epoch (UTC).
    TimeMicros(i64),
    /// Raw bytes (a fingerprint).
    Bytes(&'a [u8]),
}

impl Value<'_> {
    fn type_byte(&self) -> u8 {
        match self {
            Value::Null => 0,
            Value::Text(_) => 1,
            Value::Int(_) => 2,
            Value::TimeMicros(_) => 3,
            Value::Bytes(_) => 4,
        }
    }
}

/// An evidence entry (or the alert itself) as the chain sees it: a kind and named fields
/// in a fixed order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// What the entry is (`alert`, `event`, `attempt`, `outcome`...).
    pub kind: &'a str,
    /// Its fields, in the order the kind defines.
    pub fields: Vec<(&'a str, Value<'a>)>,
}

/// Why a record cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// A kind or field name that is empty, not ASCII or longer than 255 bytes.
    #[error("a record's kind and field names are 1 to 255 ASCII bytes; `{0}` is not")]
    BadName(String),
    /// More than 65,535 fields, or a text or byte value longer than 4 GiB.
    #[error("a record has at most 65,535 fields and values under 4 GiB")]
    TooLarge,
}

impl Record<'_> {
    /// The record's canonical bytes (see the module's documentation).
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(MAGIC);
        push_name(&mut out, self.kind)?;
        let count = u16::try_from(self.fields.len()).map_err(|_| EncodeError::TooLarge)?;
        out.extend_from_slice(&count.to_be_bytes());
        for (name, value) in &self.fields {
            push_name(&mut out, name)?;
            out.push(value.type_byte());
            match value {
                Value::Null => {}
                Value::Text(text) => push_sized(&mut out, text.as_bytes())?,
                Value::Int(n) | Value::TimeMicros(n) => out.extend_from_slice(&n.to_be_bytes()),
                Value::Bytes(bytes) => push_sized(&mut out, bytes)?,
            }
        }
        Ok(out)
    }
}

fn push_name(out: &mut Vec<u8>, name: &str) -> Result<(), EncodeError> {
    let len = u8::try_from(name.len()).map_err(|_| EncodeError::BadName(name.to_owned()))?;
    if len == 0 || !name.is_ascii() {
        return Err(EncodeError::BadName(name.to_owned()));
    }
    out.push(len);
    out.extend_from_slice(name.as_bytes());
    Ok(())
}

fn push_sized(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), EncodeError> {
    let len = u32::try_from(bytes.len()).map_err(|_| EncodeError::TooLarge)?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
    Ok(())
}

/// The head an alert's chain starts from: its own record, under [`CHAIN_DOMAIN`].
pub fn genesis(alert: &Record<'_>) -> Result<Hash, EncodeError> {
    let mut digest = Sha256::new();
    digest.update(CHAIN_DOMAIN);
    digest.update([0u8]);
    digest.update(alert.encode()?);
    Ok(digest.finalize().into())
}

/// The next head: `previous` with `entry` chained on.
pub fn link(previous: &Hash, entry: &Record<'_>) -> Result<Hash, EncodeError> {
    let mut digest = Sha256::new();
    digest.update(previous);
    digest.update(entry.encode()?);
    Ok(digest.finalize().into())
}

/// Where a recomputed chain first differs from the heads it was stored with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The entry's position (0 for the first entry after the alert's own record).
    pub index: usize,
    /// The head recomputed from the entries.
    pub expected: Hash,
    /// The head stored with the entry.
    pub stored: Hash,
}

/// Recomputes an alert's chain over `entries` (each with the head stored beside it) and
/// returns the final head, or the first entry whose stored head does not match.
pub fn verify_chain<'a>(
    alert: &Record<'_>,
    entries: impl IntoIterator<Item = (Record<'a>, Hash)>,
) -> Result<Result<Hash, Mismatch>, EncodeError> {
    let mut head = genesis(alert)?;
    for (index, (entry, stored)) in entries.into_iter().enumerate() {
        head = link(&head, &entry)?;
        if head != stored {
            return Ok(Err(Mismatch {
                index,
                expected: head,
                stored,
            }));
        }
    }
    Ok(Ok(head))
}

/// One leaf of a checkpoint's tree: an alert's chain head after `entries` entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leaf {
    /// The alert.
    pub alert_id: Uuid,
    /// How many entries the head chains.
    pub entries: u64,
    /// The head.
    pub head: Hash,
}

impl Leaf {
    /// The leaf's data: alert id, entry count (big-endian), head.
    pub fn data(&self) -> [u8; 56] {
        let mut data = [0u8; 56];
        data[..16].copy_from_slice(self.alert_id.as_bytes());
        data[16..24].copy_from_slice(&self.entries.to_be_bytes());
        data[24..].copy_from_slice(&self.head);
        data
    }

    /// The leaf's hash in the tree: `SHA-256(0x00 || data)`.
    pub fn hash(&self) -> Hash {
        let mut digest = Sha256::new();
        digest.update([0u8]);
        digest.update(self.data());
        digest.finalize().into()
    }
}

fn node(left: &Hash, right: &Hash) -> Hash {
    let mut digest = Sha256::new();
    digest.update([1u8]);
    digest.update(left);
    digest.update(right);
    digest.finalize().into()
}

/// The largest power of two smaller than `n` (`n` at least 2).
fn split(n: usize) -> usize {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

/// The root of the tree over these leaf hashes, in order (RFC 9162, section 2.1.1).
pub fn merkle_root(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => Sha256::digest([]).into(),
        1 => leaves[0],
        n => {
            let k = split(n);
            node(&merkle_root(&leaves[..k]), &merkle_root(&leaves[k..]))
        }
    }
}

/// The audit path of leaf `index` among `leaves` (RFC 9162, section 2.1.3.1): the
/// sibling hashes from the leaf up. `None` when `index` is out of range.
pub fn inclusion_proof(leaves: &[Hash], index: usize) -> Option<Vec<Hash>> {
    if index >= leaves.len() {
        return None;
    }
    let mut path = Vec::new();
    collect_path(leaves, index, &mut path);
    Some(path)
}

fn collect_path(leaves: &[Hash], index: usize, path: &mut Vec<Hash>) {
    let n = leaves.len();
    if n <= 1 {
        return;
    }
    let k = split(n);
    if index < k {
        collect_path(&leaves[..k], index, path);
        path.push(merkle_root(&leaves[k..]));
    } else {
        collect_path(&leaves[k..], index - k, path);
        path.push(merkle_root(&leaves[..k]));
    }
}

/// Whether `leaf` is leaf `index` of a tree of `size` leaves with root `root`, by its
/// audit path (RFC 9162, section 2.1.3.2).
pub fn verify_inclusion(leaf: &Hash, index: u64, size: u64, path: &[Hash], root: &Hash) -> bool {
    if index >= size {
        return false;
    }
    let (mut f_n, mut s_n) = (index, size - 1);
    let mut r = *leaf;
    for p in path {
        if s_n == 0 {
            return false;
        }
        if f_n & 1 == 1 || f_n == s_n {
            r = node(p, &r);
            if f_n & 1 == 0 {
                while f_n & 1 == 0 && f_n != 0 {
                    f_n >>= 1;
                    s_n >>= 1;
                }
            }
        } else {
            r = node(&r, p);
        }
        f_n >>= 1;
        s_n >>= 1;
    }
    s_n == 0 && r == *root
}

/// What a checkpoint commits to, and what its signature signs ([`Checkpoint::signed_bytes`]):
/// its number, when it was made, the tree it closes (size and root), and the previous
/// checkpoint's hash, so that checkpoints chain as entries do and a deleted or replaced
/// one breaks the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// Its number, from 1.
    pub seq: u64,
    /// When it was made, in microseconds since the Unix epoch (UTC).
    pub made_at_micros: i64,
    /// Leaves in its tree.
    pub size: u64,
    /// The tree's root.
    pub root: Hash,
    /// The previous checkpoint's [`Checkpoint::hash`] (all zeros for the first).
    pub previous: Hash,
}

/// What every checkpoint's signed bytes start with.
pub const CHECKPOINT_DOMAIN: &[u8] = b"alert-outbox checkpoint v1";

impl Checkpoint {
    /// The bytes a checkpoint's signature signs: [`CHECKPOINT_DOMAIN`], a zero byte, then
    /// `seq`, `made_at_micros` and `size` as eight bytes big-endian each, the root and
    /// the previous checkpoint's hash.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(CHECKPOINT_DOMAIN.len() + 1 + 24 + 64);
        out.extend_from_slice(CHECKPOINT_DOMAIN);
        out.push(0);
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.made_at_micros.to_be_bytes());
        out.extend_from_slice(&self.size.to_be_bytes());
        out.extend_from_slice(&self.root);
        out.extend_from_slice(&self.previous);
        out
    }

    /// The checkpoint's hash, which the next one names: SHA-256 of its signed bytes.
    pub fn hash(&self) -> Hash {
        Sha256::digest(self.signed_bytes()).into()
    }
}

/// Lowercase hexadecimal, as hashes are shown and stored in text.
pub fn hex(hash: &Hash) -> String {
    use std::fmt::Write;
    hash.iter().fold(String::with_capacity(64), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert() -> Record<'static> {
        Record {
            kind: "alert",
            fields: vec![
                ("id", Value::Text("0190c6a8-7d2e-7000-8000-000000000001")),
                ("subject", Value::Text("contract:42")),
                ("occurrence", Value::Text("2027-01-15/30d")),
                ("revision", Value::Int(0)),
                ("payload_sha256", Value::Bytes(&[0xab; 32])),
                ("created_at", Value::TimeMicros(1_796_256_000_123_456)),
            ],
        }
    }

    fn event(line: &'static str) -> Record<'static> {
        Record {
            kind: "event",
            fields: vec![
                ("at", Value::TimeMicros(1_796_256_000_223_456)),
                ("from_state", Value::Null),
                ("to_state", Value::Text("pending")),
                ("actor", Value::Text("api:acme")),
                ("line", Value::Text(line)),
            ],
        }
    }

    #[test]
    fn the_encoding_is_the_documented_bytes() {
        let record = Record {
            kind: "k",
            fields: vec![
                ("n", Value::Null),
                ("t", Value::Text("é")),
                ("i", Value::Int(-2)),
                ("at", Value::TimeMicros(1)),
                ("b", Value::Bytes(&[7])),
            ],
        };
        let mut expected = b"aoe1\x01k\x00\x05".to_vec();
        expected.extend_from_slice(b"\x01n\x00");
        expected.extend_from_slice(b"\x01t\x01\x00\x00\x00\x02\xc3\xa9");
        expected.extend_from_slice(b"\x01i\x02\xff\xff\xff\xff\xff\xff\xff\xfe");
        expected.extend_from_slice(b"\x02at\x03\x00\x00\x00\x00\x00\x00\x00\x01");
        expected.extend_from_slice(b"\x01b\x04\x00\x00\x00\x01\x07");
        assert_eq!(record.encode().unwrap(), expected);
    }

    #[test]
    fn null_empty_text_and_a_missing_field_encode_apart() {
        let with = |value| Record {
            kind: "event",
            fields: vec![("line", value)],
        };
        let null = with(Value::Null).encode().unwrap();
        let empty = with(Value::Text("")).encode().unwrap();
        let none = Record {
            kind: "event",
            fields: vec![],
        }
        .encode()
        .unwrap();
        assert_ne!(null, empty);
        assert_ne!(null, none);
        assert_ne!(empty, none);
    }

    #[test]
    fn field_boundaries_cannot_shift() {
        // "ab" + "c" and "a" + "bc" in two text fields encode differently.
        let two = |a, b| Record {
            kind: "event",
            fields: vec![("x", Value::Text(a)), ("y", Value::Text(b))],
        };
        assert_ne!(
            two("ab", "c").encode().unwrap(),
            two("a", "bc").encode().unwrap()
        );
    }

    #[test]
    fn bad_names_are_refused() {
        let named = |kind| Record {
            kind,
            fields: vec![],
        };
        assert!(named("").encode().is_err());
        assert!(named("é").encode().is_err());
        let long = "k".repeat(256);
        assert!(named(&long).encode().is_err());
        assert!(named(&long[..255]).encode().is_ok());
    }

    /// Test vectors, computed independently from the steps this module's documentation
    /// gives (a short Python script over `hashlib` and `struct`), so that a verifier in
    /// another language can check itself against them.
    #[test]
    fn the_chain_matches_the_documented_vectors() {
        let head_0 = genesis(&alert()).unwrap();
        let head_1 = link(&head_0, &event("alert approved")).unwrap();
        assert_eq!(hex(&head_0), GENESIS_VECTOR);
        assert_eq!(hex(&head_1), LINK_VECTOR);
    }

    const GENESIS_VECTOR: &str = "0f94e568596a960f6ea3cf01451464b139f03d303bf63713cc860f59ba7c5a59";
    const LINK_VECTOR: &str = "4e2fe2eabccdfa58e37dc47ee3f957ea3a4e38e323bb9a6bcd0370cec25709bf";

    #[test]
    fn a_changed_entry_is_named_where_it_changed() {
        let head_0 = genesis(&alert()).unwrap();
        let h1 = link(&head_0, &event("one")).unwrap();
        let h2 = link(&h1, &event("two")).unwrap();
        let h3 = link(&h2, &event("three")).unwrap();
        let stored = [(event("one"), h1), (event("two"), h2), (event("three"), h3)];
        assert_eq!(verify_chain(&alert(), stored.clone()).unwrap(), Ok(h3));
        // The second line rewritten: the chain breaks at index 1.
        let mut tampered = stored.clone();
        tampered[1].0 = event("TWO");
        let mismatch = verify_chain(&alert(), tampered).unwrap().unwrap_err();
        assert_eq!((mismatch.index, mismatch.stored), (1, h2));
        // An entry deleted: the next one no longer chains.
        let deleted = [stored[0].clone(), stored[2].clone()];
        assert_eq!(
            verify_chain(&alert(), deleted).unwrap().unwrap_err().index,
            1
        );
        // Two entries swapped.
        let swapped = [stored[1].clone(), stored[0].clone(), stored[2].clone()];
        assert_eq!(
            verify_chain(&alert(), swapped).unwrap().unwrap_err().index,
            0
        );
    }

    #[test]
    fn checkpoints_chain_and_sign_every_field() {
        let first = Checkpoint {
            seq: 1,
            made_at_micros: 1_796_256_000_000_000,
            size: 3,
            root: merkle_root(&leaves(3)),
            previous: [0; 32],
        };
        let second = Checkpoint {
            seq: 2,
            size: 1,
            root: merkle_root(&leaves(1)),
            previous: first.hash(),
            ..first
        };
        assert_eq!(hex(&first.hash()), CHECKPOINT_VECTOR);
        assert_eq!(second.previous, first.hash());
        // Any field changed changes what is signed.
        let changed = [
            Checkpoint { seq: 3, ..first },
            Checkpoint {
                made_at_micros: 0,
                ..first
            },
            Checkpoint { size: 4, ..first },
            Checkpoint {
                root: [1; 32],
                ..first
            },
            Checkpoint {
                previous: [1; 32],
                ..first
            },
        ];
        for other in changed {
            assert_ne!(other.signed_bytes(), first.signed_bytes(), "{other:?}");
        }
    }

    /// As the chain's vectors: computed independently from the documented layout.
    const CHECKPOINT_VECTOR: &str =
        "b2bc3de5d0dd56718c03cbd0b63c17bf43472b63aabf19d76018d7e9690796f2";

    fn leaves(n: usize) -> Vec<Hash> {
        (0..n)
            .map(|i| {
                Leaf {
                    alert_id: Uuid::from_u128(i as u128),
                    entries: i as u64,
                    head: [i as u8; 32],
                }
                .hash()
            })
            .collect()
    }

    #[test]
    fn the_tree_is_rfc_9162s() {
        assert_eq!(
            hex(&merkle_root(&[])),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let l = leaves(3);
        assert_eq!(merkle_root(&l[..1]), l[0]);
        assert_eq!(merkle_root(&l), node(&node(&l[0], &l[1]), &l[2]));
    }

    #[test]
    fn every_leaf_of_every_size_proves_and_nothing_else_does() {
        for size in 1..=17 {
            let l = leaves(size);
            let root = merkle_root(&l);
            for index in 0..size {
                let path = inclusion_proof(&l, index).unwrap();
                assert!(
                    verify_inclusion(&l[index], index as u64, size as u64, &path, &root),
                    "leaf {index} of {size}"
                );
                // Another leaf, another position, another size or another root fails.
                let other = l[(index + 1) % size];
                if size > 1 {
                    assert!(!verify_inclusion(
                        &other,
                        index as u64,
                        size as u64,
                        &path,
                        &root
                    ));
                    assert!(!verify_inclusion(
                        &l[index],
                        ((index + 1) % size) as u64,
                        size as u64,
                        &path,
                        &root
                    ));
                }
                // (The size is not proven by the path alone, as in RFC 9162: a checkpoint
                // signs its size with its root.) A shortened path fails.
                if let Some((_, shorter)) = path.split_last() {
                    assert!(!verify_inclusion(
                        &l[index],
                        index as u64,
                        size as u64,
                        shorter,
                        &root
                    ));
                }
                assert!(!verify_inclusion(
                    &l[index],
                    index as u64,
                    size as u64,
                    &path,
                    &[0; 32]
                ));
            }
            assert!(inclusion_proof(&l, size).is_none());
        }
    }
}
