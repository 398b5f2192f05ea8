//! Where an alert stands: the one definition of its state that every reader joins, and
//! its standing as an operator's transition reads it under its locks.

use outbox_core::{AlertState, AttemptKind, LiveStatus, Ordering, Outcome};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::lane_key::LANE_KEY;
use crate::sql_names::{SqlName, SqlText};
use crate::StoreError;

/// How every reader finds an alert's state, joined to an alert aliased `a`: its live
/// outbox row (`o`), its outcome row (`ao`), and, for an alert that has neither, the
/// attempt row that accepted it (`aa`). With [`STATE`], the one definition of an alert's
/// state (the view `alert_states` is the same joins, for people at a psql prompt).
///
/// **Where an alert came to rest is always a record that says so.** An alert a
/// dispatcher's attempt got accepted has no outcome row: the attempt row says `accepted`
/// (its `to_state`), with the destination's reference and when it finished, and that row
/// is the only write its acceptance needs (`COMPLETE_BATCH`). Every other resting place
/// (held, failed, superseded, and an acceptance an operator established) is an outcome row.
///
/// The rule is stated here once: `aa` is the alert's newest attempt row that carries a
/// state, kept only if that state is `accepted`. So an alert whose outbox row were lost
/// with no such attempt has no state at all, which the checker reports, rather than
/// reading as delivered; and the expressions below are plain `COALESCE`s. The attempt is
/// looked up only for an alert with neither row (a one-time filter on the lateral
/// subquery), by the attempts' primary key `(alert_id, id)`, newest first; its `LIMIT`
/// keeps the planner from filtering before it picks the newest.
pub(crate) static STATE_JOINS: SqlText = SqlText::new(|| {
    format!(
        "LEFT JOIN outbox o ON o.alert_id = a.id \
         LEFT JOIN alert_outcomes ao ON ao.alert_id = a.id \
         LEFT JOIN LATERAL (SELECT newest.* FROM ( \
             SELECT fa.to_state, fa.destination_reference, fa.finished_at \
             FROM delivery_attempts fa \
             WHERE o.alert_id IS NULL AND ao.alert_id IS NULL \
               AND fa.alert_id = a.id AND fa.to_state IS NOT NULL \
             ORDER BY fa.id DESC LIMIT 1) newest \
             WHERE newest.to_state = {accepted}) aa ON true",
        accepted = AlertState::Accepted.sql(),
    )
});

/// Where an alert came to rest, over [`STATE_JOINS`]: its outcome row's outcome, else
/// `accepted` from the attempt that accepted it; NULL while it is live (and for an alert
/// with no record of either, an anomaly).
pub(crate) const OUTCOME: &str = "COALESCE(ao.outcome, aa.to_state)";

/// An alert's state over [`STATE_JOINS`]: the live status while it has an outbox row, else
/// its [`OUTCOME`]; NULL for an alert with neither (an anomaly).
pub(crate) const STATE: &str = "COALESCE(o.status, ao.outcome, aa.to_state)";

/// Whether the alert has come to rest, over [`STATE_JOINS`]: an outcome row, or an attempt
/// row that accepted it. Never NULL (an alert with neither is not settled), so that it
/// can be read as a plain boolean.
pub(crate) const SETTLED: &str = "(ao.alert_id IS NOT NULL OR aa.to_state IS NOT NULL)";

/// When a settled alert came to rest, over [`STATE_JOINS`] (NULL while it is live).
pub(crate) const SETTLED_AT: &str = "COALESCE(ao.settled_at, aa.finished_at)";

/// The destination's reference for a settled alert, over [`STATE_JOINS`].
pub(crate) const DESTINATION_REFERENCE: &str =
    "COALESCE(ao.destination_reference, aa.destination_reference)";

/// An alert as an operator's transition finds it, read under its locks.
#[derive(Debug, Clone)]
pub struct Standing {
    /// The alert.
    pub alert_id: Uuid,
    /// Its outbox row's status, while it has one.
    pub live_status: Option<LiveStatus>,
    /// Where it came to rest, once it left the queue.
    pub outcome: Option<Outcome>,
    /// Its destination.
    pub destination_id: Uuid,
    /// The destination's reference, if it gave one.
    pub destination_reference: Option<String>,
    /// The highest send attempt recorded.
    pub last_attempt: i32,
    /// The identity's latest revision, when it is not this alert.
    pub latest_revision: Option<Uuid>,
    /// Retention removed its payload (`outboxctl prune`).
    pub pruned: bool,
    /// It holds up its ordered lane: it has not been released, and later alerts of the
    /// lane wait behind it (or the next one will).
    pub blocks_lane: bool,
    /// It has a place in a lane of a destination that orders per key.
    pub in_ordered_lane: bool,
}

