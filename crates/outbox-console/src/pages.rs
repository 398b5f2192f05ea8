//! The pages that read. Each reads through `outbox-store` within the account's tenant grant.

use axum::extract::{Path, State};
use axum::response::Response;
use chrono::{DateTime, NaiveDateTime, Utc};
use outbox_core::{AlertState, BulkReplayState};
use outbox_store::alert_listings::AlertFilter;
use outbox_store::{alert_actions, alerts, destinations, rendered, stats};
use std::collections::HashMap;
use uuid::Uuid;

use crate::auth::Signed;
use crate::error_page::PageError;
use crate::input::Query;
use crate::view::sparkline;
use crate::Console;

/// Rows per outbox page.
const PAGE_SIZE: i64 = 50;

/// `GET /console`: what needs attention.
pub(crate) async fn overview(
    State(console): State<Console>,
    signed: Signed,
) -> Result<Response, PageError> {
    let stats = stats::stats(&console.pool).await?;
    let mut by_state: HashMap<AlertState, i64> =
        AlertState::ALL.iter().map(|state| (*state, 0)).collect();
    for row in stats
        .by_state
        .iter()
        .filter(|row| signed.sees_tenant_named(&row.tenant))
    {
        if let Some(count) = by_state.get_mut(&row.state) {
            *count += row.count;
        }
    }
    let counts: Vec<_> = AlertState::ALL
        .iter()
        .map(|state| minijinja::context! { state => state.as_str(), count => by_state[state] })
        .collect();
    let health = outbox_store::health::destination_health(&console.pool, signed.scope()).await?;
    let oldest_due = health
        .iter()
        .filter_map(|d| d.oldest_due_age_secs)
        .fold(None, |max: Option<f64>, age| {
            Some(max.map_or(age, |m| m.max(age)))
        });
    let destinations: Vec<_> = health
        .iter()
        .map(|d| {
            minijinja::context! {
                d => d,
                acceptance => (d.attempts > 0).then(|| d.accepted * 100 / d.attempts),
                chart => sparkline(&d.attempts_by_bucket, &d.accepted_by_bucket),
            }
        })
        .collect();
    let attention = |state: AlertState| AlertFilter {
        state: Some(state),
        ..AlertFilter::default()
    };
    let held_filter = attention(AlertState::Held);
    let uncertain_filter = attention(AlertState::Uncertain);
    let mut attention_rows = outbox_store::alert_listings::alerts_page(
        &console.pool,
        signed.scope(),
        &held_filter,
        None,
        10,
    )
    .await?;
    attention_rows.extend(
        outbox_store::alert_listings::alerts_page(
            &console.pool,
            signed.scope(),
            &uncertain_filter,
            None,
            10,
        )
        .await?,
    );
    console.views.render(
        &signed,
        "overview.html",
        minijinja::context! {
            counts => counts,
            held_count => by_state[&AlertState::Held],
            uncertain_count => by_state[&AlertState::Uncertain],
            oldest_due => oldest_due,
            destinations => destinations,
            disabled => health.iter().filter(|d| !d.enabled).collect::<Vec<_>>(),
            auto_disabled => health.iter().filter(|d| d.auto_disabled_at.is_some()).collect::<Vec<_>>(),
            attention => attention_rows,
            at => stats.at,
        },
    )
}

/// The outbox page's query string: the filter, and the page's cursor.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct ListQuery {
    #[serde(default)]
    tenant: String,
    #[serde(default)]
    destination: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    from: String,
    #[serde(default)]
    to: String,
    #[serde(default)]
    subject: String,
    #[serde(default)]
    before: String,
}

fn non_empty(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// A time from the filter: RFC 3339, or a browser's `datetime-local` (`2026-12-01T10:00`,
/// taken as UTC).
fn parse_time(field: &str, text: &str) -> Result<Option<DateTime<Utc>>, PageError> {
    let Some(text) = non_empty(text) else {
        return Ok(None);
    };
    if let Ok(at) = DateTime::parse_from_rfc3339(&text) {
        return Ok(Some(at.with_timezone(&Utc)));
    }
    for format in ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"] {
        if let Ok(at) = NaiveDateTime::parse_from_str(&text, format) {
            return Ok(Some(at.and_utc()));
        }
    }
    Err(PageError::BadRequest(format!(
        "`{field}` must be a time such as 2026-12-01T10:00 (UTC) or RFC 3339"
    )))
}

