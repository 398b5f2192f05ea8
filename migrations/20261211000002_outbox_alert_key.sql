-- An outbox row is inserted by the statement that inserts its alert (an approval), or for
-- an alert the writer holds locked (a replay brings one back), so its alert always
-- exists; the foreign key checked that again on every approval (a lookup of the new alert
-- row and a lock on it) and cascaded a deletion of alerts that the product never makes.
-- What it guarded is kept by refusing that deletion outright: an alert is its identity's
-- record (one alert per identity) and the start of its evidence chain, retention keeps it
-- (pruning only its payload), and its trail's tables name it without a key of their own.
ALTER TABLE outbox DROP CONSTRAINT outbox_alert_id_fkey;

CREATE FUNCTION refuse_alert_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'alerts are never deleted: each is its identity''s record and the start of its evidence; retention (outboxctl prune) removes payloads and trails'
        USING ERRCODE = 'restrict_violation';
END
$$;

CREATE TRIGGER alerts_are_kept BEFORE DELETE OR TRUNCATE ON alerts
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_alert_delete();
