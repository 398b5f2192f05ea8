//! Where a new alert is written, once for every way in: the alerts table's one insert (its
//! columns, which an approval and a revision fill alike), an approval's first evidence
//! line, and the approval statement's body, which a single approval, a group of them and
//! a monitor's batch are all built on: their lane places, their alert rows in identity
//! order, their outbox rows and their first evidence lines. Each way in gives its approvals
//! as rows (`given`) and reads its own answer; what is written is this module's.

use crate::lanes::LANE_KEY;
use crate::lifecycle::ENQUEUE;

/// The alerts table and its columns, in the order every insert lists them: every alert,
/// approved or a revision, is inserted through this one insert (an approval gives `NULL`
/// for `reason`, a revision's own).
pub(super) const ALERT_INSERT: &str =
    "INSERT INTO alerts (id, tenant_id, subject, occurrence, destination_id, revision, \
     payload, payload_sha256, reason, created_by, traceparent, tracestate, ordering_key, \
     lane_seq)";

/// SQL for the trace id of a stored `traceparent` (the SQL expression `traceparent`):
/// characters 4 to 35 of its version-00 form, which the column's CHECK holds it to.
pub(crate) fn trace_id_of(traceparent: &str) -> String {
    format!("substr({traceparent}::text, 4, 32)")
}

/// SQL for the end of an approval's evidence line naming its trace (`; trace <id>`), or
/// nothing when the approval has no trace context (`traceparent`: the SQL expression of
/// the `traceparent` stored).
fn trace_note(traceparent: &str) -> String {
    format!("coalesce('; trace ' || {}, '')", trace_id_of(traceparent))
}

/// SQL for an approval's first evidence line, from SQL expressions: the destination's
/// name, the approval's trace context, and, for a monitor's approval, the monitor that
/// approved (`named_actor`), which the line names. (An API approval's actor is its token,
/// which the line's own actor column records.)
pub(super) fn approval_line(
    destination: &str,
    named_actor: Option<&str>,
    traceparent: &str,
) -> String {
    let (by, actor) = match named_actor {
        Some(actor) => (" by %s", format!("{actor}, ")),
        None => ("", String::new()),
    };
    format!(
        "format('alert approved{by} for destination `%s`; queued for delivery', \
                {actor}{destination}) || {note}",
        note = trace_note(traceparent),
    )
}

/// An approval statement: `given`, the approvals as a CTE of that name (after any others
/// it needs), then what every approval writes, then `answer`, which either continues the
/// `WITH` list (`, name AS (...)`) or ends it with the statement's `SELECT`.
///
/// `given` has one row per approval: `n` (its order, from 1), `id` (the new alert's id),
/// `tenant_id`, `destination_id` (`NULL` for a destination the tenant does not have:
/// nothing is written for it), `in_lane` (whether the destination orders per key),
/// `subject`, `occurrence`, `text` and `sha256` (the payload as stored and its
/// fingerprint), `actor`, `traceparent`, `tracestate`, `ordering_key` and `line` (its
/// first evidence line, [`approval_line`]). What follows it:
/// - `lane`: the places of the approvals whose destination orders per key, taken by
///   `outbox_lanes_join_new` (migration 20261217000056), which takes their identities'
///   advisory locks and then their lanes' rows in one order, and gives no place to an
///   identity that exists already or that is given again.
/// - `inserted`: the alert rows. The identity's UNIQUE constraint, not a read-then-write
///   check, is what makes concurrent approvals of one identity produce one alert: `ON
///   CONFLICT DO NOTHING` waits for a concurrent inserter of the same identity to commit
///   or roll back, then either inserts or yields to it. Rows are inserted in identity
///   order (tenant, then subject, occurrence and destination in byte order; of an
///   identity given twice, the first given, the one with the place), so that two
///   statements approving overlapping identities wait for each other instead of
///   deadlocking. The sort reads every place before the first row is inserted, so every
///   lane lock is taken before the statement waits on another approval's insert.
/// - `approved`, then [`ENQUEUE`]: each new alert's outbox row (behind the place it found
///   in its lane) and first evidence line; `queued` and `explained` return them.
pub(super) fn approval_statement(given: &str, answer: &str) -> String {
    format!(
        "WITH {given}, lane AS ( \
             SELECT j.alert_id, j.seq, j.waits_behind \
             FROM (SELECT array_agg(a.tenant_id ORDER BY a.n) AS tenants, \
                          array_agg(a.destination_id ORDER BY a.n) AS destinations, \
                          array_agg(a.subject ORDER BY a.n) AS subjects, \
                          array_agg(a.occurrence ORDER BY a.n) AS occurrences, \
                          array_agg({LANE_KEY} ORDER BY a.n) AS keys, \
                          array_agg(a.id ORDER BY a.n) AS ids \
                   FROM given a WHERE a.in_lane HAVING count(*) > 0) l, \
                  LATERAL outbox_lanes_join_new(l.tenants, l.destinations, l.subjects, \
                                                l.occurrences, l.keys, l.ids) j \
         ), inserted AS ( \
             {ALERT_INSERT} \
             SELECT g.id, g.tenant_id, g.subject, g.occurrence, g.destination_id, 0, g.text, \
                    g.sha256, NULL, g.actor, g.traceparent, g.tracestate, g.ordering_key, p.seq \
             FROM given g LEFT JOIN lane p ON p.alert_id = g.id \
             WHERE g.destination_id IS NOT NULL \
             ORDER BY g.tenant_id, g.subject COLLATE \"C\", g.occurrence COLLATE \"C\", \
                      g.destination_id, g.n \
             ON CONFLICT ON CONSTRAINT alerts_identity_key DO NOTHING \
             RETURNING id, destination_id, created_at, traceparent, \
                       evidence_genesis(alerts) AS genesis \
         ), approved AS ( \
             SELECT n.id, n.destination_id, NULL::uuid AS after_alert, \
                    p.waits_behind AS lane_after, g.actor, g.line, n.genesis \
             FROM inserted n JOIN given g ON g.id = n.id \
             LEFT JOIN lane p ON p.alert_id = n.id \
         ), {enqueue}{answer}",
        enqueue = *ENQUEUE,
    )
}
