-- Fewer writes per delivery. A routine delivery used to rewrite the wide `alerts` row (its
-- payload included, and every one of its index entries, since `settled_at` and `outcome`
-- are indexed) and to add an evidence line beside its attempt row. From here on:
--
-- - where an alert came to rest lives in the narrow `alert_outcomes`: settling inserts a
--   row there, putting a settled alert back in the queue deletes it, and `alerts` is
--   written at approval (and by retention) only;
-- - a dispatcher's completion that recorded an attempt carries its evidence in that
--   attempt row (`to_state`, `line`) instead of a separate `alert_events` row; the view
--   `alert_evidence` reads both as one trail.

-- Where an alert came to rest once it left the live outbox: one row per settled alert,
-- none while it is live (its state is then the outbox row's status). No foreign key, for
-- the reason given for the evidence tables (20261129000004): every writer holds the
-- alert's outbox row, which references the alert, and nothing deletes alerts.
CREATE TABLE alert_outcomes (
    alert_id                uuid PRIMARY KEY,
    outcome                 text NOT NULL CHECK (outcome IN ('accepted', 'held', 'failed', 'superseded')),
    -- The destination's own reference for the accepted alert (body `id` or a header), or
    -- the operator's reference when reconciled by hand.
    destination_reference   text,
    settled_at              timestamptz NOT NULL DEFAULT now()
);

INSERT INTO alert_outcomes (alert_id, outcome, destination_reference, settled_at)
SELECT id, outcome, destination_reference, settled_at FROM alerts WHERE outcome IS NOT NULL;

-- Operators' "what needs attention" listings (oldest settled first), and the console's
-- held/failed filter, which walks alert ids newest first.
CREATE INDEX alert_outcomes_attention_idx ON alert_outcomes (settled_at)
    WHERE outcome IN ('held', 'failed');
CREATE INDEX alert_outcomes_held_failed_id_idx ON alert_outcomes (alert_id)
    WHERE outcome IN ('held', 'failed');

DROP VIEW alert_states;
DROP INDEX alerts_attention_idx;
DROP INDEX alerts_held_failed_id_idx;
-- Drops the CHECK that tied the two together as well.
ALTER TABLE alerts DROP COLUMN outcome, DROP COLUMN settled_at, DROP COLUMN destination_reference;

-- An alert's state in one place (for people at a psql prompt and for tests; the store's
-- readers use the same joins, `lifecycle::STATE_JOINS`): the live outbox row's status
-- while it has one, otherwise where the alert came to rest.
CREATE VIEW alert_states AS
SELECT a.id AS alert_id,
       COALESCE(o.status, ao.outcome) AS state
FROM alerts a
LEFT JOIN outbox o ON o.alert_id = a.id
LEFT JOIN alert_outcomes ao ON ao.alert_id = a.id;

-- A completion's evidence, folded into its attempt row: the state the attempt led to and
-- the line a person reads. NULL on rows written before this migration (their lines are in
-- alert_events) and on attempt rows that are not a transition (a lookup recorded before a
-- resend, whose line is the resend's "attempt N started").
ALTER TABLE delivery_attempts
    ADD COLUMN to_state text
        CHECK (to_state IN ('pending', 'sending', 'accepted', 'uncertain', 'held', 'failed', 'superseded')),
    ADD COLUMN line text CHECK (octet_length(line) BETWEEN 1 AND 2000),
    ADD CONSTRAINT delivery_attempts_line_with_state CHECK ((to_state IS NULL) = (line IS NULL));

-- The evidence trail, as one: the lines of alert_events and those folded into attempt
-- rows. An attempt's line is a transition out of `sending`, by the dispatcher that made
-- it, at the attempt's finish. Readers order by (at, source, id): time first, and within
-- one instant the events before the attempts, each in insertion order.
CREATE VIEW alert_evidence AS
SELECT e.alert_id, e.at, e.from_state, e.to_state, e.attempt, e.actor, e.line,
       0 AS source, e.id
FROM alert_events e
UNION ALL
SELECT d.alert_id, d.finished_at, 'sending', d.to_state, d.attempt, 'dispatcher:' || d.worker,
       d.line, 1 AS source, d.id
FROM delivery_attempts d
WHERE d.line IS NOT NULL;
