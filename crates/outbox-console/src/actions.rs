//! The actions: replay, resolve, destinations on and off, bulk replays. Each checks the
//! session's form token and the operator role first (by taking its form as
//! [`Authorized`]), then the tenant grant, and then asks `outbox_store::alert_actions`
//! and `outbox_store::destination_switch`, the same functions `outboxctl` calls, with the
//! account as the actor (`console:NAME`, where `outboxctl --actor NAME` is `cli:NAME`).

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use outbox_core::AlertState;
use outbox_store::alert_actions::{self, Resolution};
use outbox_store::destination_switch;
use outbox_store::destinations;
use uuid::Uuid;

use crate::auth::{Authorized, Signed};
use crate::error_page::PageError;
use crate::input::Query;
use crate::pages::{alert_id, visible_alert, visible_bulk_replay, ListQuery};
use crate::Console;

/// The longest note kept, as for `outboxctl --note`.
const NOTE_MAX: usize = 1000;

fn required_note(note: &str) -> Result<&str, PageError> {
    let note = note.trim();
    if note.is_empty() {
        return Err(PageError::BadRequest(
            "a note is required: say why, it is kept with the alert's evidence".into(),
        ));
    }
    if note.len() > NOTE_MAX {
        return Err(PageError::BadRequest(format!(
            "the note is longer than {NOTE_MAX} bytes"
        )));
    }
    Ok(note)
}

/// `GET /console/alerts/{id}/replay`: the confirm page.
pub(crate) async fn confirm_replay(
    State(console): State<Console>,
    signed: Signed,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    signed.require_operator()?;
    let detail = visible_alert(&console, &signed, alert_id(&id)?).await?;
    console.views.render(
        &signed,
        "confirm.html",
        minijinja::context! {
            a => &detail,
            title => "Replay this alert",
            action => format!("/console/alerts/{}/replay", detail.id),
            explain => "It goes back in the queue with the same notification id, idempotency key and payload, and a fresh retry budget. A held alert's last attempt may have arrived: replaying it is your call, and the alert is flagged as a possible duplicate.",
            button => "Replay",
            resolution => "",
        },
    )
}

/// A replay or resolve form.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct ActionForm {
    #[serde(default)]
    note: String,
    #[serde(default)]
    resolution: String,
    #[serde(default)]
    reference: String,
}

/// `POST /console/alerts/{id}/replay`.
pub(crate) async fn replay(
    State(console): State<Console>,
    Path(id): Path<String>,
    Authorized { signed, form }: Authorized<ActionForm>,
) -> Result<Response, PageError> {
    let id = alert_id(&id)?;
    let note = required_note(&form.note)?;
    visible_alert(&console, &signed, id).await?;
    alert_actions::replay(&console.pool, id, &signed.actor(), note).await?;
    Ok(Redirect::to(&format!("/console/alerts/{id}")).into_response())
}

/// Which resolution a resolve page is for.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct ResolveQuery {
    #[serde(rename = "as", default)]
    resolution: String,
}

fn resolution_text(resolution: &str) -> Result<(&'static str, &'static str), PageError> {
    match resolution {
        "accepted" => Ok((
            "Resolve as accepted",
            "You found the alert at the destination: it is recorded as accepted with the destination's reference you give. Nothing is sent.",
        )),
        "not-delivered" => Ok((
            "Resolve as not delivered",
            "You established that the destination does not have it: it goes out again with the same idempotency key.",
        )),
        "abandon" => Ok((
            "Abandon this alert",
            "It is given up, visibly: it ends failed, with your note in its evidence. It can be replayed later.",
        )),
        other => Err(PageError::BadRequest(format!(
            "unknown resolution `{other}` (expected accepted, not-delivered or abandon)"
        ))),
    }
}

/// `GET /console/alerts/{id}/resolve?as=accepted|not-delivered|abandon`: the confirm page.
pub(crate) async fn confirm_resolve(
    State(console): State<Console>,
    signed: Signed,
    Path(id): Path<String>,
    Query(query): Query<ResolveQuery>,
) -> Result<Response, PageError> {
    signed.require_operator()?;
    let (title, explain) = resolution_text(&query.resolution)?;
    let detail = visible_alert(&console, &signed, alert_id(&id)?).await?;
    console.views.render(
        &signed,
        "confirm.html",
        minijinja::context! {
            a => &detail,
            title => title,
            action => format!("/console/alerts/{}/resolve", detail.id),
            explain => explain,
            button => title,
            resolution => query.resolution,
        },
    )
}

