//! Destination health: every dispatcher tallies its sends per destination in memory (the
//! first failure after its last acceptance, the last failure, the last acceptance) and
//! reports the tallies every few seconds with [`report`], which merges them into one
//! `destination_health` row per destination and disables, in the same statement, a
//! destination whose every send has failed for longer than its `disable_after_failing`
//! window. Nothing here is written on a delivery's own path: a delivery costs no extra
//! row write, a report costs one statement per dispatcher every few seconds.
//!
//! The merge is correct whatever order the reports of many dispatchers arrive in: the
//! latest acceptance wins, and `failing_since` is the earliest reported failure after it
//! (NULL when there is none). A failure a dispatcher reports that happened before an
//! acceptance another one reported earlier is ignored, and an acceptance newer than
//! `failing_since` clears it. What a report cannot tell is a failure between an earlier
//! dispatcher's first failure and a newer acceptance; such failures are counted from that
//! dispatcher's next report on, so the window errs late by at most one report interval,
//! never early.
//!
//! What operators read of it: each destination's last hour of sends in buckets
//! ([`destination_health`]) and its recent failed or uncertain attempts
//! ([`recent_errors`]), within an account's tenant grant ([`Scope`]).

use chrono::{DateTime, Utc};
use outbox_core::{AttemptKind, AttemptOutcome};
use sqlx::{PgExecutor, PgPool};
use std::time::Duration;
use uuid::Uuid;

use crate::dispatch::due_status;
use crate::tenants::Scope;
use crate::StoreError;

/// What one dispatcher saw of one destination since its previous report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendTally {
    /// The destination.
    pub destination_id: Uuid,
    /// The first failed send after `last_success` (after the previous report, when there
    /// is no `last_success`); `None` when the latest send was accepted.
    pub first_failure: Option<DateTime<Utc>>,
    /// The latest failed send.
    pub last_failure: Option<DateTime<Utc>>,
    /// The latest accepted send.
    pub last_success: Option<DateTime<Utc>>,
}

impl SendTally {
    /// An empty tally of `destination_id`.
    pub fn new(destination_id: Uuid) -> Self {
        SendTally {
            destination_id,
            first_failure: None,
            last_failure: None,
            last_success: None,
        }
    }

    /// Counts a send that finished at `at`, accepted or not. Sends are counted in the
    /// order they finish, so an acceptance clears every failure before it.
    pub fn count(&mut self, accepted: bool, at: DateTime<Utc>) {
        if accepted {
            self.last_success = Some(at);
            self.first_failure = None;
        } else {
            self.last_failure = Some(at);
            self.first_failure.get_or_insert(at);
        }
    }

    /// This tally followed by `newer` (a report that could not be written is kept and
    /// merged with what came after it).
    pub fn then(self, newer: SendTally) -> SendTally {
        SendTally {
            destination_id: self.destination_id,
            first_failure: if newer.last_success.is_some() {
                newer.first_failure
            } else {
                self.first_failure.or(newer.first_failure)
            },
            last_failure: newer.last_failure.or(self.last_failure),
            last_success: newer.last_success.or(self.last_success),
        }
    }
}

/// A destination a report disabled.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AutoDisabled {
    /// Its id.
    pub id: Uuid,
    /// Its name.
    pub name: String,
    /// The reason now on the destination (and on its audit line).
    pub reason: String,
    /// Since when every send failed.
    pub failing_since: DateTime<Utc>,
}

