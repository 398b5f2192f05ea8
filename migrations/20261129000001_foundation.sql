-- The alert outbox's foundation: who (tenants, tokens), where (destinations and their
-- delivery capabilities), what was decided (alerts, stored once), what is still to do
-- (the live outbox), and what happened (delivery attempts and the evidence trail).
--
-- Layout rule: `alerts` grows with history; `outbox` holds only actionable rows and stays
-- small, so that claiming work costs the same with ten rows of history or ten million.

CREATE TABLE tenants (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE
                CHECK (octet_length(name) BETWEEN 1 AND 200 AND name = btrim(name)),
    -- IANA time zone used to count days for date-based monitors.
    time_zone   text NOT NULL DEFAULT 'UTC' CHECK (octet_length(time_zone) BETWEEN 1 AND 64),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Bearer tokens for the approval API. Only the SHA-256 of a token is stored: tokens are
-- 256-bit random strings, so a fast hash is enough and a leaked table reveals nothing usable.
CREATE TABLE api_tokens (
    id          uuid PRIMARY KEY,
    tenant_id   uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    token_hash  bytea NOT NULL UNIQUE CHECK (octet_length(token_hash) = 32),
    label       text CHECK (octet_length(label) <= 200),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

CREATE TABLE destinations (
    id                      uuid PRIMARY KEY,
    tenant_id               uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name                    text NOT NULL
                            CHECK (octet_length(name) BETWEEN 1 AND 200 AND name = btrim(name)),
    kind                    text NOT NULL DEFAULT 'webhook' CHECK (kind IN ('webhook')),
    url                     text NOT NULL CHECK (url ~ '^https?://'),
    -- Standard Webhooks signing secrets (`whsec_...`). More than one while a secret rotates:
    -- every request then carries one signature per secret.
    signing_secrets         text[] NOT NULL DEFAULT '{}'
                            CHECK (cardinality(signing_secrets) <= 4),
    -- Every request carries the notification id in this header.
    idempotency_header      text NOT NULL DEFAULT 'Idempotency-Key'
                            CHECK (idempotency_header ~ '^[A-Za-z0-9-]{1,100}$'),
    -- How long the destination de-duplicates by that header; NULL when it does not.
    -- Only inside this window (minus a margin) is a resend of an uncertain attempt safe.
    idempotency_retention   interval CHECK (idempotency_retention > interval '0'),
    -- GET this URL (with `{key}` replaced by the notification id) to ask whether the
    -- destination has the alert; NULL when the destination offers no lookup.
    lookup_url_template     text CHECK (lookup_url_template ~ '^https?://' AND strpos(lookup_url_template, '{key}') > 0),
    -- Header carrying the destination's reference for an accepted alert; NULL means the
    -- JSON body field `id`.
    reference_header        text CHECK (reference_header ~ '^[A-Za-z0-9-]{1,100}$'),
    -- What to do with an uncertain send that neither lookup nor de-duplication resolves.
    on_uncertain            text NOT NULL DEFAULT 'hold' CHECK (on_uncertain IN ('hold', 'retry')),
    timeout_ms              integer NOT NULL DEFAULT 10000 CHECK (timeout_ms BETWEEN 1 AND 300000),
    max_in_flight           integer NOT NULL DEFAULT 16 CHECK (max_in_flight BETWEEN 1 AND 10000),
    max_attempts            integer NOT NULL DEFAULT 12 CHECK (max_attempts BETWEEN 1 AND 1000),
    max_retry_window        interval NOT NULL DEFAULT interval '3 days'
                            CHECK (max_retry_window > interval '0'),
    enabled                 boolean NOT NULL DEFAULT true,
    disabled_reason         text,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name),
    -- Target of the alerts' composite foreign key: an alert's destination is always one
    -- of its own tenant's.
    UNIQUE (tenant_id, id)
);

-- One row per approved alert revision. The id is the notification id: the idempotency key
-- and `webhook-id` on every attempt, never regenerated.
CREATE TABLE alerts (
    id                      uuid PRIMARY KEY,
    tenant_id               uuid NOT NULL,
    subject                 text NOT NULL CHECK (octet_length(subject) BETWEEN 1 AND 512),
    occurrence              text NOT NULL CHECK (octet_length(occurrence) BETWEEN 1 AND 512),
    destination_id          uuid NOT NULL,
    revision                integer NOT NULL CHECK (revision >= 0),
    -- The payload chosen at approval, stored once; every attempt sends exactly its text form.
    payload                 jsonb NOT NULL CHECK (jsonb_typeof(payload) = 'object'),
    -- SHA-256 of the bytes sent (`payload::text`, UTF-8).
    payload_sha256          bytea NOT NULL CHECK (octet_length(payload_sha256) = 32),
    -- Why a revision was made; every revision after the first has one.
    reason                  text CHECK (octet_length(reason) BETWEEN 1 AND 2000),
    -- Where the alert rests once it has left the live outbox; NULL while it is live, and
    -- then its state is the outbox row's status (see the `alert_states` view).
    outcome                 text CHECK (outcome IN ('accepted', 'held', 'failed', 'superseded')),
    -- The destination's own reference for the accepted alert (body `id` or a header), or
    -- the operator's reference when reconciled by hand.
    destination_reference   text,
    -- Set when a send was repeated without evidence that the first did not arrive.
    possible_duplicate      boolean NOT NULL DEFAULT false,
    created_at              timestamptz NOT NULL DEFAULT now(),
    created_by              text NOT NULL CHECK (octet_length(created_by) BETWEEN 1 AND 200),
    settled_at              timestamptz,
    FOREIGN KEY (tenant_id, destination_id) REFERENCES destinations (tenant_id, id),
    -- One logical alert per identity and revision, whatever races in front of it.
    CONSTRAINT alerts_identity_key UNIQUE (tenant_id, subject, occurrence, destination_id, revision),
    CHECK ((revision = 0) = (reason IS NULL)),
    CHECK ((outcome IS NULL) = (settled_at IS NULL))
);

-- The live queue: one row per alert that still needs a dispatcher (pending, sending,
-- uncertain). Narrow on purpose, and rows leave it when their alert settles, so its size
-- tracks the backlog and not the history.
CREATE TABLE outbox (
    alert_id            uuid PRIMARY KEY REFERENCES alerts (id) ON DELETE CASCADE,
    destination_id      uuid NOT NULL REFERENCES destinations (id),
    status              text NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'sending', 'uncertain')),
    next_attempt_at     timestamptz NOT NULL DEFAULT now(),
    -- Attempts started so far; the next claim starts attempt `attempts + 1`.
    attempts            integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- The lease of the dispatcher that claimed the row. A completion only applies while
    -- its fencing token still matches, so a worker that stalled past its lease cannot
    -- overwrite the result of the worker that took over.
    lease_owner         text,
    lease_expires_at    timestamptz,
    fencing_token       bigint,
    -- When the send under the current lease started; NULL while a claim only settles an
    -- uncertain attempt (a lookup), so an expired lease is not mistaken for a send.
    send_started_at     timestamptz,
    CHECK ((status = 'sending') = (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL AND fencing_token IS NOT NULL))
) WITH (fillfactor = 70);

