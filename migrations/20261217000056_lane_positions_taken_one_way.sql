-- Places in ordered lanes are taken one way. A single approval, a group of approvals, a
-- monitor's bulk approval and a revision all call `outbox_lanes_join` (the approvals
-- through `outbox_lanes_join_new`, which first keeps repeated approvals out), instead of a
-- row-at-a-time function for the first two and the last and a statement of its own for
-- the bulk approval. What a place is does not change (`20261207000001_ordered_lanes`): the
-- lane's row holds the last position handed out and its newest unreleased alert (the
-- tail), and a new member waits behind the tail it found.

-- Joins `new_alerts[i]` to the lane (`lane_destinations[i]`, `lane_keys[i]`), for every i:
-- each lane's row is upserted once, however many of the alerts join it (`INSERT ... ON
-- CONFLICT DO UPDATE` locks the row as `SELECT ... FOR UPDATE` would), in the order every
-- locker of several lanes uses (key in byte order, then destination), so that two callers
-- joining overlapping lanes wait for each other instead of deadlocking. The lane's last
-- position grows by the number of its new alerts and its tail becomes the last of them;
-- within a lane the alerts take positions in the order given. Returns each alert's
-- position and the alert it waits behind: for the first of a lane, the tail the lane had
-- (`joined_behind`: `RETURNING` gives a row's new values only, so the upsert keeps the
-- tail it found there; NULL when the lane had nothing unreleased); for the others, the
-- alert given before it.
--
-- Each alert finds its lane's figures in one JSON object keyed by lane (`lane_ends`), not
-- by joining the upsert's rows: PostgreSQL cannot estimate those, and a nested loop over
-- them made a batch of 5,000 take seconds. The function returns only once every lane it
-- joins is locked (a PL/pgSQL function's rows are all computed before the first is
-- returned), so a caller that inserts the alerts afterwards takes every lane lock before
-- it waits on any other approval's insert. `ROWS 100`: what a caller's plan expects of
-- it (most calls join a few alerts; PostgreSQL's default guess is 1,000).
CREATE FUNCTION outbox_lanes_join(lane_destinations uuid[], lane_keys text[], new_alerts uuid[])
    RETURNS TABLE (alert_id uuid, seq bigint, waits_behind uuid)
    LANGUAGE plpgsql VOLATILE ROWS 100 AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH given AS (
        SELECT * FROM unnest(lane_destinations, lane_keys, new_alerts) WITH ORDINALITY
            AS g(destination_id, ordering_key, id, n)
    ), ordered AS (
        SELECT g.id, g.destination_id, g.ordering_key,
               row_number() OVER lane AS nth, lag(g.id) OVER lane AS before_in_call,
               count(*) OVER whole_lane AS new_in_lane,
               last_value(g.id) OVER whole_lane AS last_in_lane
        FROM given g
        WINDOW lane AS (PARTITION BY g.destination_id, g.ordering_key ORDER BY g.n),
               whole_lane AS (lane ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
    ), bumped AS (
        INSERT INTO alert_lanes AS l (destination_id, ordering_key, last_seq, tail_alert,
                                      joined_behind)
        SELECT o.destination_id, o.ordering_key, o.new_in_lane, o.last_in_lane, NULL
        FROM ordered o WHERE o.nth = 1
        ORDER BY o.ordering_key COLLATE "C", o.destination_id
        ON CONFLICT (destination_id, ordering_key) DO UPDATE
            SET last_seq = l.last_seq + EXCLUDED.last_seq, joined_behind = l.tail_alert,
                tail_alert = EXCLUDED.tail_alert
        RETURNING l.destination_id, l.ordering_key, l.last_seq, l.joined_behind
    ), lane_ends AS (
        SELECT jsonb_object_agg(b.destination_id::text || '/' || b.ordering_key,
                                jsonb_build_array(b.last_seq, b.joined_behind)) AS by_lane
        FROM bumped b
    )
    SELECT o.id, (e.lane ->> 0)::int8 - o.new_in_lane + o.nth,
           CASE WHEN o.nth = 1 THEN (e.lane ->> 1)::uuid ELSE o.before_in_call END
    FROM ordered o, lane_ends le,
         LATERAL (SELECT le.by_lane -> (o.destination_id::text || '/' || o.ordering_key)
                      AS lane) e;
END
$$;

-- An approval's lane join: as `outbox_lanes_join`, for the new identities among the ones
-- given. The identities' transaction-scoped advisory locks are taken first, in identity
-- order (tenant, subject, destination, occurrence), and their existence checked after
-- them (a statement of its own, so a fresh snapshot), so that an approval that will find
-- its identity already there (its insert does nothing) never joins a lane: a repeated
-- approval, racing or not, takes no place and leaves the tail alone. An identity given
-- twice joins once, as the first given (the one its caller inserts). A lane's new alerts
-- take positions in occurrence order (byte order), then in the order given. Returns no
-- row for an identity that exists or is given again.
CREATE FUNCTION outbox_lanes_join_new(tenants uuid[], lane_destinations uuid[],
                                      subjects text[], occurrences text[], lane_keys text[],
                                      new_alerts uuid[])
    RETURNS TABLE (alert_id uuid, seq bigint, waits_behind uuid)
    LANGUAGE plpgsql VOLATILE ROWS 100 AS $$
#variable_conflict use_column
BEGIN
    PERFORM count(pg_advisory_xact_lock(hashtext('outbox.approval.identity'),
                  hashtext(i.tenant_id::text || '/' || i.destination_id::text || '/'
                           || i.subject || '/' || i.occurrence)))
    FROM (SELECT * FROM unnest(tenants, lane_destinations, subjects, occurrences)
              AS i(tenant_id, destination_id, subject, occurrence)
          ORDER BY i.tenant_id, i.subject COLLATE "C", i.destination_id,
                   i.occurrence COLLATE "C"
          OFFSET 0) i;
    RETURN QUERY
    SELECT j.alert_id, j.seq, j.waits_behind
    FROM (SELECT array_agg(f.destination_id ORDER BY f.occurrence COLLATE "C", f.n) AS lanes,
                 array_agg(f.ordering_key ORDER BY f.occurrence COLLATE "C", f.n) AS keys,
                 array_agg(f.id ORDER BY f.occurrence COLLATE "C", f.n) AS ids
          FROM (SELECT DISTINCT ON (i.tenant_id, i.destination_id, i.subject, i.occurrence) i.*
                FROM unnest(tenants, lane_destinations, subjects, occurrences, lane_keys,
                            new_alerts) WITH ORDINALITY
                    AS i(tenant_id, destination_id, subject, occurrence, ordering_key, id, n)
                WHERE NOT EXISTS (SELECT 1 FROM alerts a
                                  WHERE a.tenant_id = i.tenant_id AND a.subject = i.subject
                                    AND a.occurrence = i.occurrence
                                    AND a.destination_id = i.destination_id
                                    AND a.revision = 0)
                ORDER BY i.tenant_id, i.destination_id, i.subject, i.occurrence, i.n) f
          HAVING count(*) > 0) fresh,
         LATERAL outbox_lanes_join(fresh.lanes, fresh.keys, fresh.ids) j;
END
$$;

-- The row-at-a-time functions this replaces, kept for the processes of the previous
-- version while an upgrade replaces them one by one (nothing in this version calls them):
-- each is now the set-based one over one alert.
CREATE OR REPLACE FUNCTION outbox_lane_join(destination uuid, key text, new_alert uuid,
                                            OUT seq bigint, OUT waits_behind uuid)
    LANGUAGE sql VOLATILE AS $$
    SELECT j.seq, j.waits_behind
    FROM outbox_lanes_join(ARRAY[destination], ARRAY[key], ARRAY[new_alert]) j
$$;

CREATE OR REPLACE FUNCTION outbox_lane_join_new(tenant uuid, subject text, occurrence text,
                                                destination uuid, key text, new_alert uuid,
                                                OUT seq bigint, OUT waits_behind uuid)
    LANGUAGE sql VOLATILE AS $$
    SELECT j.seq, j.waits_behind
    FROM outbox_lanes_join_new(ARRAY[tenant], ARRAY[destination], ARRAY[subject],
                               ARRAY[occurrence], ARRAY[key], ARRAY[new_alert]) j
$$;
