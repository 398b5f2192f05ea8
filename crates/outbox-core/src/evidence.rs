//! The evidence chain's definition, pure (no I/O), shared by the store that writes it and
//! the checks that read it back:
//! - [`chain`]: the chain's arithmetic: the canonical encoding of an entry, each alert's
//!   hash chain, and the Merkle tree over chain heads that checkpoints sign, with
//!   inclusion proofs (RFC 9162's tree).
//! - [`entries`]: what the chain records of an alert and of each kind of evidence entry,
//!   field by field.
//! - [`note`]: a checkpoint as a signed note, the text kept outside the database (the
//!   checkpoint log) and read back by the checks.
//! - [`signing`]: checkpoints signed with Ed25519: key texts, key ids, signing and strict
//!   verification.

pub mod chain;
pub mod entries;
pub mod note;
pub mod signing;
