//! What became of alerts, counted over the whole database: how far a run has come
//! (approved, settled, uncertain now) and how the accepted ones got there (first try,
//! retries, a de-duplicated resend, a lookup). The counts only mean something in a
//! database that holds one run (`outboxctl demo` makes one); no operator command reads them.

use outbox_core::{AttemptKind, AttemptOutcome, LiveStatus, Outcome};
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use crate::lifecycle::{LAST_EVIDENCE_LINE, SETTLED, STATE, STATE_JOINS};
use crate::StoreError;

/// The oldest alert for the destination called `destination` (any tenant), if any.
pub async fn first_alert_for(
    db: impl PgExecutor<'_>,
    destination: &str,
) -> Result<Option<Uuid>, StoreError> {
    let id = sqlx::query_scalar::<_, Uuid>(
        "SELECT a.id FROM alerts a JOIN destinations d ON d.id = a.destination_id \
         WHERE d.name = $1 ORDER BY a.created_at, a.id LIMIT 1",
    )
    .bind(destination)
    .fetch_optional(db)
    .await?;
    Ok(id)
}

/// How far a demo run has come.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Alerts approved.
    pub total: i64,
    /// Alerts settled (accepted, held, failed, superseded).
    pub settled: i64,
    /// Alerts uncertain now.
    pub uncertain: i64,
}

/// Reads a demo run's progress.
pub async fn progress(db: impl PgExecutor<'_>) -> Result<Progress, StoreError> {
    let (total, settled, uncertain): (i64, i64, i64) = sqlx::query_as(&format!(
        "SELECT (SELECT count(*) FROM alerts), \
                (SELECT count(*) FROM alerts a {STATE_JOINS} WHERE {SETTLED}), \
                (SELECT count(*) FROM outbox WHERE status = $1)",
    ))
    .bind(LiveStatus::Uncertain)
    .fetch_one(db)
    .await?;
    Ok(Progress {
        total,
        settled,
        uncertain,
    })
}

/// What became of a demo's alerts, and how the accepted ones got there.
#[derive(Debug, Clone)]
pub struct Report {
    /// Accepted by the first attempt.
    pub first_try: i64,
    /// Accepted after retries of attempts that were not processed or not sent.
    pub after_retry: i64,
    /// Accepted by a resend after an uncertain attempt (the destination de-duplicated).
    pub by_dedup_resend: i64,
    /// Accepted because a lookup found it.
    pub by_lookup: i64,
    /// Held for an operator.
    pub held: i64,
    /// Failed.
    pub failed: i64,
    /// Still live.
    pub live: i64,
    /// Held alerts with their last evidence line (the first ten).
    pub held_lines: Vec<(Uuid, String)>,
}

/// Reads the demo's final figures.
pub async fn report(pool: &PgPool) -> Result<Report, StoreError> {
    let (by_lookup, by_dedup_resend, after_retry, first_try, held, failed, live): (
        i64,
        i64,
        i64,
        i64,
        i64,
        i64,
        i64,
    ) = sqlx::query_as(&format!(
        "WITH accepted AS ( \
                 SELECT a.id, \
                        EXISTS (SELECT 1 FROM delivery_attempts d WHERE d.alert_id = a.id \
                                AND d.kind = $1 AND d.outcome = $2) AS lookup, \
                        EXISTS (SELECT 1 FROM delivery_attempts d WHERE d.alert_id = a.id \
                                AND d.kind = $3 AND d.outcome = $4) AS was_uncertain, \
                        (SELECT count(*) FROM delivery_attempts d WHERE d.alert_id = a.id \
                                AND d.kind = $3) AS sends \
                 FROM alerts a {STATE_JOINS} \
                 WHERE {STATE} = $5 \
             ) \
             SELECT count(*) FILTER (WHERE lookup), \
                    count(*) FILTER (WHERE NOT lookup AND was_uncertain), \
                    count(*) FILTER (WHERE NOT lookup AND NOT was_uncertain AND sends > 1), \
                    count(*) FILTER (WHERE NOT lookup AND NOT was_uncertain AND sends <= 1), \
                    (SELECT count(*) FROM alert_outcomes WHERE outcome = $6), \
                    (SELECT count(*) FROM alert_outcomes WHERE outcome = $7), \
                    (SELECT count(*) FROM outbox) \
             FROM accepted",
    ))
    .bind(AttemptKind::Lookup)
    .bind(AttemptOutcome::Found)
    .bind(AttemptKind::Send)
    .bind(AttemptOutcome::Uncertain)
    .bind(Outcome::Accepted)
    .bind(Outcome::Held)
    .bind(Outcome::Failed)
    .fetch_one(pool)
    .await?;
    let held_lines = sqlx::query_as::<_, (Uuid, String)>(&format!(
        "SELECT a.id, {LAST_EVIDENCE_LINE} \
         FROM alert_outcomes ao JOIN alerts a ON a.id = ao.alert_id \
         WHERE ao.outcome = $1 ORDER BY a.created_at, a.id LIMIT 10"
    ))
    .bind(Outcome::Held)
    .fetch_all(pool)
    .await?;
    Ok(Report {
        first_try,
        after_retry,
        by_dedup_resend,
        by_lookup,
        held,
        failed,
        live,
        held_lines,
    })
}
