//! The bound on alert listings running at once (`GET /v1/alerts`, MCP `list_alerts`), so
//! that one tenant's listings cannot take the database connections every tenant's
//! approvals need.
//!
//! Approvals and listings share the process's pool. A listing holds its connection for
//! as long as its query runs; twenty of them at once once took every connection, and
//! another tenant's approvals waited behind them (2.9 ms became 922 ms at the median).
//! So a listing first takes a turn: a permit of its tenant's own (at most
//! [`ListingLimits::per_tenant`] listings of one tenant run at once) and then one of the
//! process's share for listings (at most [`ListingLimits::connections`] of the pool,
//! the rest staying for approvals). A listing waits at most [`LISTING_WAIT`] for both;
//! past it, it is answered `429 too-many-listings` when its tenant's own permits were
//! taken, `503 listings-busy` when the share was, each with `Retry-After`. Its query then
//! runs under [`ListingLimits::timeout`] (`503 listing-timeout`). The figures are in
//! `/metrics`.

use axum::http::StatusCode;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use crate::Problem;

/// The longest a listing waits for its turn, both permits together: long enough for the
/// listings ahead of it to finish (a page takes milliseconds), short enough that a client
/// sending many at once is told so.
pub const LISTING_WAIT: Duration = Duration::from_secs(1);

/// How many listings may run at once, and for how long (`decider serve
/// --max-listings-per-tenant`, `--max-listing-connections`, `--listing-timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListingLimits {
    /// Listings of one tenant running at once.
    pub per_tenant: NonZeroUsize,
    /// Listings of all tenants running at once: the connections of the pool they may hold.
    pub connections: NonZeroUsize,
    /// How long a listing's query may run before the database stops it.
    pub timeout: Duration,
}

impl ListingLimits {
    /// Listings of one tenant running at once, unless configured: an agent that pages
    /// while another lists still runs, and a tenant's burst waits its turn.
    pub const DEFAULT_PER_TENANT: NonZeroUsize = NonZeroUsize::MIN.saturating_add(1);
    /// How long a listing's query may run, unless configured: a page takes milliseconds;
    /// one that takes seconds reads far more than a page.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

    /// The defaults for a pool of `max_connections`: a quarter of it for listings (at
    /// least one), [`Self::DEFAULT_PER_TENANT`] per tenant, [`Self::DEFAULT_TIMEOUT`].
    pub fn for_pool(max_connections: u32) -> Self {
        ListingLimits {
            per_tenant: Self::DEFAULT_PER_TENANT,
            connections: Self::default_connections(max_connections),
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }

    /// A quarter of `max_connections`, at least one.
    pub fn default_connections(max_connections: u32) -> NonZeroUsize {
        NonZeroUsize::new(max_connections as usize / 4).unwrap_or(NonZeroUsize::MIN)
    }
}

/// The permits, and the figures `/metrics` shows.
#[derive(Debug)]
pub(crate) struct ListingTurns {
    limits: ListingLimits,
    /// How long a listing waits for its turn: [`LISTING_WAIT`].
    wait: Duration,
    /// The process's share of the pool for listings.
    connections: Arc<Semaphore>,
    /// Each tenant's own permits, made at its first listing. Tenants are made by
    /// operators, so the map holds at most one small entry for each of them.
    tenants: Mutex<HashMap<Uuid, Arc<Semaphore>>>,
    running: AtomicU64,
    turned_away_tenant: AtomicU64,
    turned_away_busy: AtomicU64,
    timed_out: AtomicU64,
}

/// A listing's turn: both permits, given back when the listing ends (also when its
/// client went away meanwhile: the turn is dropped with the request's future).
#[derive(Debug)]
pub(crate) struct ListingTurn {
    turns: Arc<ListingTurns>,
    _tenant: OwnedSemaphorePermit,
    _connection: OwnedSemaphorePermit,
}

impl Drop for ListingTurn {
    fn drop(&mut self) {
        self.turns.running.fetch_sub(1, Relaxed);
    }
}

impl ListingTurns {
    pub(crate) fn new(limits: ListingLimits) -> Self {
        Self::waiting(limits, LISTING_WAIT)
    }

    fn waiting(limits: ListingLimits, wait: Duration) -> Self {
        ListingTurns {
            limits,
            wait,
            connections: Arc::new(Semaphore::new(limits.connections.get())),
            tenants: Mutex::new(HashMap::new()),
            running: AtomicU64::new(0),
            turned_away_tenant: AtomicU64::new(0),
            turned_away_busy: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
        }
    }

    /// How long a listing's query may run.
    pub(crate) fn timeout(&self) -> Duration {
        self.limits.timeout
    }

