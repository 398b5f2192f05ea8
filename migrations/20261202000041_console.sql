-- The operator console: accounts (separate from tenants' API tokens), their sign-in
-- sessions, an audit log of console actions that are not alert evidence, and bulk replays
-- that run in the background and survive a restart.

CREATE TABLE operator_accounts (
    id              uuid PRIMARY KEY,
    name            text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    -- A viewer reads; an operator reads and acts.
    role            text NOT NULL CHECK (role IN ('viewer', 'operator')),
    -- NULL: every tenant. Otherwise only these tenants' alerts and destinations exist for
    -- the account, in every query.
    tenant_ids      uuid[] CHECK (cardinality(tenant_ids) >= 1),
    -- argon2id, PHC string format; the password itself is shown once and never stored.
    password_hash   text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE console_sessions (
    -- SHA-256 of the cookie's 256-bit random value: a copy of the table signs nobody in.
    id_sha256       bytea PRIMARY KEY CHECK (octet_length(id_sha256) = 32),
    account_id      uuid NOT NULL REFERENCES operator_accounts (id) ON DELETE CASCADE,
    -- The form token of this session (compared in constant time on every POST).
    csrf_token      text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL
);
CREATE INDEX console_sessions_account_idx ON console_sessions (account_id);
CREATE INDEX console_sessions_expiry_idx ON console_sessions (expires_at);

-- Console actions that leave no line in an alert's evidence (destinations switched on and
-- off, bulk replays started and stopped). Alert actions are read from the evidence itself.
CREATE TABLE console_audit (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    operator    text NOT NULL,
    tenant_id   uuid REFERENCES tenants (id),
    action      text NOT NULL,
    target      text NOT NULL,
    note        text NOT NULL DEFAULT ''
);

-- The console's alert list is paged along the primary key (UUIDv7: approval order), newest
-- first. These keep its filters on that walk at any history size: one tenant's alerts in
-- id order, and the held and failed ones (what operators look for) in id order.
CREATE INDEX alerts_tenant_id_idx ON alerts (tenant_id, id);
CREATE INDEX alerts_held_failed_id_idx ON alerts (id) WHERE outcome IN ('held', 'failed');

-- The audit page reads operators' lines from the evidence, newest first.
CREATE INDEX alert_events_operator_idx ON alert_events (id) WHERE actor LIKE 'operator:%';

-- A bulk replay: the selection (a filter of held or failed alerts), its progress and a
-- keyset cursor, so that a stopped or crashed run resumes where it was. Each alert is
-- replayed in its own transaction by the same function as `outboxctl replay`.
CREATE TABLE console_bulk_replays (
    id              uuid PRIMARY KEY,
    operator        text NOT NULL,
    note            text NOT NULL CHECK (octet_length(note) BETWEEN 1 AND 1000),
    -- The tenants the operator could act on when starting it (NULL: every tenant).
    tenant_ids      uuid[],
    filter          jsonb NOT NULL,
    state           text NOT NULL CHECK (state IN ('running', 'stopped', 'done')),
    planned         integer NOT NULL,
    replayed        integer NOT NULL DEFAULT 0,
    skipped         integer NOT NULL DEFAULT 0,
    -- The last alert id handled (alert ids are time-ordered UUIDv7; the walk goes down).
    cursor_id       uuid,
    -- The console process working on it, until when; another takes over after that.
    lease_until     timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
