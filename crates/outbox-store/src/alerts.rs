//! The decider's write path and the read model of one alert.
//!
//! Approving writes the alert, its pending outbox row and the first evidence line in one
//! statement (one transaction, one round trip), so a crash leaves all three or none, and
//! returns the alert as written, for the API's answer. The identity's UNIQUE constraint,
//! not a read-then-write check, is what makes concurrent approvals of one identity
//! produce one alert: `INSERT ... ON CONFLICT DO NOTHING` waits for a concurrent inserter
//! of the same identity to commit or roll back, then either inserts or yields to it.
//!
//! An alert keeps the W3C trace context of its approval (`traceparent`, `tracestate`),
//! never part of its identity or fingerprint; a repeated approval keeps the first one
//! ([`note_repeated_trace`] says so in the evidence when another came).
//!
//! A payload is stored as the text every attempt sends: the approved JSON object parsed
//! as `jsonb` and rendered back once, at approval (so key order and whitespace do not
//! matter). Its fingerprint is the SHA-256 of exactly those bytes, computed by PostgreSQL
//! in the same statement, so "same payload" means "same bytes on the wire".
//!
//! One file per subject: `approve` (an identity's first alert), `group` (the API's
//! concurrent approvals written together, one statement and one commit per group),
//! `bulk` (the monitors' many alerts of one tenant in one statement), `revise` (a
//! correction as a new revision), `read_model` (an alert with its revisions, attempts and
//! evidence).

mod approve;
pub(crate) use approve::{trace_id_of, trace_note};
mod bulk;
mod group;
mod read_model;
mod revise;

pub use crate::lifecycle::EvidenceLine;
pub use approve::{
    approve, approve_checked, approve_on, note_repeated_trace, Approval, ApproveOutcome, Approved,
    CheckedApproval,
};
pub use bulk::{approve_batch, MonitorAlert};
pub use group::{approve_group, ApprovalGroups, MAX_GROUP, MAX_WRITERS};
pub use read_model::{
    alert_tenant, current_state, detail, state_of, AlertDetail, AttemptRecord, RevisionSummary,
};
pub use revise::{revise, ReviseOutcome, Revision};
