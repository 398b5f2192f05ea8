//! Destination health, the dispatcher's half: every finished send is counted in memory
//! per destination (accepted, or not), and the counts are reported every few seconds
//! (and once more at shutdown) to `outbox_store::health::report`, which merges every
//! dispatcher's reports and disables a destination whose every send has failed for its
//! window. A delivery's own path writes nothing more for this. The counts themselves are
//! `send_tallies`, which every task reaches through `Shared`.
//!
//! What counts: a send (never a lookup) that reached or tried to reach the destination.
//! Accepted is a success; rejected, not processed, not sent and uncertain are failures.
//! Lookups count as neither: a lookup that finds an alert proves the destination kept
//! one in the past, not that it accepts new ones, and a failed lookup leads to a resend,
//! which is counted.

use outbox_store::health::SendTally;
use std::sync::Arc;
use std::time::Duration;

use crate::Shared;
use outbox_runtime::shutdown::Shutdown;

/// Reports the tallies every `interval` until the dispatcher stops.
pub(crate) async fn report_every(shared: Arc<Shared>, interval: Duration, mut stop: Shutdown) {
    loop {
        tokio::select! {
            () = stop.wait() => return,
            () = tokio::time::sleep(interval) => {}
        }
        report(&shared).await;
    }
}

/// Reports what was counted since the last report. A destination the report disabled is
/// logged (once: only one report disables it, whichever dispatcher's), counted in the
/// metrics, and marked so that this process claims none of its rows meanwhile.
pub(crate) async fn report(shared: &Shared) {
    let taken = shared.tallies.take();
    if taken.is_empty() {
        return;
    }
    let tallies: Vec<SendTally> = taken.values().map(|(_, tally)| *tally).collect();
    match outbox_store::health::report(&shared.pool, &shared.config.worker_id, &tallies).await {
        Ok(disabled) => {
            for destination in disabled {
                shared.mark_disabled(destination.id);
                shared
                    .metrics
                    .destination_disabled(&destination.name, "failing");
                tracing::warn!(
                    destination = %destination.name,
                    destination_id = %destination.id,
                    failing_since = %destination.failing_since,
                    reason = %destination.reason,
                    "destination disabled: every send failed for longer than its window"
                );
            }
        }
        Err(err) => {
            tracing::error!(error = %err, "destination health report failed; kept for the next one");
            shared.tallies.put_back(taken);
        }
    }
}
