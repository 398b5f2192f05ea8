//! What operators do to alerts: replay, resolve, enable and disable destinations, and the
//! figures they look at. Every action takes the alert's row lock first, checks the state
//! under it, and appends the operator's name and note to the evidence in the same
//! transaction: an action either happens with its evidence, or not at all.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor, PgPool};
use uuid::Uuid;

use crate::alerts::{append_event, Event};
use crate::StoreError;

#[derive(Debug)]
struct Locked {
    outcome: Option<String>,
    destination_id: Uuid,
    destination_reference: Option<String>,
    live_status: Option<String>,
    last_attempt: i32,
    /// The identity's latest revision, when it is not this alert.
    latest_revision: Option<Uuid>,
    /// Retention removed its payload (`outboxctl prune`).
    pruned: bool,
}

/// Locks an alert (and its outbox row, if any) and reads what the actions need.
///
/// Lock order is outbox row first, then the alert, as in a dispatcher's completion (which
/// holds the outbox row and then settles the alert): the same order everywhere means an
/// operator and a dispatcher wait for each other instead of deadlocking.
async fn lock(tx: &mut PgConnection, alert_id: Uuid) -> Result<Locked, StoreError> {
    let live_status =
        sqlx::query_scalar::<_, String>("SELECT status FROM outbox WHERE alert_id = $1 FOR UPDATE")
            .bind(alert_id)
            .fetch_optional(&mut *tx)
            .await?;
    // NO KEY UPDATE: the weakest lock that still serialises operators on the alert; it
    // does not conflict with key-share locks anything may take on the alert row.
    let row = sqlx::query_as::<
        _,
        (
            Option<String>,
            Uuid,
            Option<String>,
            i32,
            Option<Uuid>,
            bool,
        ),
    >(
        "SELECT a.outcome, a.destination_id, a.destination_reference, \
                COALESCE((SELECT max(d.attempt) FROM delivery_attempts d \
                          WHERE d.alert_id = a.id AND d.kind = 'send'), 0), \
                (SELECT later.id FROM alerts later \
                 WHERE later.tenant_id = a.tenant_id AND later.subject = a.subject \
                   AND later.occurrence = a.occurrence \
                   AND later.destination_id = a.destination_id AND later.revision > a.revision \
                 ORDER BY later.revision DESC LIMIT 1), \
                a.pruned_at IS NOT NULL \
         FROM alerts a WHERE a.id = $1 FOR NO KEY UPDATE OF a",
    )
    .bind(alert_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((
        outcome,
        destination_id,
        destination_reference,
        last_attempt,
        latest_revision,
        pruned,
    )) = row
    else {
        return Err(StoreError::UnknownAlert(alert_id));
    };
    Ok(Locked {
        outcome,
        destination_id,
        destination_reference,
        live_status,
        last_attempt,
        latest_revision,
        pruned,
    })
}

impl Locked {
    fn state(&self) -> &str {
        self.live_status
            .as_deref()
            .or(self.outcome.as_deref())
            .unwrap_or("unknown")
    }
}

/// Puts a held or failed alert back in the queue: same notification id, key and payload,
/// a fresh retry budget, and the operator's note in the evidence. Refused for a revision
/// that has been corrected since: its payload is outdated.
pub async fn replay(
    pool: &PgPool,
    alert_id: Uuid,
    actor: &str,
    note: &str,
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    let alert = lock(&mut tx, alert_id).await?;
    match alert.outcome.as_deref() {
        Some("held" | "failed") => {}
        Some("accepted") => {
            return Err(StoreError::Refused(format!(
                "alert {alert_id} was accepted by the destination{}; replaying it would deliver it twice, so it is refused",
                alert
                    .destination_reference
                    .as_deref()
                    .map(|r| format!(" (reference {r})"))
                    .unwrap_or_default()
            )))
        }
        Some("superseded") => {
            return Err(StoreError::Refused(format!(
                "alert {alert_id} was superseded by a revision and is never sent; replay the revision instead"
            )))
        }
        _ => {
            return Err(StoreError::Refused(format!(
                "alert {alert_id} is {}; only held or failed alerts can be replayed",
                alert.state()
            )))
        }
    }
    if let Some(latest) = alert.latest_revision {
        return Err(StoreError::Refused(format!(
            "alert {alert_id} has been corrected by a later revision ({latest}); replaying it would send the outdated payload"
        )));
    }
    if alert.pruned {
        return Err(StoreError::Refused(pruned_refusal(alert_id)));
    }
    let from = alert.outcome.clone().unwrap_or_default();
    requeue(&mut tx, alert_id, &alert).await?;
    // A held alert's last attempt may have arrived: resending it is the operator's call,
    // and the alert says so from now on.
    let warning = if from == "held" {
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
            from: Some(&from),
            to: "pending",
            attempt: None,
            actor: &format!("operator:{actor}"),
            line: &format!(
                "replayed by {actor} (was {from}): {note}; same notification id, key and payload{warning}"
            ),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Back in the queue as pending, due now, with a fresh budget; attempt numbers go on.
async fn requeue(tx: &mut PgConnection, alert_id: Uuid, alert: &Locked) -> Result<(), StoreError> {
    sqlx::query("UPDATE alerts SET outcome = NULL, settled_at = NULL WHERE id = $1")
        .bind(alert_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO outbox (alert_id, destination_id, attempts, budget_base_attempts) \
         VALUES ($1, $2, $3, $3) \
         ON CONFLICT (alert_id) DO UPDATE SET status = 'pending', next_attempt_at = now(), \
             lease_owner = NULL, lease_expires_at = NULL, fencing_token = NULL, \
             send_started_at = NULL, budget_since = now(), \
             budget_base_attempts = outbox.attempts",
    )
    .bind(alert_id)
    .bind(alert.destination_id)
    .bind(alert.last_attempt)
    .execute(&mut *tx)
    .await?;
    Ok(())
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

/// Resolves an uncertain or held alert by what the operator established.
pub async fn resolve(
    pool: &PgPool,
    alert_id: Uuid,
    resolution: &Resolution,
    actor: &str,
    note: &str,
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    let alert = lock(&mut tx, alert_id).await?;
    let state = alert.state().to_owned();
    if state == "sending" {
        return Err(StoreError::Refused(format!(
            "a dispatcher is working on alert {alert_id} right now; resolve it once it is no longer sending"
        )));
    }
    if state != "uncertain" && state != "held" {
        return Err(StoreError::Refused(format!(
            "alert {alert_id} is {state}; only uncertain or held alerts can be resolved"
        )));
    }
    let operator = format!("operator:{actor}");
    let (to, line) = match resolution {
        Resolution::Accepted { reference } => {
            settle(&mut tx, alert_id, "accepted", Some(reference)).await?;
            (
                "accepted",
                format!("resolved by {actor}: delivery confirmed at the destination (reference {reference}): {note}"),
            )
        }
        Resolution::NotDelivered => {
            requeue(&mut tx, alert_id, &alert).await?;
            (
                "pending",
                format!("resolved by {actor}: confirmed not delivered, so it goes out again with the same key: {note}"),
            )
        }
        Resolution::Abandon => {
            settle(&mut tx, alert_id, "failed", None).await?;
            ("failed", format!("abandoned by {actor}: {note}"))
        }
    };
    append_event(
        &mut *tx,
        Event {
            alert_id,
            from: Some(&state),
            to,
            attempt: None,
            actor: &operator,
            line: &line,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

async fn settle(
    tx: &mut PgConnection,
    alert_id: Uuid,
    outcome: &str,
    reference: Option<&str>,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM outbox WHERE alert_id = $1")
        .bind(alert_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "UPDATE alerts SET outcome = $2, settled_at = now(), \
             destination_reference = COALESCE($3, destination_reference) WHERE id = $1",
    )
    .bind(alert_id)
    .bind(outcome)
    .bind(reference)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Ids of settled alerts in `state` (held or failed), optionally of one tenant and
/// destination (names), oldest first: the selection of a bulk replay.
pub async fn settled_ids(
    db: impl PgExecutor<'_>,
    state: &str,
    tenant: Option<&str>,
    destination: Option<&str>,
) -> Result<Vec<Uuid>, StoreError> {
    let ids = sqlx::query_scalar::<_, Uuid>(
        "SELECT a.id FROM alerts a \
         JOIN tenants t ON t.id = a.tenant_id JOIN destinations d ON d.id = a.destination_id \
         WHERE a.outcome = $1 AND a.pruned_at IS NULL AND ($2::text IS NULL OR t.name = $2) \
           AND ($3::text IS NULL OR d.name = $3) \
         ORDER BY a.settled_at, a.id",
    )
    .bind(state)
    .bind(tenant)
    .bind(destination)
    .fetch_all(db)
    .await?;
    Ok(ids)
}

/// Enables or disables a tenant's destination. A disabled destination's alerts wait,
/// pending; nothing fails. Returns `false` when there is no such destination.
pub async fn set_destination_enabled(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    name: &str,
    enabled: bool,
    actor: &str,
) -> Result<bool, StoreError> {
    let updated = sqlx::query(
        "UPDATE destinations SET enabled = $3, updated_at = now(), \
             disabled_reason = CASE WHEN $3 THEN NULL ELSE 'disabled by ' || $4 END \
         WHERE tenant_id = $1 AND name = $2",
    )
    .bind(tenant_id)
    .bind(name)
    .bind(enabled)
    .bind(actor)
    .execute(db)
    .await?;
    Ok(updated.rows_affected() == 1)
}

/// Counts by tenant, destination and state.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct StateCount {
    /// Tenant name.
    pub tenant: String,
    /// Destination name.
    pub destination: String,
    /// State.
    pub state: String,
    /// Alerts.
    pub count: i64,
}

/// The figures `outboxctl stats` shows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Stats {
    /// Alerts by tenant, destination and state.
    pub by_state: Vec<StateCount>,
    /// Age in seconds of the oldest due row nobody works on.
    pub oldest_due_age_secs: f64,
    /// Alerts uncertain now.
    pub uncertain: i64,
    /// Alerts held now.
    pub held: i64,
    /// Send attempts finished in the last hour.
    pub attempts_last_hour: i64,
    /// Of those, accepted.
    pub accepted_last_hour: i64,
    /// When the figures were read.
    pub at: DateTime<Utc>,
}

/// Reads the figures, from one snapshot.
pub async fn stats(pool: &PgPool) -> Result<Stats, StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    let by_state = sqlx::query_as::<_, StateCount>(
        "SELECT t.name AS tenant, d.name AS destination, COALESCE(o.status, a.outcome) AS state, \
                count(*) AS count \
         FROM alerts a JOIN tenants t ON t.id = a.tenant_id \
         JOIN destinations d ON d.id = a.destination_id \
         LEFT JOIN outbox o ON o.alert_id = a.id \
         GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
    )
    .fetch_all(&mut *tx)
    .await?;
    let (oldest, uncertain, held, attempts, accepted, at): (
        Option<f64>,
        i64,
        i64,
        i64,
        i64,
        DateTime<Utc>,
    ) = sqlx::query_as(
        "SELECT (SELECT extract(epoch FROM now() - min(next_attempt_at))::float8 FROM outbox \
                     WHERE status IN ('pending', 'uncertain') AND next_attempt_at <= now()), \
                    (SELECT count(*) FROM outbox WHERE status = 'uncertain'), \
                    (SELECT count(*) FROM alerts WHERE outcome = 'held'), \
                    (SELECT count(*) FROM delivery_attempts \
                     WHERE kind = 'send' AND finished_at > now() - interval '1 hour'), \
                    (SELECT count(*) FROM delivery_attempts \
                     WHERE kind = 'send' AND outcome = 'accepted' \
                       AND finished_at > now() - interval '1 hour'), \
                    now()",
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Stats {
        by_state,
        oldest_due_age_secs: oldest.unwrap_or(0.0),
        uncertain,
        held,
        attempts_last_hour: attempts,
        accepted_last_hour: accepted,
        at,
    })
}

/// The oldest alert for the destination called `destination` (any tenant), if any.
pub async fn first_alert_for(
    db: impl PgExecutor<'_>,
    destination: &str,
) -> Result<Option<Uuid>, StoreError> {
    let id = sqlx::query_scalar::<_, Uuid>(
        "SELECT a.id FROM alerts a JOIN destinations d ON d.id = a.destination_id \
         WHERE d.name = $1 ORDER BY a.created_at, a.id LIMIT 1",
    )
    .bind(destination)
    .fetch_optional(db)
    .await?;
    Ok(id)
}

/// How far a demo run has come.
#[derive(Debug, Clone, Copy)]
pub struct DemoProgress {
    /// Alerts approved.
    pub total: i64,
    /// Alerts settled (accepted, held, failed, superseded).
    pub settled: i64,
    /// Alerts uncertain now.
    pub uncertain: i64,
}

/// Reads a demo run's progress.
pub async fn demo_progress(db: impl PgExecutor<'_>) -> Result<DemoProgress, StoreError> {
    let (total, settled, uncertain): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM alerts), \
                (SELECT count(*) FROM alerts WHERE outcome IS NOT NULL), \
                (SELECT count(*) FROM outbox WHERE status = 'uncertain')",
    )
    .fetch_one(db)
    .await?;
    Ok(DemoProgress {
        total,
        settled,
        uncertain,
    })
}

/// What became of a demo's alerts, and how the accepted ones got there.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// Accepted by the first attempt.
    pub first_try: i64,
    /// Accepted after retries of attempts that were not processed or not sent.
    pub after_retry: i64,
    /// Accepted by a resend after an uncertain attempt (the destination de-duplicated).
    pub by_dedup_resend: i64,
    /// Accepted because a lookup found it.
    pub by_lookup: i64,
    /// Held for an operator.
    pub held: i64,
    /// Failed.
    pub failed: i64,
    /// Still live.
    pub live: i64,
    /// Held alerts with their last evidence line (the first ten).
    pub held_lines: Vec<(Uuid, String)>,
}

/// Reads the demo's final figures.
pub async fn demo_report(pool: &PgPool) -> Result<DemoReport, StoreError> {
    let (by_lookup, by_dedup_resend, after_retry, first_try, held, failed, live): (
        i64,
        i64,
        i64,
        i64,
        i64,
        i64,
        i64,
    ) = sqlx::query_as(
        "WITH accepted AS ( \
                 SELECT a.id, \
                        EXISTS (SELECT 1 FROM delivery_attempts d WHERE d.alert_id = a.id \
                                AND d.kind = 'lookup' AND d.outcome = 'found') AS lookup, \
                        EXISTS (SELECT 1 FROM delivery_attempts d WHERE d.alert_id = a.id \
                                AND d.kind = 'send' AND d.outcome = 'uncertain') AS was_uncertain, \
                        (SELECT count(*) FROM delivery_attempts d WHERE d.alert_id = a.id \
                                AND d.kind = 'send') AS sends \
                 FROM alerts a WHERE a.outcome = 'accepted' \
             ) \
             SELECT count(*) FILTER (WHERE lookup), \
                    count(*) FILTER (WHERE NOT lookup AND was_uncertain), \
                    count(*) FILTER (WHERE NOT lookup AND NOT was_uncertain AND sends > 1), \
                    count(*) FILTER (WHERE NOT lookup AND NOT was_uncertain AND sends <= 1), \
                    (SELECT count(*) FROM alerts WHERE outcome = 'held'), \
                    (SELECT count(*) FROM alerts WHERE outcome = 'failed'), \
                    (SELECT count(*) FROM outbox) \
             FROM accepted",
    )
    .fetch_one(pool)
    .await?;
    let held_lines = sqlx::query_as::<_, (Uuid, String)>(
        "SELECT a.id, (SELECT e.line FROM alert_events e WHERE e.alert_id = a.id \
                       ORDER BY e.id DESC LIMIT 1) \
         FROM alerts a WHERE a.outcome = 'held' ORDER BY a.created_at, a.id LIMIT 10",
    )
    .fetch_all(pool)
    .await?;
    Ok(DemoReport {
        first_try,
        after_retry,
        by_dedup_resend,
        by_lookup,
        held,
        failed,
        live,
        held_lines,
    })
}

/// Why a pruned alert cannot be replayed.
pub fn pruned_refusal(alert_id: Uuid) -> String {
    format!(
        "alert {alert_id} was pruned by retention: its payload is gone, so it cannot be sent again"
    )
}

/// Whether retention removed this alert's payload and evidence.
pub async fn is_pruned(db: impl PgExecutor<'_>, alert_id: Uuid) -> Result<bool, StoreError> {
    Ok(
        sqlx::query_scalar::<_, bool>("SELECT pruned_at IS NOT NULL FROM alerts WHERE id = $1")
            .bind(alert_id)
            .fetch_optional(db)
            .await?
            .unwrap_or(false),
    )
}

/// What retention removed (or, on a dry run, would remove).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Pruned {
    /// Alerts whose payload, attempts and evidence were removed.
    pub alerts: u64,
    /// Attempt rows removed.
    pub attempts: u64,
    /// Evidence lines removed.
    pub evidence: u64,
}

/// Outcomes retention may prune: finished for good. `held` never (it waits for an
/// operator), and live alerts have no outcome; `failed` only when asked.
pub fn prunable_outcomes(include_failed: bool) -> Vec<&'static str> {
    let mut outcomes = vec!["accepted", "superseded"];
    if include_failed {
        outcomes.push("failed");
    }
    outcomes
}