#[derive(Debug, sqlx::FromRow)]
struct StandingRow {
    outcome: Option<String>,
    destination_id: Uuid,
    destination_reference: Option<String>,
    last_attempt: i32,
    latest_revision: Option<Uuid>,
    pruned: bool,
    blocks_lane: bool,
    in_ordered_lane: bool,
}

/// Reads where an alert stands. With `lock`, takes its outbox row (`FOR UPDATE`) and then
/// the alert row (`FOR NO KEY UPDATE`: the weakest lock that serialises operators, and
/// no conflict with the key-share locks anything may take on the alert row), so the
/// answer holds until the transaction ends; without, it only reads (a dry run).
pub async fn standing(
    tx: &mut PgConnection,
    alert_id: Uuid,
    lock: bool,
) -> Result<Standing, StoreError> {
    let (lock_outbox, lock_alert) = if lock {
        (" FOR UPDATE", " FOR NO KEY UPDATE OF a")
    } else {
        ("", "")
    };
    let live_status = sqlx::query_scalar::<_, String>(&format!(
        "SELECT status FROM outbox WHERE alert_id = $1{lock_outbox}"
    ))
    .bind(alert_id)
    .fetch_optional(&mut *tx)
    .await?;
    let row = sqlx::query_as::<_, StandingRow>(&format!(
        "SELECT {OUTCOME} AS outcome, a.destination_id, {DESTINATION_REFERENCE} AS destination_reference, \
                COALESCE((SELECT max(d.attempt) FROM delivery_attempts d \
                          WHERE d.alert_id = a.id AND d.kind = $2), 0) AS last_attempt, \
                (SELECT later.id FROM alerts later \
                 WHERE later.tenant_id = a.tenant_id AND later.subject = a.subject \
                   AND later.occurrence = a.occurrence \
                   AND later.destination_id = a.destination_id AND later.revision > a.revision \
                 ORDER BY later.revision DESC LIMIT 1) AS latest_revision, \
                a.pruned_at IS NOT NULL AS pruned, \
                {BLOCKS_LANE} AS blocks_lane, \
                a.lane_seq IS NOT NULL AND EXISTS (SELECT 1 FROM destinations d \
                    WHERE d.id = a.destination_id AND d.ordering = {per_key}) AS in_ordered_lane \
         FROM alerts a {STATE_JOINS} \
         WHERE a.id = $1{lock_alert}",
        per_key = Ordering::PerKey.sql(),
    ))
    .bind(alert_id)
    .bind(AttemptKind::Send)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Err(StoreError::UnknownAlert(alert_id));
    };
    Ok(Standing {
        alert_id,
        live_status: parse_optional(live_status)?,
        outcome: parse_optional(row.outcome)?,
        destination_id: row.destination_id,
        destination_reference: row.destination_reference,
        last_attempt: row.last_attempt,
        latest_revision: row.latest_revision,
        pruned: row.pruned,
        blocks_lane: row.blocks_lane,
        in_ordered_lane: row.in_ordered_lane,
    })
}

/// Whether alert `a` holds up its ordered lane: it is in a lane and not released, which
/// shows as a row waiting behind it or as the lane's tail naming it.
pub(crate) static BLOCKS_LANE: SqlText = SqlText::new(|| {
    format!(
        "(a.lane_seq IS NOT NULL AND ( \
             EXISTS (SELECT 1 FROM outbox w WHERE w.lane_after = a.id) \
             OR EXISTS (SELECT 1 FROM alert_lanes l \
                        WHERE l.destination_id = a.destination_id \
                          AND l.ordering_key = {LANE_KEY} AND l.tail_alert = a.id)))"
    )
});

/// Parses a nullable column's text into its type.
pub(crate) fn parse_optional<T>(text: Option<String>) -> Result<Option<T>, StoreError>
where
    T: std::str::FromStr<Err = outbox_core::UnknownValue>,
{
    text.map(|t| t.parse::<T>()).transpose().map_err(Into::into)
}

impl Standing {
    /// The alert's state: the live status while it has an outbox row, else its outcome.
    pub fn state(&self) -> Result<AlertState, StoreError> {
        match (self.live_status, self.outcome) {
            (Some(live), _) => Ok(live.into()),
            (None, Some(outcome)) => Ok(outcome.into()),
            // Approval writes the outbox row with the alert, and every transition out of
            // the queue writes the outcome, or the attempt that accepted it, with the
            // delete: this cannot be.
            (None, None) => Err(StoreError::Inconsistent(format!(
                "alert {} has neither an outbox row, nor an outcome, nor an attempt that accepted it",
                self.alert_id
            ))),
        }
    }
}
