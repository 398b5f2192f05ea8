//! The alert lifecycle's transitions and refusals, each written once. Everything that moves
//! an alert between states is here or is built from the pieces here:
//!
//! - [`settle`]: an alert leaves the live queue for an [`Outcome`] (with the destination's
//!   reference when it was accepted), recorded in `alert_outcomes`, never in the wide
//!   alert row. Its set-based twin is the settling step of [`COMPLETE_BATCH`], built with
//!   the same [`SETTLE_CONFLICT`].
//! - requeue: a live row goes back to `pending` or `uncertain`, its claim cleared
//!   ([`requeue_assignments`], used by the batch completion, the lease sweep and a
//!   dispatcher's release), or a settled alert comes back to the queue with a fresh retry
//!   budget ([`requeue_with_fresh_budget`], for replay and resolve).
//! - [`append_event`]: a line of the evidence trail, with typed states; a dispatcher's
//!   completion folds its line into its attempt row instead, and [`evidence_trail`] reads
//!   both as one trail.
//! - where an alert stands, in one place: [`STATE_JOINS`] and [`STATE`], which every
//!   reader of a state uses.
//! - the operator transitions [`replay`] and [`resolve`], each with its refusals
//!   ([`Standing::replay_refusal`], [`Standing::resolve_refusal`]): every caller (the CLI,
//!   its dry runs, bulk replays) asks these, so no copy of a rule can disagree with it.
//!
//! Lock order everywhere: the outbox row first, then the alert row (a dispatcher's
//! completion holds the outbox row and then settles the alert; operators lock both before
//! they touch its outcome row), so operators and dispatchers wait for each other instead
//! of deadlocking.

use chrono::{DateTime, Utc};
use outbox_core::{AlertState, AttemptKind, LiveStatus, Outcome};
use sqlx::{PgConnection, PgExecutor};
use std::sync::LazyLock;
use uuid::Uuid;

use crate::sql_names::SqlName;
use crate::StoreError;

/// One line of an alert's evidence trail.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    /// The alert it belongs to.
    pub alert_id: Uuid,
    /// State before, when the event is a transition from a known state.
    pub from: Option<AlertState>,
    /// State after.
    pub to: AlertState,
    /// The delivery attempt it concerns, if any.
    pub attempt: Option<i32>,
    /// Who caused it.
    pub actor: &'a str,
    /// What happened, for a person to read.
    pub line: &'a str,
}

/// The evidence table and its columns, in the order every insert lists them: every line
/// of evidence is written through this one insert.
pub(crate) const EVENT_INSERT: &str =
    "INSERT INTO alert_events (alert_id, from_state, to_state, attempt, actor, line)";

/// The attempts table and its columns, in the order every insert lists them (an insert
/// that has no value for a column gives `NULL`): every attempt is recorded through this
/// one insert.
pub(crate) const ATTEMPT_INSERT: &str =
    "INSERT INTO delivery_attempts (alert_id, attempt, kind, worker, fencing_token, \
     started_at, finished_at, idempotency_key, payload_sha256, outcome, http_status, \
     destination_reference, error_class, response_excerpt, to_state, line)";

/// Queues newly approved alerts. It follows a CTE named `approved` that yields each new
/// alert's `id`, `destination_id`, `after_alert` (an earlier revision it must wait for, or
/// `NULL`), `actor` and evidence `line`, and adds two: `queued`, its outbox row (returning
/// `alert_id`, `next_attempt_at`), and `explained`, the first line of its evidence
/// (returning `alert_id`, `at`, `line`). An approval through the API, a monitor's batch
/// and a revision all queue through this one fragment, so a new alert is queued and
/// explained alike whichever way it came.
pub(crate) static ENQUEUE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "queued AS ( \
             INSERT INTO outbox (alert_id, destination_id, after_alert) \
             SELECT id, destination_id, after_alert FROM approved \
             RETURNING alert_id, next_attempt_at \
         ), explained AS ( \
             {EVENT_INSERT} \
             SELECT id, NULL, {pending}, NULL, actor, line FROM approved \
             RETURNING alert_id, at, line \
         )",
        pending = AlertState::Pending.sql(),
    )
});

