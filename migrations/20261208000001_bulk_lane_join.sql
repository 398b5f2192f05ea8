-- A bulk approval joins all its lanes in one statement: one upsert per lane, however
-- many of its alerts join it (`INSERT ... ON CONFLICT DO UPDATE`, which locks the lane's
-- row as the single join does). `RETURNING` gives a row's new values only, so the upsert
-- keeps the tail it found here, for the statement to read back: the first of the lane's
-- new alerts waits behind it. Nothing else reads it.
ALTER TABLE alert_lanes ADD COLUMN joined_behind uuid;