    /// Waits (at most [`LISTING_WAIT`]) for a turn of `tenant`'s: its own permit first,
    /// so that a tenant over its bound never holds a place in the shared queue.
    pub(crate) async fn turn(self: &Arc<Self>, tenant: Uuid) -> Result<ListingTurn, Problem> {
        let deadline = tokio::time::Instant::now() + self.wait;
        let own = self.tenant_permits(tenant);
        let Ok(Ok(tenant_permit)) = tokio::time::timeout_at(deadline, own.acquire_owned()).await
        else {
            self.turned_away_tenant.fetch_add(1, Relaxed);
            return Err(Problem::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too-many-listings",
                "Too many listings at once",
                format!(
                    "this tenant already has {} listings running, the most it may at once; \
                     retry when one has ended",
                    self.limits.per_tenant
                ),
            ));
        };
        let shared = Arc::clone(&self.connections);
        let Ok(Ok(connection)) = tokio::time::timeout_at(deadline, shared.acquire_owned()).await
        else {
            self.turned_away_busy.fetch_add(1, Relaxed);
            return Err(Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "listings-busy",
                "Listings busy",
                "every database connection this server lends to listings is in use \
                 (approvals keep their own); retry in a second",
            ));
        };
        self.running.fetch_add(1, Relaxed);
        Ok(ListingTurn {
            turns: Arc::clone(self),
            _tenant: tenant_permit,
            _connection: connection,
        })
    }

    /// The answer to a listing whose query the database stopped at the timeout, counted.
    pub(crate) fn timed_out(&self) -> Problem {
        self.timed_out.fetch_add(1, Relaxed);
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "listing-timeout",
            "Listing took too long",
            format!(
                "the listing was stopped after {}; narrow it (a state, a destination, a \
                 longer subject text) or retry later",
                outbox_core::duration::format(self.limits.timeout)
            ),
        )
    }

    fn tenant_permits(&self, tenant: Uuid) -> Arc<Semaphore> {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(
            tenants
                .entry(tenant)
                .or_insert_with(|| Arc::new(Semaphore::new(self.limits.per_tenant.get()))),
        )
    }
}

impl outbox_runtime::prometheus::Figures for ListingTurns {
    fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP outbox_listings_running Alert listings running now, of every tenant."
        );
        let _ = writeln!(out, "# TYPE outbox_listings_running gauge");
        let _ = writeln!(
            out,
            "outbox_listings_running {}",
            self.running.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP outbox_listings_max Alert listings allowed at once: database connections \
             lent to listings."
        );
        let _ = writeln!(out, "# TYPE outbox_listings_max gauge");
        let _ = writeln!(out, "outbox_listings_max {}", self.limits.connections);
        let _ = writeln!(
            out,
            "# HELP outbox_listings_refused_total Alert listings refused: `tenant` (429, the \
             tenant's own bound), `busy` (503, every connection lent to listings in use), \
             `timeout` (503, the query ran past the listing timeout)."
        );
        let _ = writeln!(out, "# TYPE outbox_listings_refused_total counter");
        for (reason, count) in [
            ("tenant", &self.turned_away_tenant),
            ("busy", &self.turned_away_busy),
            ("timeout", &self.timed_out),
        ] {
            let _ = writeln!(
                out,
                "outbox_listings_refused_total{{reason=\"{reason}\"}} {}",
                count.load(Relaxed)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Turns with a short wait, so that a refusal comes quickly.
    fn turns(per_tenant: usize, connections: usize) -> Arc<ListingTurns> {
        let limits = ListingLimits {
            per_tenant: NonZeroUsize::new(per_tenant).unwrap(),
            connections: NonZeroUsize::new(connections).unwrap(),
            timeout: Duration::from_secs(1),
        };
        Arc::new(ListingTurns::waiting(limits, Duration::from_millis(20)))
    }

    #[test]
    fn listings_get_a_quarter_of_the_pool_by_default() {
        assert_eq!(ListingLimits::for_pool(16).connections.get(), 4);
        assert_eq!(ListingLimits::for_pool(3).connections.get(), 1);
        assert_eq!(ListingLimits::for_pool(1).connections.get(), 1);
    }

    #[tokio::test]
    async fn a_tenant_past_its_bound_waits_then_is_refused_and_others_still_list() {
        let turns = turns(2, 3);
        let (acme, globex) = (Uuid::now_v7(), Uuid::now_v7());
        let first = turns.turn(acme).await.expect("a free permit");
        let _second = turns.turn(acme).await.expect("a free permit");
        let third = turns.turn(acme).await.expect_err("acme's two are taken");
        assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(third.kind(), "too-many-listings");
        // Another tenant is not held up by acme's bound.
        let _other = turns.turn(globex).await.expect("globex has its own");
        // The share (three) is taken now: a fourth listing of anyone waits, then is refused.
        let busy = turns.turn(globex).await.expect_err("the share is taken");
        assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(busy.kind(), "listings-busy");
        drop(first);
        let _again = turns.turn(acme).await.expect("acme's permit came back");
        let mut figures = String::new();
        outbox_runtime::prometheus::Figures::render(&*turns, &mut figures);
        assert!(figures.contains("outbox_listings_running 3"), "{figures}");
        assert!(
            figures.contains("outbox_listings_refused_total{reason=\"tenant\"} 1"),
            "{figures}"
        );
        assert!(
            figures.contains("outbox_listings_refused_total{reason=\"busy\"} 1"),
            "{figures}"
        );
    }

    #[tokio::test]
    async fn a_listing_waiting_for_its_turn_gets_the_one_that_ends() {
        let turns = Arc::new(ListingTurns::new(ListingLimits {
            per_tenant: NonZeroUsize::MIN,
            ..ListingLimits::for_pool(16)
        }));
        let acme = Uuid::now_v7();
        let first = turns.turn(acme).await.expect("a free permit");
        let waiting = tokio::spawn({
            let turns = Arc::clone(&turns);
            async move { turns.turn(acme).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        drop(first);
        assert!(waiting.await.expect("joined").is_ok());
    }
}
