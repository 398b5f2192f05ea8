-- An outbox row's destination is its alert's (the approval copies it), and
-- `alerts.destination_id` already refers to the destination and keeps it from being
-- deleted. The outbox's own foreign key checked the same destination row again on every
-- approval (a lookup and a key-share lock per row) and guarded nothing more.
ALTER TABLE outbox DROP CONSTRAINT outbox_destination_id_fkey;