impl ListQuery {
    /// The filter it names; a bad field is a clear refusal.
    pub(crate) fn filter(&self) -> Result<AlertFilter, PageError> {
        let state = match non_empty(&self.state) {
            Some(state) => Some(
                state
                    .parse::<AlertState>()
                    .map_err(|err| PageError::BadRequest(err.to_string()))?,
            ),
            None => None,
        };
        let subject = non_empty(&self.subject);
        if subject.as_ref().is_some_and(|s| s.len() > 512) {
            return Err(PageError::BadRequest(
                "`subject` is longer than 512 bytes".into(),
            ));
        }
        let filter = AlertFilter {
            tenant: non_empty(&self.tenant),
            destination: non_empty(&self.destination),
            state,
            from: parse_time("from", &self.from)?,
            to: parse_time("to", &self.to)?,
            subject,
        };
        Ok(filter)
    }

    fn before(&self) -> Result<Option<Uuid>, PageError> {
        non_empty(&self.before)
            .map(|id| {
                Uuid::parse_str(&id)
                    .map_err(|_| PageError::BadRequest("`before` is not an alert id".into()))
            })
            .transpose()
    }

    /// The filter's fields that are set, as name and value, for hidden form fields.
    pub(crate) fn fields(&self) -> Vec<(&'static str, String)> {
        [
            ("tenant", &self.tenant),
            ("destination", &self.destination),
            ("state", &self.state),
            ("from", &self.from),
            ("to", &self.to),
            ("subject", &self.subject),
        ]
        .into_iter()
        .filter(|(_, value)| !value.trim().is_empty())
        .map(|(name, value)| (name, value.trim().to_owned()))
        .collect()
    }

    /// The filter as a query string (without the cursor), for links.
    pub(crate) fn query_string(&self) -> String {
        self.fields()
            .iter()
            .map(|(name, value)| format!("{name}={}", percent_encode(value)))
            .collect::<Vec<_>>()
            .join("&")
    }
}

/// Percent-encodes a query value (everything but unreserved characters).
pub(crate) fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `GET /console/outbox?...`: a filtered list, newest first, paged by keyset.
pub(crate) async fn outbox(
    State(console): State<Console>,
    signed: Signed,
    Query(query): Query<ListQuery>,
) -> Result<Response, PageError> {
    let filter = query.filter()?;
    let before = query.before()?;
    let rows = outbox_store::alert_listings::alerts_page(
        &console.pool,
        signed.scope(),
        &filter,
        before,
        PAGE_SIZE + 1,
    )
    .await?;
    let more = rows.len() as i64 > PAGE_SIZE;
    let rows: Vec<_> = rows.into_iter().take(PAGE_SIZE as usize).collect();
    let filter_query = query.query_string();
    let next = more.then(|| {
        let last = rows
            .last()
            .map(|row| row.id.to_string())
            .unwrap_or_default();
        if filter_query.is_empty() {
            format!("/console/outbox?before={last}")
        } else {
            format!("/console/outbox?{filter_query}&before={last}")
        }
    });
    let bulk = filter
        .state
        .is_some_and(alert_actions::replayable)
        .then(|| format!("/console/bulk-replay?{filter_query}"));
    console.views.render(
        &signed,
        "outbox.html",
        minijinja::context! {
            rows => rows,
            next => next,
            first_page => before.is_some().then(|| format!("/console/outbox?{filter_query}")),
            bulk => bulk,
            q => minijinja::context! {
                tenant => query.tenant.trim(),
                destination => query.destination.trim(),
                state => query.state.trim(),
                from => query.from.trim(),
                to => query.to.trim(),
                subject => query.subject.trim(),
            },
            tenants => outbox_store::tenants::tenant_names(&console.pool, signed.scope()).await?,
            states => AlertState::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        },
    )
}

/// Parses an alert id from the path; a malformed one is simply not found.
pub(crate) fn alert_id(text: &str) -> Result<Uuid, PageError> {
    Uuid::parse_str(text).map_err(|_| PageError::NotFound("no such alert".into()))
}

/// Reads an alert the account may see; outside its tenants the alert does not exist.
pub(crate) async fn visible_alert(
    console: &Console,
    signed: &Signed,
    id: Uuid,
) -> Result<alerts::AlertDetail, PageError> {
    let tenant = outbox_store::alerts::alert_tenant(&console.pool, id).await?;
    let detail = match tenant {
        Some(tenant) if signed.sees_tenant(tenant) => {
            alerts::detail(&console.pool, Some(tenant), id).await?
        }
        _ => None,
    };
    detail.ok_or_else(|| PageError::NotFound("no such alert".into()))
}

