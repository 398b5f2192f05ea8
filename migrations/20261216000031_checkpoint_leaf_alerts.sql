-- Which checkpoints have a leaf for an alert, found through an index instead of by reading
-- every checkpoint's leaves.
--
-- Verifying one alert (`outboxctl evidence verify --alert`, the console's alert page, an
-- export) must hold every checkpoint that ever recorded the alert to its chain as it is
-- now, not only the checkpoints whose ranges hold its entries' current positions: a chain
-- rewritten under fresh positions is covered by the next checkpoint, and only the older
-- leaves still tell the older head. Reading every checkpoint for that grows with their
-- number: on 10,000 checkpoints of 100 leaves, a search of the packed bytes took 60 to
-- 390 ms, a binary search inside each checkpoint's leaves 130 to 170 ms; this index answers
-- in 1 to 8 ms (the whole `verify --alert` in 0.05 s). It costs the checkpoint maker about
-- 3.5 µs per leaf (a checkpoint of 250,000 leaves is stored in 0.9 s instead of 0.03 s),
-- takes about 60 bytes per leaf, and is built over 1,000,000 existing leaves in 6 s.
--
-- The index is derived from the leaves themselves, so nobody can make it disagree with
-- them; were it dropped, the same query would still be right, only slow. The verifier
-- reads the leaf it finds from the leaves, as before.

-- The alert ids of a checkpoint's packed leaves (56 bytes each: the alert id's 16 bytes,
-- then the entry count and the head), in leaf order. The value is read into a variable
-- first, so that a stored (toasted) value is fetched once, not once per leaf.
CREATE FUNCTION evidence_leaf_alerts(leaves bytea) RETURNS uuid[]
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    packed bytea := leaves;
BEGIN
    RETURN ARRAY(SELECT encode(substring(packed FROM i * 56 + 1 FOR 16), 'hex')::uuid
                 FROM generate_series(0, octet_length(packed) / 56 - 1) AS i
                 ORDER BY i);
END
$$;

CREATE INDEX evidence_checkpoints_leaf_alerts_idx ON evidence_checkpoints
    USING gin (evidence_leaf_alerts(leaves));