/// Appends a line to an alert's evidence trail.
pub async fn append_event(db: impl PgExecutor<'_>, event: Event<'_>) -> Result<(), StoreError> {
    sqlx::query(&format!("{EVENT_INSERT} VALUES ($1, $2, $3, $4, $5, $6)"))
        .bind(event.alert_id)
        .bind(event.from)
        .bind(event.to)
        .bind(event.attempt)
        .bind(event.actor)
        .bind(event.line)
        .execute(db)
        .await?;
    Ok(())
}

/// How every reader finds an alert's state, joined to an alert aliased `a`: its live
/// outbox row (`o`) and its resting place (`ao`). With [`STATE`], the one definition of an
/// alert's state (the view `alert_states` is the same joins, for people at a psql prompt).
pub(crate) const STATE_JOINS: &str = "LEFT JOIN outbox o ON o.alert_id = a.id \
     LEFT JOIN alert_outcomes ao ON ao.alert_id = a.id";

/// An alert's state over [`STATE_JOINS`]: the live status while it has an outbox row,
/// else where it came to rest.
pub(crate) const STATE: &str = "COALESCE(o.status, ao.outcome)";

/// The tail of every `INSERT INTO alert_outcomes (alert_id, outcome, destination_reference)`:
/// a settled alert has one outcome row. An operator settling a held alert (which already
/// has one) overwrites it, keeping an earlier reference when none is given.
pub(crate) const SETTLE_CONFLICT: &str = "ON CONFLICT (alert_id) DO UPDATE SET \
     outcome = EXCLUDED.outcome, settled_at = EXCLUDED.settled_at, \
     destination_reference = COALESCE(EXCLUDED.destination_reference, \
                                      alert_outcomes.destination_reference)";

/// The `SET` list that puts a live row back in the queue with its claim cleared
/// (`UPDATE outbox o SET ...`): the status it returns to and when it is due, both SQL
/// expressions. The claim's columns go together, as the outbox's CHECK demands.
pub(crate) fn requeue_assignments(status: &str, due: &str) -> String {
    format!(
        "status = {status}, next_attempt_at = {due}, lease_owner = NULL, \
         lease_expires_at = NULL, fencing_token = NULL, send_started_at = NULL"
    )
}