-- Serves the claim: `WHERE status IN ('pending', 'uncertain') AND next_attempt_at <= now()
-- ORDER BY next_attempt_at`.
CREATE INDEX outbox_due_idx ON outbox (next_attempt_at) WHERE status IN ('pending', 'uncertain');
-- Serves the sweep that turns expired leases into uncertain rows.
CREATE INDEX outbox_lease_idx ON outbox (lease_expires_at) WHERE status = 'sending';

CREATE SEQUENCE outbox_fencing_token_seq;

-- One row per finished delivery attempt or lookup. Insert-only: evidence is never edited.
-- A lookup row carries the number of the send attempt whose fate it asked about.
CREATE TABLE delivery_attempts (
    id                      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    alert_id                uuid NOT NULL REFERENCES alerts (id) ON DELETE CASCADE,
    attempt                 integer NOT NULL CHECK (attempt >= 1),
    kind                    text NOT NULL DEFAULT 'send' CHECK (kind IN ('send', 'lookup')),
    worker                  text NOT NULL,
    fencing_token           bigint NOT NULL,
    started_at              timestamptz NOT NULL,
    finished_at             timestamptz NOT NULL,
    idempotency_key         text NOT NULL,
    payload_sha256          bytea NOT NULL CHECK (octet_length(payload_sha256) = 32),
    outcome                 text NOT NULL
                            CHECK (outcome IN ('accepted', 'rejected', 'not_processed', 'not_sent', 'uncertain', 'found', 'not_found')),
    http_status             smallint CHECK (http_status BETWEEN 100 AND 599),
    destination_reference   text,
    error_class             text,
    response_excerpt        text CHECK (octet_length(response_excerpt) <= 2048)
);
CREATE INDEX delivery_attempts_alert_idx ON delivery_attempts (alert_id, id);

-- The evidence trail: every state transition of an alert, with a line a person can read.
CREATE TABLE alert_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    alert_id    uuid NOT NULL REFERENCES alerts (id) ON DELETE CASCADE,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    from_state  text CHECK (from_state IN ('pending', 'sending', 'accepted', 'uncertain', 'held', 'failed', 'superseded')),
    to_state    text NOT NULL CHECK (to_state IN ('pending', 'sending', 'accepted', 'uncertain', 'held', 'failed', 'superseded')),
    attempt     integer CHECK (attempt >= 1),
    actor       text NOT NULL CHECK (octet_length(actor) BETWEEN 1 AND 200),
    line        text NOT NULL CHECK (octet_length(line) BETWEEN 1 AND 2000)
);
CREATE INDEX alert_events_alert_idx ON alert_events (alert_id, id);

-- Evidence is append-only: reject edits outright. (Deletes stay possible so that a
-- retention job can prune finished history.)
CREATE FUNCTION reject_evidence_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is insert-only: evidence is never edited', TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;
CREATE TRIGGER delivery_attempts_insert_only BEFORE UPDATE ON delivery_attempts
    FOR EACH ROW EXECUTE FUNCTION reject_evidence_update();
CREATE TRIGGER alert_events_insert_only BEFORE UPDATE ON alert_events
    FOR EACH ROW EXECUTE FUNCTION reject_evidence_update();

-- An alert's state in one place: the live outbox row's status while it has one, otherwise
-- where the alert came to rest.
CREATE VIEW alert_states AS
SELECT a.id AS alert_id,
       COALESCE(o.status, a.outcome) AS state
FROM alerts a
LEFT JOIN outbox o ON o.alert_id = a.id;

-- Serves operators' "what needs attention" listings of settled alerts.
CREATE INDEX alerts_attention_idx ON alerts (settled_at) WHERE outcome IN ('held', 'failed');

-- Dispatchers LISTEN here; deciders NOTIFY (rate-limited) after approving, so a new alert
-- is picked up at once rather than at the next poll.
COMMENT ON TABLE outbox IS 'live queue; wake-ups on channel outbox_due';
