//! What happens under a claim's lease besides its completion: the sweep of leases that ran
//! out (the send may have happened), a resend started under a live one, and a claim given
//! back unsent.

use sqlx::PgExecutor;
use uuid::Uuid;

use outbox_core::{AttemptKind, AttemptOutcome, LiveStatus};

use super::claim::ClaimedAlert;
use crate::lifecycle::{requeue_assignments, ATTEMPT_INSERT, EVENT_INSERT};
use crate::sql_names::SqlName;
use crate::StoreError;

/// Turns `sending` rows whose lease has expired into `uncertain`: their dispatcher died or
/// stalled after committing "attempt N started", so the send may have happened. Records
/// the attempt as uncertain, with its evidence line in the attempt row (a lookup's
/// lease, which started no send, gets an evidence line of its own). The actor is the
/// dispatcher whose lease expired. Returns how many rows it moved.
///
/// The lines are inserted from the rows `moved` returns, so each row's update comes
/// before its line's insert, whose chain trigger then moves the row's chain head (an
/// update of the same row after it, never before).
pub async fn sweep_expired_leases(db: impl PgExecutor<'_>, limit: i64) -> Result<u64, StoreError> {
    let moved: i64 = sqlx::query_scalar(&format!(
        "WITH expired AS ( \
             SELECT o.alert_id, o.attempts, o.lease_owner, o.fencing_token, o.send_started_at \
             FROM outbox o \
             WHERE o.status = {sending} AND o.lease_expires_at < now() \
             ORDER BY o.lease_expires_at \
             LIMIT $1 \
             FOR UPDATE SKIP LOCKED \
         ), moved AS ( \
             UPDATE outbox o SET {requeue} \
             FROM expired e WHERE o.alert_id = e.alert_id \
             RETURNING o.alert_id \
         ), recorded AS ( \
             {ATTEMPT_INSERT} \
             SELECT e.alert_id, e.attempts, {send}, e.lease_owner, e.fencing_token, \
                    e.send_started_at, now(), e.alert_id::text, a.payload_sha256, \
                    {attempt_uncertain}, NULL, NULL, 'lease_expired', NULL, {uncertain}, \
                    format('lease expired during attempt %s; the send may have happened; \
destination acceptance unknown', e.attempts) \
             FROM moved m JOIN expired e ON e.alert_id = m.alert_id \
             JOIN alerts a ON a.id = e.alert_id \
             WHERE e.send_started_at IS NOT NULL \
         ), explained AS ( \
             {EVENT_INSERT} \
             SELECT e.alert_id, {sending}, {uncertain}, e.attempts, 'dispatcher:' || e.lease_owner, \
                    format('lease expired while settling attempt %s; still uncertain', e.attempts) \
             FROM moved m JOIN expired e ON e.alert_id = m.alert_id \
             WHERE e.send_started_at IS NULL \
         ) \
         SELECT count(*) FROM moved",
        requeue = requeue_assignments(&LiveStatus::Uncertain.sql(), "now()"),
        sending = LiveStatus::Sending.sql(),
        uncertain = LiveStatus::Uncertain.sql(),
        send = AttemptKind::Send.sql(),
        attempt_uncertain = AttemptOutcome::Uncertain.sql(),
    ))
    .bind(limit)
    .fetch_one(db)
    .await?;
    Ok(u64::try_from(moved).unwrap_or(0))
}

/// Starts a resend of a claimed uncertain row (same key, same payload): commits
/// "attempt N started" with the reason before the send, and flags the alert as a possible
/// duplicate when nothing rules a duplicate out. Returns the new attempt number, or `None`
/// when the claim is no longer ours.
pub async fn begin_resend(
    db: impl PgExecutor<'_>,
    alert_id: Uuid,
    fencing_token: i64,
    worker: &str,
    why: &str,
    possible_duplicate: bool,
) -> Result<Option<i32>, StoreError> {
    let attempt = sqlx::query_scalar::<_, i32>(&format!(
        "WITH resend AS ( \
             UPDATE outbox SET attempts = attempts + 1, send_started_at = now() \
             WHERE alert_id = $1 AND fencing_token = $2 AND status = {sending} \
             RETURNING alert_id, attempts \
         ), flagged AS ( \
             UPDATE alerts SET possible_duplicate = true \
             WHERE id IN (SELECT alert_id FROM resend) AND $5 \
         ), started AS ( \
             {EVENT_INSERT} \
             SELECT alert_id, {sending}, {sending}, attempts, 'dispatcher:' || $3, \
                    format('attempt %s started: %s', attempts, $4::text) \
             FROM resend \
         ) \
         SELECT attempts FROM resend",
        sending = LiveStatus::Sending.sql(),
    ))
    .bind(alert_id)
    .bind(fencing_token)
    .bind(worker)
    .bind(why)
    .bind(possible_duplicate)
    .fetch_optional(db)
    .await?;
    Ok(attempt)
}

/// Gives back a claim that was never acted on (shutdown, a destination disabled meanwhile,
/// a lease too short for the send): the row returns to the state it was claimed from, and
/// a pending row's attempt count is restored, since nothing was sent. `why` goes into the
/// evidence. Fenced like a completion.
pub async fn release(
    db: impl PgExecutor<'_>,
    claim: &ClaimedAlert,
    worker: &str,
    why: &str,
) -> Result<bool, StoreError> {
    let released = sqlx::query_scalar::<_, Uuid>(&format!(
        "WITH released AS ( \
             UPDATE outbox o SET {requeue}, \
                 attempts = o.attempts - CASE WHEN $3 = {pending} THEN 1 ELSE 0 END \
             WHERE o.alert_id = $1 AND o.fencing_token = $2 AND o.status = {sending} \
             RETURNING o.alert_id, o.attempts \
         ), explained AS ( \
             {EVENT_INSERT} \
             SELECT alert_id, {sending}, $3, NULL, 'dispatcher:' || $4, \
                    format('claim given back: %s; nothing was sent; back to %s', $5::text, $3) \
             FROM released \
         ) \
         SELECT alert_id FROM released",
        requeue = requeue_assignments("$3", "now()"),
        pending = LiveStatus::Pending.sql(),
        sending = LiveStatus::Sending.sql(),
    ))
    .bind(claim.alert_id)
    .bind(claim.fencing_token)
    .bind(claim.claimed_from)
    .bind(worker)
    .bind(why)
    .fetch_optional(db)
    .await?;
    Ok(released.is_some())
}