/// Settles one alert: its outbox row goes, its outcome (and reference) is recorded in
/// `alert_outcomes`; the wide alert row is not written. The single-row form of the
/// settling step of [`COMPLETE_BATCH`]; the caller holds the alert's locks and writes the
/// evidence line in the same transaction.
pub async fn settle(
    tx: &mut PgConnection,
    alert_id: Uuid,
    outcome: Outcome,
    reference: Option<&str>,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM outbox WHERE alert_id = $1")
        .bind(alert_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(&format!(
        "INSERT INTO alert_outcomes (alert_id, outcome, destination_reference) \
         VALUES ($1, $2, $3) {SETTLE_CONFLICT}"
    ))
    .bind(alert_id)
    .bind(outcome)
    .bind(reference)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Back in the queue as pending, due now, with a fresh retry budget; attempt numbers go
/// on from `last_attempt`. The alert's outcome row goes: it is live again.
pub async fn requeue_with_fresh_budget(
    tx: &mut PgConnection,
    alert_id: Uuid,
    destination_id: Uuid,
    last_attempt: i32,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM alert_outcomes WHERE alert_id = $1")
        .bind(alert_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(&format!(
        "INSERT INTO outbox AS o (alert_id, destination_id, attempts, budget_base_attempts) \
         VALUES ($1, $2, $3, $3) \
         ON CONFLICT (alert_id) DO UPDATE SET {}, budget_since = now(), \
             budget_base_attempts = o.attempts",
        requeue_assignments("$4", "now()")
    ))
    .bind(alert_id)
    .bind(destination_id)
    .bind(last_attempt)
    .bind(LiveStatus::Pending)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Records a batch of dispatcher completions in one statement over `unnest` arrays: the
/// set-based form of the same transitions, for speed (one plan, one round trip per
/// batch). Built from the same pieces as the single-row forms: settling inserts the
/// outcome row with [`SETTLE_CONFLICT`] after deleting the outbox row, as in [`settle`];
/// requeueing is [`requeue_assignments`]. The
/// `lifecycle_batch_and_single_row_settle_alike` test holds the batch and [`settle`] to the
/// same rows.
///
/// Evidence: a completion that recorded an attempt (or lookup) writes its state and line
/// into that attempt row, so a routine delivery costs four row writes (the claim's outbox
/// update, the attempt row, the outbox row's delete, the outcome row) and no evidence row
/// of its own; [`evidence_trail`] reads them back with the other lines. A completion
/// without one (nothing was sent) writes its line through [`EVENT_INSERT`].
///
/// Parameters, one array each, in this order: alert_id, fencing_token, worker, attempt,
/// kind, started_at, outcome, http_status, destination_reference, error_class,
/// response_excerpt, requeue_status, requeue_at, settle, settle_reference, to_state, line.
/// Returns `(alert_id, fencing_token)` of every completion whose claim was still current.
///
/// Fencing and locking: the outbox row's own `DELETE` (to settle) or `UPDATE` (to
/// requeue) is the fence. Each matches the row by alert and fencing token, so a completion
/// whose claim was taken over matches nothing, and only the rows these statements
/// return go on to the attempt, outcome and evidence inserts. Under READ COMMITTED a
/// `DELETE` or `UPDATE` that meets a row another transaction is changing (the lease sweep,
/// an operator) waits for it and checks the token again on the row's newest version, so
/// the fence holds without a `SELECT ... FOR UPDATE` first. That lock was a write of its
/// own (the row's header and a WAL record) on every delivery; without it a delivery
/// writes about 55 bytes less WAL (1,290 to 1,235 B in `bench run --only approvals`).
/// The `a_completion_that_waits_on_a_takeover_writes_nothing` test holds the fence to
/// that.
pub(crate) static COMPLETE_BATCH: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH input AS ( \
             SELECT * FROM unnest($1::uuid[], $2::int8[], $3::text[], $4::int4[], $5::text[], \
                 $6::timestamptz[], $7::text[], $8::int2[], $9::text[], $10::text[], $11::text[], \
                 $12::text[], $13::timestamptz[], $14::text[], $15::text[], $16::text[], $17::text[]) \
             AS i(alert_id, fencing_token, worker, attempt, kind, started_at, outcome, http_status, \
                  destination_reference, error_class, response_excerpt, requeue_status, requeue_at, \
                  settle, settle_reference, to_state, line) \
         ), removed AS ( \
             DELETE FROM outbox o USING input i \
             WHERE o.alert_id = i.alert_id AND o.fencing_token = i.fencing_token \
               AND i.settle IS NOT NULL \
             RETURNING i.alert_id, i.fencing_token \
         ), requeued AS ( \
             UPDATE outbox o SET {requeue} \
             FROM input i \
             WHERE o.alert_id = i.alert_id AND o.fencing_token = i.fencing_token \
               AND i.requeue_status IS NOT NULL \
             RETURNING i.alert_id, i.fencing_token \
         ), fenced AS ( \
             SELECT i.* FROM input i \
             JOIN (SELECT alert_id, fencing_token FROM removed \
                   UNION ALL SELECT alert_id, fencing_token FROM requeued) AS current_claim \
               ON current_claim.alert_id = i.alert_id \
              AND current_claim.fencing_token = i.fencing_token \
         ), recorded AS ( \
             {ATTEMPT_INSERT} \
             SELECT f.alert_id, f.attempt, f.kind, f.worker, f.fencing_token, f.started_at, now(), \
                    f.alert_id::text, a.payload_sha256, f.outcome, f.http_status, \
                    f.destination_reference, f.error_class, left(f.response_excerpt, 1000), \
                    f.to_state, f.line \
             FROM fenced f JOIN alerts a ON a.id = f.alert_id \
             WHERE f.kind IS NOT NULL \
         ), settled AS ( \
             INSERT INTO alert_outcomes (alert_id, outcome, destination_reference) \
             SELECT f.alert_id, f.settle, f.settle_reference FROM fenced f \
             WHERE f.settle IS NOT NULL \
             {SETTLE_CONFLICT} \
         ), explained AS ( \
             {EVENT_INSERT} \
             SELECT f.alert_id, {sending}, f.to_state, f.attempt, 'dispatcher:' || f.worker, f.line \
             FROM fenced f WHERE f.kind IS NULL \
         ) \
         SELECT alert_id, fencing_token FROM fenced",
        requeue = requeue_assignments("i.requeue_status", "i.requeue_at"),
        sending = AlertState::Sending.sql(),
    )
});

/// One alert's evidence trail, oldest first: the lines of `alert_events` and those folded
/// into attempt rows, merged in time order (the view `alert_evidence`). Every reader of a
/// trail (`outboxctl alert show`, the API, the console, the checker) reads it here.
pub async fn evidence_trail(
    db: impl PgExecutor<'_>,
    alert_id: Uuid,
) -> Result<Vec<EvidenceLine>, StoreError> {
    sqlx::query_as::<_, EvidenceRow>(&format!(
        "SELECT at, from_state, to_state, attempt, actor, line \
         FROM alert_evidence WHERE alert_id = $1 ORDER BY {EVIDENCE_ORDER}"
    ))
    .bind(alert_id)
    .fetch_all(db)
    .await?
    .into_iter()
    .map(EvidenceLine::try_from)
    .collect()
}

/// The order of a trail in `alert_evidence`: time, then events before attempt lines
/// within one instant, then insertion order.
const EVIDENCE_ORDER: &str = "at, source, id";

/// The latest line of the trail of the alert aliased `a`, as a scalar subquery (the
/// listings' "last evidence" column).
pub(crate) const LAST_EVIDENCE_LINE: &str = "(SELECT ev.line FROM alert_evidence ev \
     WHERE ev.alert_id = a.id ORDER BY ev.at DESC, ev.source DESC, ev.id DESC LIMIT 1)";

/// One line of the evidence trail.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EvidenceLine {
    /// When it was recorded.
    pub at: DateTime<Utc>,
    /// State before, if the event left a known state.
    pub from_state: Option<AlertState>,
    /// State after.
    pub to_state: AlertState,
    /// Attempt it concerns.
    pub attempt: Option<i32>,
    /// Who caused it.
    pub actor: String,
    /// What happened. May quote a destination's answer (untrusted text, kept as sent).
    pub line: String,
}

