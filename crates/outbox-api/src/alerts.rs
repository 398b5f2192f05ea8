//! Approving, reading and revising alerts.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use outbox_store::alerts::{self, AlertDetail, Approved, ReviseOutcome};
use serde::Deserialize;
use serde_json::value::RawValue;
use tracing::Instrument;
use uuid::Uuid;

use crate::auth::Caller;
use crate::health::ApprovalCounts;
use crate::problem::{
    MalformedJson, PayloadTooLarge, ProblemDocument, Unauthorized, Unavailable,
    UnsupportedMediaType,
};
use crate::trace::{self, IncomingTrace};
use crate::{body, AppState, Problem};

/// What the document says of an identity field's or a reason's text: not blank, and no
/// control or bidirectional character (`outbox_core::identity`'s rules; the byte limits
/// are in each field's description, as JSON Schema counts characters).
pub(crate) const TEXT_PATTERN: &str = r"^[^\u0000-\u001F\u007F-\u009F\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]*[^\s\u0000-\u001F\u007F-\u009F\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069][^\u0000-\u001F\u007F-\u009F\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]*$";

/// A text field's schema (the field's doc comment does not reach a `schema_with`
/// schema, so the description is given here).
fn text_schema(max_length: usize, description: &str) -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .min_length(Some(1))
        .max_length(Some(max_length))
        .pattern(Some(TEXT_PATTERN))
        .description(Some(description))
        .build()
}

fn destination_text() -> utoipa::openapi::Object {
    text_schema(
        outbox_core::MAX_IDENTITY_FIELD_BYTES,
        "The name of one of the tenant's destinations (`GET /v1/destinations`).",
    )
}

fn subject_text() -> utoipa::openapi::Object {
    text_schema(
        outbox_core::MAX_IDENTITY_FIELD_BYTES,
        "What the alert is about, stable across reruns: `contract:ACME-7`. At most 512 \
         bytes of UTF-8, not blank, no control or bidirectional characters.",
    )
}

fn occurrence_text() -> utoipa::openapi::Object {
    text_schema(
        outbox_core::MAX_IDENTITY_FIELD_BYTES,
        "Which occurrence of the subject this is, decided from the facts, never from the \
         clock of the run: `2027-01-31/30d` (the renewal date and the 30-day tier). A \
         rerun gives the same occurrence. At most 512 bytes, as `subject`.",
    )
}

fn reason_text() -> utoipa::openapi::Object {
    text_schema(
        outbox_core::identity::MAX_REASON_BYTES,
        "Why the correction is made, for the evidence trail: at most 2000 bytes of UTF-8, \
         not blank.",
    )
}

/// A member that is present, as `Some` of what it holds (`null` included), so that an
/// absent member (the field's default, `None`) and an explicit `null` differ.
fn present<'de, D>(deserializer: D) -> Result<Option<Option<String>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Option::<String>::deserialize(deserializer).map(Some)
}

fn ordering_key_text() -> utoipa::openapi::Object {
    text_schema(
        outbox_core::MAX_ORDERING_KEY_BYTES,
        "Optional. The lane the alert joins where its destination orders alerts per key: \
         alerts with one key are delivered in approval order, each once the one before it \
         was accepted, superseded, resolved or (where the destination skips them) failed. \
         Defaults to `subject`. Stored whatever the destination's ordering; a repeated \
         approval keeps the first approval's key. At most 200 bytes, the identity fields' \
         rules otherwise.",
    )
}

/// A payload: a JSON object with at least one member.
fn payload_object() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::Object)
        .min_properties(Some(1))
        .additional_properties(Some(
            utoipa::openapi::schema::AdditionalProperties::FreeForm(true),
        ))
        .description(Some(
            "What the destination receives: a non-empty JSON object of at most 256 KiB, \
             nested at most 64 levels, kept byte for byte. An email destination reads its \
             optional `recipients` member (a list of at most 100 mail addresses).",
        ))
        .build()
}