/// Merges one dispatcher's tallies (at most one per destination) into the health rows,
/// and disables each enabled destination whose every send has failed since before its
/// window: `enabled = false`, a reason saying why and since when, and an audit line by
/// `dispatcher:<worker>`. Returns the destinations this report disabled; a destination
/// is disabled by exactly one report, whichever of several dispatchers' gets there first
/// (the others find it disabled already).
///
/// Locking: the destinations are locked first, in id order (`FOR NO KEY UPDATE`, which
/// approvals' foreign-key checks do not wait for), then their health rows, the order an
/// operator switching a destination takes too; so reports and operators never deadlock.
pub async fn report(
    pool: &PgPool,
    worker: &str,
    tallies: &[SendTally],
) -> Result<Vec<AutoDisabled>, StoreError> {
    if tallies.is_empty() {
        return Ok(Vec::new());
    }
    let mut sorted = tallies.to_vec();
    sorted.sort_by_key(|t| t.destination_id);
    let ids: Vec<Uuid> = sorted.iter().map(|t| t.destination_id).collect();
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT id FROM destinations WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE")
        .bind(&ids)
        .execute(&mut *tx)
        .await?;
    let first_failure: Vec<Option<DateTime<Utc>>> =
        sorted.iter().map(|t| t.first_failure).collect();
    let last_failure: Vec<Option<DateTime<Utc>>> = sorted.iter().map(|t| t.last_failure).collect();
    let last_success: Vec<Option<DateTime<Utc>>> = sorted.iter().map(|t| t.last_success).collect();
    let disabled = sqlx::query_as::<_, AutoDisabled>(MERGE_REPORT)
        .bind(&ids)
        .bind(&first_failure)
        .bind(&last_failure)
        .bind(&last_success)
        .bind(worker)
        .fetch_all(&mut *tx)
        .await?;
    if !disabled.is_empty() {
        // A second statement: one statement cannot update a health row twice.
        let disabled_ids: Vec<Uuid> = disabled.iter().map(|d| d.id).collect();
        sqlx::query(
            "UPDATE destination_health SET auto_disabled_at = now() \
             WHERE destination_id = ANY($1)",
        )
        .bind(&disabled_ids)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(disabled)
}

/// [`report`]'s statement, over one array per tally field (destination ids sorted, first
/// failure, last failure, last success) and the worker: `merged` upserts the health rows
/// (a destination deleted meanwhile is skipped by the join); `disabled` turns off those
/// failing for longer than their window, only if still enabled, so each is disabled once;
/// `audited` writes the audit line.
const MERGE_REPORT: &str = "WITH report AS ( \
         SELECT r.* FROM unnest($1::uuid[], $2::timestamptz[], $3::timestamptz[], \
                                $4::timestamptz[]) \
             AS r(destination_id, first_failure, last_failure, last_success) \
         JOIN destinations d ON d.id = r.destination_id \
         ORDER BY r.destination_id \
     ), merged AS ( \
         INSERT INTO destination_health AS h \
             (destination_id, failing_since, last_failure_at, last_success_at) \
         SELECT destination_id, first_failure, last_failure, last_success FROM report \
         ON CONFLICT (destination_id) DO UPDATE SET \
             last_success_at = GREATEST(h.last_success_at, EXCLUDED.last_success_at), \
             last_failure_at = GREATEST(h.last_failure_at, EXCLUDED.last_failure_at), \
             failing_since = ( \
                 SELECT min(f) FROM (VALUES (h.failing_since), (EXCLUDED.failing_since)) v(f) \
                 WHERE f >= h.counted_from \
                   AND f > COALESCE(GREATEST(h.last_success_at, EXCLUDED.last_success_at), \
                                    '-infinity')), \
             updated_at = now() \
         RETURNING h.destination_id, h.failing_since \
     ), disabled AS ( \
         UPDATE destinations d SET enabled = false, updated_at = now(), \
             disabled_reason = format('disabled automatically: every send has failed since %s UTC, longer than its %s window', \
                 to_char(m.failing_since AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), \
                 (SELECT CASE WHEN w.secs % 86400 = 0 THEN (w.secs / 86400) || 'd' \
                              WHEN w.secs % 3600 = 0 THEN (w.secs / 3600) || 'h' \
                              WHEN w.secs % 60 = 0 THEN (w.secs / 60) || 'm' \
                              ELSE w.secs || 's' END \
                  FROM (SELECT ceil(extract(epoch FROM d.disable_after_failing))::int8 AS secs) w)) \
         FROM merged m \
         WHERE d.id = m.destination_id AND d.enabled \
           AND m.failing_since < now() - d.disable_after_failing \
         RETURNING d.id, d.tenant_id, d.name, d.disabled_reason AS reason, m.failing_since \
     ), audited AS ( \
         INSERT INTO console_audit (operator, tenant_id, action, target, note) \
         SELECT 'dispatcher:' || $5, tenant_id, 'destination disabled', name, reason \
         FROM disabled \
     ) \
     SELECT id, name, reason, failing_since FROM disabled";

/// A destination's health row, as merged.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct Health {
    /// The earliest failed send after the latest accepted one.
    pub failing_since: Option<DateTime<Utc>>,
    /// The latest failed send.
    pub last_failure_at: Option<DateTime<Utc>>,
    /// The latest accepted send.
    pub last_success_at: Option<DateTime<Utc>>,
    /// When it was disabled for failing.
    pub auto_disabled_at: Option<DateTime<Utc>>,
}