#[derive(Debug, sqlx::FromRow)]
struct EvidenceRow {
    at: DateTime<Utc>,
    from_state: Option<String>,
    #[sqlx(try_from = "String")]
    to_state: AlertState,
    attempt: Option<i32>,
    actor: String,
    line: String,
}

impl TryFrom<EvidenceRow> for EvidenceLine {
    type Error = StoreError;

    fn try_from(row: EvidenceRow) -> Result<Self, StoreError> {
        Ok(EvidenceLine {
            at: row.at,
            from_state: parse_optional(row.from_state)?,
            to_state: row.to_state,
            attempt: row.attempt,
            actor: row.actor,
            line: row.line,
        })
    }
}

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
}

#[derive(Debug, sqlx::FromRow)]
struct StandingRow {
    outcome: Option<String>,
    destination_id: Uuid,
    destination_reference: Option<String>,
    last_attempt: i32,
    latest_revision: Option<Uuid>,
    pruned: bool,
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
        "SELECT ao.outcome, a.destination_id, ao.destination_reference, \
                COALESCE((SELECT max(d.attempt) FROM delivery_attempts d \
                          WHERE d.alert_id = a.id AND d.kind = $2), 0) AS last_attempt, \
                (SELECT later.id FROM alerts later \
                 WHERE later.tenant_id = a.tenant_id AND later.subject = a.subject \
                   AND later.occurrence = a.occurrence \
                   AND later.destination_id = a.destination_id AND later.revision > a.revision \
                 ORDER BY later.revision DESC LIMIT 1) AS latest_revision, \
                a.pruned_at IS NOT NULL AS pruned \
         FROM alerts a LEFT JOIN alert_outcomes ao ON ao.alert_id = a.id \
         WHERE a.id = $1{lock_alert}"
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
    })
}

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
            // the queue writes the outcome with the delete: this cannot be.
            (None, None) => Err(StoreError::Inconsistent(format!(
                "alert {} has neither an outbox row nor an outcome",
                self.alert_id
            ))),
        }
    }

    /// Why this alert may not be replayed, or `None` when it may: only a held or failed
    /// alert, not corrected by a later revision (its payload is outdated) and not pruned
    /// (its payload is gone).
    pub fn replay_refusal(&self) -> Result<Option<String>, StoreError> {
        let alert_id = self.alert_id;
        let state = self.state()?;
        let refusal = if replayable(state) {
            if let Some(latest) = self.latest_revision {
                Some(format!(
                    "alert {alert_id} has been corrected by a later revision ({latest}); replaying it would send the outdated payload"
                ))
            } else if self.pruned {
                Some(pruned_refusal(alert_id))
            } else {
                None
            }
        } else {
            match state {
                AlertState::Accepted => Some(format!(
                    "alert {alert_id} was accepted by the destination{}; replaying it would deliver it twice, so it is refused",
                    self.destination_reference
                        .as_deref()
                        .map(|r| format!(" (reference {r})"))
                        .unwrap_or_default()
                )),
                AlertState::Superseded => Some(format!(
                    "alert {alert_id} was superseded by a revision and is never sent; replay the revision instead"
                )),
                _ => Some(format!(
                    "alert {alert_id} is {state}; only held or failed alerts can be replayed"
                )),
            }
        };
        Ok(refusal)
    }

    /// Why an operator may not resolve this alert so, or `None` when they may: only an
    /// uncertain or held alert, not while a dispatcher holds it, and never "not delivered"
    /// once a later revision corrected it (that would send the outdated payload again,
    /// after the correction; recording what happened, accepted or abandoned, stays open).
    pub fn resolve_refusal(&self, resolution: &Resolution) -> Result<Option<String>, StoreError> {
        let alert_id = self.alert_id;
        let state = self.state()?;
        let refusal = match state {
            AlertState::Uncertain | AlertState::Held => match (resolution, self.latest_revision) {
                (Resolution::NotDelivered, Some(latest)) => Some(format!(
                    "alert {alert_id} has been corrected by a later revision ({latest}); sending it again would deliver the outdated payload: resolve it as accepted or abandoned"
                )),
                _ => None,
            },
            AlertState::Sending => Some(format!(
                "a dispatcher is working on alert {alert_id} right now; resolve it once it is no longer sending"
            )),
            AlertState::Pending
            | AlertState::Accepted
            | AlertState::Failed
            | AlertState::Superseded => Some(format!(
                "alert {alert_id} is {state}; only uncertain or held alerts can be resolved"
            )),
        };
        Ok(refusal)
    }
}

