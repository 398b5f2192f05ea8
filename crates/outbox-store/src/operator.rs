//! What operators do to alerts: replay, resolve, enable and disable destinations, and the
//! figures they look at. Every action takes the alert's row lock first, checks the state
//! under it, and appends the operator's name and note to the evidence in the same
//! transaction: an action either happens with its evidence, or not at all.

use chrono::{DateTime, Utc};
use outbox_core::{AlertState, AttemptKind, AttemptOutcome, LiveStatus, Outcome};
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use crate::dispatch::OLDEST_DUE_AGE_SECS;
pub use crate::lifecycle::{pruned_refusal, replayable, Resolution};
use crate::lifecycle::{STATE, STATE_JOINS};
use crate::sql_names::SqlName;
use crate::{lifecycle, StoreError};

/// Puts a held or failed alert back in the queue: same notification id, key and payload,
/// a fresh retry budget, and the operator's note in the evidence. The rules are the
/// lifecycle's ([`lifecycle::Standing::replay_refusal`]).
pub async fn replay(
    pool: &PgPool,
    alert_id: Uuid,
    actor: &str,
    note: &str,
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    lifecycle::replay(&mut tx, alert_id, actor, note).await?;
    tx.commit().await?;
    Ok(())
}

/// What an operator may do to an alert right now, as the lifecycle answers: for each
/// action, `None` when it is open, or the reason it is refused. A page or command shows
/// these answers rather than deciding for itself; the action itself asks again under the
/// alert's lock, so an answer that goes stale is refused, never acted on.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OpenActions {
    /// Why a replay is refused.
    pub replay: Option<String>,
    /// Why resolving (as accepted, or abandoning) is refused.
    pub resolve: Option<String>,
    /// Why resolving as "not delivered" is refused.
    pub resolve_not_delivered: Option<String>,
}

/// Reads [`OpenActions`] for one alert, without locking it.
pub async fn open_actions(pool: &PgPool, alert_id: Uuid) -> Result<OpenActions, StoreError> {
    let mut conn = pool.acquire().await?;
    let alert = lifecycle::standing(&mut conn, alert_id, false).await?;
    Ok(OpenActions {
        replay: alert.replay_refusal()?,
        resolve: alert.resolve_refusal(&Resolution::Abandon)?,
        resolve_not_delivered: alert.resolve_refusal(&Resolution::NotDelivered)?,
    })
}

/// Replays every one of `ids` or none: one transaction, the alerts locked in id order
/// (the order dispatchers' completions lock in, so neither waits on the other in a
/// cycle). The first refusal rolls everything back and is the answer. With `dry_run`, the
/// same transaction runs to the end and is rolled back: the answer is exactly what a real
/// run would say at that moment.
pub async fn replay_all(
    pool: &PgPool,
    ids: &[Uuid],
    actor: &str,
    note: &str,
    dry_run: bool,
) -> Result<(), StoreError> {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut tx = pool.begin().await?;
    // Refusals are reported in the order the operator named the alerts, so the first
    // named problem is the one shown: check them all before changing any.
    for id in ids {
        let alert = lifecycle::standing(&mut tx, *id, false).await?;
        if let Some(why) = alert.replay_refusal()? {
            return Err(StoreError::Refused(why));
        }
    }
    for id in &sorted {
        lifecycle::replay(&mut tx, *id, actor, note).await?;
    }
    if dry_run {
        tx.rollback().await?;
    } else {
        tx.commit().await?;
    }
    Ok(())
}

/// Resolves an uncertain or held alert by what the operator established. The rules are
/// the lifecycle's ([`lifecycle::Standing::resolve_refusal`]).
pub async fn resolve(
    pool: &PgPool,
    alert_id: Uuid,
    resolution: &Resolution,
    actor: &str,
    note: &str,
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    lifecycle::resolve(&mut tx, alert_id, resolution, actor, note).await?;
    tx.commit().await?;
    Ok(())
}

/// Ids of settled alerts with `outcome` (held or failed), optionally of one tenant and
/// destination (names), oldest first: the selection of a bulk replay.
pub async fn settled_ids(
    db: impl PgExecutor<'_>,
    outcome: Outcome,
    tenant: Option<&str>,
    destination: Option<&str>,
) -> Result<Vec<Uuid>, StoreError> {
    let ids = sqlx::query_scalar::<_, Uuid>(
        "SELECT a.id FROM alert_outcomes ao JOIN alerts a ON a.id = ao.alert_id \
         JOIN tenants t ON t.id = a.tenant_id JOIN destinations d ON d.id = a.destination_id \
         WHERE ao.outcome = $1 AND a.pruned_at IS NULL AND ($2::text IS NULL OR t.name = $2) \
           AND ($3::text IS NULL OR d.name = $3) \
         ORDER BY ao.settled_at, a.id",
    )
    .bind(outcome)
    .bind(tenant)
    .bind(destination)
    .fetch_all(db)
    .await?;
    Ok(ids)
}