/// An approval: the identity (destination, subject, occurrence; the tenant is the
/// token's) and what to deliver. Approving the same identity again, with the same payload,
/// returns the alert made the first time.
///
/// Fields are optional in Rust only so that a missing one gets its own precise problem
/// instead of a generic parse error; the document says they are required.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "destination": "ops",
    "subject": "contract:ACME-7",
    "occurrence": "2027-01-31/30d",
    "payload": {"vendor": "Acme Tools", "amount": "12000.00", "currency": "EUR", "days_remaining": 30}
}))]
pub(crate) struct ApproveRequest {
    #[schema(required = true, schema_with = destination_text)]
    pub(crate) destination: Option<String>,
    #[schema(required = true, schema_with = subject_text)]
    pub(crate) subject: Option<String>,
    #[schema(required = true, schema_with = occurrence_text)]
    pub(crate) occurrence: Option<String>,
    #[schema(required = true, schema_with = payload_object)]
    pub(crate) payload: Option<Box<RawValue>>,
    /// Absent (`None`), `null` (`Some(None)`, refused: the document says a string), or a
    /// string.
    #[schema(required = false, schema_with = ordering_key_text)]
    #[serde(default, deserialize_with = "present")]
    pub(crate) ordering_key: Option<Option<String>>,
}

/// A correction of an alert's payload, with the reason for it. The revision is a new
/// alert, delivered after the one it corrects.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "payload": {"vendor": "Acme Tools", "amount": "12500.00", "currency": "EUR", "days_remaining": 30},
    "reason": "the renewal quote was revised to 12,500 EUR"
}))]
pub(crate) struct ReviseRequest {
    #[schema(required = true, schema_with = payload_object)]
    pub(crate) payload: Option<Box<RawValue>>,
    #[schema(required = true, schema_with = reason_text)]
    pub(crate) reason: Option<String>,
}

/// How an approval or a revision was answered.
#[derive(Debug)]
pub(crate) enum Answer {
    /// Made by this request (`201`).
    Created(AlertDetail),
    /// Already there, exactly as asked (`200`): a repeated request changes nothing.
    Existing(AlertDetail),
}

