-- A dispatcher's acceptance writes no outcome row: the attempt row that got the alert
-- accepted says so (`to_state = 'accepted'`, with the destination's reference and its
-- finish time), and it is written in the same statement that deletes the outbox row.
-- Every other resting place (held, failed, superseded, an acceptance an operator
-- established, and any alert retention prunes) keeps its outcome row.
--
-- An alert's state is therefore: its outbox row's status while it has one, else its
-- outcome row's outcome, else `accepted` where its newest attempt row that carries a
-- state says `accepted`. An alert with none of these has no state (NULL), which the
-- checker reports: a lost outbox row never reads as delivered. The store's readers use
-- the same joins (`lifecycle::STATE_JOINS`). The view now also shows where a settled
-- alert's reference and settlement time are read from.
CREATE OR REPLACE VIEW alert_states AS
SELECT a.id AS alert_id,
       COALESCE(o.status, ao.outcome,
                CASE WHEN aa.to_state = 'accepted' THEN aa.to_state END) AS state,
       COALESCE(ao.destination_reference,
                CASE WHEN aa.to_state = 'accepted' THEN aa.destination_reference END)
           AS destination_reference,
       COALESCE(ao.settled_at, CASE WHEN aa.to_state = 'accepted' THEN aa.finished_at END)
           AS settled_at
FROM alerts a
LEFT JOIN outbox o ON o.alert_id = a.id
LEFT JOIN alert_outcomes ao ON ao.alert_id = a.id
LEFT JOIN LATERAL (
    SELECT fa.to_state, fa.destination_reference, fa.finished_at
    FROM delivery_attempts fa
    WHERE o.alert_id IS NULL AND ao.alert_id IS NULL
      AND fa.alert_id = a.id AND fa.to_state IS NOT NULL
    ORDER BY fa.id DESC
    LIMIT 1
) aa ON true;
