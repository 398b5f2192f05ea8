//! The alert lifecycle's transitions and refusals, each written once. Everything that moves
//! an alert between states is here or is built from the pieces here:
//!
//! - [`settle`]: an alert leaves the live queue for an [`Outcome`](outbox_core::Outcome)
//!   (with the destination's reference when it was accepted), recorded in
//!   `alert_outcomes`, never in the wide alert row. Its set-based twin is the settling
//!   step of [`COMPLETE_BATCH`] (a plain insert there: a live alert has no outcome row
//!   to overwrite), which writes no outcome row for an attempt that got the alert
//!   accepted: that attempt row says so itself ([`STATE_JOINS`]).
//! - requeue: a live row goes back to `pending` or `uncertain`, its claim cleared
//!   ([`requeue_assignments`], used by the batch completion, the lease sweep and a
//!   dispatcher's release), or a settled alert comes back to the queue with a fresh retry
//!   budget ([`requeue_with_fresh_budget`], for replay and resolve).
//! - [`append_event`]: a line of the evidence trail, with typed states; a dispatcher's
//!   completion folds its line into its attempt row instead, and [`evidence_trail`] reads
//!   both as one trail.
//! - where an alert stands, in one place: [`STATE_JOINS`] and [`STATE`], which every
//!   reader of a state uses.
//! - the operator transitions [`replay`] and [`resolve`], each with its refusals
//!   ([`Standing::replay_refusal`], [`Standing::resolve_refusal`]): every caller (the CLI,
//!   its dry runs, bulk replays) asks these, so no copy of a rule can disagree with it.
//!
//! Lock order everywhere: an ordered lane's row first ([`lock_lane_of`]; a completion
//! locks the lanes it releases before its statement), then the outbox row, then the alert
//! row (a dispatcher's completion holds the outbox row and then settles the alert;
//! operators lock both before they touch its outcome row), so operators and dispatchers
//! wait for each other instead of deadlocking.
//!
//! One file per subject: `evidence` (the trail's one insert, and the trail read back),
//! `queue_moves` (queueing, settling and requeueing, and the batch completion built from
//! them), `standing` (where an alert stands), and the operator transitions `replay` and
//! `resolve`, each with its refusal.

mod evidence;
mod queue_moves;
mod replay;
mod resolve;
mod standing;

pub use evidence::{append_event, evidence_trail, Event, EvidenceLine};
pub(crate) use evidence::{ATTEMPT_INSERT, EVENT_INSERT, LAST_EVIDENCE_LINE};
pub use queue_moves::{lock_lane_of, requeue_with_fresh_budget, settle};
pub(crate) use queue_moves::{requeue_assignments, COMPLETE_BATCH, ENQUEUE};
pub use replay::{pruned_refusal, replay, replayable};
pub use resolve::{resolve, Resolution};
pub(crate) use standing::{
    parse_optional, BLOCKS_LANE, DESTINATION_REFERENCE, SETTLED, SETTLED_AT, STATE, STATE_JOINS,
};
pub use standing::{standing, Standing};

#[cfg(test)]
mod tests;
