//! What a suite run carries from phase to phase ([`RunState`]): its database, workload and
//! sink, the next alert's index and the alerts delivered so far, with the steps every
//! drain phase takes (approve a backlog, drain it, check it), and what approving measured
//! ([`Approvals`]).

use outbox_dispatcher::Transport;
use outbox_store::alerts::MonitorAlert;
use outbox_store::PgPool;
use serde::Serialize;
use std::time::Duration;

use super::settings::SuiteSettings;
use crate::dispatchers::{self, Dispatchers, DrainSettings};
use crate::drain::{self, drain, DrainReport};
use crate::own_sink::OwnSink;
use crate::workload::Workload;

/// Approvals measured.
#[derive(Debug, Clone, Serialize)]
pub struct Approvals {
    /// Alerts approved.
    pub n: u64,
    /// Concurrent clients (1 for bulk: one statement per chunk).
    pub clients: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Alerts approved per second.
    pub per_sec: f64,
}

impl Approvals {
    /// `n` alerts approved in bulk (one client: one statement per chunk) in `took`.
    fn in_bulk(n: u64, took: Duration) -> Approvals {
        Approvals {
            n,
            clients: 1,
            seconds: took.as_secs_f64(),
            per_sec: n as f64 / took.as_secs_f64(),
        }
    }
}

/// A suite run under way on its database.
pub(super) struct RunState<'a> {
    pub(super) settings: &'a SuiteSettings,
    pub(super) sink: &'a OwnSink,
    /// The run's database.
    pub(super) url: &'a str,
    pub(super) pool: PgPool,
    pub(super) workload: Workload,
    /// The next alert's index: every alert of the run has an identity of its own.
    pub(super) next: u64,
    /// Alerts delivered so far: each drain's check counts every alert in the database.
    pub(super) delivered: u64,
}

impl<'a> RunState<'a> {
    /// Migrates the run's database at `url` and prepares the workload, aimed at `sink`.
    pub(super) async fn prepare(
        settings: &'a SuiteSettings,
        sink: &'a OwnSink,
        url: &'a str,
    ) -> anyhow::Result<RunState<'a>> {
        let pool = outbox_store::connect(url, "benchmark", 8).await?;
        let workload = Workload::prepare(pool.clone(), &sink.destination()).await?;
        Ok(RunState {
            settings,
            sink,
            url,
            pool,
            workload,
            next: 0,
            delivered: 0,
        })
    }

    /// The run's dispatcher settings, for `dispatchers`.
    pub(super) fn drain_settings(&self, dispatchers: Dispatchers) -> DrainSettings {
        DrainSettings {
            dispatchers,
            batch_size: self.settings.batch_size,
            max_in_flight: self.settings.max_in_flight,
            max_concurrent_sends: self.settings.concurrent_sends,
            sink_ip: dispatchers::sink_ip(&self.sink.base),
        }
    }

    /// Approves the next `n` alerts in bulk, then vacuums and analyses the tables as after
    /// any bulk load, so that each drain starts from fresh statistics. Returns what the
    /// approvals measured.
    pub(super) async fn approve_in_bulk(&mut self, n: u64) -> anyhow::Result<Approvals> {
        let took = self.workload.approve_bulk(self.next, n).await?;
        self.next += n;
        crate::db::vacuum_analyze(&self.pool).await?;
        Ok(Approvals::in_bulk(n, took))
    }

    /// Approves the next `n` alerts in bulk as `alert(workload, i)` makes them, then
    /// vacuums and analyses as [`RunState::approve_in_bulk`] does. Returns what the
    /// approvals measured.
    pub(super) async fn approve_in_bulk_as(
        &mut self,
        n: u64,
        alert: impl Fn(&Workload, u64) -> MonitorAlert,
    ) -> anyhow::Result<Approvals> {
        let workload = &self.workload;
        let took = workload
            .approve_bulk_as(self.next, n, |i| alert(workload, i))
            .await?;
        self.next += n;
        crate::db::vacuum_analyze(&self.pool).await?;
        Ok(Approvals::in_bulk(n, took))
    }

    /// Drains the backlog of the last `n` alerts with `dispatchers` and checks the drain
    /// (over HTTP, the sink's counts too: the no-op send reaches no sink).
    pub(super) async fn drain_checked(
        &mut self,
        n: u64,
        dispatchers: Dispatchers,
    ) -> anyhow::Result<DrainReport> {
        self.drain_checked_at(n, dispatchers, self.sink).await
    }

    /// As [`RunState::drain_checked`], for alerts whose destination is `sink` (a sink of
    /// its own, such as a slow one) rather than the run's.
    pub(super) async fn drain_checked_at(
        &mut self,
        n: u64,
        dispatchers: Dispatchers,
        sink: &OwnSink,
    ) -> anyhow::Result<DrainReport> {
        let over_http = dispatchers != Dispatchers::InProcess(Transport::Discard);
        let stats_url = sink.stats_url();
        let report = drain(
            &self.pool,
            self.url,
            n,
            self.drain_settings(dispatchers),
            over_http.then_some(stats_url.as_str()),
        )
        .await?;
        self.delivered += n;
        drain::check(&report, self.delivered, over_http)?;
        Ok(report)
    }

    /// The last check, after the latency phases: every alert delivered so far accepted,
    /// with one attempt row each. Closes the run's pool.
    pub(super) async fn finish(self) -> anyhow::Result<()> {
        let delivered = self.delivered;
        let evidence = crate::db::drain_evidence(&self.pool).await?;
        anyhow::ensure!(
            evidence.accepted == delivered as i64 && evidence.attempt_rows == delivered as i64,
            "after the latency phases: {evidence:?} for {delivered} alerts"
        );
        self.pool.close().await;
        Ok(())
    }
}
