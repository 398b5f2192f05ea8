//! Listings of alerts: the live queue and alerts by state (`outboxctl list`), and the
//! filtered, keyset-paged list within an account's tenant grant (the console's outbox
//! page, and the selection of a bulk replay) or within one tenant (the approval API's
//! listing, under a statement timeout: [`alerts_page_within`]). Every read of a limited
//! account takes its grant ([`Scope`]) and applies it in SQL, so it cannot read past it
//! whatever it asks for.
//!
//! Within one tenant, every filter the API takes has an index that serves it in the
//! listing's order (newest first), so that the first page is read without reading the
//! tenant's other alerts: no filter, and `accepted` (which most alerts are), walk
//! `alerts_tenant_id_idx (tenant_id, id)` backwards and stop after a page; a destination
//! walks `alerts_tenant_destination_idx (tenant_id, destination_id, id)`; a subject text
//! is looked up in the trigram index when it is rare, and the tenant's alerts are walked
//! when it is common (the planner tells which from the column's statistics); live states
//! are read from the small outbox table, held, failed and superseded from the outcome
//! table. A subject text without a trigram has no index: [`subject_search_is_indexed`].
//! The tests in `alert_listings/tests.rs` hold these plans on a table of 80,000 alerts.

use chrono::{DateTime, Utc};
use outbox_core::{AlertState, AttemptKind};
use sqlx::{PgConnection, PgExecutor, PgPool, Postgres, QueryBuilder};
use std::time::Duration;
use uuid::Uuid;

use crate::lifecycle::{LAST_EVIDENCE_LINE, STATE, STATE_JOINS};
use crate::retention::first_id_at;
use crate::sql_names::SqlName;
use crate::tenants::Scope;
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

/// Lists alerts, oldest first. Live states are read from the small outbox table; held,
/// failed and superseded ones from the narrow outcome table.
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
        // Held, failed and superseded alerts all have an outcome row, so their listing walks
        // the narrow outcome table; accepted ones mostly have none (their accepting attempt
        // row says so), so theirs reads each settled alert's state.
        let (from, state_is) = if state == Some(AlertState::Accepted) {
            (format!("alerts a {STATE_JOINS}"), format!("{STATE} = $1"))
        } else {
            (
                "alert_outcomes ao JOIN alerts a ON a.id = ao.alert_id".to_owned(),
                "ao.outcome = $1".to_owned(),
            )
        };
        format!(
            "SELECT a.id, t.name AS tenant, d.name AS destination, a.subject, a.occurrence, \
                a.revision, $1::text AS state, \
                (SELECT count(*)::int4 FROM delivery_attempts da \
                 WHERE da.alert_id = a.id AND da.kind = {send}) AS attempts, \
                a.created_at, NULL::timestamptz AS next_attempt_at, \
                {LAST_EVIDENCE_LINE} AS last_evidence \
         FROM {from} \
         JOIN tenants t ON t.id = a.tenant_id \
         JOIN destinations d ON d.id = a.destination_id \
         WHERE {state_is} \
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

/// What the outbox page lists. Empty fields do not filter.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AlertFilter {
    /// Tenant name.
    pub tenant: Option<String>,
    /// Destination name.
    pub destination: Option<String>,
    /// One state.
    pub state: Option<AlertState>,
    /// Approved at or after.
    pub from: Option<DateTime<Utc>>,
    /// Approved before.
    pub to: Option<DateTime<Utc>>,
    /// Text the subject contains (case-insensitive).
    pub subject: Option<String>,
}

/// Alert ids are UUIDv7 taken by the approving process, so ids walk in approval order and
/// a time range becomes a range of the primary key, which the list walks instead of the
/// whole table. The approving process's clock and the database's may differ: the id range
/// is widened by this much on both sides, and `created_at` decides exactly.
const CLOCK_MARGIN_HOURS: i64 = 24;