/// A destination's health row, if any dispatcher has reported on it.
pub async fn health(pool: &PgPool, destination_id: Uuid) -> Result<Option<Health>, StoreError> {
    Ok(sqlx::query_as::<_, Health>(
        "SELECT failing_since, last_failure_at, last_success_at, auto_disabled_at \
         FROM destination_health WHERE destination_id = $1",
    )
    .bind(destination_id)
    .fetch_optional(pool)
    .await?)
}

/// Sets how long every send to a tenant's destination may fail before it is disabled
/// (`None`: never). Returns `false` when there is no such destination.
pub async fn set_disable_after_failing(
    db: impl sqlx::PgExecutor<'_>,
    tenant_id: Uuid,
    name: &str,
    window: Option<Duration>,
) -> Result<bool, StoreError> {
    let updated = sqlx::query(
        "UPDATE destinations SET disable_after_failing = make_interval(secs => $3), \
             updated_at = now() \
         WHERE tenant_id = $1 AND name = $2",
    )
    .bind(tenant_id)
    .bind(name)
    .bind(window.map(|w| w.as_secs_f64()))
    .execute(db)
    .await?;
    Ok(updated.rows_affected() == 1)
}

/// A destination's last hour, and whether it is on.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct DestinationHealth {
    /// Its id.
    pub id: Uuid,
    /// Its tenant's id.
    pub tenant_id: Uuid,
    /// Its tenant's name.
    pub tenant: String,
    /// Its name.
    pub name: String,
    /// Whether alerts are delivered to it.
    pub enabled: bool,
    /// Why it is off (`disabled by NAME`, the destination's 410, or `disabled
    /// automatically: ...` after failing for its window).
    pub disabled_reason: Option<String>,
    /// When it was disabled automatically for failing, while it stays off for that.
    pub auto_disabled_at: Option<DateTime<Utc>>,
    /// Since when every send has failed, as the dispatchers last reported (`None` while
    /// the latest send was accepted).
    pub failing_since: Option<DateTime<Utc>>,
    /// Its failing window in seconds (`None`: never disabled automatically).
    pub disable_after_failing_secs: Option<i64>,
    /// Send attempts finished in the last hour.
    pub attempts: i64,
    /// Of those, accepted.
    pub accepted: i64,
    /// Of those, neither accepted nor uncertain (rejected, not processed, not sent).
    pub errors: i64,
    /// Uncertain ones.
    pub uncertain: i64,
    /// Attempts per five minutes over the last hour, oldest first (12 buckets).
    pub attempts_by_bucket: Vec<i64>,
    /// Accepted per five minutes over the last hour, oldest first (12 buckets).
    pub accepted_by_bucket: Vec<i64>,
    /// Age in seconds of its oldest due row (pending or uncertain), if any.
    pub oldest_due_age_secs: Option<f64>,
}

