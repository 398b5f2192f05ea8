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
//!
//! One file per subject:
//! - `rules`: the rules an alert's entries and state are held to ([`next_link`],
//!   [`state_problem`], [`state_agrees`]), shared with a bundle's check.
//! - `chain`: one alert's chain recomputed from its rows ([`check_chain`]).
//! - `checkpoints`: a checkpoint checked on its own and against the one before it
//!   ([`check_checkpoint`], with the keys of [`Trust`]), its leaf held to a chain
//!   ([`leaf_agrees`]), the chain of checkpoints up to the tip.
//! - `alert`: one alert verified ([`verify_alert`]), or named deleted.
//! - `walk`: everything, or what changed since a time ([`verify_walk`]).
//! - `anchors`: checkpoints kept outside the database ([`Anchor`]) and the database held
//!   to them ([`check_anchors`]).

mod alert;
mod anchors;
mod chain;
mod checkpoints;
mod rules;
mod walk;

pub use crate::anchor::Anchor;
use crate::problem::problem;
pub use crate::problem::Problem;
pub use alert::{verify_alert, AlertReport};
pub use anchors::check_anchors;
pub use chain::{check_chain, ChainCheck};
pub use checkpoints::{check_checkpoint, find_leaf, leaf_agrees, Trust};
pub use rules::{next_link, state_agrees, state_problem};
pub use walk::{verify_walk, WalkSummary, MAX_LISTED};

#[cfg(test)]
mod tests;
