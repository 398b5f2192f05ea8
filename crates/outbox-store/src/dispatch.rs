//! The dispatcher's statements: claim due rows, sweep expired leases, start a resend,
//! record outcomes, release unsent claims, queue figures. Wake-ups are `crate::wake_ups`'.
//!
//! Ordering rule: "attempt N started" is committed by the claim (or by [`begin_resend`])
//! before any byte goes to the destination; a crash mid-send therefore always leaves a
//! `sending` row whose lease runs out, which the sweep turns into `uncertain`.
//!
//! Fencing: every claim draws a fresh token from a sequence. Completions and releases
//! apply only while the row is still `sending` under that token, so a worker that stalled
//! past its lease (and was replaced) changes nothing when it wakes up.
//!
//! One file per subject: `claim` (which rows are due and the claim that takes them),
//! `leases` (what else happens under a claim's lease: its expiry, a resend, giving it
//! back), `completion` (recording what became of a claim) and `queue_figures` (what is
//! due, for `--drain` and `/metrics`).

mod claim;
mod completion;
mod leases;
mod queue_figures;

pub use claim::{
    claim, claim_on, claim_sql, due_status, ChainSeen, ClaimedAlert, ClaimedDestination,
    FAILED_LOOKUP,
};
pub use completion::{
    complete, complete_batch, complete_batch_handing_on, record_attempt, AttemptRecord, Completion,
    LaneHead, Next, Recorded,
};
pub use leases::{begin_resend, release, sweep_expired_leases};
pub(crate) use queue_figures::OLDEST_DUE_AGE_SECS;
pub use queue_figures::{queue_figures, work_due_within, QueueFigures};
