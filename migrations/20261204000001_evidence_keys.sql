-- One index entry fewer for every delivery and every approval. The evidence tables
-- (`delivery_attempts`: one row per delivery; `alert_events`: one per approval and per
-- operator action) each had a primary key on `id` and an index on `(alert_id, id)`. Every
-- reader finds their rows by alert (an alert's trail, retention's deletes), and `id` only
-- orders one alert's rows, so `(alert_id, id)` becomes the primary key and the index on
-- `id` alone goes: each insert adds one entry to one fewer index. `id` stays an identity
-- column, so its values remain unique; the key now also says so per alert.
--
-- Building a primary key reads the whole table under a lock that blocks writers
-- meanwhile: on a large table, build the two unique indexes below by hand first with
-- CREATE UNIQUE INDEX CONCURRENTLY, under these names, and this migration will find them
-- and only swap the constraints.
CREATE UNIQUE INDEX IF NOT EXISTS delivery_attempts_alert_id_key ON delivery_attempts (alert_id, id);
ALTER TABLE delivery_attempts
    DROP CONSTRAINT delivery_attempts_pkey,
    ADD CONSTRAINT delivery_attempts_pkey PRIMARY KEY USING INDEX delivery_attempts_alert_id_key;
DROP INDEX delivery_attempts_alert_idx;

CREATE UNIQUE INDEX IF NOT EXISTS alert_events_alert_id_key ON alert_events (alert_id, id);
ALTER TABLE alert_events
    DROP CONSTRAINT alert_events_pkey,
    ADD CONSTRAINT alert_events_pkey PRIMARY KEY USING INDEX alert_events_alert_id_key;
DROP INDEX alert_events_alert_idx;
