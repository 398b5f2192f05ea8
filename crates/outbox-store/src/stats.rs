//! The figures operators look at (`outboxctl stats`, the console's overview): alerts by
//! tenant, destination and state, the age of the oldest due row, alerts uncertain and
//! held, and the last hour's sends, all read from one snapshot.

use chrono::{DateTime, Utc};
use outbox_core::{AlertState, AttemptKind, AttemptOutcome, LiveStatus, Outcome};
use sqlx::PgPool;

use crate::dispatch::OLDEST_DUE_AGE_SECS;
use crate::lifecycle::{STATE, STATE_JOINS};
use crate::StoreError;

/// Counts by tenant, destination and state.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct StateCount {
    /// Tenant name.
    pub tenant: String,
    /// Destination name.
    pub destination: String,
    /// State.
    #[sqlx(try_from = "String")]
    pub state: AlertState,
    /// Alerts.
    pub count: i64,
}

/// The figures `outboxctl stats` shows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Stats {
    /// Alerts by tenant, destination and state.
    pub by_state: Vec<StateCount>,
    /// Age in seconds of the oldest due row nobody works on.
    pub oldest_due_age_secs: f64,
    /// Alerts uncertain now.
    pub uncertain: i64,
    /// Alerts held now.
    pub held: i64,
    /// Send attempts finished in the last hour.
    pub attempts_last_hour: i64,
    /// Of those, accepted.
    pub accepted_last_hour: i64,
    /// When the figures were read.
    pub at: DateTime<Utc>,
}

/// Reads the figures, from one snapshot.
pub async fn stats(pool: &PgPool) -> Result<Stats, StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    let by_state = sqlx::query_as::<_, StateCount>(&format!(
        "SELECT t.name AS tenant, d.name AS destination, {STATE} AS state, \
                count(*) AS count \
         FROM alerts a JOIN tenants t ON t.id = a.tenant_id \
         JOIN destinations d ON d.id = a.destination_id \
         {STATE_JOINS} \
         GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
    ))
    .fetch_all(&mut *tx)
    .await?;
    let (oldest, uncertain, held, attempts, accepted, at): (
        Option<f64>,
        i64,
        i64,
        i64,
        i64,
        DateTime<Utc>,
    ) = sqlx::query_as(&format!(
        "SELECT ({oldest}), \
                    (SELECT count(*) FROM outbox WHERE status = $1), \
                    (SELECT count(*) FROM alert_outcomes WHERE outcome = $2), \
                    (SELECT count(*) FROM delivery_attempts \
                     WHERE kind = $3 AND finished_at > now() - interval '1 hour'), \
                    (SELECT count(*) FROM delivery_attempts \
                     WHERE kind = $3 AND outcome = $4 \
                       AND finished_at > now() - interval '1 hour'), \
                    now()",
        oldest = *OLDEST_DUE_AGE_SECS,
    ))
    .bind(LiveStatus::Uncertain)
    .bind(Outcome::Held)
    .bind(AttemptKind::Send)
    .bind(AttemptOutcome::Accepted)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Stats {
        by_state,
        oldest_due_age_secs: oldest.unwrap_or(0.0),
        uncertain,
        held,
        attempts_last_hour: attempts,
        accepted_last_hour: accepted,
        at,
    })
}
