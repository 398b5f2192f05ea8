//! Upkeep, the dispatcher's half (`outbox_store::upkeep` says why):
//! - the live queue's vacuum: every [`CHECK_EVERY`], one look at `outbox`'s dead tuples;
//!   past the threshold, a `VACUUM` of it. Several dispatchers may look at once; a vacuum
//!   already under way makes the others skip theirs.
//! - the subject index's pending list, merged every [`MERGE_SOON`] while approvals fill
//!   it, so that no approval has to merge it; on a quiet system the look slows down to
//!   one every [`MERGE_QUIET`]. One dispatcher merges at a time; the others skip.

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

/// A vacuum that takes this long is reported at INFO rather than DEBUG.
const LONG_VACUUM: Duration = Duration::from_secs(1);

/// Vacuums `outbox` whenever its dead tuples have reached `after_dead_tuples`, until
/// `stop`. Does nothing (after saying so once) when this role may not vacuum it.
pub(crate) async fn vacuum_queue_when_due(
    shared: Arc<Shared>,
    after_dead_tuples: u64,
    mut stop: Shutdown,
) {
    match outbox_store::upkeep::may_vacuum_queue(&shared.pool).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::info!(
                "this role does not own the outbox table: its vacuum is left to autovacuum"
            );
            return;
        }
        Err(err) => {
            tracing::warn!(error = %err, "cannot tell whether this role may vacuum the outbox table; leaving it to autovacuum");
            return;
        }
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
    match outbox_store::upkeep::may_clean_subject_index(&shared.pool).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::info!(
                "this role does not own the subject index: approvals merge its pending list themselves"
            );
            return;
        }
        Err(err) => {
            tracing::warn!(error = %err, "cannot tell whether this role may merge the subject index's pending list; leaving it to approvals");
            return;
        }
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
