//! The read model of one alert: its state, and the alert with its revisions, attempts and
//! evidence trail as one snapshot shows them.

use chrono::{DateTime, Utc};
use outbox_core::{AlertState, AttemptKind, AttemptOutcome};
use serde_json::value::RawValue;
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use crate::lifecycle::{
    evidence_trail, EvidenceLine, DESTINATION_REFERENCE, SETTLED_AT, STATE, STATE_JOINS,
};
use crate::StoreError;

/// An alert's state, or `None` when there is no such alert.
pub async fn state_of(
    db: impl PgExecutor<'_>,
    alert_id: Uuid,
) -> Result<Option<AlertState>, StoreError> {
    let state = sqlx::query_scalar::<_, Option<String>>(&format!(
        "SELECT {STATE} FROM alerts a {STATE_JOINS} WHERE a.id = $1"
    ))
    .bind(alert_id)
    .fetch_optional(db)
    .await?
    .flatten();
    crate::lifecycle::parse_optional(state)
}

/// An alert's current state: its outbox row's status while live, else its outcome.
pub async fn current_state(
    db: impl PgExecutor<'_>,
    alert_id: Uuid,
) -> Result<AlertState, StoreError> {
    state_of(db, alert_id)
        .await?
        .ok_or(StoreError::UnknownAlert(alert_id))
}

/// One alert with everything known about it, for the API and for operators.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AlertDetail {
    /// The notification id (also the idempotency key).
    pub id: Uuid,
    /// Tenant name.
    pub tenant: String,
    /// Identity: subject.
    pub subject: String,
    /// Identity: occurrence.
    pub occurrence: String,
    /// Identity: destination name.
    pub destination: String,
    /// Identity: revision number (0 for the original approval).
    pub revision: i32,
    /// Current state.
    pub state: AlertState,
    /// Set when a send was repeated without evidence that the first did not arrive.
    pub possible_duplicate: bool,
    /// The payload exactly as stored and sent.
    #[cfg_attr(feature = "openapi", schema(schema_with = any_object))]
    pub payload: Box<RawValue>,
    /// SHA-256 of the payload bytes, hex.
    pub payload_sha256: String,
    /// Why this revision was made (revisions only).
    pub reason: Option<String>,
    /// The destination's reference for the accepted alert.
    pub destination_reference: Option<String>,
    /// When it was approved.
    pub created_at: DateTime<Utc>,
    /// Who approved it.
    pub created_by: String,
    /// When it left the outbox for good or for an operator.
    pub settled_at: Option<DateTime<Utc>>,
    /// When retention removed its payload, attempts and evidence (`outboxctl prune`).
    pub pruned_at: Option<DateTime<Utc>>,
    /// When a dispatcher will next work on it (live alerts only).
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The W3C trace id of its approval (32 hex digits): every delivery attempt sends a
    /// `traceparent` in this trace. Absent for alerts approved before trace context was
    /// kept.
    pub trace_id: Option<String>,
    /// Every revision of the identity, this one included, oldest first.
    pub revisions: Vec<RevisionSummary>,
    /// Every finished delivery attempt and lookup, oldest first.
    pub attempts: Vec<AttemptRecord>,
    /// The evidence trail, oldest first.
    pub evidence: Vec<EvidenceLine>,
}

/// Any JSON object, as the OpenAPI document describes a payload.
#[cfg(feature = "openapi")]
fn any_object() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::Object)
        .additional_properties(Some(
            utoipa::openapi::schema::AdditionalProperties::FreeForm(true),
        ))
        .description(Some("The payload exactly as stored and sent."))
        .build()
}

/// One revision in an identity's chain.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RevisionSummary {
    /// Its alert id.
    pub id: Uuid,
    /// Its number.
    pub revision: i32,
    /// Its state.
    #[sqlx(try_from = "String")]
    pub state: AlertState,
    /// Why it was made.
    pub reason: Option<String>,
    /// When it was approved.
    pub created_at: DateTime<Utc>,
}

/// One finished delivery attempt or lookup.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AttemptRecord {
    /// Attempt number.
    pub attempt: i32,
    /// A send or a lookup.
    #[sqlx(try_from = "String")]
    pub kind: AttemptKind,
    /// The dispatcher that made it.
    pub worker: String,
    /// When it started (committed before any byte was sent).
    pub started_at: DateTime<Utc>,
    /// When its outcome was recorded.
    pub finished_at: DateTime<Utc>,
    /// How it ended.
    #[sqlx(try_from = "String")]
    pub outcome: AttemptOutcome,
    /// The destination's HTTP status, if it answered.
    pub http_status: Option<i16>,
    /// The destination's reference, if it gave one.
    pub destination_reference: Option<String>,
    /// What kind of failure, if any.
    pub error_class: Option<String>,
    /// The start of the destination's answer, as evidence. Untrusted text, kept byte
    /// for byte as the destination sent it: it may hold escape sequences and
    /// bidirectional controls, so views escape it before showing it to people.
    pub response_excerpt: Option<String>,
}

