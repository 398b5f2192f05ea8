//! Approving, reading and revising alerts.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use outbox_store::alerts::{self, AlertDetail, Approved, ReviseOutcome};
use serde::Deserialize;
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::auth::Caller;
use crate::health::ApprovalCounts;
use crate::{body, AppState, Problem};

/// `POST /v1/alerts`. Fields are optional here only so that a missing one gets its own
/// precise problem instead of a generic parse error.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApproveRequest {
    destination: Option<String>,
    subject: Option<String>,
    occurrence: Option<String>,
    payload: Option<Box<RawValue>>,
}

/// `POST /v1/alerts/{id}/revisions`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReviseRequest {
    payload: Option<Box<RawValue>>,
    reason: Option<String>,
}

/// Approves an alert: 201 when created, 200 when this identity already has exactly this
/// payload, 409 when it has a different one.
pub(crate) async fn approve(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    request: Body,
) -> Result<Response, Problem> {
    let request: ApproveRequest = body::read_json(&headers, request).await?;
    let destination = body::identity_field("destination", &request.destination)?;
    let subject = body::identity_field("subject", &request.subject)?;
    let occurrence = body::identity_field("occurrence", &request.occurrence)?;
    let payload = body::payload(&request.payload)?;

    // The first approval of a burst wakes the dispatchers from inside its own transaction;
    // the others poke the notifier once committed.
    let notify_dispatchers = state.wake_ups.notify_inline();
    let outcome = alerts::approve_checked(
        &state.pool,
        alerts::CheckedApproval {
            tenant_id: caller.tenant_id,
            destination,
            subject,
            occurrence,
            payload,
            actor: &caller.actor,
            notify_dispatchers,
        },
    )
    .await?;
    match outcome {
        Approved::Created(alert) => {
            if !notify_dispatchers {
                state.wake_ups.poke();
            }
            ApprovalCounts::count(&state.approvals.created);
            created_answer(*alert)
        }
        Approved::Existing(id) => {
            ApprovalCounts::count(&state.approvals.existing);
            ok(&state, &caller, id).await
        }
        Approved::Conflict { original, latest } => {
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

/// Shows an alert of the caller's tenant: identity, state, attempts, evidence.
pub(crate) async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<AlertDetail>, Problem> {
    let alert_id = Uuid::parse_str(&id).map_err(|_| Problem::alert_not_found(&id))?;
    alerts::detail(&state.pool, Some(caller.tenant_id), alert_id)
        .await?
        .map(|detail| Json(without_worker_ids(detail)))
        .ok_or_else(|| Problem::alert_not_found(&id))
}

/// Revises an alert: 201 with the new revision; 200 when this exact correction was
/// already made; 422 when nothing changes; 409 when a later revision exists.
pub(crate) async fn revise(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    request: Body,
) -> Result<Response, Problem> {
    // Resolve the alert before reading the body, so another tenant's id is a 404 whatever
    // the body says.
    let alert_id = Uuid::parse_str(&id).map_err(|_| Problem::alert_not_found(&id))?;
    let request: ReviseRequest = body::read_json(&headers, request).await?;
    let payload = body::payload(&request.payload)?.as_str();
    let reason = body::reason(&request.reason)?;

    let outcome = alerts::revise(
        &state.pool,
        alerts::Revision {
            tenant_id: Some(caller.tenant_id),
            alert_id,
            payload_json: payload,
            reason,
            actor: &caller.actor,
        },
    )
    .await?;
    match outcome {
        ReviseOutcome::Created { id, .. } => created(&state, &caller, id).await,
        ReviseOutcome::Existing(id) => ok(&state, &caller, id).await,
        ReviseOutcome::NotFound => Err(Problem::alert_not_found(&id)),
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

async fn created(state: &AppState, caller: &Caller, id: Uuid) -> Result<Response, Problem> {
    state.wake_ups.poke();
    ApprovalCounts::count(&state.approvals.created);
    created_answer(load(state, caller, id).await?)
}

/// `201 Created` with the alert and its `Location`.
fn created_answer(alert: AlertDetail) -> Result<Response, Problem> {
    let location = HeaderValue::from_str(&format!("/v1/alerts/{}", alert.id))
        .map_err(|_| Problem::internal())?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(alert),
    )
        .into_response())
}

async fn ok(state: &AppState, caller: &Caller, id: Uuid) -> Result<Response, Problem> {
    Ok(Json(load(state, caller, id).await?).into_response())
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
