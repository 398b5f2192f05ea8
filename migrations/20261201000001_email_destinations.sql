-- Email destinations over SMTP, and the rendered message every attempt of an email alert
-- sends.
--
-- An email destination keeps `url` as `smtp://host:port` (the relay, checked by the egress
-- guard like any URL), so every listing and every webhook path stays as it was. Its SMTP
-- password is a secret stored like signing secrets: sealed (`enc:v1:...`, bound to the
-- destination's id) when keys are configured.

ALTER TABLE destinations DROP CONSTRAINT destinations_kind_check;
ALTER TABLE destinations DROP CONSTRAINT destinations_url_check;

ALTER TABLE destinations
    ADD CONSTRAINT destinations_kind_check CHECK (kind IN ('webhook', 'email')),
    ADD COLUMN smtp_tls text CHECK (smtp_tls IN ('none', 'starttls', 'tls')),
    ADD COLUMN smtp_username text CHECK (octet_length(smtp_username) BETWEEN 1 AND 512),
    ADD COLUMN smtp_password text CHECK (octet_length(smtp_password) BETWEEN 1 AND 4096),
    ADD COLUMN mail_from text CHECK (octet_length(mail_from) BETWEEN 3 AND 512),
    ADD COLUMN mail_to text[] NOT NULL DEFAULT '{}' CHECK (cardinality(mail_to) <= 100),
    ADD COLUMN locale text CHECK (locale IN ('en', 'es')),
    -- A webhook is POSTed to an http(s) URL and has no SMTP settings; an email destination
    -- has a relay, a sender and recipients, and neither a lookup nor a de-duplication
    -- window (SMTP offers neither, so its uncertain sends are settled by policy alone).
    ADD CONSTRAINT destinations_kind_shape CHECK (
        (kind = 'webhook' AND url ~ '^https?://' AND smtp_tls IS NULL AND mail_from IS NULL
            AND smtp_password IS NULL AND cardinality(mail_to) = 0)
        OR (kind = 'email' AND url ~ '^smtp://' AND smtp_tls IS NOT NULL
            AND mail_from IS NOT NULL AND cardinality(mail_to) >= 1
            AND lookup_url_template IS NULL AND idempotency_retention IS NULL
            AND (smtp_password IS NULL OR smtp_username IS NOT NULL))
    );

-- The exact bytes of an email alert's message, written once before its first send and
-- read by every later attempt, so a resend is the same message whatever changed since
-- (templates, locale, sender). Insert-only.
CREATE TABLE rendered_messages (
    alert_id         uuid PRIMARY KEY REFERENCES alerts (id) ON DELETE CASCADE,
    message_id       text NOT NULL CHECK (octet_length(message_id) BETWEEN 3 AND 1000),
    bytes            bytea NOT NULL,
    sha256           text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    template_version text NOT NULL,
    rendered_at      timestamptz NOT NULL DEFAULT now()
);