fn push_filter<'a>(
    query: &mut QueryBuilder<'a, Postgres>,
    scope: Scope<'a>,
    filter: &'a AlertFilter,
) {
    if let Some(tenants) = scope {
        query
            .push(" AND a.tenant_id = ANY(")
            .push_bind(tenants)
            .push(")");
    }
    // By id, not by a join on the name: the planner then walks `alerts_tenant_id_idx` in id
    // order, which stays quick for a tenant with few alerts among millions.
    if let Some(tenant) = &filter.tenant {
        query
            .push(" AND a.tenant_id = (SELECT id FROM tenants WHERE name = ")
            .push_bind(tenant)
            .push(")");
    }
    if let Some(destination) = &filter.destination {
        match single_tenant(scope) {
            // The one destination's id, found once before the walk: an equality the planner
            // can walk `alerts_tenant_destination_idx` in order by.
            Some(tenant) => query
                .push(" AND a.destination_id = (SELECT id FROM destinations WHERE tenant_id = ")
                .push_bind(tenant)
                .push(" AND name = ")
                .push_bind(destination)
                .push(")"),
            None => query
                .push(" AND a.destination_id IN (SELECT id FROM destinations WHERE name = ")
                .push_bind(destination)
                .push(")"),
        };
    }
    if let Some(state) = filter.state {
        if let Some(live) = state.live() {
            query.push(" AND o.status = ").push_bind(live);
        } else if state == AlertState::Accepted {
            // Said as "none of the other states", which is the same for an alert that has a
            // state: the planner then estimates it at nearly every alert, as it is (most
            // were delivered), and walks the alerts in the listing's order until a page is
            // full. Said as `= 'accepted'`, an expression it has no statistics for, it
            // estimates one alert in two hundred, and with a destination filter too it
            // read all of them, hashed and sorted.
            let others: Vec<&str> = AlertState::ALL
                .iter()
                .filter(|other| **other != state)
                .map(|other| other.as_str())
                .collect();
            query
                .push(format!(" AND {STATE} <> ALL("))
                .push_bind(others)
                .push(")");
        } else if let Some(outcome) = state.outcome() {
            query.push(" AND ao.outcome = ").push_bind(outcome);
        }
    }
    let margin = chrono::Duration::hours(CLOCK_MARGIN_HOURS);
    if let Some(from) = filter.from {
        query.push(" AND a.created_at >= ").push_bind(from);
        query
            .push(" AND a.id >= ")
            .push_bind(first_id_at(from - margin));
    }
    if let Some(to) = filter.to {
        query.push(" AND a.created_at < ").push_bind(to);
        query
            .push(" AND a.id < ")
            .push_bind(first_id_at(to + margin));
    }
    if let Some(subject) = &filter.subject {
        let escaped = subject
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        query
            .push(" AND a.subject ILIKE ")
            .push_bind(format!("%{escaped}%"))
            .push(" ESCAPE '\\'");
    }
}

/// The joins the state filter needs: [`STATE_JOINS`], with the table a state filter reads
/// (live states from the small outbox table, held, failed and superseded from the outcome
/// table) joined inner, so that the planner can walk that table's index in id order.
/// Accepted alerts mostly have no outcome row (their accepting attempt row says so), so
/// that filter keeps the outer joins and reads each alert's state.
fn push_from(query: &mut QueryBuilder<'_, Postgres>, filter: &AlertFilter) {
    let joins = match filter.state {
        Some(state) if state.is_live() => {
            STATE_JOINS.replacen("LEFT JOIN outbox", "JOIN outbox", 1)
        }
        Some(AlertState::Accepted) | None => STATE_JOINS.to_owned(),
        Some(_) => STATE_JOINS.replacen("LEFT JOIN alert_outcomes", "JOIN alert_outcomes", 1),
    };
    query.push(format!(
        " FROM alerts a JOIN tenants t ON t.id = a.tenant_id \
          JOIN destinations d ON d.id = a.destination_id \
          {joins} WHERE true"
    ));
}

