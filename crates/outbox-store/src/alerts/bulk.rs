//! The monitors' bulk approval: many alerts of one tenant decided in one statement.

use outbox_core::trace_context::TraceContext;
use outbox_core::Ordering;
use sqlx::{Acquire, PgConnection};
use uuid::Uuid;

use crate::lifecycle::ENQUEUE;
use crate::sql_names::SqlName;
use crate::StoreError;

/// One alert a monitor decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitorAlert {
    /// Destination.
    pub destination_id: Uuid,
    /// Identity: subject.
    pub subject: String,
    /// Identity: occurrence.
    pub occurrence: String,
    /// Payload JSON text (an object).
    pub payload_json: String,
}

/// Approves many alerts of one tenant in one statement: each new identity gets its alert,
/// its pending outbox row and its evidence line together; identities that exist already
/// are left exactly as they are (whatever today's payload would say). Rows are inserted
/// in identity order (byte order, as the decider sorts them), so concurrent deciders
/// approving overlapping batches wait for each other briefly instead of deadlocking.
///
/// Alerts for destinations that order per key join their lanes (key: the subject), set
/// based, in its own transaction:
/// 1. a first statement takes the identity locks of those alerts (the transaction-scoped
///    advisory lock `outbox_lane_join_new` takes for one), in identity order, so that no
///    other approval of one of them is under way once it returns;
/// 2. the approving statement, with a snapshot taken after those locks, leaves out the
///    identities that exist (a repeated approval takes no place in a lane) and joins the
///    rest with one upsert per lane (`bumped`), in the order every locker of several
///    lanes uses (key, then destination): the lane's last position grows by the number of
///    its new alerts, its tail becomes the last of them, and the tail it found
///    (`joined_behind`) is what the first of them waits behind; each of the others waits
///    behind the one before it. Each alert finds its lane's figures in one JSON object
///    keyed by lane (`lane_ends`), not by joining the upsert's rows: PostgreSQL cannot
///    estimate those, and a nested loop over them made a batch of 5,000 take seconds.
///    `places` gathers the positions into arrays, which
///    PostgreSQL computes whole before the insert reads its first row, so every lane lock
///    is taken before this statement waits on any other approval's insert.
///
/// A lane's alerts in one batch take positions in occurrence order.
/// Every alert created keeps `trace`, the context of the approval (one per batch: the
/// monitor run's approval span). Returns the ids created.
pub async fn approve_batch(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    alerts: &[MonitorAlert],
    actor: &str,
    trace: Option<&TraceContext>,
) -> Result<Vec<Uuid>, StoreError> {
    if alerts.is_empty() {
        return Ok(Vec::new());
    }
    for alert in alerts {
        StoreError::check_payload(&alert.payload_json)?;
    }
    let destinations: Vec<Uuid> = alerts.iter().map(|a| a.destination_id).collect();
    let subjects: Vec<&str> = alerts.iter().map(|a| a.subject.as_str()).collect();
    let occurrences: Vec<&str> = alerts.iter().map(|a| a.occurrence.as_str()).collect();
    let mut tx = conn.begin().await?;
    sqlx::query(&format!(
        "SELECT count(pg_advisory_xact_lock(hashtext('outbox.approval.identity'), \
             hashtext($1::text || '/' || i.destination_id::text || '/' || i.subject || '/' \
                      || i.occurrence))) \
         FROM (SELECT i.* FROM unnest($2::uuid[], $3::text[], $4::text[]) \
                   AS i(destination_id, subject, occurrence) \
               JOIN destinations d ON d.id = i.destination_id \
               WHERE d.ordering = {per_key} \
               ORDER BY i.subject COLLATE \"C\", i.destination_id, i.occurrence COLLATE \"C\" \
               OFFSET 0) i",
        per_key = Ordering::PerKey.sql(),
    ))
    .bind(tenant_id)
    .bind(&destinations)
    .bind(&subjects)
    .bind(&occurrences)
    .execute(&mut *tx)
    .await?;
    // Each payload is parsed once (the `jsonb[]` cast) and rendered once (`input`, used
    // twice, is computed once): the text stored, sent and fingerprinted. Each
    // destination's evidence line is formatted once. Sorting with the "C" collation is
    // byte order, whatever the database's.
    let created = sqlx::query_scalar::<_, Uuid>(&format!(
        "WITH input AS ( \
             SELECT i.id, i.destination_id, i.subject, i.occurrence, i.payload::text AS payload \
             FROM unnest($1::uuid[], $3::uuid[], $4::text[], $5::text[], $6::jsonb[]) \
                 AS i(id, destination_id, subject, occurrence, payload) \
         ), ordered AS ( \
             SELECT i.id, i.destination_id, i.subject, \
                    row_number() OVER lane AS nth, lag(i.id) OVER lane AS before_in_batch, \
                    count(*) OVER whole_lane AS new_in_lane, \
                    last_value(i.id) OVER whole_lane AS last_in_lane \
             FROM (SELECT DISTINCT ON (i.destination_id, i.subject, i.occurrence) i.* \
                   FROM input i JOIN destinations d ON d.id = i.destination_id \
                   WHERE d.ordering = {per_key} \
                     AND NOT EXISTS (SELECT 1 FROM alerts a \
                                     WHERE a.tenant_id = $2 AND a.subject = i.subject \
                                       AND a.occurrence = i.occurrence \
                                       AND a.destination_id = i.destination_id \
                                       AND a.revision = 0) \
                   ORDER BY i.destination_id, i.subject, i.occurrence, i.id) i \
             WINDOW lane AS (PARTITION BY i.destination_id, i.subject \
                             ORDER BY i.occurrence COLLATE \"C\"), \
                    whole_lane AS (lane ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) \
         ), bumped AS ( \
             INSERT INTO alert_lanes AS l (destination_id, ordering_key, last_seq, tail_alert, \
                                           joined_behind) \
             SELECT o.destination_id, o.subject, o.new_in_lane, o.last_in_lane, NULL \
             FROM ordered o WHERE o.nth = 1 \
             ORDER BY o.subject COLLATE \"C\", o.destination_id \
             ON CONFLICT (destination_id, ordering_key) DO UPDATE \
                 SET last_seq = l.last_seq + EXCLUDED.last_seq, joined_behind = l.tail_alert, \
                     tail_alert = EXCLUDED.tail_alert \
             RETURNING l.destination_id, l.ordering_key, l.last_seq, l.joined_behind \
         ), lane_ends AS ( \
             SELECT jsonb_object_agg(b.destination_id::text || '/' || b.ordering_key, \
                                     jsonb_build_array(b.last_seq, b.joined_behind)) AS by_lane \
             FROM bumped b \
         ), places AS ( \
             SELECT array_agg(o.id) AS ids, \
                    array_agg((e.lane ->> 0)::int8 - o.new_in_lane + o.nth) AS seqs, \
                    array_agg(CASE WHEN o.nth = 1 THEN (e.lane ->> 1)::uuid \
                                   ELSE o.before_in_batch END) AS waits_behind \
             FROM ordered o, lane_ends le, \
                  LATERAL (SELECT le.by_lane -> (o.destination_id::text || '/' || o.subject) AS lane) e \
         ), place AS ( \
             SELECT * FROM unnest((SELECT ids FROM places), (SELECT seqs FROM places), \
                                  (SELECT waits_behind FROM places)) AS p(id, seq, waits_behind) \
         ), inserted AS ( \
             INSERT INTO alerts (id, tenant_id, subject, occurrence, destination_id, revision, \
                                 payload, payload_sha256, created_by, traceparent, tracestate, \
                                 lane_seq) \
             SELECT i.id, $2, i.subject, i.occurrence, i.destination_id, 0, i.payload, \
                    sha256(convert_to(i.payload, 'UTF8')), $7, $8, $9, p.seq \
             FROM input i LEFT JOIN place p ON p.id = i.id \
             ORDER BY i.subject COLLATE \"C\", i.occurrence COLLATE \"C\", i.destination_id, \
                      p.id IS NULL \
             ON CONFLICT ON CONSTRAINT alerts_identity_key DO NOTHING \
             RETURNING id, destination_id, evidence_genesis(alerts) AS genesis \
         ), line AS MATERIALIZED ( \
             SELECT id, format('alert approved by %s for destination `%s`; queued for delivery', \
                               $7::text, name) || {trace_note} AS line \
             FROM destinations WHERE tenant_id = $2 \
         ), approved AS ( \
             SELECT n.id, n.destination_id, NULL::uuid AS after_alert, p.waits_behind AS lane_after, \
                    $7::text AS actor, l.line, n.genesis \
             FROM inserted n JOIN line l ON l.id = n.destination_id \
             LEFT JOIN place p ON p.id = n.id \
         ), {enqueue} \
         SELECT id FROM inserted",
        enqueue = *ENQUEUE,
        trace_note = crate::alerts::trace_note("$8"),
        per_key = Ordering::PerKey.sql(),
    ))
    .bind(alerts.iter().map(|_| Uuid::now_v7()).collect::<Vec<_>>())
    .bind(tenant_id)
    .bind(&destinations)
    .bind(&subjects)
    .bind(&occurrences)
    .bind(
        alerts
            .iter()
            .map(|a| a.payload_json.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(actor)
    .bind(trace.map(|t| t.parent.to_string()))
    .bind(trace.and_then(|t| t.state.as_ref()).map(|s| s.as_str()))
    .fetch_all(&mut *tx)
    .await
    .map_err(StoreError::from_payload_error)?;
    tx.commit().await?;
    Ok(created)
}
