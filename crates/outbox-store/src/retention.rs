//! Retention (`outboxctl prune`): settled alerts older than a cutoff lose their payload,
//! attempt rows, evidence lines and rendered email, in steps of one transaction each,
//! while their identity, outcome and evidence chain positions stay. Alerts are found by
//! walking primary keys from the cutoff's smallest UUIDv7 (`first_id_at`), without an
//! index of their own.

use chrono::{DateTime, Utc};
use outbox_core::Outcome;
use sqlx::PgPool;
use uuid::Uuid;

use crate::lifecycle::{STATE, STATE_JOINS};
use crate::sql_names::SqlName;
use crate::StoreError;

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
