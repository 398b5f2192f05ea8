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
//! Every way an alert is approved is here, and all of them write through one module:
//! `insert` (the alerts table's one insert, an approval's first evidence line, and the
//! approval statement's body: lane places, alert rows in identity order, outbox rows,
//! evidence lines). The ways in, one file each: `approve` (approvals of identities' first
//! alerts, any number in one statement, a single approval being one, and their answers),
//! `group` (the API's concurrent approvals gathered into one statement and one commit),
//! `bulk` (the monitors' many alerts of one tenant in one statement), `revise` (a
//! correction as a new revision: its own statements, through the same insert and the same
//! queueing). And `read_model` (an alert with its revisions, attempts and evidence).

mod approve;
mod bulk;
mod group;
mod insert;
pub(crate) use insert::trace_id_of;
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
