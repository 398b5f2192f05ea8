-- The console's subject filter (`subject ILIKE '%text%'`) served by a trigram index, so
-- that a search stays quick at millions of alerts instead of reading every subject.
-- pg_trgm is a trusted extension: a database owner may create it without superuser.
-- (Building the index reads the whole table once, under a lock that blocks approvals
-- meanwhile: on a large table, build it by hand with CREATE INDEX CONCURRENTLY first,
-- under this name, and this migration will find it there.)
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX IF NOT EXISTS alerts_subject_trgm_idx ON alerts USING gin (subject gin_trgm_ops);
