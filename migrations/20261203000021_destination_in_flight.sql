-- A destination's in-flight bound holds in the database, across every dispatcher process:
-- a claim never leaves more than `destinations.max_in_flight` of its rows in `sending`.
-- Rows in `sending` are the ones a crash can leave uncertain, so the bound is also the
-- most alerts one crash can leave uncertain (or held) at that destination.

-- The room a claim has at one destination: how many more of its rows it may move to
-- `sending`, or 0 when another claim is working on that destination right now.
--
-- Race-free between concurrent claims:
-- - the transaction-scoped advisory lock serialises the claims of one destination until
--   the claim commits; it is tried, never waited for, so a second claimer skips the
--   destination for this round instead of queueing behind the first. It touches no row
--   (no tuple lock, no WAL), and the two-key form keeps it apart from the single-key locks
--   taken elsewhere.
-- - the count runs after the lock is held, in a VOLATILE function: each of its queries
--   takes a fresh snapshot (READ COMMITTED), so it sees every claim committed by an earlier
--   holder of the lock, even one that committed after the calling claim statement began.
--   A count in the claim statement itself would use the statement's older snapshot and
--   could miss such a claim.
-- The count reads the small `sending` set (served by `outbox_lease_idx`), so no index entry
-- is added per claimed row.
CREATE FUNCTION outbox_claim_room(destination uuid, max_in_flight integer) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    in_flight integer;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('outbox.claim.destination'), hashtext(destination::text)) THEN
        RETURN 0;
    END IF;
    SELECT count(*) INTO in_flight FROM outbox
    WHERE status = 'sending' AND destination_id = destination;
    RETURN greatest(max_in_flight - in_flight, 0);
END
$$;

-- Destinations that nothing can settle automatically (no lookup, no de-duplication
-- window) now default to 4 in flight instead of 16: a crash there leaves its in-flight
-- alerts for an operator (or for a resend that may duplicate), so it should leave few.
-- Existing ones still at the former default of 16 take the new one; a bound an operator
-- chose (any other value) is kept.
UPDATE destinations SET max_in_flight = 4, updated_at = now()
WHERE lookup_url_template IS NULL AND idempotency_retention IS NULL AND max_in_flight = 16;
