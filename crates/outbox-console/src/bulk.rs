//! The bulk replay worker. A run walks its filter's alerts newest first, a batch at a time,
//! and replays each through `outbox_store::alert_actions::replay` (one transaction per alert:
//! an interrupted run leaves every alert replayed with its evidence, or untouched). After
//! each batch it records progress and its cursor and renews its lease; a run stopped by an
//! operator, or whose process died, is picked up after its cursor by whichever console
//! takes it next.

use outbox_core::BulkReplayState;
use outbox_runtime::shutdown::Shutdown;
use outbox_store::alert_actions;
use outbox_store::StoreError;
use std::time::Duration;

use crate::Console;

/// How long a worker holds a run between batches before another may take it over.
const LEASE: Duration = Duration::from_secs(30);
/// How often a worker looks for runs nobody works on (a crashed console's), besides
/// being woken when one is started or resumed here.
const POLL: Duration = Duration::from_secs(5);

/// Works on bulk replays until `stopped` says stop.
pub(crate) async fn run(console: Console, mut stopped: Shutdown) {
    loop {
        match outbox_store::bulk_replays::take_bulk_replay(&console.pool, LEASE).await {
            Ok(Some(replay)) => {
                if let Err(err) = work_on(&console, replay, &stopped).await {
                    tracing::warn!(error = %err, "bulk replay interrupted; it resumes later");
                }
                continue;
            }
            Ok(None) => {}
            Err(err) => tracing::warn!(error = %err, "cannot read bulk replays"),
        }
        tokio::select! {
            () = stopped.wait() => return,
            () = console.bulk_wake.notified() => {}
            () = tokio::time::sleep(POLL) => {}
        }
    }
}

async fn work_on(
    console: &Console,
    replay: outbox_store::bulk_replays::BulkReplay,
    stopped: &Shutdown,
) -> Result<(), StoreError> {
    let mut cursor = replay.cursor_id;
    loop {
        let batch = outbox_store::alert_listings::alerts_page(
            &console.pool,
            replay.tenant_ids.as_deref(),
            &replay.filter,
            cursor,
            console.config.bulk_batch,
        )
        .await?;
        let (mut replayed, mut skipped) = (0, 0);
        for alert in &batch {
            match alert_actions::replay(&console.pool, alert.id, &replay.operator, &replay.note)
                .await
            {
                Ok(()) => replayed += 1,
                // Another operator, or a dispatcher, got there first: nothing changed.
                Err(StoreError::Refused(_) | StoreError::UnknownAlert(_)) => skipped += 1,
                Err(err) => {
                    // What was replayed so far is recorded before giving up the batch.
                    outbox_store::bulk_replays::advance_bulk_replay(
                        &console.pool,
                        replay.id,
                        replayed,
                        skipped,
                        cursor,
                        false,
                        LEASE,
                    )
                    .await?;
                    return Err(err);
                }
            }
            cursor = Some(alert.id);
        }
        let finished = (batch.len() as i64) < console.config.bulk_batch;
        let state = outbox_store::bulk_replays::advance_bulk_replay(
            &console.pool,
            replay.id,
            replayed,
            skipped,
            cursor,
            finished,
            LEASE,
        )
        .await?;
        if finished || state != BulkReplayState::Running || stopped.is_set() {
            return Ok(());
        }
    }
}
