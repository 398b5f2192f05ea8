//! The evidence trail: the one insert every line goes through (and the attempt rows'
//! columns, whose lines it also reads), and one alert's trail read back in order.

use chrono::{DateTime, Utc};
use outbox_core::AlertState;
use sqlx::PgExecutor;
use uuid::Uuid;

use super::standing::parse_optional;
use crate::StoreError;

/// One line of an alert's evidence trail.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    /// The alert it belongs to.
    pub alert_id: Uuid,
    /// State before, when the event is a transition from a known state.
    pub from: Option<AlertState>,
    /// State after.
    pub to: AlertState,
    /// The delivery attempt it concerns, if any.
    pub attempt: Option<i32>,
    /// Who caused it.
    pub actor: &'a str,
    /// What happened, for a person to read.
    pub line: &'a str,
}

/// The evidence table and its columns, in the order every insert lists them: every line
/// of evidence is written through this one insert.
pub(crate) const EVENT_INSERT: &str =
    "INSERT INTO alert_events (alert_id, from_state, to_state, attempt, actor, line)";

/// [`EVENT_INSERT`] for a line whose writer links it to its alert's evidence chain itself
/// (the time it hashed, its chain position and hash follow the line): an approval's first
/// line, whose chain starts at the alert's own record, and a dispatcher's completion
/// that sent nothing.
pub(crate) const LINKED_EVENT_INSERT: &str =
    "INSERT INTO alert_events (alert_id, from_state, to_state, attempt, actor, line, at, \
     chain_pos, entry_hash)";

/// The attempts table and its columns, in the order every insert lists them (an insert
/// that has no value for a column gives `NULL`): every attempt is recorded through this
/// one insert.
pub(crate) const ATTEMPT_INSERT: &str =
    "INSERT INTO delivery_attempts (alert_id, attempt, kind, worker, fencing_token, \
     started_at, finished_at, idempotency_key, payload_sha256, outcome, http_status, \
     destination_reference, error_class, response_excerpt, to_state, line)";

/// [`ATTEMPT_INSERT`] for an attempt whose writer links it to its alert's evidence chain
/// itself (its chain position and hash follow the line): a dispatcher's completion, which
/// reads the head from the outbox row it fences on.
pub(crate) const LINKED_ATTEMPT_INSERT: &str =
    "INSERT INTO delivery_attempts (alert_id, attempt, kind, worker, fencing_token, \
     started_at, finished_at, idempotency_key, payload_sha256, outcome, http_status, \
     destination_reference, error_class, response_excerpt, to_state, line, chain_pos, \
     entry_hash)";

/// Appends a line to an alert's evidence trail.
pub async fn append_event(db: impl PgExecutor<'_>, event: Event<'_>) -> Result<(), StoreError> {
    sqlx::query(&format!("{EVENT_INSERT} VALUES ($1, $2, $3, $4, $5, $6)"))
        .bind(event.alert_id)
        .bind(event.from)
        .bind(event.to)
        .bind(event.attempt)
        .bind(event.actor)
        .bind(event.line)
        .execute(db)
        .await?;
    Ok(())
}

/// One alert's evidence trail, oldest first: the lines of `alert_events` and those folded
/// into attempt rows, merged in time order (the view `alert_evidence`). Every reader of a
/// trail (`outboxctl alert show`, the API, the console, the checker) reads it here.
pub async fn evidence_trail(
    db: impl PgExecutor<'_>,
    alert_id: Uuid,
) -> Result<Vec<EvidenceLine>, StoreError> {
    sqlx::query_as::<_, EvidenceRow>(&format!(
        "SELECT at, from_state, to_state, attempt, actor, line \
         FROM alert_evidence WHERE alert_id = $1 ORDER BY {EVIDENCE_ORDER}"
    ))
    .bind(alert_id)
    .fetch_all(db)
    .await?
    .into_iter()
    .map(EvidenceLine::try_from)
    .collect()
}

/// The order of a trail in `alert_evidence`: time, then events before attempt lines
/// within one instant, then insertion order.
const EVIDENCE_ORDER: &str = "at, source, id";

/// The latest line of the trail of the alert aliased `a`, as a scalar subquery (the
/// listings' "last evidence" column).
pub(crate) const LAST_EVIDENCE_LINE: &str = "(SELECT ev.line FROM alert_evidence ev \
     WHERE ev.alert_id = a.id ORDER BY ev.at DESC, ev.source DESC, ev.id DESC LIMIT 1)";

/// One line of the evidence trail.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EvidenceLine {
    /// When it was recorded.
    pub at: DateTime<Utc>,
    /// State before, if the event left a known state.
    pub from_state: Option<AlertState>,
    /// State after.
    pub to_state: AlertState,
    /// Attempt it concerns.
    pub attempt: Option<i32>,
    /// Who caused it.
    pub actor: String,
    /// What happened. May quote a destination's answer (untrusted text, kept as sent).
    pub line: String,
}

#[derive(Debug, sqlx::FromRow)]
struct EvidenceRow {
    at: DateTime<Utc>,
    from_state: Option<String>,
    #[sqlx(try_from = "String")]
    to_state: AlertState,
    attempt: Option<i32>,
    actor: String,
    line: String,
}

impl TryFrom<EvidenceRow> for EvidenceLine {
    type Error = StoreError;

    fn try_from(row: EvidenceRow) -> Result<Self, StoreError> {
        Ok(EvidenceLine {
            at: row.at,
            from_state: parse_optional(row.from_state)?,
            to_state: row.to_state,
            attempt: row.attempt,
            actor: row.actor,
            line: row.line,
        })
    }
}
