//! What a tenant may list: its destinations (`GET /v1/destinations`), so that an agent can
//! learn where it may send before it approves, and its alerts (`GET /v1/alerts`), newest
//! first, filtered and keyset-paged.
//!
//! A listing of alerts shares the database with every tenant's approvals, so it is
//! bounded three ways: every filter it takes is served by an index (a subject text
//! without one is refused, `422 unsearchable-filter`); it runs in its turn
//! (`listing_turns`: `429 too-many-listings`, `503 listings-busy`); and its query is
//! stopped after the listing timeout (`503 listing-timeout`), never answered with the
//! database's own error.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::Json;
use outbox_core::{AlertState, DestinationKind};
use outbox_store::alert_listings::{AlertFilter, OutboxEntry};
use serde::Serialize;
use uuid::Uuid;

use crate::auth::Caller;
use crate::problem::{ProblemDocument, Unauthorized, Unavailable};
use crate::{AppState, Problem};

/// Alerts in one page when the request does not say.
pub const DEFAULT_PAGE: i64 = 50;
/// Most alerts in one page.
pub const MAX_PAGE: i64 = 200;

/// A destination as its tenant sees it: what to name in an approval, and what the
/// destination can do. Where it leads (URLs, addresses) and its secrets are the operators'.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TenantDestination {
    /// The name an approval gives as `destination`.
    pub name: String,
    /// `webhook` or `email` (an HTTP email API is a webhook with a body template).
    #[schema(example = "webhook")]
    pub kind: DestinationKind,
    /// The language of an email destination's messages, when set.
    pub locale: Option<String>,
    /// Whether alerts are being delivered to it now (an operator or repeated failures can
    /// pause it; approvals are still taken and wait).
    pub enabled: bool,
    /// Whether a send whose answer was lost can be settled by asking the destination
    /// (a lookup URL is configured); without it such a send stays `uncertain` for an
    /// operator.
    pub can_look_up: bool,
}

/// `GET /v1/destinations`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DestinationList {
    /// The tenant's destinations, by name.
    pub destinations: Vec<TenantDestination>,
}

/// `GET /v1/alerts`: one page, newest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AlertList {
    /// The alerts of this page.
    pub alerts: Vec<AlertSummary>,
    /// Pass as `before` for the next page; absent on the last page.
    pub next_before: Option<Uuid>,
}

/// One alert in a listing.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AlertSummary {
    /// The alert id (also the idempotency key its destination receives).
    pub id: Uuid,
    /// Identity: destination name.
    pub destination: String,
    /// Identity: subject.
    pub subject: String,
    /// Identity: occurrence.
    pub occurrence: String,
    /// Identity: revision number (0 for the original approval).
    pub revision: i32,
    /// Current state.
    #[schema(example = "accepted")]
    pub state: AlertState,
    /// Delivery attempts made.
    pub attempts: i32,
    /// When it was approved.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// When a dispatcher will next work on it (live alerts only).
    pub next_attempt_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl From<OutboxEntry> for AlertSummary {
    fn from(entry: OutboxEntry) -> Self {
        AlertSummary {
            id: entry.id,
            destination: entry.destination,
            subject: entry.subject,
            occurrence: entry.occurrence,
            revision: entry.revision,
            state: entry.state,
            attempts: entry.attempts,
            created_at: entry.created_at,
            next_attempt_at: entry.next_attempt_at,
        }
    }
}

/// What `GET /v1/alerts` filters by, read from its query string.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct AlertQuery {
    /// Only alerts in this state.
    pub state: Option<AlertState>,
    /// Only alerts to this destination (name).
    pub destination: Option<String>,
    /// Only alerts whose subject contains this text (case-insensitive); it holds three
    /// letters or digits in a row, which the index looks it up by.
    pub subject: Option<String>,
    /// Only alerts older than this one (the previous page's `next_before`).
    pub before: Option<Uuid>,
    /// At most this many.
    pub limit: i64,
}

