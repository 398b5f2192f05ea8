//! The audit log: what operators did, read as one log (their lines in the alerts' evidence
//! and the log's own lines: actions that leave no evidence line, failed sign-ins), keyset
//! paged and limited to an account's tenant grant ([`Scope`]).

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::tenants::Scope;
use crate::StoreError;

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
