-- Signing secret rotation with an overlap, and API token lifetimes.
--
-- `destinations.signing_secrets` keeps its shape; an element is now either a plain
-- `whsec_...` secret or one sealed with a key from OUTBOX_SECRET_KEYS
-- (`enc:v1:<key id>:<base64>`, see `outbox_core::sealing`).

-- The secrets a rotation replaced. They keep signing beside the current ones until
-- `retiring_until`, and are ignored after it; the next rotation overwrites them.
ALTER TABLE destinations
    ADD COLUMN retiring_signing_secrets text[] NOT NULL DEFAULT '{}'
        CHECK (cardinality(retiring_signing_secrets) <= 4),
    ADD COLUMN retiring_until timestamptz;

-- A token past `expires_at` is refused like a revoked one. `last_used_at` is refreshed
-- at most once a minute per token, so busy tokens do not write on every request.
ALTER TABLE api_tokens
    ADD COLUMN expires_at timestamptz,
    ADD COLUMN last_used_at timestamptz;

CREATE INDEX api_tokens_tenant ON api_tokens (tenant_id, created_at);
