//! Wake-ups: `NOTIFY outbox_due` forwarded to the claim loop.

use outbox_runtime::shutdown::Shutdown;
use outbox_store::PgPool;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Forwards `NOTIFY outbox_due` to the claim loop until the dispatcher stops. Reconnects
/// on failure; the loop's polling covers any wake-up missed meanwhile.
pub(crate) async fn listen_for_wake_ups(pool: PgPool, wake: Arc<Notify>, mut stop: Shutdown) {
    tokio::select! {
        () = stop.wait() => {}
        () = forward_wake_ups(pool, wake) => {}
    }
}

async fn forward_wake_ups(pool: PgPool, wake: Arc<Notify>) {
    loop {
        match outbox_store::wake_ups::listen(&pool).await {
            Ok(mut listener) => loop {
                match listener.recv().await {
                    Ok(()) => wake.notify_one(),
                    Err(err) => {
                        tracing::warn!(error = %err, "wake-up listener lost its connection");
                        break;
                    }
                }
            },
            Err(err) => tracing::warn!(error = %err, "cannot listen for wake-ups; polling only"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
