//! What the operator console reads beyond `outboxctl`'s views: a keyset-paged, filtered
//! list of alerts, per-destination figures of the last hour, recent errors, the audit log,
//! and its bulk replays' progress. Every read takes the account's tenant grant
//! ([`Scope`]) and applies it in SQL, so a limited account cannot read past it whatever
//! it asks for. Actions are not here: the console acts through [`crate::operator`].

use chrono::{DateTime, Utc};
use outbox_core::{AlertState, AttemptKind, AttemptOutcome, BulkReplayState};
use sqlx::{PgExecutor, Postgres, QueryBuilder};
use uuid::Uuid;

use crate::dispatch::DUE;
use crate::lifecycle::{LAST_EVIDENCE_LINE, STATE, STATE_JOINS};
use crate::operator::first_id_at;
use crate::outbox::OutboxEntry;
use crate::sql_names::sql_list;
use crate::StoreError;

/// The tenants an account may see: `None` for every tenant.
pub type Scope<'a> = Option<&'a [Uuid]>;

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
        query
            .push(" AND a.destination_id IN (SELECT id FROM destinations WHERE name = ")
            .push_bind(destination)
            .push(")");
    }
    if let Some(state) = filter.state {
        if let Some(live) = state.live() {
            query.push(" AND o.status = ").push_bind(live);
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
/// (live states from the small outbox table, settled ones from the outcome table) joined
/// inner, so that the planner can walk that table's index in id order.
fn push_from(query: &mut QueryBuilder<'_, Postgres>, filter: &AlertFilter) {
    let joins = match filter.state {
        Some(state) if state.is_live() => {
            STATE_JOINS.replacen("LEFT JOIN outbox", "JOIN outbox", 1)
        }
        Some(_) => STATE_JOINS.replacen("LEFT JOIN alert_outcomes", "JOIN alert_outcomes", 1),
        None => STATE_JOINS.to_owned(),
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
    let mut query = QueryBuilder::<Postgres>::new(format!(
        "SELECT a.id, t.name AS tenant, d.name AS destination, a.subject, a.occurrence, \
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
    query.push(" ORDER BY a.id DESC LIMIT ").push_bind(limit);
    Ok(query.build_query_as::<OutboxEntry>().fetch_all(db).await?)
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

/// The id of the tenant called `name`, if there is one.
pub async fn tenant_id(db: impl PgExecutor<'_>, name: &str) -> Result<Option<Uuid>, StoreError> {
    Ok(
        sqlx::query_scalar::<_, Uuid>("SELECT id FROM tenants WHERE name = $1")
            .bind(name)
            .fetch_optional(db)
            .await?,
    )
}

/// Tenants by name within a scope, for the filter's choices.
pub async fn tenant_names(
    db: impl PgExecutor<'_>,
    scope: Scope<'_>,
) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar::<_, String>(
        "SELECT name FROM tenants WHERE $1::uuid[] IS NULL OR id = ANY($1) ORDER BY name",
    )
    .bind(scope)
    .fetch_all(db)
    .await?)
}

/// A destination's last hour, and whether it is on.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct DestinationHealth {
    /// Its id.
    pub id: Uuid,
    /// Its tenant's id.
    pub tenant_id: Uuid,
    /// Its tenant's name.
    pub tenant: String,
    /// Its name.
    pub name: String,
    /// Whether alerts are delivered to it.
    pub enabled: bool,
    /// Why it is off (`disabled by NAME`, the destination's 410, or `disabled
    /// automatically: ...` after failing for its window).
    pub disabled_reason: Option<String>,
    /// When it was disabled automatically for failing, while it stays off for that.
    pub auto_disabled_at: Option<DateTime<Utc>>,
    /// Since when every send has failed, as the dispatchers last reported (`None` while
    /// the latest send was accepted).
    pub failing_since: Option<DateTime<Utc>>,
    /// Its failing window in seconds (`None`: never disabled automatically).
    pub disable_after_failing_secs: Option<i64>,
    /// Send attempts finished in the last hour.
    pub attempts: i64,
    /// Of those, accepted.
    pub accepted: i64,
    /// Of those, neither accepted nor uncertain (rejected, not processed, not sent).
    pub errors: i64,
    /// Uncertain ones.
    pub uncertain: i64,
    /// Attempts per five minutes over the last hour, oldest first (12 buckets).
    pub attempts_by_bucket: Vec<i64>,
    /// Accepted per five minutes over the last hour, oldest first (12 buckets).
    pub accepted_by_bucket: Vec<i64>,
    /// Age in seconds of its oldest due row (pending or uncertain), if any.
    pub oldest_due_age_secs: Option<f64>,
}

/// Every destination in scope with its last hour of send attempts, by tenant and name.
pub async fn destination_health(
    db: impl PgExecutor<'_>,
    scope: Scope<'_>,
) -> Result<Vec<DestinationHealth>, StoreError> {
    Ok(sqlx::query_as::<_, DestinationHealth>(&format!(
        "WITH recent AS ( \
             SELECT a.destination_id, da.outcome, \
                    LEAST(11, GREATEST(0, floor(extract(epoch FROM da.finished_at - (now() - interval '1 hour')) / 300)))::int AS bucket \
             FROM delivery_attempts da JOIN alerts a ON a.id = da.alert_id \
             WHERE da.kind = $2 AND da.finished_at > now() - interval '1 hour' \
         ), per_bucket AS ( \
             SELECT destination_id, bucket, count(*) AS attempts, \
                    count(*) FILTER (WHERE outcome = $3) AS accepted, \
                    count(*) FILTER (WHERE outcome NOT IN ($3, $4)) AS errors, \
                    count(*) FILTER (WHERE outcome = $4) AS uncertain \
             FROM recent GROUP BY 1, 2 \
         ) \
         SELECT d.id, d.tenant_id, t.name AS tenant, d.name, d.enabled, d.disabled_reason, \
                CASE WHEN NOT d.enabled THEN h.auto_disabled_at END AS auto_disabled_at, \
                h.failing_since, \
                ceil(extract(epoch FROM d.disable_after_failing))::int8 AS disable_after_failing_secs, \
                COALESCE((SELECT sum(p.attempts) FROM per_bucket p WHERE p.destination_id = d.id), 0)::int8 AS attempts, \
                COALESCE((SELECT sum(p.accepted) FROM per_bucket p WHERE p.destination_id = d.id), 0)::int8 AS accepted, \
                COALESCE((SELECT sum(p.errors) FROM per_bucket p WHERE p.destination_id = d.id), 0)::int8 AS errors, \
                COALESCE((SELECT sum(p.uncertain) FROM per_bucket p WHERE p.destination_id = d.id), 0)::int8 AS uncertain, \
                ARRAY(SELECT COALESCE(p.attempts, 0) FROM generate_series(0, 11) b \
                      LEFT JOIN per_bucket p ON p.destination_id = d.id AND p.bucket = b ORDER BY b) \
                    AS attempts_by_bucket, \
                ARRAY(SELECT COALESCE(p.accepted, 0) FROM generate_series(0, 11) b \
                      LEFT JOIN per_bucket p ON p.destination_id = d.id AND p.bucket = b ORDER BY b) \
                    AS accepted_by_bucket, \
                (SELECT extract(epoch FROM now() - min(o.next_attempt_at))::float8 FROM outbox o \
                 WHERE o.destination_id = d.id AND o.status IN ({due}) \
                   AND o.next_attempt_at <= now()) AS oldest_due_age_secs \
         FROM destinations d JOIN tenants t ON t.id = d.tenant_id \
         LEFT JOIN destination_health h ON h.destination_id = d.id \
         WHERE $1::uuid[] IS NULL OR d.tenant_id = ANY($1) \
         ORDER BY t.name, d.name",
        due = sql_list(DUE),
    ))
    .bind(scope)
    .bind(AttemptKind::Send)
    .bind(AttemptOutcome::Accepted)
    .bind(AttemptOutcome::Uncertain)
    .fetch_all(db)
    .await?)
}

/// A recent failed or uncertain attempt at a destination.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct RecentError {
    /// The destination.
    pub destination_id: Uuid,
    /// The alert.
    pub alert_id: Uuid,
    /// When it finished.
    pub finished_at: DateTime<Utc>,
    /// Its outcome.
    pub outcome: AttemptOutcome,
    /// The destination's HTTP status, if it answered.
    pub http_status: Option<i16>,
    /// The kind of failure.
    pub error_class: Option<String>,
    /// The start of the destination's answer (untrusted text).
    pub response_excerpt: Option<String>,
}

/// The last `per_destination` attempts of the last day that were not accepted, per
/// destination in scope, newest first.
pub async fn recent_errors(
    db: impl PgExecutor<'_>,
    scope: Scope<'_>,
    per_destination: i64,
) -> Result<Vec<RecentError>, StoreError> {
    Ok(sqlx::query_as::<_, RecentError>(
        "SELECT destination_id, alert_id, finished_at, outcome, http_status, error_class, \
                response_excerpt \
         FROM ( \
             SELECT a.destination_id, da.alert_id, da.finished_at, da.outcome, da.http_status, \
                    da.error_class, da.response_excerpt, \
                    row_number() OVER (PARTITION BY a.destination_id ORDER BY da.id DESC) AS n \
             FROM delivery_attempts da JOIN alerts a ON a.id = da.alert_id \
             WHERE da.finished_at > now() - interval '1 day' AND da.kind = $3 \
               AND da.outcome <> $4 \
               AND ($1::uuid[] IS NULL OR a.tenant_id = ANY($1)) \
         ) e WHERE n <= $2 ORDER BY destination_id, finished_at DESC",
    )
    .bind(scope)
    .bind(per_destination)
    .bind(AttemptKind::Send)
    .bind(AttemptOutcome::Accepted)
    .fetch_all(db)
    .await?)
}

/// One line of the audit log.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct AuditEntry {
    /// When.
    pub at: DateTime<Utc>,
    /// Who: `console:NAME` (a console account), `cli:NAME` (`outboxctl`),
    /// `dispatcher:WORKER`; lines written before actors were told apart say `NAME` alone.
    pub operator: String,
    /// What: the state an alert went to, or an action of the audit log's own.
    pub action: String,
    /// On what: an alert id, or a destination or bulk replay.
    pub target: String,
    /// The alert, when it was an alert action.
    pub alert_id: Option<Uuid>,
    /// The evidence line or the operator's note.
    pub note: String,
    /// How many times it happened (failed sign-ins are counted on one line per name,
    /// address and window); 1 for everything else.
    pub count: i32,
    /// Where the line is kept: 2 for the evidence, 1 for console actions.
    pub source: i32,
    /// Its id there.
    pub seq: i64,
}

impl AuditEntry {
    /// The cursor of the page after this line.
    pub fn cursor(&self) -> AuditCursor {
        AuditCursor {
            at: self.at,
            source: self.source,
            seq: self.seq,
        }
    }
}

/// Where an audit page starts: strictly after this line in the log's order (time, then
/// source, then id, all descending). Written in URLs as `MICROS-SOURCE-ID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditCursor {
    /// The line's time.
    pub at: DateTime<Utc>,
    /// The line's source (see [`AuditEntry::source`]).
    pub source: i32,
    /// The line's id in its source.
    pub seq: i64,
}

