//! Upkeep, the dispatcher's half (`outbox_store::upkeep` says why):
//! - the live queue's vacuum: every [`CHECK_EVERY`], one look at `outbox`'s dead tuples;
//!   past the threshold, a `VACUUM` of it. Several dispatchers may look at once; a vacuum
//!   already under way makes the others skip theirs.
//! - the subject index's pending list, merged every [`MERGE_SOON`] while approvals fill
//!   it, so that no approval has to merge it; on a quiet system the look slows down to
//!   one every [`MERGE_QUIET`]. One dispatcher merges at a time; the others skip.
//! - the attempts' time index: each page range of `delivery_attempts` summarized once it
//!   has filled, looked for every [`SUMMARIZE_SOON`] while ranges fill, down to one look
//!   every [`SUMMARIZE_QUIET`]. One dispatcher summarizes at a time; the others skip.
//!
//! Each task needs the owner of what it tends; a dispatcher whose role is not says so once
//! at start and leaves the work where PostgreSQL would have it (autovacuum, the
//! approvals, the next vacuum): [`may_tend`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Shared;
use outbox_runtime::shutdown::Shutdown;

/// How often a dispatcher looks at the queue's dead tuples.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(2);

/// How soon a dispatcher merges the subject index's pending list again after a merge
/// that found entries. At the approval rates measured (`docs/performance.md`), a tenth of
/// a second of approvals fills a few hundred kilobytes of the list's 4 MB.
pub(crate) const MERGE_SOON: Duration = Duration::from_millis(100);

/// The longest a dispatcher waits between looks at an empty pending list: each empty look
/// doubles the wait up to this, so an idle system sees one cheap statement every 2 s.
pub(crate) const MERGE_QUIET: Duration = Duration::from_secs(2);

/// How soon a dispatcher looks for filled page ranges of the attempts again after a look
/// that found some. At 20,000 deliveries a second a range (1 MB) fills in a few tenths of
/// a second, so one look a second summarizes a handful of ranges at a time.
pub(crate) const SUMMARIZE_SOON: Duration = Duration::from_secs(1);

/// The longest a dispatcher waits between looks that find no filled range: each such
/// look doubles the wait up to this. At a few deliveries a minute a range takes hours to
/// fill, so a range left unsummarized for ten seconds more costs nothing.
pub(crate) const SUMMARIZE_QUIET: Duration = Duration::from_secs(10);

/// A vacuum that takes this long is reported at INFO rather than DEBUG.
const LONG_VACUUM: Duration = Duration::from_secs(1);

/// Whether this dispatcher may do an upkeep task that needs the owner of what it tends,
/// from the store's answer `may`. When it may not, it says so once, naming the task
/// (`to`) and who does the work instead (`instead`): at INFO when the role is simply not
/// the owner (a deployment's choice), at WARN when the answer could not be had.
fn may_tend(may: Result<bool, outbox_store::StoreError>, to: &str, instead: &str) -> bool {
    match may {
        Ok(true) => true,
        Ok(false) => {
            tracing::info!("this role is not the owner it would take to {to}: {instead}");
            false
        }
        Err(err) => {
            tracing::warn!(error = %err, "cannot tell whether this role may {to}: {instead}");
            false
        }
    }
}

/// Vacuums `outbox` whenever its dead tuples have reached `after_dead_tuples`, until
/// `stop`. Does nothing (after saying so once) when this role may not vacuum it.
pub(crate) async fn vacuum_queue_when_due(
    shared: Arc<Shared>,
    after_dead_tuples: u64,
    mut stop: Shutdown,
) {
    let may = outbox_store::upkeep::may_vacuum_queue(&shared.pool).await;
    if !may_tend(may, "vacuum the outbox table", "autovacuum vacuums it") {
        return;
    }
    let threshold = i64::try_from(after_dead_tuples).unwrap_or(i64::MAX);
    loop {
        tokio::select! {
            () = stop.wait() => return,
            () = tokio::time::sleep(CHECK_EVERY) => {}
        }
        let dead = match outbox_store::upkeep::queue_dead_tuples(&shared.pool).await {
            Ok(dead) => dead,
            Err(err) => {
                tracing::debug!(error = %err, "reading the outbox table's dead tuples failed");
                continue;
            }
        };
        if dead < threshold {
            continue;
        }
        let started = Instant::now();
        match outbox_store::upkeep::vacuum_queue(&shared.pool).await {
            Ok(()) => {
                shared.metrics.queue_vacuumed();
                let took = started.elapsed();
                let took_ms = took.as_millis() as u64;
                // A long vacuum is worth a line an operator sees (the queue had grown
                // large), but it is upkeep done, not a fault.
                if took >= LONG_VACUUM {
                    tracing::info!(dead_tuples = dead, took_ms, "vacuumed the outbox table");
                } else {
                    tracing::debug!(dead_tuples = dead, took_ms, "vacuumed the outbox table");
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, dead_tuples = dead, "vacuuming the outbox table failed")
            }
        }
    }
}

