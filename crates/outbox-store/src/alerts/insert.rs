//! Where a new alert is written, once for every way in: the alerts table's one insert (its
//! columns, which an approval and a revision fill alike), an approval's first evidence
//! line, and the approval statement's body, which a single approval, a group of them and
//! a monitor's batch are all built on: their lane places, their alert rows in identity
//! order, their outbox rows and their first evidence lines. Each way in gives its approvals
//! as rows (`given`) and reads its own answer; what is written is this module's.

use crate::lane_key::LANE_KEY;
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

/// What an approval's first evidence line says besides the destination and the trace:
/// whether it names who approved. A monitor's approval does (`approved by
/// decider:renewals`); an API approval does not, its actor being its token, which the
/// line's own actor column records.
#[derive(Debug, Clone, Copy)]
pub(super) enum ApprovalLine {
    /// `alert approved for destination `ops`; queued for delivery`.
    Plain,
    /// `alert approved by <actor> for destination `ops`; queued for delivery`.
    NamingActor,
}

impl ApprovalLine {
    /// SQL for the line, over the inserted alert `n` (its `created_by` and `traceparent`)
    /// and its destination `d`, with its trace's id at the end when it has one.
    fn sql(self) -> String {
        let (by, actor) = match self {
            ApprovalLine::Plain => ("", ""),
            ApprovalLine::NamingActor => (" by %s", "n.created_by, "),
        };
        format!(
            "format('alert approved{by} for destination `%s`; queued for delivery', \
                    {actor}d.name) || {note}",
            note = trace_note("n.traceparent"),
        )
    }
}

/// An approval statement: `given`, the approvals as a CTE of that name (after any others
/// it needs), then what every approval writes, then `answer`, which either continues the
/// `WITH` list (`, name AS (...)`) or ends it with the statement's `SELECT`.
///
/// `given` has one row per approval: `n` (its order, from 1), `id` (the new alert's id),
/// `tenant_id`, `destination_id` (`NULL` for a destination the tenant does not have:
/// nothing is written for it), `in_lane` (whether the destination orders per key),
/// `subject`, `occurrence`, `text` and `sha256` (the payload as stored and its
/// fingerprint), `actor`, `traceparent`, `tracestate` and `ordering_key`. What follows it:
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
///   in its lane) and first evidence line ([`ApprovalLine`]); `queued` and `explained`
///   return them. What they need is read from the inserted row and its destination, not
///   by joining `given` again: PostgreSQL cannot estimate a join of two CTEs, and over a
///   batch of thousands its guess grew by orders of magnitude.
pub(super) fn approval_statement(given: &str, line: ApprovalLine, answer: &str) -> String {
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
             RETURNING id, destination_id, created_at, created_by, traceparent, \
                       evidence_genesis(alerts) AS genesis \
         ), approved AS ( \
             SELECT n.id, n.destination_id, NULL::uuid AS after_alert, \
                    p.waits_behind AS lane_after, n.created_by AS actor, {line} AS line, \
                    n.genesis \
             FROM inserted n JOIN destinations d ON d.id = n.destination_id \
             LEFT JOIN lane p ON p.alert_id = n.id \
         ), {enqueue}{answer}",
        line = line.sql(),
        enqueue = *ENQUEUE,
    )
}