/// Whether alerts in `state` may be replayed at all: held and failed ones, which have come
/// to rest without being delivered. [`Standing::replay_refusal`] adds what else must hold;
/// a bulk replay's selection asks this before it counts anything.
pub fn replayable(state: AlertState) -> bool {
    matches!(state, AlertState::Held | AlertState::Failed)
}

/// Why a pruned alert cannot be replayed.
pub fn pruned_refusal(alert_id: Uuid) -> String {
    format!(
        "alert {alert_id} was pruned by retention: its payload is gone, so it cannot be sent again"
    )
}

/// Replays a held or failed alert inside the caller's transaction: same notification id,
/// key and payload, a fresh retry budget, the operator's note in the evidence. Refused
/// (nothing written) by [`Standing::replay_refusal`].
pub async fn replay(
    tx: &mut PgConnection,
    alert_id: Uuid,
    actor: &str,
    note: &str,
) -> Result<(), StoreError> {
    let alert = standing(tx, alert_id, true).await?;
    if let Some(why) = alert.replay_refusal()? {
        return Err(StoreError::Refused(why));
    }
    let from = alert.state()?;
    requeue_with_fresh_budget(tx, alert_id, alert.destination_id, alert.last_attempt).await?;
    // A held alert's last attempt may have arrived: resending it is the operator's call,
    // and the alert says so from now on.
    let warning = if from == AlertState::Held {
        sqlx::query("UPDATE alerts SET possible_duplicate = true WHERE id = $1")
            .bind(alert_id)
            .execute(&mut *tx)
            .await?;
        "; flagged as a possible duplicate, since the held attempt may have arrived"
    } else {
        ""
    };
    append_event(
        &mut *tx,
        Event {
            alert_id,
            from: Some(from),
            to: AlertState::Pending,
            attempt: None,
            actor: &format!("operator:{actor}"),
            line: &format!(
                "replayed by {actor} (was {from}): {note}; same notification id, key and payload{warning}"
            ),
        },
    )
    .await
}