impl std::fmt::Display for AuditCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}-{}-{}",
            self.at.timestamp_micros(),
            self.source,
            self.seq
        )
    }
}

impl std::str::FromStr for AuditCursor {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("`{text}` is not an audit page cursor");
        let mut parts = text.splitn(3, '-');
        let (Some(micros), Some(source), Some(seq)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let at = micros
            .parse::<i64>()
            .ok()
            .and_then(DateTime::from_timestamp_micros)
            .ok_or_else(bad)?;
        let source = source
            .parse::<i32>()
            .ok()
            .filter(|s| matches!(s, 1 | 2))
            .ok_or_else(bad)?;
        let seq = seq.parse::<i64>().map_err(|_| bad())?;
        Ok(AuditCursor { at, source, seq })
    }
}

/// One page of what operators did, newest first, strictly after `after` (the cursor of
/// the previous page's last line): operators' lines in the alerts' evidence (the
/// console's and `outboxctl --actor`'s), and the audit log's own lines ([`record_audit`],
/// [`record_failed_sign_in`], destinations disabled automatically). `operator` keeps one
/// operator's (as recorded: `console:alice`). A limited `scope` sees a line of the log
/// only when it covers every tenant the line concerns.
///
/// Keyset paging: each source walks its own index on (at, id) from the cursor on, and
/// the two are merged by (at, source, id); so a page deep in the history costs what the
/// first one does, and a page's URL shows the same lines later (newer lines do not push
/// them along, as with OFFSET).
pub async fn audit(
    db: impl PgExecutor<'_>,
    scope: Scope<'_>,
    operator: Option<&str>,
    after: Option<AuditCursor>,
    limit: i64,
) -> Result<Vec<AuditEntry>, StoreError> {
    // The `at <= cursor` conjunct lets each index scan start at the cursor; the rest of
    // the condition orders lines of the same time. Written only on pages after the
    // first, so that each shape gets a plan of its own.
    let (after_events, after_console) = if after.is_some() {
        (
            "AND e.at <= $4 AND (e.at < $4 OR 2 < $5 OR (2 = $5 AND e.id < $6))",
            "AND c.at <= $4 AND (c.at < $4 OR 1 < $5 OR (1 = $5 AND c.id < $6))",
        )
    } else {
        (
            "AND $4::timestamptz IS NULL AND $5::int4 IS NULL AND $6::int8 IS NULL",
            "",
        )
    };
    let sql = format!(
        "(SELECT e.at, substr(e.actor, 10) AS operator, e.to_state AS action, \
                 e.alert_id::text AS target, e.alert_id, e.line AS note, 1 AS count, \
                 2 AS source, e.id AS seq \
          FROM alert_events e \
          WHERE e.actor LIKE 'operator:%' \
            AND ($2::text IS NULL OR e.actor = 'operator:' || $2) \
            AND ($1::uuid[] IS NULL \
                 OR EXISTS (SELECT 1 FROM alerts a WHERE a.id = e.alert_id AND a.tenant_id = ANY($1))) \
            {after_events} \
          ORDER BY e.at DESC, e.id DESC LIMIT $3) \
         UNION ALL \
         (SELECT c.at, c.operator, c.action, c.target, NULL::uuid, c.note, c.count, \
                 1 AS source, c.id AS seq \
          FROM console_audit c \
          WHERE ($2::text IS NULL OR c.operator = $2) \
            AND ($1::uuid[] IS NULL OR COALESCE(c.tenant_ids, ARRAY[c.tenant_id]) <@ $1) \
            {after_console} \
          ORDER BY c.at DESC, c.id DESC LIMIT $3) \
         ORDER BY at DESC, source DESC, seq DESC LIMIT $3"
    );
    Ok(sqlx::query_as::<_, AuditEntry>(&sql)
        .bind(scope)
        .bind(operator)
        .bind(limit)
        .bind(after.map(|c| c.at))
        .bind(after.map(|c| c.source))
        .bind(after.map(|c| c.seq))
        .fetch_all(db)
        .await?)
}

