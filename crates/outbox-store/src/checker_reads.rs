//! Alerts as committed, read straight from the tables (never through the dispatcher's
//! statements): every alert with its state and evidence (and, in an ordered lane, its
//! place there), identities committed more than once, and the stored messages of email
//! alerts. The fault suite's referee compares these with what the destinations received.

use outbox_core::{AlertState, DestinationKind, OnHeadFailed, Ordering};
use sqlx::PgPool;
use uuid::Uuid;

use crate::lane_key::LANE_KEY;
use crate::lifecycle::{evidence_trail, SETTLED, STATE, STATE_JOINS};
use crate::sql_names::SqlName;
use crate::StoreError;

/// One committed alert as the checker sees it.
#[derive(Debug, Clone)]
pub struct CommittedAlert {
    /// Notification id (the key destinations see).
    pub id: Uuid,
    /// Destination name.
    pub destination: String,
    /// Its state, by the store's one definition: the outbox row's status, else its outcome
    /// row's, else `accepted` where its newest attempt row says so (`None` when none of
    /// these holds).
    pub state: Option<AlertState>,
    /// Hex SHA-256 of the bytes every request for it must carry: the payload's, or for
    /// an email API (a webhook with a body template) the stored rendered request body's.
    pub payload_sha256: String,
    /// Flagged as possibly delivered twice.
    pub possible_duplicate: bool,
    /// Whether it has an outbox row.
    pub queued: bool,
    /// Whether it came to rest: an outcome row, or an attempt row that accepted it.
    pub settled: bool,
    /// Evidence lines it has.
    pub events: i64,
    /// Retention removed its payload and evidence (so no evidence line is expected).
    pub pruned: bool,
    /// Its place in an ordered lane: `None` when it was approved into none, or when its
    /// destination no longer orders per key (its lanes were dissolved).
    pub lane: Option<LanePlace>,
}

/// Where a committed alert stands in its ordered lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LanePlace {
    /// The lane's destination (the alert's).
    pub destination_id: Uuid,
    /// The lane's ordering key: the approval's, or the alert's subject when it gave none.
    pub key: String,
    /// Its position in the lane (`lane_seq`): the order its approval committed in.
    pub seq: i64,
    /// The unreleased alert of the lane its outbox row waits behind (`outbox.lane_after`):
    /// while set the row is not due. `None` once it is due, or when it has left the queue.
    pub waits_behind: Option<Uuid>,
    /// The destination lets the lane go on past a head that failed for good
    /// (`on_head_failed = skip`).
    pub skips_failed: bool,
}

#[derive(Debug, sqlx::FromRow)]
struct CommittedRow {
    id: Uuid,
    destination: String,
    state: Option<String>,
    payload_sha256: String,
    possible_duplicate: bool,
    queued: bool,
    settled: bool,
    events: i64,
    pruned: bool,
    lane_destination: Option<Uuid>,
    lane_key: Option<String>,
    lane_seq: Option<i64>,
    lane_after: Option<Uuid>,
    skips_failed: bool,
}

/// Every committed alert, with its place in its ordered lane when it has one.
pub async fn committed_alerts(pool: &PgPool) -> Result<Vec<CommittedAlert>, StoreError> {
    let rows = sqlx::query_as::<_, CommittedRow>(&format!(
        "SELECT a.id, d.name AS destination, {STATE} AS state, \
                COALESCE(CASE WHEN d.body_template IS NOT NULL THEN \
                             (SELECT r.sha256 FROM rendered_messages r WHERE r.alert_id = a.id) END, \
                         encode(a.payload_sha256, 'hex')) AS payload_sha256, \
                a.possible_duplicate, \
                o.alert_id IS NOT NULL AS queued, {SETTLED} AS settled, \
                (SELECT count(*) FROM alert_evidence e WHERE e.alert_id = a.id) AS events, \
                a.pruned_at IS NOT NULL AS pruned, \
                CASE WHEN {ordered} THEN a.destination_id END AS lane_destination, \
                CASE WHEN {ordered} THEN {LANE_KEY} END AS lane_key, \
                CASE WHEN {ordered} THEN a.lane_seq END AS lane_seq, \
                o.lane_after, d.on_head_failed = {skip} AS skips_failed \
         FROM alerts a JOIN destinations d ON d.id = a.destination_id \
         {STATE_JOINS}",
        ordered = format!(
            "a.lane_seq IS NOT NULL AND d.ordering = {}",
            Ordering::PerKey.sql()
        ),
        skip = OnHeadFailed::Skip.sql(),
    ))
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|row| {
            Ok(CommittedAlert {
                id: row.id,
                destination: row.destination,
                state: crate::lifecycle::parse_optional(row.state)?,
                payload_sha256: row.payload_sha256,
                possible_duplicate: row.possible_duplicate,
                queued: row.queued,
                settled: row.settled,
                events: row.events,
                pruned: row.pruned,
                lane: match (row.lane_destination, row.lane_key, row.lane_seq) {
                    (Some(destination_id), Some(key), Some(seq)) => Some(LanePlace {
                        destination_id,
                        key,
                        seq,
                        waits_behind: row.lane_after,
                        skips_failed: row.skips_failed,
                    }),
                    _ => None,
                },
            })
        })
        .collect()
}

/// Identities (with revision) that have more than one alert, with how many.
pub async fn duplicated_identities(
    pool: &PgPool,
) -> Result<Vec<(String, String, i64)>, StoreError> {
    let rows = sqlx::query_as::<_, (String, String, i64)>(
        "SELECT subject, occurrence || ' rev ' || revision, count(*) FROM alerts \
         GROUP BY tenant_id, subject, occurrence, destination_id, revision \
         HAVING count(*) > 1",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// An alert's evidence lines, oldest first, for the checker's report.
pub async fn evidence_lines(pool: &PgPool, alert_id: Uuid) -> Result<Vec<String>, StoreError> {
    Ok(evidence_trail(pool, alert_id)
        .await?
        .into_iter()
        .map(|e| format!("{} {} {}", e.at.format("%H:%M:%S%.3f"), e.to_state, e.line))
        .collect())
}

/// An email alert's stored message, as an SMTP inbox must have received it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredMessage {
    /// The alert.
    pub alert_id: Uuid,
    /// Its `Message-ID`, without the angle brackets (as an inbox records it).
    pub message_id: String,
    /// Hex SHA-256 of the message data as a relay receives it, less the trace context
    /// fields each attempt puts at its top: the stored bytes and the CRLF that ends the
    /// data before the final dot.
    pub wire_sha256: String,
}

/// Every email alert's stored message (messages of email destinations only: a webhook's
/// rendered request body is not mail).
pub async fn stored_messages(pool: &PgPool) -> Result<Vec<StoredMessage>, StoreError> {
    let rows = sqlx::query_as::<_, StoredMessage>(
        "SELECT r.alert_id, btrim(r.message_id, '<>') AS message_id, \
                encode(sha256(r.bytes || '\\x0d0a'::bytea), 'hex') AS wire_sha256 \
         FROM rendered_messages r JOIN alerts a ON a.id = r.alert_id \
         JOIN destinations d ON d.id = a.destination_id \
         WHERE d.kind = $1",
    )
    .bind(DestinationKind::Email)
    .fetch_all(pool)
    .await?;
    Ok(rows)
}
