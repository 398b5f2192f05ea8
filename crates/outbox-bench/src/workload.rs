//! The work every measurement uses: one tenant, one destination (signed, so every send
//! pays for its signature), and ~500-byte alerts with unique identities, approved in bulk
//! as the decider approves a monitor run's alerts (sorted by identity, one statement per
//! chunk, two chunks in flight, one alert per identity). The ordered-lanes phase adds
//! destinations of the same tenant and alerts spread over a set of subjects
//! ([`Workload::keyed_alert`]).

use anyhow::Context;
use base64::Engine;
use outbox_store::alerts::{self, MonitorAlert};
use outbox_store::approval_plan::{self, ApprovalPlan};
use outbox_store::destinations::NewDestination;
use outbox_store::PgPool;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// Alerts per bulk approval statement (the peers' harness enqueues in chunks of 5,000).
pub const APPROVAL_CHUNK: usize = 5_000;

/// How many bulk approval statements are in flight at once.
#[derive(Debug, Clone, Copy)]
enum InFlight {
    /// One after another, as the peers' harness enqueues.
    One,
    /// Two, as the decider approves a monitor run's alerts.
    Two,
}

/// A migrated database with the benchmark's tenant and destination.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The database.
    pub pool: PgPool,
    /// The tenant.
    pub tenant_id: Uuid,
    /// The tenant's name (for the API).
    pub tenant_name: String,
    /// The destination.
    pub destination_id: Uuid,
    /// The destination's name.
    pub destination_name: String,
    /// Distinguishes this run's identities from earlier ones.
    run: String,
    /// The trace context bulk approvals store, as a monitor run's approvals do.
    pub trace: outbox_core::trace_context::TraceContext,
}

/// How the destination is set up.
#[derive(Debug, Clone)]
pub struct DestinationSettings {
    /// Where alerts are POSTed.
    pub url: String,
    /// Requests in flight to it at once, per dispatcher process.
    pub max_in_flight: u32,
}

impl Workload {
    /// Migrates `pool`'s database and creates the tenant and destination.
    pub async fn prepare(pool: PgPool, destination: &DestinationSettings) -> anyhow::Result<Self> {
        outbox_store::MIGRATOR
            .run(&pool)
            .await
            .context("migrating the benchmark database")?;
        let run = Uuid::now_v7().simple().to_string();
        let tenant_name = format!("bench-{}", &run[..12]);
        let tenant_id = outbox_store::tenants::create(&pool, &tenant_name, "UTC", None).await?;
        let destination_name = "bench-sink".to_owned();
        let destination_id =
            create_destination(&pool, tenant_id, &destination_name, destination).await?;
        Ok(Workload {
            pool,
            tenant_id,
            tenant_name,
            destination_id,
            destination_name,
            run,
            trace: outbox_core::trace_context::TraceContext {
                parent: outbox_core::trace_context::TraceParent::new_trace(false),
                state: None,
            },
        })
    }

    /// The payload of alert `i`: about 500 bytes of JSON, like the peers' jobs.
    pub fn payload(&self, i: u64) -> String {
        alert_payload(&self.run, i)
    }

    /// The identity subject of alert `i`.
    pub fn subject(&self, i: u64) -> String {
        format!("bench:{}:{i}", self.run)
    }

    /// Another destination of the workload's tenant, signed like the first.
    pub async fn add_destination(
        &self,
        name: &str,
        destination: &DestinationSettings,
    ) -> anyhow::Result<Uuid> {
        create_destination(&self.pool, self.tenant_id, name, destination).await
    }

    /// Makes `destination_id` order its alerts per key (failed heads block their lane), as
    /// an operator would.
    pub async fn order_per_key(&self, destination_id: Uuid) -> anyhow::Result<()> {
        outbox_store::lanes::set_ordering(
            &self.pool,
            destination_id,
            outbox_store::lanes::OrderingSettings {
                ordering: outbox_core::Ordering::PerKey,
                on_head_failed: outbox_core::OnHeadFailed::Block,
            },
            false,
            "benchmark",
        )
        .await?;
        Ok(())
    }

    /// Approves alerts `from..from + count` in bulk as the decider does (see
    /// [`Workload::approve_bulk_as`]). Returns the time it took.
    pub async fn approve_bulk(&self, from: u64, count: u64) -> anyhow::Result<Duration> {
        self.approve_bulk_as(from, count, |i| self.alert(i)).await
    }

    /// Approves alerts `from..from + count` in bulk as the peers' harness enqueues its
    /// jobs: chunks of [`APPROVAL_CHUNK`], one after another on one connection, so that
    /// the harness's enqueue times compare like with like. Returns the time it took.
    pub async fn approve_bulk_one_at_a_time(
        &self,
        from: u64,
        count: u64,
    ) -> anyhow::Result<Duration> {
        self.approve_planned(from, count, |i| self.alert(i), InFlight::One)
            .await
    }