/// The smallest UUIDv7 of the millisecond `at`: alert ids are UUIDv7 taken at approval,
/// so every alert approved before `at` has a smaller id, and a walk along the primary key
/// finds them without an index of its own.
pub(crate) fn first_id_at(at: DateTime<Utc>) -> Uuid {
    let ms = u64::try_from(at.timestamp_millis())
        .unwrap_or(0)
        .min((1 << 48) - 1);
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    bytes[6] = 0x70;
    bytes[8] = 0x80;
    Uuid::from_bytes(bytes)
}

/// One step of retention: up to `limit` alerts with a prunable outcome settled before
/// `settled_before` and after the cursor `after` (in id order) lose their payload (kept:
/// its fingerprint), attempt rows, evidence lines and rendered email (it holds the
/// payload's content too), in one transaction; their identity,
/// outcome, reference and times stay, so one alert per identity still holds. Returns what
/// was removed and the cursor for the next step (`None` when nothing is left).
pub async fn prune_step(
    pool: &PgPool,
    settled_before: DateTime<Utc>,
    outcomes: &[&str],
    after: Uuid,
    limit: i64,
) -> Result<(Pruned, Option<Uuid>), StoreError> {
    // Approval clocks are the writers' and settlement is the database's: a day's margin
    // on the id bound covers any skew between them.
    let id_bound = first_id_at(settled_before + chrono::Duration::days(1));
    let (alerts, attempts, evidence, last): (i64, i64, i64, Option<Uuid>) = sqlx::query_as(
        "WITH candidates AS ( \
             SELECT id FROM alerts \
             WHERE id > $1 AND id < $2 AND outcome = ANY($3::text[]) AND settled_at < $4 \
               AND pruned_at IS NULL \
             ORDER BY id \
             LIMIT $5 \
             FOR UPDATE SKIP LOCKED \
         ), attempts AS ( \
             DELETE FROM delivery_attempts WHERE alert_id IN (SELECT id FROM candidates) \
             RETURNING 1 \
         ), evidence AS ( \
             DELETE FROM alert_events WHERE alert_id IN (SELECT id FROM candidates) \
             RETURNING 1 \
         ), rendered AS ( \
             DELETE FROM rendered_messages WHERE alert_id IN (SELECT id FROM candidates) \
         ), pruned AS ( \
             UPDATE alerts a SET payload = '{}', pruned_at = now() \
             FROM candidates c WHERE a.id = c.id \
             RETURNING a.id \
         ) \
         SELECT (SELECT count(*) FROM pruned), (SELECT count(*) FROM attempts), \
                (SELECT count(*) FROM evidence), \
                (SELECT id FROM candidates ORDER BY id DESC LIMIT 1)",
    )
    .bind(after)
    .bind(id_bound)
    .bind(outcomes)
    .bind(settled_before)
    .bind(limit)
    .fetch_one(pool)
    .await?;
    let pruned = Pruned {
        alerts: alerts.unsigned_abs(),
        attempts: attempts.unsigned_abs(),
        evidence: evidence.unsigned_abs(),
    };
    Ok((pruned, last.filter(|_| alerts >= limit)))
}