/// Records an operator's action that leaves no line in an alert's evidence (the
/// console's and `outboxctl`'s), by `operator` as it is to be read (`console:NAME`,
/// `cli:NAME`). `tenants` are the tenants it concerns: an account limited to some tenants
/// sees the line only when its grant covers all of them; `None`, no tenant in particular
/// (accounts of every tenant see it).
pub async fn record_audit(
    db: impl PgExecutor<'_>,
    operator: &str,
    tenants: Option<&[Uuid]>,
    action: &str,
    target: &str,
    note: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO console_audit (operator, tenant_id, tenant_ids, action, target, note) \
         VALUES ($1, CASE WHEN cardinality($2::uuid[]) = 1 THEN $2[1] END, $2, $3, $4, $5)",
    )
    .bind(operator)
    .bind(tenants)
    .bind(action)
    .bind(target)
    .bind(note)
    .execute(db)
    .await?;
    Ok(())
}

/// The action of a failed sign-in's line.
pub const FAILED_SIGN_IN: &str = "sign-in failed";

/// Counts a failed (or refused) sign-in as `operator` (`console:NAME`, the name as typed)
/// from `address`: one line per name, address and `window` (aligned on the epoch), whose
/// count goes up, so a flood of guesses cannot grow the log.
pub async fn record_failed_sign_in(
    db: impl PgExecutor<'_>,
    operator: &str,
    address: &str,
    window: std::time::Duration,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO console_audit (operator, action, target, window_start, last_at) \
         VALUES ($1, $2, $3, \
                 to_timestamp(floor(extract(epoch FROM now()) / $4) * $4), now()) \
         ON CONFLICT (operator, target, window_start) WHERE action = 'sign-in failed' \
         DO UPDATE SET count = console_audit.count + 1, last_at = now()",
    )
    .bind(operator)
    .bind(FAILED_SIGN_IN)
    .bind(address)
    .bind(window.as_secs_f64().max(1.0))
    .execute(db)
    .await?;
    Ok(())
}