/// One page of alerts matching `filter`, newest first, strictly older than `before`
/// (the last id of the previous page): keyset paging along the primary key, so a page
/// deep in history costs what the first one does.
pub async fn alerts_page(
    db: impl PgExecutor<'_>,
    scope: Scope<'_>,
    filter: &AlertFilter,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<OutboxEntry>, StoreError> {
    Ok(page_query("", scope, filter, before, limit)
        .build_query_as::<OutboxEntry>()
        .fetch_all(db)
        .await?)
}

/// [`alerts_page`] for a caller that must not hold a connection for long (the approval
/// API's listings): in a transaction of its own whose statements PostgreSQL stops after
/// `timeout` ([`StoreError::is_statement_timeout`] then tells), each planned for its own
/// values.
pub async fn alerts_page_within(
    pool: &PgPool,
    timeout: Duration,
    scope: Scope<'_>,
    filter: &AlertFilter,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<OutboxEntry>, StoreError> {
    let mut tx = pool.begin().await?;
    bound_listing(&mut tx, timeout).await?;
    let page = page_query("", scope, filter, before, limit)
        .build_query_as::<OutboxEntry>()
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(page)
}

/// Bounds the rest of the transaction for a listing: each statement is stopped after
/// `timeout`, and each is planned for its values (`force_custom_plan`): a plan made once
/// for any subject text estimates every text as rare, and may take the trigram index for
/// one that half the tenant's alerts hold, reading all of them, where a plan for that
/// text walks the tenant's newest alerts and stops after a page. Planning a listing takes
/// about a millisecond.
async fn bound_listing(conn: &mut PgConnection, timeout: Duration) -> Result<(), StoreError> {
    sqlx::query(
        "SELECT set_config('statement_timeout', $1, true), \
                set_config('plan_cache_mode', 'force_custom_plan', true)",
    )
    .bind(format!("{}ms", timeout.as_millis().max(1)))
    .execute(conn)
    .await?;
    Ok(())
}

/// The page statement, after `head` (empty, or `EXPLAIN ...` for the plan tests).
fn page_query<'a>(
    head: &str,
    scope: Scope<'a>,
    filter: &'a AlertFilter,
    before: Option<Uuid>,
    limit: i64,
) -> QueryBuilder<'a, Postgres> {
    let mut query = QueryBuilder::<Postgres>::new(format!(
        "{head}SELECT a.id, t.name AS tenant, d.name AS destination, a.subject, a.occurrence, \
                a.revision, {STATE} AS state, \
                COALESCE(o.attempts, (SELECT count(*)::int4 FROM delivery_attempts da \
                                      WHERE da.alert_id = a.id AND da.kind = "
    ));
    query.push_bind(AttemptKind::Send).push(format!(
        ")) AS attempts, a.created_at, o.next_attempt_at, {LAST_EVIDENCE_LINE} AS last_evidence"
    ));
    push_from(&mut query, filter);
    push_filter(&mut query, scope, filter);
    if let Some(before) = before {
        query.push(" AND a.id < ").push_bind(before);
    }
    // Within one tenant, newest first is (tenant, id) descending, and said so it is the
    // order of the tenant's own indexes, which the planner walks and leaves after a page.
    // Said as `a.id DESC`, the primary key has that order too: for a tenant that holds
    // most of the table, the planner walks it instead, through every newer alert of every
    // other tenant. (The tenant is compared as `= ANY(...)`, which the planner does not
    // take as fixing the column, so the primary key cannot give this order.)
    if single_tenant(scope).is_some() {
        query.push(" ORDER BY a.tenant_id DESC, a.id DESC LIMIT ");
    } else {
        query.push(" ORDER BY a.id DESC LIMIT ");
    }
    query.push_bind(limit);
    query
}

/// The tenant of a scope that holds exactly one (the approval API's listings, an account
/// granted one tenant).
fn single_tenant(scope: Scope<'_>) -> Option<Uuid> {
    match scope {
        Some([tenant]) => Some(*tenant),
        _ => None,
    }
}

/// Whether a subject search for `text` can be looked up in the trigram index
/// (`alerts_subject_trgm_idx`): only when it holds three letters or digits in a row.
/// `pg_trgm` takes its trigrams from the words of a text (runs of letters and digits);
/// from a shorter text it takes none, or only a word's edge padded with spaces, which
/// nearly every subject has, and the search then reads all of a tenant's alerts.
pub fn subject_search_is_indexed(text: &str) -> bool {
    let mut run = 0;
    for c in text.chars() {
        run = if c.is_alphanumeric() { run + 1 } else { 0 };
        if run == 3 {
            return true;
        }
    }
    false
}

/// How many alerts match `filter` (the dry run of a bulk replay).
pub async fn count_alerts(
    db: impl PgExecutor<'_>,
    scope: Scope<'_>,
    filter: &AlertFilter,
) -> Result<i64, StoreError> {
    let mut query = QueryBuilder::<Postgres>::new("SELECT count(*)");
    push_from(&mut query, filter);
    push_filter(&mut query, scope, filter);
    Ok(query.build_query_scalar::<i64>().fetch_one(db).await?)
}

#[cfg(test)]
mod tests;