/// Enables or disables a tenant's destination. A disabled destination's alerts wait,
/// pending; nothing fails. Returns `false` when there is no such destination.
///
/// Its health count starts again (`crate::health`): sends that finished before now no
/// longer count towards an automatic disable, so a destination an operator enables after
/// it was disabled for failing gets its whole window again. The destination row is
/// locked before its health row, the order the health reports take.
pub async fn set_destination_enabled(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    name: &str,
    enabled: bool,
    actor: &str,
) -> Result<bool, StoreError> {
    let updated: i64 = sqlx::query_scalar(
        "WITH switched AS ( \
             UPDATE destinations SET enabled = $3, updated_at = now(), \
                 disabled_reason = CASE WHEN $3 THEN NULL ELSE 'disabled by ' || $4 END \
             WHERE tenant_id = $1 AND name = $2 \
             RETURNING id \
         ), recount AS ( \
             INSERT INTO destination_health (destination_id, counted_from) \
             SELECT id, now() FROM switched \
             ON CONFLICT (destination_id) DO UPDATE SET counted_from = now(), \
                 failing_since = NULL, auto_disabled_at = NULL, updated_at = now() \
         ) \
         SELECT count(*) FROM switched",
    )
    .bind(tenant_id)
    .bind(name)
    .bind(enabled)
    .bind(actor)
    .fetch_one(db)
    .await?;
    Ok(updated == 1)
}

