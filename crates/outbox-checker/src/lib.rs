//! The fault suite's referee. It judges a run only by the database's tables and the
//! sinks' own records, never by what the dispatchers say about themselves, and counts:
//!
//! - **lost**: committed alerts that are not accepted, failed, held or superseded;
//! - **logical duplicates**: more than one alert per identity and revision;
//! - **partial commits**: an alert without its queue row or outcome (or with both), or
//!   without the evidence line its approval writes;
//! - **unexpected**: a key a sink saw that no committed alert has;
//! - **mutated retries**: a key seen with another payload than the one committed;
//! - **effective duplicates** per sink (applied more than once) and **wire duplicates**
//!   (recognised and absorbed by the sink);
//! - **unresolved uncertain** alerts;
//! - **phantom acceptances**: alerts recorded as accepted that their sink never applied.
//!
//! Passing means all zero, except wire duplicates at sinks that de-duplicate or answer
//! lookups, and effective duplicates at `retry` sinks, each of which must belong to an
//! alert flagged `possible_duplicate`.
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
//! - `report`: [`Report`] (the counts, with its table) and [`Offence`] (the offenders).
//! - `tables`: what the tables alone show (lost, unresolved, partial, logical duplicates).
//! - `sinks` and `inboxes`: what the webhook sinks and the SMTP inboxes show against them,
//!   with `effective` (a key applied more than once at a destination) shared by both.
//! - `explain`: [`explain`], each offence with its alert's evidence trail.
//! - here: [`check`] and [`check_with_inboxes`], the judgement's steps in order.

mod effective;
mod explain;
mod inboxes;
mod recorded;
mod report;
mod sinks;
mod tables;

pub use explain::explain;
pub use recorded::{Capability, Inbox, InboxMessage, Sink, SinkRecord};
pub use report::{Offence, Report};

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
/// alert's own (by the tables), logical duplicates, each sink's, each inbox's, then the
/// phantom acceptances at the sinks.
pub async fn check_with_inboxes(
    pool: &PgPool,
    seed: u64,
    sinks: &[Sink],
    inboxes: &[Inbox],
) -> Result<Report, outbox_store::StoreError> {
    let alerts = outbox_store::committed::committed_alerts(pool).await?;
    let duplicated = outbox_store::committed::duplicated_identities(pool).await?;
    let mut report = Report {
        seed,
        alerts: alerts.len(),
        ..Report::default()
    };
    let by_id = tables::by_id(&alerts);
    tables::judge_alerts(&mut report, &alerts);
    tables::judge_identities(&mut report, &duplicated);
    let applied_anywhere = sinks::judge_sinks(&mut report, &by_id, sinks);
    if !inboxes.is_empty() {
        let stored = outbox_store::committed::stored_messages(pool).await?;
        inboxes::judge_inboxes(&mut report, &by_id, &stored, inboxes);
    }
    sinks::judge_acceptances(&mut report, &alerts, sinks, &applied_anywhere);
    Ok(report)
}