/// What [`prune_step`] would remove, counted without changing anything.
pub async fn prune_preview(
    pool: &PgPool,
    settled_before: DateTime<Utc>,
    outcomes: &[&str],
) -> Result<Pruned, StoreError> {
    let id_bound = first_id_at(settled_before + chrono::Duration::days(1));
    let (alerts, attempts, evidence): (i64, i64, i64) = sqlx::query_as(
        "WITH candidates AS ( \
             SELECT id FROM alerts \
             WHERE id < $1 AND outcome = ANY($2::text[]) AND settled_at < $3 \
               AND pruned_at IS NULL \
         ) \
         SELECT (SELECT count(*) FROM candidates), \
                (SELECT count(*) FROM delivery_attempts WHERE alert_id IN (SELECT id FROM candidates)), \
                (SELECT count(*) FROM alert_events WHERE alert_id IN (SELECT id FROM candidates))",
    )
    .bind(id_bound)
    .bind(outcomes)
    .bind(settled_before)
    .fetch_one(pool)
    .await?;
    Ok(Pruned {
        alerts: alerts.unsigned_abs(),
        attempts: attempts.unsigned_abs(),
        evidence: evidence.unsigned_abs(),
    })
}

#[cfg(test)]
mod tests {
    use super::first_id_at;

    #[test]
    fn the_id_bound_is_the_smallest_uuid_v7_of_its_millisecond() {
        let at = chrono::DateTime::from_timestamp_millis(1_764_460_800_123).unwrap();
        let bound = first_id_at(at);
        assert_eq!(bound.get_version_num(), 7);
        let (secs, nanos) = bound.get_timestamp().unwrap().to_unix();
        assert_eq!(
            secs * 1000 + u64::from(nanos) / 1_000_000,
            1_764_460_800_123
        );
        let later = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            1_764_460_800,
            123_000_000,
        ));
        assert!(later >= bound);
        let earlier = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            1_764_460_800,
            122_999_999,
        ));
        assert!(earlier < bound);
    }
}