impl AlertQuery {
    /// Reads a query string; an unknown or repeated parameter, or a value out of its range,
    /// is a problem that names it, and a subject text that no index can look up is refused
    /// (`422 unsearchable-filter`).
    pub fn parse(query: Option<&str>) -> Result<AlertQuery, Problem> {
        let mut parsed = AlertQuery {
            limit: DEFAULT_PAGE,
            ..AlertQuery::default()
        };
        let mut seen = Vec::new();
        for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            if seen.contains(&name) {
                return Err(bad_query(format!("parameter `{name}` is given twice")));
            }
            seen.push(name.clone());
            let value = value.into_owned();
            match name.as_ref() {
                "state" => {
                    parsed.state = Some(value.parse::<AlertState>().map_err(|_| {
                        bad_query(format!(
                            "`state` must be one of {}; got `{value}`",
                            AlertState::ALL
                                .iter()
                                .map(|s| s.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    })?);
                }
                "destination" => parsed.destination = Some(bounded_text("destination", value)?),
                "subject" => parsed.subject = Some(searchable_subject(value)?),
                "before" => {
                    parsed.before = Some(Uuid::parse_str(&value).map_err(|_| {
                        bad_query(format!(
                            "`before` must be an alert id from `next_before`; got `{value}`"
                        ))
                    })?);
                }
                "limit" => {
                    parsed.limit = value
                        .parse::<i64>()
                        .ok()
                        .filter(|n| (1..=MAX_PAGE).contains(n))
                        .ok_or_else(|| {
                            bad_query(format!(
                                "`limit` must be a whole number from 1 to {MAX_PAGE}; got `{value}`"
                            ))
                        })?;
                }
                other => {
                    return Err(bad_query(format!(
                        "unknown parameter `{other}`; this listing takes state, destination, \
                         subject, before and limit"
                    )))
                }
            }
        }
        Ok(parsed)
    }
}

/// A filter's text: at most as long as an identity field, and without control characters.
fn bounded_text(name: &str, value: String) -> Result<String, Problem> {
    if value.len() > outbox_core::MAX_IDENTITY_FIELD_BYTES || value.chars().any(char::is_control) {
        return Err(bad_query(format!(
            "`{name}` must be at most {} bytes of text without control characters",
            outbox_core::MAX_IDENTITY_FIELD_BYTES
        )));
    }
    Ok(value)
}

/// A subject text the trigram index can look up: the listing never reads all of a
/// tenant's alerts to find one.
fn searchable_subject(value: String) -> Result<String, Problem> {
    let text = bounded_text("subject", value)?;
    if !outbox_store::alert_listings::subject_search_is_indexed(&text) {
        return Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "unsearchable-filter",
            "Filter cannot be searched",
            "`subject` must hold at least three letters or digits in a row (`acme`, `C-123`): \
             a listing is searched only through an index, never by reading all of a tenant's \
             alerts, and the index looks a text up by those",
        )
        .with("filter", "subject"));
    }
    Ok(text)
}

fn bad_query(detail: String) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-query",
        "Invalid query parameter",
        detail,
    )
}

/// The caller's destinations.
pub(crate) async fn destinations(
    state: &AppState,
    caller: &Caller,
) -> Result<DestinationList, Problem> {
    let destinations = outbox_store::destinations::list(&state.pool, Some(caller.tenant_id))
        .await?
        .into_iter()
        .map(|d| TenantDestination {
            name: d.name,
            kind: d.kind,
            locale: d.locale.map(|locale| locale.as_str().to_owned()),
            enabled: d.enabled,
            can_look_up: d.lookup_url_template.is_some(),
        })
        .collect();
    Ok(DestinationList { destinations })
}

/// One page of the caller's alerts, in its turn and within the listing timeout.
pub(crate) async fn alerts(
    state: &AppState,
    caller: &Caller,
    query: &AlertQuery,
) -> Result<AlertList, Problem> {
    let filter = AlertFilter {
        destination: query.destination.clone(),
        state: query.state,
        subject: query.subject.clone(),
        ..AlertFilter::default()
    };
    let tenants = [caller.tenant_id];
    let turn = state.listings.turn(caller.tenant_id).await?;
    let page = outbox_store::alert_listings::alerts_page_within(
        &state.pool,
        state.listings.timeout(),
        Some(&tenants),
        &filter,
        query.before,
        query.limit + 1,
    )
    .await;
    drop(turn);
    let mut page = page.map_err(|err| {
        if err.is_statement_timeout() {
            state.listings.timed_out()
        } else {
            Problem::from(err)
        }
    })?;
    // One more than asked for tells whether another page follows.
    let next_before = if page.len() as i64 > query.limit {
        page.truncate(query.limit as usize);
        page.last().map(|entry| entry.id)
    } else {
        None
    };
    Ok(AlertList {
        alerts: page.into_iter().map(AlertSummary::from).collect(),
        next_before,
    })
}