/// Merges the subject index's pending list into the index while approvals fill it, until
/// `stop`. Does nothing (after saying so once) when this role may not: the approvals then
/// merge it themselves, as PostgreSQL does by default.
pub(crate) async fn merge_subject_index_while_approvals_arrive(
    shared: Arc<Shared>,
    mut stop: Shutdown,
) {
    let may = outbox_store::upkeep::may_clean_subject_index(&shared.pool).await;
    if !may_tend(
        may,
        "merge the subject index's pending list",
        "approvals merge it themselves",
    ) {
        return;
    }
    let mut wait = MERGE_SOON;
    loop {
        tokio::select! {
            () = stop.wait() => return,
            () = tokio::time::sleep(wait) => {}
        }
        let started = Instant::now();
        wait = match outbox_store::upkeep::clean_subject_index(&shared.pool).await {
            Ok(0) => (wait * 2).min(MERGE_QUIET),
            Ok(pages) => {
                tracing::debug!(
                    pages,
                    took_ms = started.elapsed().as_millis() as u64,
                    "merged the subject index's pending list"
                );
                MERGE_SOON
            }
            // A failover or a restart under way: the next look, a quiet interval later,
            // finds the server back.
            Err(err) => {
                tracing::debug!(error = %err, "merging the subject index's pending list failed");
                MERGE_QUIET
            }
        };
    }
}

/// Summarizes each page range of `delivery_attempts` in the attempts' time index once it
/// has filled, until `stop`. Does nothing (after saying so once) when this role may not:
/// the ranges then wait for the next vacuum of the table, autovacuum's or an operator's.
pub(crate) async fn summarize_attempt_ranges_as_they_fill(shared: Arc<Shared>, mut stop: Shutdown) {
    let may = outbox_store::upkeep::may_summarize_attempt_ranges(&shared.pool).await;
    if !may_tend(
        may,
        "summarize the attempts' time index",
        "its ranges wait for the next vacuum",
    ) {
        return;
    }
    // From the table's first range: ranges summarized already are passed over at the cost
    // of a lookup each, and it finds any that a crash or a role change left behind.
    let mut from_block = 0;
    let mut wait = SUMMARIZE_SOON;
    loop {
        tokio::select! {
            () = stop.wait() => return,
            () = tokio::time::sleep(wait) => {}
        }
        let started = Instant::now();
        wait = match outbox_store::upkeep::summarize_filled_attempt_ranges(&shared.pool, from_block)
            .await
        {
            Ok(Some(done)) => {
                from_block = done.next_block;
                if done.summarized > 0 {
                    tracing::debug!(
                        ranges = done.summarized,
                        took_ms = started.elapsed().as_millis() as u64,
                        "summarized filled ranges of the attempts' time index"
                    );
                }
                if done.more {
                    // A backlog of ranges (the first look at a large table): on at once,
                    // a bounded call at a time.
                    Duration::from_millis(10)
                } else if done.summarized > 0 {
                    SUMMARIZE_SOON
                } else {
                    (wait * 2).min(SUMMARIZE_QUIET)
                }
            }
            // Another dispatcher is at it.
            Ok(None) => SUMMARIZE_SOON,
            // A vacuum of the table holding its lock (the call gives up after 50 ms rather
            // than have the server cancel that vacuum), a failover, a restart: the next
            // look tries again.
            Err(err) => {
                tracing::debug!(error = %err, "summarizing the attempts' time index failed");
                SUMMARIZE_QUIET
            }
        };
    }
}
