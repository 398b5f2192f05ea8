-- Destination health: a destination that fails every send for a window is disabled
-- automatically (with a reason, an audit line and a metric), as a 410 Gone disables it at
-- once.

-- How long every send may fail before the destination is disabled; NULL: never. A
-- constant default, so adding it rewrites no row.
ALTER TABLE destinations ADD COLUMN disable_after_failing interval DEFAULT interval '24 hours'
    CHECK (disable_after_failing > interval '0');

-- One row per destination that has been sent to, merged from every dispatcher's in-memory
-- tallies every few seconds (never written on a delivery's own path). Times are the
-- dispatchers' clocks when the send finished.
CREATE TABLE destination_health (
    destination_id      uuid PRIMARY KEY REFERENCES destinations (id) ON DELETE CASCADE,
    -- The earliest failed send after the latest accepted one; NULL while the latest send
    -- any dispatcher reported was accepted (or none failed).
    failing_since       timestamptz,
    last_failure_at     timestamptz,
    last_success_at     timestamptz,
    -- Sends that finished before this are not counted: an operator switched the
    -- destination on or off then, and a tally still in a dispatcher's memory from before
    -- must not disable it again at once.
    counted_from        timestamptz NOT NULL DEFAULT '-infinity',
    -- When it was disabled for failing (NULL once an operator switches it again).
    auto_disabled_at    timestamptz,
    updated_at          timestamptz NOT NULL DEFAULT now()
);
