-- The view states the "accepted by its attempt" rule once, as the store's readers now do
-- (`lifecycle::STATE_JOINS`): `aa` is an alert's newest attempt row that carries a state,
-- kept only if that state is `accepted`. Its columns are then plain COALESCEs. What the
-- view returns is unchanged.
CREATE OR REPLACE VIEW alert_states AS
SELECT a.id AS alert_id,
       COALESCE(o.status, ao.outcome, aa.to_state) AS state,
       COALESCE(ao.destination_reference, aa.destination_reference) AS destination_reference,
       COALESCE(ao.settled_at, aa.finished_at) AS settled_at
FROM alerts a
LEFT JOIN outbox o ON o.alert_id = a.id
LEFT JOIN alert_outcomes ao ON ao.alert_id = a.id
LEFT JOIN LATERAL (
    SELECT newest.*
    FROM (
        SELECT fa.to_state, fa.destination_reference, fa.finished_at
        FROM delivery_attempts fa
        WHERE o.alert_id IS NULL AND ao.alert_id IS NULL
          AND fa.alert_id = a.id AND fa.to_state IS NOT NULL
        ORDER BY fa.id DESC
        LIMIT 1
    ) newest
    WHERE newest.to_state = 'accepted'
) aa ON true;
