-- Throughput: the live queue churns (every delivery updates and deletes its row), so it
-- is vacuumed after a fixed number of dead rows rather than a share of its size, and
-- without the cost-based pauses; a queue table's dead tuples are what slows its claims.
ALTER TABLE outbox SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 10000
);

-- The evidence tables are written only by statements that read the alert row in the
-- same statement (or lock its outbox row), so an orphan cannot be written; the foreign
-- keys' per-row checks cost more than a third of recording an outcome. Retention deletes
-- evidence explicitly with its alert (`outboxctl prune`).
ALTER TABLE delivery_attempts DROP CONSTRAINT delivery_attempts_alert_id_fkey;
ALTER TABLE alert_events DROP CONSTRAINT alert_events_alert_id_fkey;

-- Retention (`outboxctl prune`): a finished alert past the retention period keeps its
-- identity, fingerprint, outcome, reference and times, so that one alert per identity
-- still holds and a repeated approval is still recognised; its payload, attempt rows and
-- evidence lines are removed, and this says when.
ALTER TABLE alerts ADD COLUMN pruned_at timestamptz;