/// List the tenant's destinations: the names an approval may give, and what each can do.
#[utoipa::path(
    get,
    operation_id = "list_destinations",
    path = "/v1/destinations",
    tag = "destinations",
    responses(
        (status = 200, description = "The tenant's destinations, by name", body = DestinationList),
        Unauthorized,
        Unavailable,
    )
)]
pub(crate) async fn list_destinations(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<DestinationList>, Problem> {
    destinations(&state, &caller).await.map(Json)
}

/// List the tenant's alerts, newest first, one page at a time.
#[utoipa::path(
    get,
    operation_id = "list_alerts",
    path = "/v1/alerts",
    tag = "alerts",
    params(
        ("state" = Option<AlertState>, Query, description = "Only alerts in this state"),
        ("destination" = Option<String>, Query, max_length = 512, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$", description = "Only alerts to this destination"),
        ("subject" = Option<String>, Query, min_length = 3, max_length = 512, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$", description = "Only alerts whose subject contains this text (case-insensitive). It must hold at least three letters or digits in a row, which the index looks it up by; a text without them is refused with `422 unsearchable-filter`"),
        ("before" = Option<Uuid>, Query, description = "The previous page's `next_before`"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 200, description = "At most this many (default 50)"),
    ),
    responses(
        (status = 200, description = "One page", body = AlertList),
        (status = 400, description = "`invalid-query`", body = ProblemDocument, content_type = "application/problem+json"),
        Unauthorized,
        (status = 422, description = "`unsearchable-filter`: `subject` holds no three letters or digits in a row; member `filter` names it", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 429, description = "`too-many-listings`: this tenant's listings running at once are at their bound; retry after `Retry-After`", body = ProblemDocument, content_type = "application/problem+json",
            headers(("Retry-After" = u32, description = "Seconds to wait before retrying"))),
        (status = 503, description = "`unavailable`, `listings-busy` (every connection lent to listings is in use) or `listing-timeout` (the query ran past the listing timeout); retry after `Retry-After`", body = ProblemDocument, content_type = "application/problem+json",
            headers(("Retry-After" = u32, description = "Seconds to wait before retrying"))),
    )
)]
pub(crate) async fn list_alerts(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<AlertList>, Problem> {
    let query = AlertQuery::parse(query.as_deref())?;
    alerts(&state, &caller, &query).await.map(Json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_reads_every_parameter() {
        let id = Uuid::now_v7();
        let query = AlertQuery::parse(Some(&format!(
            "state=held&destination=ops&subject=acme%20renewal&before={id}&limit=10"
        )))
        .unwrap();
        assert_eq!(
            query,
            AlertQuery {
                state: Some(AlertState::Held),
                destination: Some("ops".into()),
                subject: Some("acme renewal".into()),
                before: Some(id),
                limit: 10,
            }
        );
        assert_eq!(AlertQuery::parse(None).unwrap().limit, DEFAULT_PAGE);
    }

    #[test]
    fn a_subject_text_without_a_trigram_is_refused_as_unsearchable() {
        for query in [
            "subject=ab",
            "subject=C-1",
            "subject=%25%25%25",
            "subject=a%3Ab%3Ac",
        ] {
            let problem = AlertQuery::parse(Some(query)).unwrap_err();
            assert_eq!(
                problem.status(),
                StatusCode::UNPROCESSABLE_ENTITY,
                "{query}"
            );
            assert_eq!(problem.kind(), "unsearchable-filter", "{query}");
            assert_eq!(problem.document()["filter"], "subject", "{query}");
            assert!(problem.detail().contains("`subject`"), "{query}");
        }
        let query = AlertQuery::parse(Some("subject=C-123")).unwrap();
        assert_eq!(query.subject.as_deref(), Some("C-123"));
    }

    #[test]
    fn a_bad_query_is_refused_by_name() {
        for (query, named) in [
            ("state=lost", "`state`"),
            ("limit=0", "`limit`"),
            ("limit=201", "`limit`"),
            ("limit=ten", "`limit`"),
            ("before=yesterday", "`before`"),
            ("colour=red", "`colour`"),
            ("limit=5&limit=6", "`limit`"),
            ("subject=%07", "`subject`"),
        ] {
            let problem = AlertQuery::parse(Some(query)).unwrap_err();
            assert_eq!(problem.kind(), "invalid-query", "{query}");
            assert!(
                problem.detail().contains(named),
                "{query}: {}",
                problem.detail()
            );
        }
    }
}