/// Reads a bulk replay its account may see: one started within the account's grant.
pub(crate) async fn visible_bulk_replay(
    console: &Console,
    signed: &Signed,
    id: &str,
) -> Result<outbox_store::bulk_replays::BulkReplay, PageError> {
    let not_found = || PageError::NotFound("no such bulk replay".into());
    let id = Uuid::parse_str(id).map_err(|_| not_found())?;
    let replay = outbox_store::bulk_replays::bulk_replay(&console.pool, id)
        .await?
        .ok_or_else(not_found)?;
    let within_grant = match (&replay.tenant_ids, signed.scope()) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(started), Some(mine)) => started.iter().all(|t| mine.contains(t)),
    };
    if within_grant {
        Ok(replay)
    } else {
        Err(not_found())
    }
}

/// `GET /console/alerts/{id}`: identity, payload, revisions, attempts, evidence, email.
pub(crate) async fn alert(
    State(console): State<Console>,
    signed: Signed,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let id = alert_id(&id)?;
    let detail = visible_alert(&console, &signed, id).await?;
    let payload = serde_json::from_str::<serde_json::Value>(detail.payload.get())
        .and_then(|value| serde_json::to_string_pretty(&value))
        .unwrap_or_else(|_| detail.payload.get().to_owned());
    let payload = visible_lines(&payload);
    let email = rendered::find(&console.pool, id).await?.map(|message| {
        minijinja::context! {
            message_id => message.message_id,
            sha256 => message.sha256,
            template_version => message.template_version,
            rendered_at => message.rendered_at,
            text => visible_lines(&String::from_utf8_lossy(&message.bytes)),
        }
    });
    // Which actions are open is the lifecycle's answer, the same rules the actions apply.
    let open = alert_actions::open_actions(&console.pool, id).await?;
    let (evidence_ok, evidence_check) = evidence_check(&console.pool, id).await?;
    console.views.render(
        &signed,
        "alert.html",
        minijinja::context! {
            trace_url => detail.trace_id.as_ref().and_then(|id| {
                console
                    .config
                    .trace_url_template
                    .as_ref()
                    .map(|template| template.replace("{trace_id}", id))
            }),
            a => &detail,
            payload => payload,
            email => email,
            open => open,
            evidence_ok => evidence_ok,
            evidence_check => evidence_check,
        },
    )
}

/// The alert's evidence chain checked as `outboxctl evidence verify --alert` checks it
/// (with the keys the database holds, and without walking every later checkpoint): the
/// line the alert page shows, and whether it is a success.
async fn evidence_check(
    pool: &outbox_store::PgPool,
    id: uuid::Uuid,
) -> Result<(bool, String), outbox_store::StoreError> {
    use outbox_evidence::verify;
    let trust = verify::Trust::load(pool, vec![]).await?;
    let report = verify::verify_alert(pool, id, &trust, false).await?;
    Ok(match (report.problems.first(), report.checkpoint) {
        (Some(first), _) => (
            false,
            format!(
                "does not verify ({} problem(s)); the first: {first}",
                report.problems.len()
            ),
        ),
        (None, Some((seq, at, covered))) => (
            true,
            format!(
                "evidence verified up to checkpoint {seq} at {} ({covered} of {} entries)",
                at.format("%Y-%m-%d %H:%M:%S UTC"),
                report.entries
            ),
        ),
        (None, None) => (
            true,
            format!(
                "{} entries chain correctly; no checkpoint covers them yet",
                report.entries
            ),
        ),
    })
}

