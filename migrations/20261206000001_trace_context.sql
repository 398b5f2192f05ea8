-- The W3C trace context an alert keeps from its approval: the approval's `traceparent`
-- (version 00, the approval's span as its parent) and the caller's `tracestate`. Every
-- delivery attempt sends the same trace with its own span as the parent. It is never part
-- of the identity, the payload's fingerprint or a rendered message's fingerprint, and a
-- repeated approval keeps the first one. NULL for alerts approved before this migration:
-- their attempts send no trace context. Adding nullable columns rewrites no row, so the
-- migration is instant on any table size, and dispatchers of the previous version keep
-- working beside it (they do not read the columns).
ALTER TABLE alerts
    ADD COLUMN traceparent text
        CHECK (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'),
    ADD COLUMN tracestate text
        CHECK (octet_length(tracestate) BETWEEN 1 AND 512 AND tracestate ~ '^[ -~]+$'),
    ADD CONSTRAINT alerts_tracestate_needs_traceparent
        CHECK (tracestate IS NULL OR traceparent IS NOT NULL);