/// Counts by tenant, destination and state.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct StateCount {
    /// Tenant name.
    pub tenant: String,
    /// Destination name.
    pub destination: String,
    /// State.
    #[sqlx(try_from = "String")]
    pub state: AlertState,
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
    let by_state = sqlx::query_as::<_, StateCount>(&format!(
        "SELECT t.name AS tenant, d.name AS destination, {STATE} AS state, \
                count(*) AS count \
         FROM alerts a JOIN tenants t ON t.id = a.tenant_id \
         JOIN destinations d ON d.id = a.destination_id \
         {STATE_JOINS} \
         GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
    ))
    .fetch_all(&mut *tx)
    .await?;
    let (oldest, uncertain, held, attempts, accepted, at): (
        Option<f64>,
        i64,
        i64,
        i64,
        i64,
        DateTime<Utc>,
    ) = sqlx::query_as(&format!(
        "SELECT ({oldest}), \
                    (SELECT count(*) FROM outbox WHERE status = $1), \
                    (SELECT count(*) FROM alert_outcomes WHERE outcome = $2), \
                    (SELECT count(*) FROM delivery_attempts \
                     WHERE kind = $3 AND finished_at > now() - interval '1 hour'), \
                    (SELECT count(*) FROM delivery_attempts \
                     WHERE kind = $3 AND outcome = $4 \
                       AND finished_at > now() - interval '1 hour'), \
                    now()",
        oldest = *OLDEST_DUE_AGE_SECS,
    ))
    .bind(LiveStatus::Uncertain)
    .bind(Outcome::Held)
    .bind(AttemptKind::Send)
    .bind(AttemptOutcome::Accepted)
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
pub fn prunable_outcomes(include_failed: bool) -> Vec<Outcome> {
    let mut outcomes = vec![Outcome::Accepted, Outcome::Superseded];
    if include_failed {
        outcomes.push(Outcome::Failed);
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

/// SQL for the settled, unpruned alerts retention may take: ids strictly between `after`
/// and `id_bound` (SQL expressions), with an outcome in `outcomes` (a `text[]`) settled
/// before `settled_before`. Columns: `id`, `accepted_by_attempt` (accepted, with no
/// outcome row: its attempt row says so), and for those the attempt's
/// `destination_reference` and finish time (`settled_at`). Two walks in id order: the
/// outcome table's primary key, and for accepted alerts without an outcome row, the
/// alerts' primary key with each alert's state read ([`STATE_JOINS`]).
fn prunable_settled(after: &str, id_bound: &str, outcomes: &str, settled_before: &str) -> String {
    format!(
        "SELECT ao.alert_id AS id, false AS accepted_by_attempt, \
                NULL::text AS destination_reference, NULL::timestamptz AS settled_at \
         FROM alert_outcomes ao JOIN alerts a ON a.id = ao.alert_id \
         WHERE ao.alert_id > {after} AND ao.alert_id < {id_bound} \
           AND ao.outcome = ANY({outcomes}::text[]) AND ao.settled_at < {settled_before} \
           AND a.pruned_at IS NULL \
         UNION ALL \
         SELECT a.id, true, aa.destination_reference, aa.finished_at \
         FROM alerts a {STATE_JOINS} \
         WHERE a.id > {after} AND a.id < {id_bound} AND a.pruned_at IS NULL \
           AND {accepted} = ANY({outcomes}::text[]) \
           AND {STATE} = {accepted} AND ao.alert_id IS NULL AND aa.finished_at < {settled_before}",
        accepted = Outcome::Accepted.sql(),
    )
}

/// One step of retention: up to `limit` alerts with a prunable outcome settled before
/// `settled_before` and after the cursor `after` (in id order) lose their payload (kept:
/// its fingerprint), attempt rows, evidence lines and rendered email (it holds the
/// payload's content too), in one transaction. Their evidence chains keep each entry's
/// position and hash (`evidence_pruned_chains`), so the checkpoints that covered them
/// still verify; their identity,
/// outcome, reference and times stay, so one alert per identity still holds. An accepted
/// alert whose acceptance only its attempt row records ([`STATE_JOINS`]) gets an outcome
/// row with that attempt's reference and time, in the same statement, before the attempt
/// row goes: it still reads as accepted, from a record that says so. Returns what was
/// removed and the cursor for the next step (`None` when nothing is left).
pub async fn prune_step(
    pool: &PgPool,
    settled_before: DateTime<Utc>,
    outcomes: &[Outcome],
    after: Uuid,
    limit: i64,
) -> Result<(Pruned, Option<Uuid>), StoreError> {
    // Approval clocks are the writers' and settlement is the database's: a day's margin
    // on the id bound covers any skew between them.
    let id_bound = first_id_at(settled_before + chrono::Duration::days(1));
    let (alerts, attempts, evidence, last): (i64, i64, i64, Option<Uuid>) =
        sqlx::query_as(&format!(
            "WITH candidates AS ( \
             SELECT a.id, s.accepted_by_attempt, s.destination_reference, s.settled_at \
             FROM ({settled}) s JOIN alerts a ON a.id = s.id \
             ORDER BY s.id \
             LIMIT $5 \
             FOR UPDATE OF a SKIP LOCKED \
         ), kept_outcomes AS ( \
             INSERT INTO alert_outcomes (alert_id, outcome, destination_reference, settled_at) \
             SELECT c.id, {accepted}, c.destination_reference, c.settled_at \
             FROM candidates c WHERE c.accepted_by_attempt \
         ), kept_chains AS ( \
             INSERT INTO evidence_pruned_chains (alert_id, positions, entry_hashes) \
             SELECT c.id, coalesce(array_agg(x.chain_pos ORDER BY x.chain_pos) \
                        FILTER (WHERE x.chain_pos IS NOT NULL), '{{}}'), \
                    coalesce(string_agg(x.entry_hash, ''::bytea ORDER BY x.chain_pos), ''::bytea) \
             FROM candidates c \
             LEFT JOIN LATERAL ( \
                 SELECT chain_pos, entry_hash FROM alert_events \
                 WHERE alert_id = c.id AND entry_hash IS NOT NULL \
                 UNION ALL \
                 SELECT chain_pos, entry_hash FROM delivery_attempts \
                 WHERE alert_id = c.id AND entry_hash IS NOT NULL \
             ) x ON true \
             GROUP BY c.id \
             ON CONFLICT (alert_id) DO NOTHING \
         ), attempts AS ( \
             DELETE FROM delivery_attempts WHERE alert_id IN (SELECT id FROM candidates) \
             RETURNING line IS NOT NULL AS with_line \
         ), evidence AS ( \
             DELETE FROM alert_events WHERE alert_id IN (SELECT id FROM candidates) \
             RETURNING 1 \
         ), rendered AS ( \
             DELETE FROM rendered_messages WHERE alert_id IN (SELECT id FROM candidates) \
         ), pruned AS ( \
             UPDATE alerts a SET payload = '{{}}', pruned_at = now() \
             FROM candidates c WHERE a.id = c.id \
             RETURNING a.id \
         ) \
         SELECT (SELECT count(*) FROM pruned), (SELECT count(*) FROM attempts), \
                (SELECT count(*) FROM evidence) \
                    + (SELECT count(*) FROM attempts WHERE with_line), \
                (SELECT id FROM candidates ORDER BY id DESC LIMIT 1)",
            settled = prunable_settled("$1", "$2", "$3", "$4"),
            accepted = Outcome::Accepted.sql(),
        ))
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
    outcomes: &[Outcome],
) -> Result<Pruned, StoreError> {
    let id_bound = first_id_at(settled_before + chrono::Duration::days(1));
    let (alerts, attempts, evidence): (i64, i64, i64) = sqlx::query_as(&format!(
        "WITH candidates AS ({settled}) \
         SELECT (SELECT count(*) FROM candidates), \
                (SELECT count(*) FROM delivery_attempts WHERE alert_id IN (SELECT id FROM candidates)), \
                (SELECT count(*) FROM alert_evidence WHERE alert_id IN (SELECT id FROM candidates))",
        settled = prunable_settled("'00000000-0000-0000-0000-000000000000'::uuid", "$1", "$2", "$3"),
    ))
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
