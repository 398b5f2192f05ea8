//! What the queue holds and when work is due: `--drain`'s question, and the figures
//! `/metrics` and `outboxctl stats` show.

use sqlx::{PgExecutor, PgPool};
use std::sync::LazyLock;
use std::time::Duration;

use outbox_core::{LiveStatus, Outcome};

use super::claim::due_status;
use crate::sql_names::SqlName;
use crate::StoreError;

/// Whether any live row of an enabled destination is due now or within `horizon`
/// (counting a `sending` row as due when its lease runs out): what `--drain` waits for.
/// A row waiting in an ordered lane is not due: it becomes due only when the alert
/// before it is released, by a completion (of a row that is due or sending itself) or by
/// an operator.
pub async fn work_due_within(
    db: impl PgExecutor<'_>,
    horizon: Duration,
) -> Result<bool, StoreError> {
    let due: bool = sqlx::query_scalar(&format!(
        "SELECT EXISTS ( \
             SELECT 1 FROM outbox o JOIN destinations d ON d.id = o.destination_id \
             WHERE d.enabled AND o.lane_after IS NULL \
               AND CASE WHEN o.status = {sending} THEN o.lease_expires_at ELSE o.next_attempt_at END \
                   <= now() + $1 * interval '1 millisecond' \
               AND (o.after_alert IS NULL \
                    OR NOT EXISTS (SELECT 1 FROM outbox p WHERE p.alert_id = o.after_alert)))",
        sending = LiveStatus::Sending.sql(),
    ))
    .bind(i64::try_from(horizon.as_millis()).unwrap_or(i64::MAX))
    .fetch_one(db)
    .await?;
    Ok(due)
}

/// How many alerts are held. The state is a literal so that the partial index on held
/// and failed outcomes serves the count under a generic plan too (a dispatcher's pool
/// plans generically: `outbox_dispatcher::POOL_PLANS`).
static HELD_COUNT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT count(*) FROM alert_outcomes WHERE outcome = {held}",
        held = Outcome::Held.sql()
    )
});

/// The age in seconds of the oldest row that is due and that no dispatcher holds (NULL
/// when there is none): `/metrics` and `outboxctl stats` both show it.
pub(crate) static OLDEST_DUE_AGE_SECS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT extract(epoch FROM now() - min(next_attempt_at))::float8 FROM outbox \
         WHERE {due} AND next_attempt_at <= now()",
        due = due_status("outbox"),
    )
});

/// Queue figures for `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct QueueFigures {
    /// Live rows by status.
    pub live: Vec<(LiveStatus, i64)>,
    /// Age in seconds of the oldest row that is due and not being worked on.
    pub oldest_due_age_secs: f64,
    /// Alerts held for an operator.
    pub held: i64,
    /// Every ordered destination's open and blocked lanes.
    pub lanes: Vec<crate::lanes::LaneCounts>,
}

impl QueueFigures {
    /// The lane counts as `(tenant, destination, open, blocked)` rows, as the metrics
    /// renderer takes them.
    pub fn lane_rows(&self) -> Vec<(&str, &str, i64, i64)> {
        self.lanes
            .iter()
            .map(|l| (l.tenant.as_str(), l.destination.as_str(), l.open, l.blocked))
            .collect()
    }
}

/// Reads the queue figures.
pub async fn queue_figures(pool: &PgPool) -> Result<QueueFigures, StoreError> {
    let live = sqlx::query_as::<_, (String, i64)>(
        "SELECT status, count(*) FROM outbox GROUP BY status ORDER BY status",
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|(status, n)| Ok((status.parse::<LiveStatus>()?, n)))
    .collect::<Result<Vec<_>, StoreError>>()?;
    let oldest: Option<f64> = sqlx::query_scalar(&OLDEST_DUE_AGE_SECS)
        .fetch_one(pool)
        .await?;
    let held: i64 = sqlx::query_scalar(&HELD_COUNT).fetch_one(pool).await?;
    let lanes = crate::lanes::counts(pool).await?;
    Ok(QueueFigures {
        live,
        oldest_due_age_secs: oldest.unwrap_or(0.0),
        held,
        lanes,
    })
}
