//! Sends counted per destination in memory since the last health report ([`Tallies`]):
//! each finished send adds to them on the delivery's own path, and `health` takes them
//! for its report (and puts them back when the report could not be written).
//!
//! What counts: a send (never a lookup) that reached or tried to reach the destination;
//! `health` says why.

use chrono::Utc;
use outbox_core::{AttemptKind, AttemptOutcome};
use outbox_store::dispatch::AttemptRecord;
use outbox_store::health::SendTally;
use std::collections::HashMap;
use std::sync::Mutex;
use uuid::Uuid;

/// Sends counted since the last report, per destination, with the destination's name
/// (for logs and metrics).
#[derive(Debug, Default)]
pub(crate) struct Tallies(Mutex<HashMap<Uuid, (String, SendTally)>>);

impl Tallies {
    /// Counts a finished attempt, if it was a send.
    pub(crate) fn count(&self, destination_id: Uuid, destination: &str, record: &AttemptRecord) {
        if record.kind != AttemptKind::Send {
            return;
        }
        let accepted = record.outcome == AttemptOutcome::Accepted;
        let mut tallies = self.0.lock().unwrap_or_else(|e| e.into_inner());
        tallies
            .entry(destination_id)
            .or_insert_with(|| (destination.to_owned(), SendTally::new(destination_id)))
            .1
            .count(accepted, Utc::now());
    }

    /// Everything counted so far, leaving nothing.
    pub(crate) fn take(&self) -> HashMap<Uuid, (String, SendTally)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Puts back a report that could not be written, before what was counted since.
    pub(crate) fn put_back(&self, unreported: HashMap<Uuid, (String, SendTally)>) {
        let mut tallies = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for (id, (name, older)) in unreported {
            let merged = match tallies.remove(&id) {
                Some((_, newer)) => older.then(newer),
                None => older,
            };
            tallies.insert(id, (name, merged));
        }
    }
}