#[derive(Debug, sqlx::FromRow)]
struct AlertRow {
    id: Uuid,
    tenant_id: Uuid,
    tenant: String,
    subject: String,
    occurrence: String,
    destination_id: Uuid,
    destination: String,
    revision: i32,
    #[sqlx(try_from = "String")]
    state: AlertState,
    possible_duplicate: bool,
    payload: String,
    payload_sha256: String,
    reason: Option<String>,
    destination_reference: Option<String>,
    created_at: DateTime<Utc>,
    created_by: String,
    settled_at: Option<DateTime<Utc>>,
    pruned_at: Option<DateTime<Utc>>,
    next_attempt_at: Option<DateTime<Utc>>,
    trace_id: Option<String>,
}

/// Reads one alert with its revisions, attempts and evidence, from one snapshot.
/// With `tenant_id`, an alert of another tenant is reported as absent.
pub async fn detail(
    pool: &PgPool,
    tenant_id: Option<Uuid>,
    alert_id: Uuid,
) -> Result<Option<AlertDetail>, StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    let row = sqlx::query_as::<_, AlertRow>(&format!(
        "SELECT a.id, a.tenant_id, t.name AS tenant, a.subject, a.occurrence, a.destination_id, \
                d.name AS destination, a.revision, {STATE} AS state, \
                a.possible_duplicate, a.payload, \
                encode(a.payload_sha256, 'hex') AS payload_sha256, a.reason, \
                {DESTINATION_REFERENCE} AS destination_reference, a.created_at, a.created_by, \
                {SETTLED_AT} AS settled_at, \
                a.pruned_at, o.next_attempt_at, {trace_id} AS trace_id \
         FROM alerts a \
         JOIN tenants t ON t.id = a.tenant_id \
         JOIN destinations d ON d.id = a.destination_id \
         {STATE_JOINS} \
         WHERE a.id = $1 AND ($2::uuid IS NULL OR a.tenant_id = $2)",
        trace_id = super::trace_id_of("a.traceparent"),
    ))
    .bind(alert_id)
    .bind(tenant_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };

    let revisions = sqlx::query_as::<_, RevisionSummary>(&format!(
        "SELECT a.id, a.revision, {STATE} AS state, a.reason, a.created_at \
         FROM alerts a {STATE_JOINS} \
         WHERE a.tenant_id = $1 AND a.subject = $2 AND a.occurrence = $3 AND a.destination_id = $4 \
         ORDER BY a.revision"
    ))
    .bind(row.tenant_id)
    .bind(&row.subject)
    .bind(&row.occurrence)
    .bind(row.destination_id)
    .fetch_all(&mut *tx)
    .await?;
    let attempts = sqlx::query_as::<_, AttemptRecord>(
        "SELECT attempt, kind, worker, started_at, finished_at, outcome, http_status, \
                destination_reference, error_class, response_excerpt \
         FROM delivery_attempts WHERE alert_id = $1 ORDER BY id",
    )
    .bind(alert_id)
    .fetch_all(&mut *tx)
    .await?;
    let evidence = evidence_trail(&mut *tx, alert_id).await?;
    tx.commit().await?;

    let payload = RawValue::from_string(row.payload)
        .map_err(|err| StoreError::UnstorablePayload(err.to_string()))?;
    Ok(Some(AlertDetail {
        id: row.id,
        tenant: row.tenant,
        subject: row.subject,
        occurrence: row.occurrence,
        destination: row.destination,
        revision: row.revision,
        state: row.state,
        possible_duplicate: row.possible_duplicate,
        payload,
        payload_sha256: row.payload_sha256,
        reason: row.reason,
        destination_reference: row.destination_reference,
        created_at: row.created_at,
        created_by: row.created_by,
        settled_at: row.settled_at,
        pruned_at: row.pruned_at,
        next_attempt_at: row.next_attempt_at,
        trace_id: row.trace_id,
        revisions,
        attempts,
        evidence,
    }))
}

/// The tenant of an alert, if it exists.
pub async fn alert_tenant(
    db: impl PgExecutor<'_>,
    alert_id: Uuid,
) -> Result<Option<Uuid>, StoreError> {
    Ok(
        sqlx::query_scalar::<_, Uuid>("SELECT tenant_id FROM alerts WHERE id = $1")
            .bind(alert_id)
            .fetch_optional(db)
            .await?,
    )
}