/// `POST /console/alerts/{id}/resolve`.
pub(crate) async fn resolve(
    State(console): State<Console>,
    Path(id): Path<String>,
    Authorized { signed, form }: Authorized<ActionForm>,
) -> Result<Response, PageError> {
    let id = alert_id(&id)?;
    let note = required_note(&form.note)?;
    resolution_text(&form.resolution)?;
    let resolution = match form.resolution.as_str() {
        "accepted" => {
            let reference = form.reference.trim();
            if reference.is_empty() || reference.len() > 500 {
                return Err(PageError::BadRequest(
                    "name the destination's reference for the alert (at most 500 bytes)".into(),
                ));
            }
            Resolution::Accepted {
                reference: reference.to_owned(),
            }
        }
        "not-delivered" => Resolution::NotDelivered,
        _ => Resolution::Abandon,
    };
    visible_alert(&console, &signed, id).await?;
    alert_actions::resolve(&console.pool, id, &resolution, &signed.actor(), note).await?;
    Ok(Redirect::to(&format!("/console/alerts/{id}")).into_response())
}

/// An on/off action: the form field that says which, and the audit log's words for each.
struct Switch {
    field: &'static str,
    value: fn(&SwitchForm) -> &str,
    on: &'static str,
    off: &'static str,
}

/// The form of an on/off action: the one field its [`Switch`] reads, `true` or `false`.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct SwitchForm {
    #[serde(default)]
    enabled: String,
    #[serde(default)]
    running: String,
}

/// A destination turned on or off.
const DESTINATION_ENABLED: Switch = Switch {
    field: "enabled",
    value: |form| &form.enabled,
    on: "destination enabled",
    off: "destination disabled",
};

/// A bulk replay resumed or stopped.
const BULK_REPLAY_RUNNING: Switch = Switch {
    field: "running",
    value: |form| &form.running,
    on: "bulk replay resumed",
    off: "bulk replay stopped",
};

impl Switch {
    /// The switch's field in `form`: `true` or `false`.
    fn read(&self, form: &SwitchForm) -> Result<bool, PageError> {
        match (self.value)(form) {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(PageError::BadRequest(format!(
                "`{}` must be true or false",
                self.field
            ))),
        }
    }

    /// The action in the audit log, by the word for the way it went, on `target`.
    async fn audit(
        &self,
        console: &Console,
        signed: &Signed,
        tenants: Option<&[Uuid]>,
        on: bool,
        target: &str,
    ) -> Result<(), PageError> {
        let action = if on { self.on } else { self.off };
        outbox_store::audit::record_audit(
            &console.pool,
            &signed.actor(),
            tenants,
            action,
            target,
            "",
        )
        .await?;
        Ok(())
    }
}

/// `POST /console/destinations/{id}/enabled`: on or off, recorded in the audit log.
pub(crate) async fn set_destination_enabled(
    State(console): State<Console>,
    Path(id): Path<String>,
    Authorized { signed, form }: Authorized<SwitchForm>,
) -> Result<Response, PageError> {
    let enabled = DESTINATION_ENABLED.read(&form)?;
    let not_found = || PageError::NotFound("no such destination".into());
    let id = Uuid::parse_str(&id).map_err(|_| not_found())?;
    let destination = destinations::list(&console.pool, None)
        .await?
        .into_iter()
        .find(|d| d.id == id && signed.sees_tenant_named(&d.tenant))
        .ok_or_else(not_found)?;
    let tenant = outbox_store::tenants::find(&console.pool, &destination.tenant).await?;
    destination_switch::set_destination_enabled(
        &console.pool,
        tenant.id,
        &destination.name,
        enabled,
        &signed.actor(),
    )
    .await?;
    let target = format!("{}/{}", destination.tenant, destination.name);
    DESTINATION_ENABLED
        .audit(&console, &signed, Some(&[tenant.id]), enabled, &target)
        .await?;
    Ok(Redirect::to("/console/destinations").into_response())
}

/// Only held and failed alerts can be replayed: a bulk replay's filter must say which.
fn replayable_filter(
    query: &ListQuery,
) -> Result<outbox_store::alert_listings::AlertFilter, PageError> {
    let filter = query.filter()?;
    if !filter.state.is_some_and(alert_actions::replayable) {
        return Err(PageError::BadRequest(
            "a bulk replay needs state held or failed in its filter (only those can be replayed)"
                .into(),
        ));
    }
    Ok(filter)
}