    /// Approves alerts `from..from + count` in bulk as `alert(i)` makes them (each a new
    /// identity), as the decider approves a monitor run's alerts: sorted by identity, in
    /// statements of at most [`APPROVAL_CHUNK`] that share no subject, two in flight at
    /// once ([`ApprovalPlan`]). Returns the time it took, making the alerts included.
    pub async fn approve_bulk_as(
        &self,
        from: u64,
        count: u64,
        alert: impl Fn(u64) -> MonitorAlert,
    ) -> anyhow::Result<Duration> {
        self.approve_planned(from, count, alert, InFlight::Two)
            .await
    }

    async fn approve_planned(
        &self,
        from: u64,
        count: u64,
        alert: impl Fn(u64) -> MonitorAlert,
        in_flight: InFlight,
    ) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let mut alerts: Vec<MonitorAlert> = (from..from + count).map(alert).collect();
        approval_plan::sort_by_identity(&mut alerts);
        anyhow::ensure!(
            alerts.len() as u64 == count,
            "{count} alerts have {} identities",
            alerts.len()
        );
        let plan = ApprovalPlan::new(&alerts, APPROVAL_CHUNK);
        match in_flight {
            InFlight::Two => {
                plan.run(|chunk| self.approve_chunk(chunk)).await?;
            }
            InFlight::One => {
                for chunk in plan.units().iter().flatten() {
                    self.approve_chunk(chunk).await?;
                }
            }
        }
        Ok(started.elapsed())
    }

    /// Approves one chunk of new identities in one statement. Returns how many.
    async fn approve_chunk(&self, chunk: &[MonitorAlert]) -> anyhow::Result<u64> {
        let created = alerts::approve_batch(
            &mut *self.pool.acquire().await?,
            self.tenant_id,
            chunk,
            "benchmark",
            Some(&self.trace),
        )
        .await?;
        anyhow::ensure!(
            created.len() == chunk.len(),
            "approved {} of {} new identities",
            created.len(),
            chunk.len()
        );
        Ok(chunk.len() as u64)
    }

    /// Alert `i` as a monitor decides it.
    pub fn alert(&self, i: u64) -> MonitorAlert {
        MonitorAlert {
            destination_id: self.destination_id,
            subject: self.subject(i),
            occurrence: "firing".to_owned(),
            payload_json: self.payload(i),
        }
    }

    /// Alert `i` for `destination_id`, about one of `keys` subjects (`i % keys`, so that
    /// consecutive alerts are about different subjects), with an occurrence of its own
    /// that sorts in `i`'s order: at a destination that orders per key, the subject is
    /// the lane, and a bulk approval places one lane's alerts in occurrence order.
    pub fn keyed_alert(&self, destination_id: Uuid, i: u64, keys: u64) -> MonitorAlert {
        MonitorAlert {
            destination_id,
            subject: format!("bench:{}:key-{}", self.run, i % keys.max(1)),
            occurrence: format!("{i:012}"),
            payload_json: self.payload(i),
        }
    }
}

/// Creates destination `name` of `tenant_id`, signed with a fresh secret, with the
/// workload's settings (10 s timeout, `Idempotency-Key`, uncertain sends held).
async fn create_destination(
    pool: &PgPool,
    tenant_id: Uuid,
    name: &str,
    destination: &DestinationSettings,
) -> anyhow::Result<Uuid> {
    let secret: [u8; 32] = rand::random();
    Ok(outbox_store::destinations::create(
        pool,
        &NewDestination {
            signing_secrets: vec![format!(
                "whsec_{}",
                base64::engine::general_purpose::STANDARD.encode(secret)
            )],
            timeout: Duration::from_secs(10),
            max_in_flight: destination.max_in_flight,
            ..NewDestination::webhook(tenant_id, name, &destination.url)
        },
    )
    .await?)
}

/// Alert `i` of run `run`: the peers' job payload (~500 bytes, a unique `alert_id`).
pub fn alert_payload(run: &str, i: u64) -> String {
    let mut payload = serde_json::json!({
        "alert_id": format!("{run}-{i}"),
        "tenant": format!("tenant-{}", i % 97),
        "rule": format!("rule-{}", i % 13),
        "severity": if i.is_multiple_of(10) { "critical" } else { "warning" },
        "status": "firing",
        "starts_at": "2024-01-01T00:00:00.000Z",
        "title": format!("CPU usage above threshold on host-{}", i % 1000),
        "labels": {"host": format!("host-{}", i % 1000), "region": "eu-west-1", "service": "api"},
        "value": (i % 1000) as f64 / 10.0,
        "note": "",
    });
    let base = payload.to_string().len();
    payload["note"] = serde_json::Value::String("x".repeat(500usize.saturating_sub(base)));
    payload.to_string()
}

#[cfg(test)]
mod tests {
    use super::alert_payload;

    #[test]
    fn payloads_are_500_bytes_of_json_with_a_unique_id() {
        for i in [0, 7, 123_456] {
            let payload = alert_payload("0190c0ffee", i);
            assert_eq!(payload.len(), 500, "{payload}");
            let parsed: serde_json::Value = serde_json::from_str(&payload).unwrap();
            assert_eq!(parsed["alert_id"], format!("0190c0ffee-{i}"));
        }
    }
}
