//! The tamper-evident trail, above the store: every alert's evidence entries are linked
//! into a hash chain by the database as they are inserted (`outbox_store::evidence_chain`,
//! with `outbox_core`'s encoding); this crate makes the checkpoints that commit to those
//! chains, verifies chains and checkpoints, and writes and checks proof bundles.
//!
//! Layout:
//! - [`checkpoint`]: making a checkpoint (which entries it covers, the tree, the
//!   signature) and the loop deciders and dispatchers run to make one per interval, which
//!   also moves the backfill of older alerts along.
//! - [`dating`]: the rule that an entry is not dated before the checkpoint made before its
//!   own, and the margin it allows.
//! - [`verify`]: one alert verified (`outboxctl evidence verify --alert`, the console's
//!   alert page), and the walk over everything or what changed since a time, in bounded
//!   memory; every finding names its place.
//! - [`bundle`]: one alert's proof as a self-contained JSON document, checked with no
//!   database.
//! - [`earlier`]: earlier bundles of an alert an auditor kept, which a later bundle or
//!   the database's chain must extend.
//! - [`published`]: the checkpoint log, every checkpoint as a signed note in a file
//!   outside the database, appended by the processes that make checkpoints and held
//!   against the database as it is.
//! - [`trusted_keys`]: the public keys an auditor trusts, read alike by every check.
//! - Below them all, what every one of them speaks: [`problem`] (a finding), [`anchor`]
//!   (a checkpoint's number and hash kept outside the database) and [`stored_form`] (a
//!   stored checkpoint and its leaves in the core's forms). They import none of the
//!   modules above, so no two modules of the crate import each other.
//!
//! What this proves and what it does not is docs/auditing.md's subject; the bundle and the
//! algorithm, field by field and byte by byte, are docs/evidence-format.md's.

pub mod anchor;
pub mod bundle;
pub mod checkpoint;
pub mod dating;
pub mod earlier;
pub mod problem;
pub mod published;
pub mod stored_form;
pub mod trusted_keys;
pub mod verify;