/// `GET /console/bulk-replay?<filter>`: the dry run, how many would be replayed, and the
/// form that starts it.
pub(crate) async fn bulk_dry_run(
    State(console): State<Console>,
    signed: Signed,
    Query(query): Query<ListQuery>,
) -> Result<Response, PageError> {
    signed.require_operator()?;
    let filter = replayable_filter(&query)?;
    let count =
        outbox_store::alert_listings::count_alerts(&console.pool, signed.scope(), &filter).await?;
    console.views.render(
        &signed,
        "bulk.html",
        minijinja::context! {
            count => count,
            state => filter.state.map(AlertState::as_str),
            query => query.query_string(),
            fields => query.fields().into_iter().map(|(name, value)| minijinja::context! { name => name, value => value }).collect::<Vec<_>>(),
        },
    )
}

/// The form that starts a bulk replay: the filter (as in the URL) and a note.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct BulkForm {
    #[serde(default)]
    note: String,
    #[serde(flatten)]
    query: ListQuery,
}

/// `POST /console/bulk-replay`: records the run and wakes the worker.
pub(crate) async fn start_bulk_replay(
    State(console): State<Console>,
    Authorized { signed, form }: Authorized<BulkForm>,
) -> Result<Response, PageError> {
    let note = required_note(&form.note)?;
    let filter = replayable_filter(&form.query)?;
    let planned =
        outbox_store::alert_listings::count_alerts(&console.pool, signed.scope(), &filter).await?;
    let id = outbox_store::bulk_replays::create_bulk_replay(
        &console.pool,
        &signed.actor(),
        note,
        signed.scope(),
        &filter,
        planned,
    )
    .await?;
    let tenants = bulk_replay_tenants(&console, signed.scope(), &filter).await?;
    outbox_store::audit::record_audit(
        &console.pool,
        &signed.actor(),
        tenants.as_deref(),
        "bulk replay started",
        &format!(
            "bulk replay {id} of {planned} ({})",
            form.query.query_string()
        ),
        note,
    )
    .await?;
    console.bulk_wake.notify_one();
    Ok(Redirect::to(&format!("/console/bulk-replay/{id}")).into_response())
}

/// The tenants a bulk replay's audit lines concern: the one its filter names, when its
/// starter could act on it; otherwise those of its starter's grant (`None`: every tenant).
/// So an account limited to a tenant sees the bulk replays of that tenant in the audit
/// log, and no other's.
async fn bulk_replay_tenants(
    console: &Console,
    scope: Option<&[Uuid]>,
    filter: &outbox_store::alert_listings::AlertFilter,
) -> Result<Option<Vec<Uuid>>, PageError> {
    if let Some(name) = &filter.tenant {
        if let Some(tenant) = outbox_store::tenants::tenant_id(&console.pool, name).await? {
            if scope.is_none_or(|scope| scope.contains(&tenant)) {
                return Ok(Some(vec![tenant]));
            }
        }
    }
    Ok(scope.map(<[Uuid]>::to_vec))
}

/// `POST /console/bulk-replay/{id}/running`: stop (`false`) or resume (`true`).
pub(crate) async fn set_bulk_running(
    State(console): State<Console>,
    Path(id): Path<String>,
    Authorized { signed, form }: Authorized<SwitchForm>,
) -> Result<Response, PageError> {
    let running = BULK_REPLAY_RUNNING.read(&form)?;
    let replay = visible_bulk_replay(&console, &signed, &id).await?;
    if !outbox_store::bulk_replays::set_bulk_replay_running(&console.pool, replay.id, running)
        .await?
    {
        return Err(PageError::Refused(format!(
            "bulk replay {} is {}; it cannot be {}",
            replay.id,
            replay.state,
            if running { "resumed" } else { "stopped" }
        )));
    }
    let tenants =
        bulk_replay_tenants(&console, replay.tenant_ids.as_deref(), &replay.filter).await?;
    let target = format!("bulk replay {}", replay.id);
    BULK_REPLAY_RUNNING
        .audit(&console, &signed, tenants.as_deref(), running, &target)
        .await?;
    if running {
        console.bulk_wake.notify_one();
    }
    Ok(Redirect::to(&format!("/console/bulk-replay/{}", replay.id)).into_response())
}
