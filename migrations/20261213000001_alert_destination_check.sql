-- An alert belongs to a destination of its own tenant. The foreign key
-- `alerts (tenant_id, destination_id) -> destinations (tenant_id, id)` held that, but it
-- checked row by row: a lookup and a key-share lock on the destination for every alert.
-- A monitor's batch of 5,000 alerts paid 5,000 of them (19 ms of a 240 ms statement under
-- auto_explain), and concurrent approvals through the API each turned the destination
-- row's lock into a MultiXact, as they all share one destination row.
--
-- The same rule, kept by the database for every writer, checked once per statement:
-- 1. Destinations are never deleted, and a destination's id and tenant never change
--    (disable one instead: its alerts and their evidence name it). That is what the key's
--    lock guarded against while an approval was under way; refusing it outright makes the
--    check below sound without any lock: a destination seen once stays.
-- 2. After each statement that inserts alerts, one anti-join over the statement's new rows
--    refuses the statement when any names a destination that is not its tenant's, with
--    the foreign-key error code and the detail a key would give.
-- 3. An alert's tenant and destination never change either.
ALTER TABLE alerts DROP CONSTRAINT alerts_tenant_id_destination_id_fkey;

CREATE FUNCTION refuse_destination_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'destinations are never deleted: alerts and their evidence name them; disable one instead'
        USING ERRCODE = 'restrict_violation';
END
$$;

CREATE TRIGGER destinations_are_kept BEFORE DELETE OR TRUNCATE ON destinations
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_destination_delete();

CREATE FUNCTION refuse_key_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%: an alert''s tenant and destination, and a destination''s id and tenant, never change',
        TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;

CREATE TRIGGER destinations_keep_their_key BEFORE UPDATE ON destinations
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id OR OLD.tenant_id IS DISTINCT FROM NEW.tenant_id)
    EXECUTE FUNCTION refuse_key_change();

CREATE TRIGGER alerts_keep_their_destination BEFORE UPDATE ON alerts
    FOR EACH ROW WHEN (OLD.tenant_id IS DISTINCT FROM NEW.tenant_id
                       OR OLD.destination_id IS DISTINCT FROM NEW.destination_id)
    EXECUTE FUNCTION refuse_key_change();

CREATE FUNCTION check_alert_destinations() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    stray record;
BEGIN
    SELECT n.tenant_id, n.destination_id INTO stray
    FROM new_alerts n
    WHERE NOT EXISTS (SELECT 1 FROM destinations d
                      WHERE d.id = n.destination_id AND d.tenant_id = n.tenant_id)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'insert on table "alerts" names a destination that is not its tenant''s'
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = format('Key (tenant_id, destination_id)=(%s, %s) is not present in table "destinations".',
                                  stray.tenant_id, stray.destination_id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER alerts_destination_is_the_tenants AFTER INSERT ON alerts
    REFERENCING NEW TABLE AS new_alerts
    FOR EACH STATEMENT EXECUTE FUNCTION check_alert_destinations();
