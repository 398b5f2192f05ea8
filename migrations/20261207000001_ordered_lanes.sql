-- Ordered lanes. A destination may ask for the alerts about one thing to arrive in the
-- order they were approved: with `ordering = 'per-key'`, the alerts of one ordering key
-- form a lane, and alert n+1 of a lane is not sent until alert n is released (accepted,
-- superseded, resolved by an operator, or failed under `on_head_failed = 'skip'`). Across
-- keys there is no order and no waiting.
--
-- How it is kept, without scanning the backlog to find lane heads:
-- - `alert_lanes` holds one row per (destination, key): the last position handed out and
--   the lane's newest unreleased alert (`tail_alert`, NULL when all are released). An
--   approval locks that row, takes the next position and becomes the tail; the row lock
--   is held until the approval commits, so positions are in commit order even when two
--   deciders race.
-- - a new member's outbox row names the tail it found in `outbox.lane_after`: while that
--   is set the row is not due, and it is outside `outbox_due_idx`, so the claim never
--   reads waiting members (a lane's head is an ordinary due row).
-- - releasing an alert hands its place on: the rows that named it take its own
--   `lane_after` (NULL for a head), and the lane's tail is cleared if it was the tail,
--   in the transaction that settles the alert, holding the lane's row first.
-- Unordered destinations use none of this: their rows' `lane_after` is always NULL.

ALTER TABLE destinations
    ADD COLUMN ordering text NOT NULL DEFAULT 'none' CHECK (ordering IN ('none', 'per-key')),
    ADD COLUMN on_head_failed text NOT NULL DEFAULT 'block'
        CHECK (on_head_failed IN ('block', 'skip'));

-- The ordering key an approval gave (NULL: the subject), stored whatever the destination's
-- ordering, so that ordering may be turned on later; and the alert's position in its lane
-- when it was approved for a destination that orders.
ALTER TABLE alerts
    ADD COLUMN ordering_key text CHECK (octet_length(ordering_key) BETWEEN 1 AND 200),
    ADD COLUMN lane_seq bigint CHECK (lane_seq > 0);

CREATE TABLE alert_lanes (
    destination_id  uuid NOT NULL REFERENCES destinations (id) ON DELETE CASCADE,
    -- The alerts' ordering key, or their subject when they gave none.
    ordering_key    text NOT NULL,
    -- The position the newest member was given (positions start at 1).
    last_seq        bigint NOT NULL DEFAULT 0,
    -- The newest member not yet released, which the next member waits behind; NULL when
    -- every member has been released.
    tail_alert      uuid,
    PRIMARY KEY (destination_id, ordering_key)
) WITH (fillfactor = 70);

-- The unreleased alert a row waits behind in its lane (NULL: it is not waiting).
ALTER TABLE outbox ADD COLUMN lane_after uuid;

-- The claim reads due rows only, and a row waiting in a lane is not due: leaving it out of
-- the index keeps the claim's index scan to lane heads and unordered rows, however long
-- the lanes behind them. (Dispatchers of the previous version claim with the old
-- predicate, which no longer implies this one: stop them before migrating.)
DROP INDEX outbox_due_idx;
CREATE INDEX outbox_due_idx ON outbox (next_attempt_at)
    WHERE status IN ('pending', 'uncertain') AND lane_after IS NULL;

-- Releasing an alert finds the rows waiting behind it.
CREATE INDEX outbox_lane_after_idx ON outbox (lane_after) WHERE lane_after IS NOT NULL;

-- Joins `new_alert` to the lane (`destination`, `key`): locks the lane's row (creating it
-- the first time), hands out the next position and makes the alert the lane's tail.
-- Returns the position and the previous tail, which the new alert's outbox row waits
-- behind (NULL when the lane had nothing unreleased). VOLATILE, so that the lock is
-- taken before the lane is read: a concurrent approval of the same lane waits for this
-- transaction, and then reads what it committed.
CREATE FUNCTION outbox_lane_join(destination uuid, key text, new_alert uuid,
                                 OUT seq bigint, OUT waits_behind uuid)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    SELECT l.last_seq, l.tail_alert INTO seq, waits_behind FROM alert_lanes l
    WHERE l.destination_id = destination AND l.ordering_key = key FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO alert_lanes (destination_id, ordering_key) VALUES (destination, key)
        ON CONFLICT DO NOTHING;
        SELECT l.last_seq, l.tail_alert INTO seq, waits_behind FROM alert_lanes l
        WHERE l.destination_id = destination AND l.ordering_key = key FOR UPDATE;
    END IF;
    seq := seq + 1;
    UPDATE alert_lanes l SET last_seq = seq, tail_alert = new_alert
    WHERE l.destination_id = destination AND l.ordering_key = key;
END
$$;

-- An approval's lane join: as `outbox_lane_join`, for a new identity only. The identity's
-- transaction-scoped advisory lock is taken first and its existence checked after it (a
-- fresh snapshot), so that an approval that will find the identity already there (its
-- insert does nothing) never joins a lane: a repeated approval, racing or not, takes no
-- position and leaves the tail alone. Returns NULLs when the identity exists.
CREATE FUNCTION outbox_lane_join_new(tenant uuid, subject text, occurrence text,
                                     destination uuid, key text, new_alert uuid,
                                     OUT seq bigint, OUT waits_behind uuid)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('outbox.approval.identity'),
        hashtext(tenant::text || '/' || destination::text || '/' || subject || '/' || occurrence));
    IF EXISTS (SELECT 1 FROM alerts a
               WHERE a.tenant_id = tenant AND a.subject = outbox_lane_join_new.subject
                 AND a.occurrence = outbox_lane_join_new.occurrence
                 AND a.destination_id = destination AND a.revision = 0) THEN
        RETURN;
    END IF;
    SELECT j.seq, j.waits_behind INTO seq, waits_behind
    FROM outbox_lane_join(destination, key, new_alert) j;
END
$$;