/// Text laid out in lines (a pretty-printed payload, an email as stored) shown like every
/// other untrusted text, with control and bidirectional characters as escapes, line by
/// line: its line breaks are its layout (inside a JSON string, one is already JSON's own
/// `\n` escape).
fn visible_lines(text: &str) -> String {
    text.lines()
        .map(outbox_core::untrusted::visible)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Blocked lanes shown per ordered destination on the destinations page (the rest are a
/// `outboxctl lanes list` away).
const BLOCKED_LANES_SHOWN: i64 = 20;

/// `GET /console/destinations`: each destination, its capability, health and last errors,
/// and an ordered destination's lanes blocked by a held or failed head.
pub(crate) async fn destinations(
    State(console): State<Console>,
    signed: Signed,
) -> Result<Response, PageError> {
    let all = destinations::list(&console.pool, None).await?;
    let health = outbox_store::health::destination_health(&console.pool, signed.scope()).await?;
    let errors = outbox_store::health::recent_errors(&console.pool, signed.scope(), 5).await?;
    let mut rows = Vec::new();
    for d in all.iter().filter(|d| signed.sees_tenant_named(&d.tenant)) {
        let h = health.iter().find(|h| h.id == d.id);
        let blocked = if d.ordering == outbox_core::Ordering::PerKey {
            outbox_store::lanes::stalled(&console.pool, d.id, false, BLOCKED_LANES_SHOWN).await?
        } else {
            Vec::new()
        };
        rows.push(minijinja::context! {
            d => d,
            h => h,
            chart => h.map(|h| sparkline(&h.attempts_by_bucket, &h.accepted_by_bucket)),
            errors => errors.iter().filter(|e| e.destination_id == d.id).collect::<Vec<_>>(),
            blocked => blocked,
        });
    }
    console.views.render(
        &signed,
        "destinations.html",
        minijinja::context! { rows => rows },
    )
}

/// The audit page's query: one operator's lines, and the page's cursor.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct AuditQuery {
    #[serde(default)]
    operator: String,
    #[serde(default)]
    after: String,
}

/// Lines per audit page.
const AUDIT_PAGE_SIZE: i64 = 50;

/// `GET /console/audit?operator=...&after=...`: operators' actions, newest first, paged
/// by keyset (a page's URL keeps showing the same lines).
pub(crate) async fn audit(
    State(console): State<Console>,
    signed: Signed,
    Query(query): Query<AuditQuery>,
) -> Result<Response, PageError> {
    let operator = non_empty(&query.operator);
    let after = non_empty(&query.after)
        .map(|text| text.parse::<outbox_store::audit::AuditCursor>())
        .transpose()
        .map_err(PageError::BadRequest)?;
    let mut entries = outbox_store::audit::audit(
        &console.pool,
        signed.scope(),
        operator.as_deref(),
        after,
        AUDIT_PAGE_SIZE + 1,
    )
    .await?;
    let more = entries.len() as i64 > AUDIT_PAGE_SIZE;
    entries.truncate(AUDIT_PAGE_SIZE as usize);
    let filter = operator
        .as_deref()
        .map(|name| format!("operator={}&", percent_encode(name)))
        .unwrap_or_default();
    let next = more
        .then(|| {
            entries
                .last()
                .map(|last| format!("/console/audit?{filter}after={}", last.cursor()))
        })
        .flatten();
    console.views.render(
        &signed,
        "audit.html",
        minijinja::context! {
            entries => entries,
            operator => operator.unwrap_or_default(),
            next => next,
            first_page => after.is_some().then(|| format!("/console/audit?{}", filter.trim_end_matches('&'))),
        },
    )
}

/// `GET /console/bulk-replay/{id}`: a bulk replay's progress.
pub(crate) async fn bulk_progress(
    State(console): State<Console>,
    signed: Signed,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let replay = visible_bulk_replay(&console, &signed, &id).await?;
    console.views.render(
        &signed,
        "bulk_progress.html",
        minijinja::context! {
            r => &replay,
            running => replay.state == BulkReplayState::Running,
            handled => replay.replayed + replay.skipped,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_reads_from_the_query_and_back() {
        let query = ListQuery {
            tenant: "acme".into(),
            state: "held".into(),
            subject: "contract:A&B 7".into(),
            from: "2026-12-01T10:00".into(),
            ..ListQuery::default()
        };
        let filter = query.filter().expect("filter");
        assert_eq!(filter.state, Some(AlertState::Held));
        assert_eq!(
            filter.from.map(|t| t.to_rfc3339()),
            Some("2026-12-01T10:00:00+00:00".into())
        );
        assert_eq!(
            query.query_string(),
            "tenant=acme&state=held&from=2026-12-01T10%3A00&subject=contract%3AA%26B%207"
        );
    }

    #[test]
    fn a_payload_keeps_its_layout_and_shows_its_controls() {
        let pretty = "{\n  \"file\": \"invoice\u{202e}gnp.exe\",\n  \"bell\": \"\u{7}\"\n}";
        assert_eq!(
            visible_lines(pretty),
            "{\n  \"file\": \"invoice\\u{202e}gnp.exe\",\n  \"bell\": \"\\x07\"\n}"
        );
    }

    #[test]
    fn a_bad_filter_is_refused_by_name() {
        let bad_state = ListQuery {
            state: "lost".into(),
            ..ListQuery::default()
        };
        assert!(matches!(bad_state.filter(), Err(PageError::BadRequest(m)) if m.contains("lost")));
        let bad_time = ListQuery {
            to: "yesterday".into(),
            ..ListQuery::default()
        };
        assert!(matches!(bad_time.filter(), Err(PageError::BadRequest(m)) if m.contains("`to`")));
    }
}
