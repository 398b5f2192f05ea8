//! The fault suite's referee. It judges a run only by the database's tables and the
//! sinks' own records, never by what the dispatchers say about themselves, and counts:
//!
//! - **lost**: committed alerts that are not accepted, failed, held or superseded (nor
//!   waiting in their ordered lane behind a blocked head, below);
//! - **logical duplicates**: more than one alert per identity and revision;
//! - **partial commits**: an alert with neither its queue row nor a record of where it came
//!   to rest (an outcome row, or the attempt row that got it accepted), or with both, or
//!   without the evidence line its approval writes;
//! - **unexpected**: a key a sink saw that no committed alert has;
//! - **mutated retries**: a key seen with another payload than the one committed;
//! - **effective duplicates** per sink (applied more than once) and **wire duplicates**
//!   (recognised and absorbed by the sink);
//! - **unresolved uncertain** alerts;
//! - **phantom acceptances**: alerts recorded as accepted that their sink never applied;
//! - **out of order**: alerts of an ordered lane (a per-key destination's alerts of one
//!   ordering key) whose first acceptance in the destination's own log (a sink's records,
//!   an inbox's messages, in arrival order) came before that of an alert approved ahead of
//!   them in the lane (by `lane_seq`), or that went past an alert ahead of them that was
//!   never released (held, failed and not skipped, or still queued): accepted in that log,
//!   or sent by their state.
//!
//! Passing means all zero, except wire duplicates at sinks that de-duplicate or answer
//! lookups, and effective duplicates at `retry` sinks, each of which must belong to an
//! alert flagged `possible_duplicate`.
//!
//! An alert still pending because it waits in its lane behind a head that blocks it (held,
//! or failed where the destination does not skip failed heads) is not lost: such a lane
//! stays blocked until an operator resolves its head. It is counted apart, as **waiting
//! behind blocked heads**, and only when its lane's head really blocks; a pending alert
//! whose lane's head was released is lost. Each ordered destination's lanes are tallied
//! too (keys, alerts, accepted, blocked heads, waiting), to show they were exercised.
//!
//! An email destination is judged by its SMTP inbox ([`Inbox`], the sink's
//! `/_sink/messages`), which de-duplicates nothing, as a real one: a Message-ID there more
//! than once is an effective duplicate (allowed only at a `retry` destination, for an
//! alert flagged `possible_duplicate`); a message whose bytes differ from the alert's
//! stored message is a mutated retry; a message for no committed alert is unexpected; an
//! email alert recorded as accepted whose Message-ID is not in the inbox is a phantom
//! acceptance.
//!
//! Layout:
//! - `recorded`: [`SinkRecord`] and [`Sink`] (what a webhook sink recorded),
//!   [`InboxMessage`] and [`Inbox`] (what an SMTP inbox recorded), [`Capability`].
//! - `report`: [`Report`] (the counts, with its table), [`Offence`] (the offenders) and
//!   [`LaneFigures`] (an ordered destination's lanes).
//! - `tables`: what the tables alone show (lost, unresolved, partial, logical duplicates).
//! - `sinks` and `inboxes`: what the webhook sinks and the SMTP inboxes show against them,
//!   with `effective` (a key applied more than once at a destination) shared by both.
//! - `lanes`: the ordered lanes, each against its destination's log (out of order), and
//!   which pending alerts wait behind a blocked head.
//! - `explain`: [`explain`], each offence with its alert's evidence trail.
//! - here: [`check`] and [`check_with_inboxes`], the judgement's steps in order.

mod effective;
mod explain;
mod inboxes;
mod lanes;
mod recorded;
mod report;
mod sinks;
mod tables;

pub use explain::explain;
pub use recorded::{Capability, Inbox, InboxMessage, Sink, SinkRecord};
pub use report::{LaneFigures, Offence, Report};

use outbox_store::PgPool;

/// Judges a run of webhook destinations: reads the database, compares with the sinks'
/// records.
pub async fn check(
    pool: &PgPool,
    seed: u64,
    sinks: &[Sink],
) -> Result<Report, outbox_store::StoreError> {
    check_with_inboxes(pool, seed, sinks, &[]).await
}

/// Judges a run of webhook and email destinations: reads the database, compares with the
/// sinks' records and the inboxes' messages. The offences come in this order: each
/// alert's own (by the tables), logical duplicates, each sink's, each inbox's, the
/// phantom acceptances at the sinks, then each ordered lane's out-of-order acceptances.
pub async fn check_with_inboxes(
    pool: &PgPool,
    seed: u64,
    sinks: &[Sink],
    inboxes: &[Inbox],
) -> Result<Report, outbox_store::StoreError> {
    let alerts = outbox_store::checker_reads::committed_alerts(pool).await?;
    let duplicated = outbox_store::checker_reads::duplicated_identities(pool).await?;
    let mut report = Report {
        seed,
        alerts: alerts.len(),
        ..Report::default()
    };
    let by_id = tables::by_id(&alerts);
    let lanes = lanes::Lanes::of(&alerts);
    tables::judge_alerts(&mut report, &alerts, &lanes.waiting_behind_blocked_heads());
    tables::judge_identities(&mut report, &duplicated);
    let applied_anywhere = sinks::judge_sinks(&mut report, &by_id, sinks);
    if !inboxes.is_empty() {
        let stored = outbox_store::checker_reads::stored_messages(pool).await?;
        inboxes::judge_inboxes(&mut report, &by_id, &stored, inboxes);
    }
    sinks::judge_acceptances(&mut report, &alerts, sinks, &applied_anywhere);
    lanes::judge_lanes(&mut report, &lanes, sinks, inboxes);
    Ok(report)
}
