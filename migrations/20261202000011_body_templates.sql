-- Webhook destinations that speak to an HTTP email API: the alert is rendered as email
-- (subject, text, HTML in the destination's locale) and written into the request body the
-- API expects by a body template, then POSTed with the usual idempotency key. Such a
-- destination names a sender and recipients (the columns email destinations use) and may
-- carry the API's key, sent as `Authorization: Bearer`, sealed at rest like the other
-- secrets. The rendered body is stored in `rendered_messages` before the first send, so
-- every retry sends the same bytes.

ALTER TABLE destinations
    -- `email-api-resend` (shipped) or `file` (the operator's template, kept here so the
    -- dispatcher never reads the operator's files).
    ADD COLUMN body_template text CHECK (body_template IN ('email-api-resend', 'file')),
    ADD COLUMN body_template_text text
        CHECK (octet_length(body_template_text) BETWEEN 1 AND 262144),
    ADD COLUMN bearer_token text CHECK (octet_length(bearer_token) BETWEEN 1 AND 4096),
    ADD CONSTRAINT destinations_body_template_text
        CHECK ((body_template IS NOT DISTINCT FROM 'file') = (body_template_text IS NOT NULL)),
    ADD CONSTRAINT destinations_bearer_token_needs_body_template
        CHECK (bearer_token IS NULL OR body_template IS NOT NULL);

-- A webhook has a sender and recipients exactly when it has a body template; an email
-- destination never has a body template or an API key.
ALTER TABLE destinations DROP CONSTRAINT destinations_kind_shape;
ALTER TABLE destinations ADD CONSTRAINT destinations_kind_shape CHECK (
    (kind = 'webhook' AND url ~ '^https?://' AND smtp_tls IS NULL AND smtp_password IS NULL
        AND ((body_template IS NULL AND mail_from IS NULL AND cardinality(mail_to) = 0)
             OR (body_template IS NOT NULL AND mail_from IS NOT NULL
                 AND cardinality(mail_to) >= 1)))
    OR (kind = 'email' AND url ~ '^smtp://' AND smtp_tls IS NOT NULL
        AND mail_from IS NOT NULL AND cardinality(mail_to) >= 1
        AND lookup_url_template IS NULL AND idempotency_retention IS NULL
        AND (smtp_password IS NULL OR smtp_username IS NOT NULL)
        AND body_template IS NULL AND bearer_token IS NULL)
);