/// Every destination in scope with its last hour of send attempts, by tenant and name.
pub async fn destination_health(
    db: impl PgExecutor<'_>,
    scope: Scope<'_>,
) -> Result<Vec<DestinationHealth>, StoreError> {
    Ok(sqlx::query_as::<_, DestinationHealth>(&format!(
        "WITH recent AS ( \
             SELECT a.destination_id, da.outcome, \
                    LEAST(11, GREATEST(0, floor(extract(epoch FROM da.finished_at - (now() - interval '1 hour')) / 300)))::int AS bucket \
             FROM delivery_attempts da JOIN alerts a ON a.id = da.alert_id \
             WHERE da.kind = $2 AND da.finished_at > now() - interval '1 hour' \
         ), per_bucket AS ( \
             SELECT destination_id, bucket, count(*) AS attempts, \
                    count(*) FILTER (WHERE outcome = $3) AS accepted, \
                    count(*) FILTER (WHERE outcome NOT IN ($3, $4)) AS errors, \
                    count(*) FILTER (WHERE outcome = $4) AS uncertain \
             FROM recent GROUP BY 1, 2 \
         ) \
         SELECT d.id, d.tenant_id, t.name AS tenant, d.name, d.enabled, d.disabled_reason, \
                CASE WHEN NOT d.enabled THEN h.auto_disabled_at END AS auto_disabled_at, \
                h.failing_since, \
                ceil(extract(epoch FROM d.disable_after_failing))::int8 AS disable_after_failing_secs, \
                COALESCE((SELECT sum(p.attempts) FROM per_bucket p WHERE p.destination_id = d.id), 0)::int8 AS attempts, \
                COALESCE((SELECT sum(p.accepted) FROM per_bucket p WHERE p.destination_id = d.id), 0)::int8 AS accepted, \
                COALESCE((SELECT sum(p.errors) FROM per_bucket p WHERE p.destination_id = d.id), 0)::int8 AS errors, \
                COALESCE((SELECT sum(p.uncertain) FROM per_bucket p WHERE p.destination_id = d.id), 0)::int8 AS uncertain, \
                ARRAY(SELECT COALESCE(p.attempts, 0) FROM generate_series(0, 11) b \
                      LEFT JOIN per_bucket p ON p.destination_id = d.id AND p.bucket = b ORDER BY b) \
                    AS attempts_by_bucket, \
                ARRAY(SELECT COALESCE(p.accepted, 0) FROM generate_series(0, 11) b \
                      LEFT JOIN per_bucket p ON p.destination_id = d.id AND p.bucket = b ORDER BY b) \
                    AS accepted_by_bucket, \
                (SELECT extract(epoch FROM now() - min(o.next_attempt_at))::float8 FROM outbox o \
                 WHERE o.destination_id = d.id AND {due} \
                   AND o.next_attempt_at <= now()) AS oldest_due_age_secs \
         FROM destinations d JOIN tenants t ON t.id = d.tenant_id \
         LEFT JOIN destination_health h ON h.destination_id = d.id \
         WHERE $1::uuid[] IS NULL OR d.tenant_id = ANY($1) \
         ORDER BY t.name, d.name",
        due = due_status("o"),
    ))
    .bind(scope)
    .bind(AttemptKind::Send)
    .bind(AttemptOutcome::Accepted)
    .bind(AttemptOutcome::Uncertain)
    .fetch_all(db)
    .await?)
}

/// A recent failed or uncertain attempt at a destination.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct RecentError {
    /// The destination.
    pub destination_id: Uuid,
    /// The alert.
    pub alert_id: Uuid,
    /// When it finished.
    pub finished_at: DateTime<Utc>,
    /// Its outcome.
    pub outcome: AttemptOutcome,
    /// The destination's HTTP status, if it answered.
    pub http_status: Option<i16>,
    /// The kind of failure.
    pub error_class: Option<String>,
    /// The start of the destination's answer (untrusted text).
    pub response_excerpt: Option<String>,
}

/// The last `per_destination` attempts of the last day that were not accepted, per
/// destination in scope, newest first.
pub async fn recent_errors(
    db: impl PgExecutor<'_>,
    scope: Scope<'_>,
    per_destination: i64,
) -> Result<Vec<RecentError>, StoreError> {
    Ok(sqlx::query_as::<_, RecentError>(
        "SELECT destination_id, alert_id, finished_at, outcome, http_status, error_class, \
                response_excerpt \
         FROM ( \
             SELECT a.destination_id, da.alert_id, da.finished_at, da.outcome, da.http_status, \
                    da.error_class, da.response_excerpt, \
                    row_number() OVER (PARTITION BY a.destination_id ORDER BY da.id DESC) AS n \
             FROM delivery_attempts da JOIN alerts a ON a.id = da.alert_id \
             WHERE da.finished_at > now() - interval '1 day' AND da.kind = $3 \
               AND da.outcome <> $4 \
               AND ($1::uuid[] IS NULL OR a.tenant_id = ANY($1)) \
         ) e WHERE n <= $2 ORDER BY destination_id, finished_at DESC",
    )
    .bind(scope)
    .bind(per_destination)
    .bind(AttemptKind::Send)
    .bind(AttemptOutcome::Accepted)
    .fetch_all(db)
    .await?)
}