/// What an operator found out about an uncertain or held alert.
#[derive(Debug, Clone)]
pub enum Resolution {
    /// The destination has it (with its reference).
    Accepted {
        /// The destination's reference, as the operator found it.
        reference: String,
    },
    /// The destination does not have it: deliver it again.
    NotDelivered,
    /// Give up, visibly.
    Abandon,
}

/// Resolves an uncertain or held alert inside the caller's transaction, by what the
/// operator established. Refused (nothing written) by [`Standing::resolve_refusal`].
pub async fn resolve(
    tx: &mut PgConnection,
    alert_id: Uuid,
    resolution: &Resolution,
    actor: &str,
    note: &str,
) -> Result<(), StoreError> {
    let alert = standing(tx, alert_id, true).await?;
    if let Some(why) = alert.resolve_refusal(resolution)? {
        return Err(StoreError::Refused(why));
    }
    let from = alert.state()?;
    let (to, line) = match resolution {
        Resolution::Accepted { reference } => {
            settle(tx, alert_id, Outcome::Accepted, Some(reference)).await?;
            (
                AlertState::Accepted,
                format!("resolved by {actor}: delivery confirmed at the destination (reference {reference}): {note}"),
            )
        }
        Resolution::NotDelivered => {
            requeue_with_fresh_budget(tx, alert_id, alert.destination_id, alert.last_attempt)
                .await?;
            (
                AlertState::Pending,
                format!("resolved by {actor}: confirmed not delivered, so it goes out again with the same key: {note}"),
            )
        }
        Resolution::Abandon => {
            settle(tx, alert_id, Outcome::Failed, None).await?;
            (AlertState::Failed, format!("abandoned by {actor}: {note}"))
        }
    };
    append_event(
        &mut *tx,
        Event {
            alert_id,
            from: Some(from),
            to,
            attempt: None,
            actor: &format!("operator:{actor}"),
            line: &line,
        },
    )
    .await
}

#[cfg(test)]
mod tests;
