-- The console's audit log is paged by keyset along (at, id), newest first: operators'
-- lines in the evidence and console actions each walk an index in that order, so a page
-- deep in the history costs what the first one does.
CREATE INDEX alert_events_operator_at_idx ON alert_events (at DESC, id DESC)
    WHERE actor LIKE 'operator:%';
CREATE INDEX console_audit_at_idx ON console_audit (at DESC, id DESC);