/// Approve an alert.
///
/// `201` when this request made the alert, `200` when this identity already had exactly
/// this payload (a rerun, or a retry after a lost answer: nothing changes), `409
/// identity-conflict` when it has a different one (correct it with a revision).
///
/// A W3C `traceparent` (with `tracestate`) on the request is kept with the alert, and
/// every delivery attempt sends the same trace; a malformed one is ignored and a new trace
/// started. A repeated approval keeps the first approval's trace (and says so in the
/// evidence when it came with another).
#[utoipa::path(
    post,
    operation_id = "approve_alert",
    path = "/v1/alerts",
    tag = "alerts",
    request_body = ApproveRequest,
    responses(
        (status = 201, description = "Created by this request", body = AlertDetail,
            headers(("Location" = String, description = "`/v1/alerts/{id}`"))),
        (status = 200, description = "This identity already had exactly this payload; nothing changed (a repeat within another trace adds one evidence line saying so)", body = AlertDetail),
        MalformedJson,
        Unauthorized,
        (status = 409, description = "`identity-conflict`: members `existing_alert_id`, `latest_alert_id`", body = ProblemDocument, content_type = "application/problem+json"),
        PayloadTooLarge,
        UnsupportedMediaType,
        (status = 422, description = "`missing-field`, `field-too-long`, `invalid-field`, `invalid-payload`, `invalid-recipients`, `unknown-destination`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`: retry with the same identity", body = ProblemDocument, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn approve(
    State(state): State<AppState>,
    caller: Caller,
    incoming: IncomingTrace,
    headers: HeaderMap,
    request: Body,
) -> Result<Response, Problem> {
    let request: ApproveRequest = body::read_json(&headers, request).await?;
    answer(approve_alert(&state, &caller, &incoming, &request).await?)
}

/// Approves an alert for `caller`'s tenant (the API's and the agents' tools' one path).
pub(crate) async fn approve_alert(
    state: &AppState,
    caller: &Caller,
    incoming: &IncomingTrace,
    request: &ApproveRequest,
) -> Result<Answer, Problem> {
    let destination = body::identity_field("destination", &request.destination)?;
    let subject = body::identity_field("subject", &request.subject)?;
    let occurrence = body::identity_field("occurrence", &request.occurrence)?;
    let payload = body::payload(&request.payload)?;
    let ordering_key = body::ordering_key(&request.ordering_key)?;
    let span = trace::approval_span("approve", caller.tenant_id, Some(destination), incoming);
    let stored_trace = trace::context_to_store(&span, incoming);

    // The first approval of a burst wakes the dispatchers from inside its own transaction;
    // the others poke the notifier once committed.
    let notify_dispatchers = state.wake_ups.notify_inline();
    // Approvals that arrive while earlier ones are being written are written with each
    // other, in one transaction, each with its own answer (`ApprovalGroups`).
    let outcome = state
        .approval_groups
        .approve(alerts::CheckedApproval {
            tenant_id: caller.tenant_id,
            destination,
            subject,
            occurrence,
            payload,
            actor: &caller.actor,
            ordering_key,
            notify_dispatchers,
            trace: Some(&stored_trace),
        })
        .instrument(span.clone())
        .await?;
    match outcome {
        Approved::Created(alert) => {
            if !notify_dispatchers {
                state.wake_ups.poke();
            }
            ApprovalCounts::count(&state.approvals.created);
            span.record("messaging.message.id", alert.id.to_string());
            span.record("outbox.approval", "created");
            Ok(Answer::Created(without_worker_ids(*alert)))
        }
        Approved::Existing(id) => {
            ApprovalCounts::count(&state.approvals.existing);
            span.record("messaging.message.id", id.to_string());
            span.record("outbox.approval", "existing");
            let alert = load(state, caller, id).await?;
            let Some(given) = incoming.differs_from(alert.trace_id.as_deref()) else {
                return Ok(Answer::Existing(alert));
            };
            // The note is evidence about the request, not part of its answer: a note that
            // cannot be written leaves the idempotent answer as it is.
            match alerts::note_repeated_trace(&state.pool, id, &caller.actor, given).await {
                Ok(()) => Ok(Answer::Existing(load(state, caller, id).await?)),
                Err(err) => {
                    tracing::warn!(alert_id = %id, error = %err, "the repeated approval's trace could not be noted");
                    Ok(Answer::Existing(alert))
                }
            }
        }
        Approved::Conflict { original, latest } => {
            span.record("outbox.approval", "conflict");
            ApprovalCounts::count(&state.approvals.conflicts);
            Err(Problem::new(
                StatusCode::CONFLICT,
                "identity-conflict",
                "Alert exists with a different payload",
                format!(
                    "alert {original} already has this identity (tenant, subject, occurrence, \
                 destination) with a different payload; it was not changed. A correction must \
                 be a revision: POST /v1/alerts/{latest}/revisions with the payload and a reason"
                ),
            )
            .with("existing_alert_id", original.to_string())
            .with("latest_alert_id", latest.to_string()))
        }
    }
}

/// Read an alert: its identity, state, revisions, attempts and evidence trail.
#[utoipa::path(
    get,
    operation_id = "get_alert",
    path = "/v1/alerts/{id}",
    tag = "alerts",
    params(("id" = String, Path, description = "The alert id")),
    responses(
        (status = 200, description = "The alert", body = AlertDetail),
        Unauthorized,
        (status = 404, description = "`alert-not-found` (also another tenant's alert)", body = ProblemDocument, content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<AlertDetail>, Problem> {
    alert(&state, &caller, &id).await.map(Json)
}

/// An alert of the caller's tenant: identity, state, attempts, evidence. Another
/// tenant's alert is not found, as an unknown one is.
pub(crate) async fn alert(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<AlertDetail, Problem> {
    let alert_id = Uuid::parse_str(id).map_err(|_| Problem::alert_not_found(id))?;
    alerts::detail(&state.pool, Some(caller.tenant_id), alert_id)
        .await?
        .map(without_worker_ids)
        .ok_or_else(|| Problem::alert_not_found(id))
}

/// Revise an alert: correct its payload, with a reason.
///
/// `201` with the new revision; `200` when this exact correction was already made; `422
/// revision-unchanged` when nothing changes; `409 not-latest-revision` when a later
/// revision exists (revise that one).
#[utoipa::path(
    post,
    operation_id = "revise_alert",
    path = "/v1/alerts/{id}/revisions",
    tag = "alerts",
    params(("id" = String, Path, description = "The alert to correct (its latest revision)")),
    request_body = ReviseRequest,
    responses(
        (status = 201, description = "The new revision", body = AlertDetail,
            headers(("Location" = String, description = "`/v1/alerts/{id}` of the revision"))),
        (status = 200, description = "This correction was already made; nothing was written", body = AlertDetail),
        MalformedJson,
        Unauthorized,
        (status = 404, description = "`alert-not-found`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "`not-latest-revision`: member `latest_alert_id`", body = ProblemDocument, content_type = "application/problem+json"),
        PayloadTooLarge,
        UnsupportedMediaType,
        (status = 422, description = "`missing-field`, `field-too-long`, `invalid-field`, `invalid-payload`, `invalid-recipients`, `revision-unchanged`", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`: retry; the same correction is never made twice", body = ProblemDocument, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn revise(
    State(state): State<AppState>,
    caller: Caller,
    incoming: IncomingTrace,
    Path(id): Path<String>,
    headers: HeaderMap,
    request: Body,
) -> Result<Response, Problem> {
    // Resolve the alert before reading the body, so another tenant's id is a 404 whatever
    // the body says.
    Uuid::parse_str(&id).map_err(|_| Problem::alert_not_found(&id))?;
    let request: ReviseRequest = body::read_json(&headers, request).await?;
    answer(revise_alert(&state, &caller, &incoming, &id, &request).await?)
}

/// Revises an alert of `caller`'s tenant. The revision keeps its own approval's trace
/// context, as an approval does.
pub(crate) async fn revise_alert(
    state: &AppState,
    caller: &Caller,
    incoming: &IncomingTrace,
    id: &str,
    request: &ReviseRequest,
) -> Result<Answer, Problem> {
    let alert_id = Uuid::parse_str(id).map_err(|_| Problem::alert_not_found(id))?;
    let payload = body::payload(&request.payload)?.as_str();
    let reason = body::reason(&request.reason)?;
    let span = trace::approval_span("revise", caller.tenant_id, None, incoming);
    let stored_trace = trace::context_to_store(&span, incoming);

    let outcome = alerts::revise(
        &state.pool,
        alerts::Revision {
            tenant_id: Some(caller.tenant_id),
            alert_id,
            payload_json: payload,
            reason,
            actor: &caller.actor,
            trace: Some(&stored_trace),
        },
    )
    .instrument(span.clone())
    .await?;
    match outcome {
        ReviseOutcome::Created { id, .. } => {
            span.record("messaging.message.id", id.to_string());
            state.wake_ups.poke();
            ApprovalCounts::count(&state.approvals.created);
            Ok(Answer::Created(load(state, caller, id).await?))
        }
        ReviseOutcome::Existing(id) => Ok(Answer::Existing(load(state, caller, id).await?)),
        ReviseOutcome::NotFound => Err(Problem::alert_not_found(id)),
        ReviseOutcome::Unchanged(current) => Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "revision-unchanged",
            "Revision changes nothing",
            format!(
                "the payload equals that of alert {current}; a revision must correct something"
            ),
        )),
        ReviseOutcome::NotLatest { latest } => Err(Problem::new(
            StatusCode::CONFLICT,
            "not-latest-revision",
            "Alert already revised",
            format!(
                "alert {alert_id} has been revised since; revise the latest revision instead: \
                 POST /v1/alerts/{latest}/revisions"
            ),
        )
        .with("latest_alert_id", latest.to_string())),
    }
}

/// `201 Created` with the alert and its `Location`, or `200` with the alert as it is.
fn answer(answer: Answer) -> Result<Response, Problem> {
    match answer {
        Answer::Created(alert) => {
            let location = HeaderValue::from_str(&format!("/v1/alerts/{}", alert.id))
                .map_err(|_| Problem::internal())?;
            Ok((
                StatusCode::CREATED,
                [(header::LOCATION, location)],
                Json(alert),
            )
                .into_response())
        }
        Answer::Existing(alert) => Ok(Json(alert).into_response()),
    }
}

async fn load(state: &AppState, caller: &Caller, id: Uuid) -> Result<AlertDetail, Problem> {
    alerts::detail(&state.pool, Some(caller.tenant_id), id)
        .await?
        .map(without_worker_ids)
        .ok_or_else(Problem::internal)
}

/// What tenants see in place of a dispatcher's id.
const DISPATCHER: &str = "dispatcher";

/// The alert as a tenant may see it: the ids of the dispatchers that worked on it (by
/// default `host:pid`, which tells the tenant about the operator's machines) replaced by
/// "dispatcher" in attempts and in evidence actors, the only places that hold them (no
/// evidence line names a dispatcher). Operators see them with `outboxctl alert show`.
fn without_worker_ids(mut detail: AlertDetail) -> AlertDetail {
    for attempt in &mut detail.attempts {
        DISPATCHER.clone_into(&mut attempt.worker);
    }
    for line in &mut detail.evidence {
        if line.actor.starts_with("dispatcher:") {
            DISPATCHER.clone_into(&mut line.actor);
        }
    }
    detail
}
