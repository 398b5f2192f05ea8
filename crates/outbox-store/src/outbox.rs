//! Listings for operators: the live queue, and alerts by state.

use chrono::{DateTime, Utc};
use outbox_core::{AlertState, AttemptKind};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::lifecycle::LAST_EVIDENCE_LINE;
use crate::sql_names::SqlName;
use crate::StoreError;

/// One alert in a listing.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct OutboxEntry {
    /// Alert (notification) id.
    pub id: Uuid,
    /// Tenant name.
    pub tenant: String,
    /// Destination name.
    pub destination: String,
    /// Identity: subject.
    pub subject: String,
    /// Identity: occurrence.
    pub occurrence: String,
    /// Identity: revision.
    pub revision: i32,
    /// Current state.
    pub state: AlertState,
    /// Attempts started (live alerts) or recorded (settled ones).
    pub attempts: i32,
    /// When it was approved.
    pub created_at: DateTime<Utc>,
    /// When a dispatcher will next work on it (live alerts only).
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The latest line of its evidence trail.
    pub last_evidence: Option<String>,
}

/// What to list.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// One state; `None`: the live queue (pending, sending, uncertain).
    pub state: Option<AlertState>,
    /// Only this tenant's (name).
    pub tenant: Option<String>,
    /// Only this destination's (name).
    pub destination: Option<String>,
    /// Only alerts approved within this long.
    pub since: Option<std::time::Duration>,
    /// At most this many.
    pub limit: i64,
}

/// Lists alerts, oldest first. Live states are read from the small outbox table; settled
/// ones from the narrow outcome table.
pub async fn list(
    db: impl PgExecutor<'_>,
    filter: &Filter,
) -> Result<Vec<OutboxEntry>, StoreError> {
    let state = filter.state;
    let live = state.is_none_or(AlertState::is_live);
    let sql = if live {
        format!(
            "SELECT a.id, t.name AS tenant, d.name AS destination, a.subject, a.occurrence, \
                a.revision, o.status AS state, o.attempts, a.created_at, o.next_attempt_at, \
                {LAST_EVIDENCE_LINE} AS last_evidence \
         FROM outbox o \
         JOIN alerts a ON a.id = o.alert_id \
         JOIN tenants t ON t.id = a.tenant_id \
         JOIN destinations d ON d.id = a.destination_id \
         WHERE ($1::text IS NULL OR o.status = $1) \
           AND ($3::text IS NULL OR t.name = $3) AND ($4::text IS NULL OR d.name = $4) \
           AND ($5::float8 IS NULL OR a.created_at >= now() - make_interval(secs => $5)) \
         ORDER BY a.created_at, a.id LIMIT $2"
        )
    } else {
        format!(
            "SELECT a.id, t.name AS tenant, d.name AS destination, a.subject, a.occurrence, \
                a.revision, ao.outcome AS state, \
                (SELECT count(*)::int4 FROM delivery_attempts da \
                 WHERE da.alert_id = a.id AND da.kind = {send}) AS attempts, \
                a.created_at, NULL::timestamptz AS next_attempt_at, \
                {LAST_EVIDENCE_LINE} AS last_evidence \
         FROM alert_outcomes ao \
         JOIN alerts a ON a.id = ao.alert_id \
         JOIN tenants t ON t.id = a.tenant_id \
         JOIN destinations d ON d.id = a.destination_id \
         WHERE ao.outcome = $1 \
           AND ($3::text IS NULL OR t.name = $3) AND ($4::text IS NULL OR d.name = $4) \
           AND ($5::float8 IS NULL OR a.created_at >= now() - make_interval(secs => $5)) \
         ORDER BY a.created_at, a.id LIMIT $2",
            send = AttemptKind::Send.sql(),
        )
    };
    let rows = sqlx::query_as::<_, OutboxEntry>(&sql)
        .bind(state)
        .bind(filter.limit)
        .bind(&filter.tenant)
        .bind(&filter.destination)
        .bind(filter.since.map(|d| d.as_secs_f64()))
        .fetch_all(db)
        .await?;
    Ok(rows)
}
