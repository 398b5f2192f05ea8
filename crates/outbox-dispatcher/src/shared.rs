//! What every task of a running dispatcher shares ([`Shared`]): the pool, the clients,
//! the stop signals, the templates, the send permits, the destinations marked gone and the
//! destinations' prepared request parts.

use crate::prepared::{Prepared, PreparedDestinations};
use crate::{recorder, send_tallies, Config, Metrics, TenantTemplates};
use outbox_runtime::shutdown::Shutdown;
use outbox_store::dispatch::ClaimedAlert;
use outbox_store::PgPool;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use uuid::Uuid;

/// What every worker task shares.
pub(crate) struct Shared {
    pub pool: PgPool,
    pub http: outbox_egress::DeliveryClient,
    pub config: Config,
    pub metrics: Arc<Metrics>,
    pub(crate) recorder: recorder::Recorder,
    /// Where a worker hands the claim loop what its completion claimed as it released an
    /// ordered lane (the lane's next alert), with the worker's in-flight permit.
    pub(crate) handed_on: tokio::sync::mpsc::UnboundedSender<HandedOn>,
    /// Destinations this process saw answer 410 Gone, and when: rows of theirs it claimed
    /// are given back unsent instead of being sent to a destination known to be gone, and
    /// it claims none of theirs for a while. The mark expires, after which the database's
    /// `enabled` decides again (the 410 may not have been recorded, or an operator may
    /// have enabled the destination since).
    pub(crate) disabled: Mutex<HashMap<Uuid, Instant>>,
    /// Set once shutdown begins: nothing new is sent after it.
    pub(crate) stop: Shutdown,
    /// Set once the claim loop has ended, so no claim statement can still be running.
    /// Claims are given back for shutdown only after it: a claim already on its way to
    /// the database when shutdown began would otherwise pick up rows given back a moment
    /// before, and each would be given back twice.
    pub(crate) claims_ended: Shutdown,
    /// Each tenant's email templates: replaced whole when SIGHUP reloads them.
    pub(crate) templates: std::sync::RwLock<Arc<TenantTemplates>>,
    /// This process's sends at once (`Config::max_concurrent_sends`): a permit is taken
    /// after the destination's slot, in that order everywhere, and held for the exchange.
    pub(crate) sends: Arc<Semaphore>,
    /// Sends counted per destination since the last health report.
    pub(crate) tallies: send_tallies::Tallies,
    /// What every request to a webhook destination shares, prepared once per destination
    /// and settings.
    pub(crate) prepared: PreparedDestinations,
}

impl Shared {
    /// The templates now (a reload does not change a rendering already under way).
    pub(crate) fn templates(&self) -> Arc<TenantTemplates> {
        self.templates
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The request parts of `row`'s destination, as `row` states its settings.
    pub(crate) fn prepared_of(&self, row: &ClaimedAlert) -> Arc<Prepared> {
        self.prepared
            .of(&self.config.egress, &self.config.secret_keys, row)
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.is_set()
    }

    pub(crate) fn is_disabled(&self, destination: Uuid) -> bool {
        self.disabled_now().contains(&destination)
    }

    /// Destinations marked gone within the last [`GONE_MARK`].
    pub(crate) fn disabled_now(&self) -> Vec<Uuid> {
        let mut marks = self.disabled.lock().unwrap_or_else(|e| e.into_inner());
        marks.retain(|_, at| at.elapsed() < GONE_MARK);
        marks.keys().copied().collect()
    }

    pub(crate) fn mark_disabled(&self, destination: Uuid) {
        self.disabled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(destination, Instant::now());
    }
}

/// A lane's next alert, claimed by the completion that released its lane, on its way to
/// the claim loop, which starts its task.
pub(crate) struct HandedOn {
    pub(crate) row: outbox_store::dispatch::ClaimedAlert,
    /// The released alert's in-flight permit, which the next one takes over (`None` if a
    /// broken lane handed on more than one: each of those needs a free permit).
    pub(crate) permit: Option<tokio::sync::OwnedSemaphorePermit>,
    /// When its claim committed.
    pub(crate) claimed_at: Instant,
    /// When the completion that claimed it was sent, and when it answered.
    pub(crate) started: std::time::SystemTime,
    pub(crate) finished: std::time::SystemTime,
}

/// How long a disabled destination (410 Gone, or failing for its window) keeps this
/// process off it without asking the database.
const GONE_MARK: Duration = Duration::from_secs(30);
