//! Room among the open connections: the table of every open connection and what it is
//! doing, the caps a new connection meets, the idle connection closed to make room for it,
//! and the rate-limited report of crowding (the policy is in the parent module's doc).

use super::activity::Activity;
use super::ServerLimits;
use outbox_core::client_key::ClientKey;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Which cap a connection met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cap {
    /// [`ServerLimits::max_connections`].
    Server,
    /// [`ServerLimits::max_connections_per_client`].
    Client,
}

/// Every open connection and what it is doing: the accept loop asks it for room.
#[derive(Debug, Default)]
pub(super) struct Registry {
    pub(super) table: Mutex<Table>,
}

#[derive(Debug, Default)]
pub(super) struct Table {
    next_id: u64,
    pub(super) open: HashMap<u64, Registered>,
    /// Open connections that count against the caps: all but those asked to make room,
    /// which are closing.
    pub(super) counted: usize,
    counted_per_client: HashMap<ClientKey, usize>,
}

#[derive(Debug)]
pub(super) struct Registered {
    client: ClientKey,
    activity: Arc<Activity>,
    making_room: bool,
}

/// A connection let in, and whether another was closed to make room for it.
#[derive(Debug)]
pub(super) struct Admitted {
    pub(super) place: Place,
    pub(super) made_room: bool,
}

impl Registry {
    /// Lets a connection from `client` in, making room when a cap is reached (see the
    /// module doc), or says which cap keeps it out.
    pub(super) fn admit(
        self: &Arc<Self>,
        client: ClientKey,
        limits: &ServerLimits,
        now: Instant,
    ) -> Result<Admitted, Cap> {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let from_client = table.counted_per_client.get(&client).copied().unwrap_or(0);
        let made_room = if from_client >= limits.max_connections_per_client.max(1) {
            table
                .make_room(|other| other == client)
                .ok_or(Cap::Client)?;
            true
        } else if table.counted >= limits.max_connections.max(1) {
            table.make_room(|_| true).ok_or(Cap::Server)?;
            true
        } else {
            false
        };
        let id = table.next_id;
        table.next_id += 1;
        let activity = Arc::new(Activity::new(now));
        table.open.insert(
            id,
            Registered {
                client,
                activity: Arc::clone(&activity),
                making_room: false,
            },
        );
        table.counted += 1;
        *table.counted_per_client.entry(client).or_default() += 1;
        Ok(Admitted {
            place: Place {
                registry: Arc::clone(self),
                id,
                activity,
            },
            made_room,
        })
    }
}

impl Table {
    /// Asks the longest-idle counted connection of a client that `eligible` accepts to
    /// close, and stops counting it; `None` when no such connection is idle.
    pub(super) fn make_room(&mut self, eligible: impl Fn(ClientKey) -> bool) -> Option<()> {
        let (id, _) = self
            .open
            .iter()
            .filter(|(_, open)| !open.making_room && eligible(open.client))
            .filter_map(|(id, open)| open.activity.idle_since().map(|since| (*id, since)))
            .min_by_key(|(_, since)| *since)?;
        let victim = self.open.get_mut(&id)?;
        victim.making_room = true;
        victim.activity.make_room();
        let client = victim.client;
        self.uncount(client);
        Some(())
    }

    pub(super) fn uncount(&mut self, client: ClientKey) {
        self.counted -= 1;
        if let Some(count) = self.counted_per_client.get_mut(&client) {
            *count -= 1;
            if *count == 0 {
                self.counted_per_client.remove(&client);
            }
        }
    }

    pub(super) fn remove(&mut self, id: u64) {
        if let Some(gone) = self.open.remove(&id) {
            if !gone.making_room {
                self.uncount(gone.client);
            }
        }
    }
}

/// A connection's place among the open ones, given up when the connection ends.
#[derive(Debug)]
pub(super) struct Place {
    registry: Arc<Registry>,
    id: u64,
    pub(super) activity: Arc<Activity>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut table = self
            .registry
            .table
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        table.remove(self.id);
    }
}

/// Connections closed to make room or refused for lack of it, reported at most every ten
/// seconds so that a flood does not become a flood of log lines too.
#[derive(Debug, Default)]
pub(super) struct Crowding {
    made_room: u64,
    refused_server_cap: u64,
    refused_client_cap: u64,
    last_report: Option<Instant>,
}

impl Crowding {
    pub(super) const REPORT_EVERY: Duration = Duration::from_secs(10);

    pub(super) fn made_room(&mut self) {
        self.made_room += 1;
    }

    pub(super) fn refused(&mut self, cap: Cap) {
        match cap {
            Cap::Server => self.refused_server_cap += 1,
            Cap::Client => self.refused_client_cap += 1,
        }
    }

    pub(super) fn report(&mut self, limits: &ServerLimits) {
        if self.made_room + self.refused_server_cap + self.refused_client_cap == 0 {
            return;
        }
        let now = Instant::now();
        if self
            .last_report
            .is_some_and(|last| now.duration_since(last) < Self::REPORT_EVERY)
        {
            return;
        }
        tracing::warn!(
            max_connections = limits.max_connections,
            max_connections_per_client = limits.max_connections_per_client,
            closed_idle = self.made_room,
            refused_all_busy = self.refused_server_cap,
            refused_client_busy = self.refused_client_cap,
            "connection limit reached; closing idle connections to make room, refusing new \
             ones when none is idle"
        );
        *self = Crowding {
            last_report: Some(now),
            ..Crowding::default()
        };
    }
}