/// A bulk replay and how far it has come.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct BulkReplay {
    /// Its id.
    pub id: Uuid,
    /// Who started it.
    pub operator: String,
    /// Their note, on every replayed alert's evidence.
    pub note: String,
    /// The tenants it may touch (`None`: every tenant).
    pub tenant_ids: Option<Vec<Uuid>>,
    /// The selection.
    #[sqlx(json)]
    pub filter: AlertFilter,
    /// Where it stands.
    pub state: BulkReplayState,
    /// How many matched when it started (the dry run's count).
    pub planned: i32,
    /// Replayed so far.
    pub replayed: i32,
    /// Skipped so far (another operator or a dispatcher got there first).
    pub skipped: i32,
    /// The last alert handled.
    pub cursor_id: Option<Uuid>,
    /// When it started.
    pub created_at: DateTime<Utc>,
    /// When it last moved.
    pub updated_at: DateTime<Utc>,
}

/// Records a bulk replay, running.
pub async fn create_bulk_replay(
    db: impl PgExecutor<'_>,
    operator: &str,
    note: &str,
    scope: Scope<'_>,
    filter: &AlertFilter,
    planned: i64,
) -> Result<Uuid, StoreError> {
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO console_bulk_replays (id, operator, note, tenant_ids, filter, state, planned) \
         VALUES ($1, $2, $3, $4, $5, $7, $6)",
    )
    .bind(id)
    .bind(operator)
    .bind(note)
    .bind(scope)
    .bind(sqlx::types::Json(filter))
    .bind(i32::try_from(planned).unwrap_or(i32::MAX))
    .bind(BulkReplayState::Running)
    .execute(db)
    .await?;
    Ok(id)
}

