-- The lane functions' statements are planned for the values they are called with, each
-- call. PL/pgSQL caches a statement's plan for the session and may switch to a generic
-- plan after five calls; a session that starts while `alert_lanes` is nearly empty then
-- keeps a sequential scan of it, and every later approval to an ordered destination reads
-- the whole table (bulk approvals of a fresh lane set ran 8 to 11 times slower). A custom
-- plan costs a planning step per call and always probes the primary key.
ALTER FUNCTION outbox_lane_join(uuid, text, uuid) SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION outbox_lane_join_new(uuid, text, text, uuid, text, uuid)
    SET plan_cache_mode = force_custom_plan;
