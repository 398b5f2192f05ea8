-- An email destination's relay in columns of its own: its host (a name, or an address, an
-- IPv6 one without brackets) and its port. `url` was `smtp://host:port` for email
-- destinations; it is now a webhook's alone (http or https), and NULL for email.
-- Existing email destinations' relays move over (a relay written without a port meant 25).

ALTER TABLE destinations DROP CONSTRAINT destinations_kind_shape;

ALTER TABLE destinations
    ALTER COLUMN url DROP NOT NULL,
    ADD COLUMN smtp_host text CHECK (octet_length(smtp_host) BETWEEN 1 AND 255),
    ADD COLUMN smtp_port integer CHECK (smtp_port BETWEEN 1 AND 65535);

UPDATE destinations
SET smtp_host = btrim(substring(url FROM '^smtp://(\[[^]]*\]|[^:/]*)'), '[]'),
    smtp_port = COALESCE(substring(url FROM '^smtp://(?:\[[^]]*\]|[^:/]*):([0-9]+)')::integer, 25),
    url = NULL
WHERE kind = 'email';

-- As 20261202000011's, with the relay in its columns: a webhook has a URL and no relay; an
-- email destination a relay and no URL.
ALTER TABLE destinations ADD CONSTRAINT destinations_kind_shape CHECK (
    (kind = 'webhook' AND url IS NOT NULL AND url ~ '^https?://' AND smtp_host IS NULL AND smtp_port IS NULL
        AND smtp_tls IS NULL AND smtp_password IS NULL
        AND ((body_template IS NULL AND mail_from IS NULL AND cardinality(mail_to) = 0)
             OR (body_template IS NOT NULL AND mail_from IS NOT NULL
                 AND cardinality(mail_to) >= 1)))
    OR (kind = 'email' AND url IS NULL AND smtp_host IS NOT NULL AND smtp_port IS NOT NULL
        AND smtp_tls IS NOT NULL
        AND mail_from IS NOT NULL AND cardinality(mail_to) >= 1
        AND lookup_url_template IS NULL AND idempotency_retention IS NULL
        AND (smtp_password IS NULL OR smtp_username IS NOT NULL)
        AND body_template IS NULL AND bearer_token IS NULL)
);
