-- A revision is never delivered before the alert it corrects has settled: a revision
-- approved while an earlier revision of its identity is still live (pending, sending or
-- uncertain: it may yet reach the destination) names that revision here, and dispatchers
-- do not claim it while that revision has an outbox row. NULL, the common case, costs
-- nothing; the claim probes the named row by primary key only for revisions that wait.
ALTER TABLE outbox ADD COLUMN after_alert uuid;

-- Revisions already queued behind a live earlier revision wait for it from now on.
UPDATE outbox o SET after_alert = (
    SELECT p.id FROM alerts a
    JOIN alerts p ON p.tenant_id = a.tenant_id AND p.subject = a.subject
                 AND p.occurrence = a.occurrence AND p.destination_id = a.destination_id
                 AND p.revision < a.revision
    JOIN outbox po ON po.alert_id = p.id
    WHERE a.id = o.alert_id
    ORDER BY p.revision DESC LIMIT 1)
WHERE o.alert_id IN (SELECT id FROM alerts WHERE revision > 0);
