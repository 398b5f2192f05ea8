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

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::time::Duration;
use uuid::Uuid;

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
    let first_failure: Vec<Option<DateTime<Utc>>> =
        sorted.iter().map(|t| t.first_failure).collect();
    let last_failure: Vec<Option<DateTime<Utc>>> = sorted.iter().map(|t| t.last_failure).collect();
    let last_success: Vec<Option<DateTime<Utc>>> = sorted.iter().map(|t| t.last_success).collect();
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT id FROM destinations WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE")
        .bind(&ids)
        .execute(&mut *tx)
        .await?;
    // `merged` upserts the health rows (a destination deleted meanwhile is skipped by the
    // join); `disabled` turns off those failing for longer than their window, only if
    // still enabled, so each is disabled once; `audited` writes the audit line.
    let disabled = sqlx::query_as::<_, AutoDisabled>(
        "WITH report AS ( \
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
         SELECT id, name, reason, failing_since FROM disabled",
    )
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
