//! Templates reloaded on SIGHUP.

use crate::{Shared, TenantTemplates};
use outbox_runtime::shutdown::Shutdown;
use std::sync::Arc;

/// Reads the templates folder again at every SIGHUP until the dispatcher stops. A folder
/// that no longer loads (a broken file) keeps the templates already loaded.
pub(crate) async fn reload_templates_on_hangup(
    shared: Arc<Shared>,
    dir: std::path::PathBuf,
    mut stop: Shutdown,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(hangups) => hangups,
        Err(err) => {
            tracing::error!(error = %err, "cannot listen for SIGHUP; templates reload only at a restart");
            return;
        }
    };
    loop {
        tokio::select! {
            () = stop.wait() => return,
            got = hangups.recv() => if got.is_none() { return },
        }
        match TenantTemplates::load(&dir) {
            Ok(templates) => {
                let tenants: Vec<&str> = templates.tenants().collect();
                tracing::info!(tenants = ?tenants, "templates reloaded");
                drop(tenants);
                *shared.templates.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(templates);
            }
            Err(err) => {
                tracing::error!(error = %err, "templates not reloaded; the ones loaded before stay");
            }
        }
    }
}