/// A bulk replay by id.
pub async fn bulk_replay(
    db: impl PgExecutor<'_>,
    id: Uuid,
) -> Result<Option<BulkReplay>, StoreError> {
    Ok(sqlx::query_as::<_, BulkReplay>(
        "SELECT id, operator, note, tenant_ids, filter, state, planned, replayed, skipped, \
                cursor_id, created_at, updated_at \
         FROM console_bulk_replays WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(db)
    .await?)
}

/// Takes a running bulk replay nobody works on (none started, or its worker's lease ran
/// out: that process stopped or died), leasing it for `lease`.
pub async fn take_bulk_replay(
    db: impl PgExecutor<'_>,
    lease: std::time::Duration,
) -> Result<Option<BulkReplay>, StoreError> {
    Ok(sqlx::query_as::<_, BulkReplay>(
        "WITH next AS ( \
             SELECT id FROM console_bulk_replays \
             WHERE state = $2 AND (lease_until IS NULL OR lease_until < now()) \
             ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED \
         ) \
         UPDATE console_bulk_replays b SET lease_until = now() + make_interval(secs => $1) \
         FROM next WHERE b.id = next.id \
         RETURNING b.id, b.operator, b.note, b.tenant_ids, b.filter, b.state, b.planned, \
                   b.replayed, b.skipped, b.cursor_id, b.created_at, b.updated_at",
    )
    .bind(lease.as_secs_f64())
    .bind(BulkReplayState::Running)
    .fetch_optional(db)
    .await?)
}

/// Records a batch's progress and renews the lease; returns the replay's state now
/// (stopped when an operator stopped it meanwhile).
pub async fn advance_bulk_replay(
    db: impl PgExecutor<'_>,
    id: Uuid,
    replayed: i32,
    skipped: i32,
    cursor_id: Option<Uuid>,
    finished: bool,
    lease: std::time::Duration,
) -> Result<BulkReplayState, StoreError> {
    Ok(sqlx::query_scalar::<_, BulkReplayState>(
        "UPDATE console_bulk_replays SET replayed = replayed + $2, skipped = skipped + $3, \
             cursor_id = COALESCE($4, cursor_id), updated_at = now(), \
             state = CASE WHEN $5 AND state = $7 THEN $8 ELSE state END, \
             lease_until = CASE WHEN $5 OR state <> $7 THEN NULL \
                                ELSE now() + make_interval(secs => $6) END \
         WHERE id = $1 RETURNING state",
    )
    .bind(id)
    .bind(replayed)
    .bind(skipped)
    .bind(cursor_id)
    .bind(finished)
    .bind(lease.as_secs_f64())
    .bind(BulkReplayState::Running)
    .bind(BulkReplayState::Done)
    .fetch_one(db)
    .await?)
}

/// Stops a running bulk replay, or sets a stopped one running again (it resumes after its
/// cursor). Returns `false` when it was not in the state to change from. The lease stays:
/// a worker in the middle of a batch finishes it, sees the state, and lets go.
pub async fn set_bulk_replay_running(
    db: impl PgExecutor<'_>,
    id: Uuid,
    running: bool,
) -> Result<bool, StoreError> {
    let (from, to) = if running {
        (BulkReplayState::Stopped, BulkReplayState::Running)
    } else {
        (BulkReplayState::Running, BulkReplayState::Stopped)
    };
    let changed = sqlx::query(
        "UPDATE console_bulk_replays SET state = $3, updated_at = now() \
         WHERE id = $1 AND state = $2",
    )
    .bind(id)
    .bind(from)
    .bind(to)
    .execute(db)
    .await?;
    Ok(changed.rows_affected() == 1)
}
