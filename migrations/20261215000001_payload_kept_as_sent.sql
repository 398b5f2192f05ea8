-- An alert's payload is kept as the exact text every attempt sends, instead of as `jsonb`
-- turned back into text by each claim.
--
-- Every writer already stored `jsonb` and fingerprinted its text form (`payload::text`),
-- and every reader asked for that text; the claim paid the conversion once per attempt,
-- about 2 µs a row of the server's CPU for a 0.5 kB payload, a few per cent of all a
-- delivery costs the host. Writers now store the text they fingerprint (the `jsonb`
-- rendering of what was approved, so key order and whitespace still do not matter when two
-- approvals are compared), and the bytes an attempt sends are fixed at approval, not
-- rendered again by whichever server version reads them later.
--
-- The check stays "a JSON object", read with `json` (a syntax check, a fraction of what
-- parsing into `jsonb` costs). A writer that stored any other text form of an object would
-- still pass it; the fingerprint would then be of that text, which is what is sent.
--
-- The table is rewritten once. PostgreSQL will not change the type of a column of a row
-- type that a function body names, so the two functions that take an alert's row
-- (`evidence_genesis`, and `evidence_chain_head`, which calls it) are dropped first and
-- made again, unchanged, after it.
DROP FUNCTION evidence_chain_head(uuid);
DROP FUNCTION evidence_genesis(alerts);

ALTER TABLE alerts
    DROP CONSTRAINT alerts_payload_check,
    ALTER COLUMN payload TYPE text USING payload::text,
    ADD CONSTRAINT alerts_payload_check CHECK (json_typeof(payload::json) = 'object');

COMMENT ON COLUMN alerts.payload IS
    'The payload exactly as every attempt sends it: the text form of the approved JSON object, fixed at approval; payload_sha256 is its SHA-256 (UTF-8).';

CREATE FUNCTION evidence_genesis(a alerts) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    -- The domain: "alert-outbox evidence chain v1" and a zero byte.
    RETURN sha256('\x616c6572742d6f7574626f782065766964656e636520636861696e20763100'::bytea
        || evidence_alert_bytes(a.id, a.tenant_id, a.subject, a.occurrence, a.destination_id,
               a.revision, a.payload_sha256, a.reason, a.created_at, a.created_by));

CREATE FUNCTION evidence_chain_head(alert uuid) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (SELECT CASE WHEN newest.found THEN newest.hash ELSE evidence_genesis(a) END
            FROM alerts a
            LEFT JOIN LATERAL (
                SELECT true AS found, x.hash FROM (
                    SELECT e.chain_pos AS pos, e.entry_hash AS hash FROM alert_events e
                    WHERE e.alert_id = a.id
                    UNION ALL
                    SELECT d.chain_pos, d.entry_hash FROM delivery_attempts d
                    WHERE d.alert_id = a.id
                ) x ORDER BY x.pos DESC NULLS FIRST LIMIT 1
            ) newest ON true
            WHERE a.id = alert);
