-- Operator actions: a replayed alert gets a fresh retry budget (attempt count and window
-- measured from the replay), while its attempt numbers keep counting up.
ALTER TABLE outbox
    ADD COLUMN budget_since timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN budget_base_attempts integer NOT NULL DEFAULT 0 CHECK (budget_base_attempts >= 0);
-- Rows already queued keep their window from their approval.
UPDATE outbox o SET budget_since = a.created_at FROM alerts a WHERE a.id = o.alert_id;

-- Serves "attempts in the last hour" for operators' statistics.
CREATE INDEX delivery_attempts_finished_idx ON delivery_attempts (finished_at);
