-- TLS to mail relays: a relay on a private PKI names the CA its certificate must chain to,
-- kept with the destination (certificates only, PEM; checked by `outboxctl destination
-- add --smtp-ca-file`). Without one, the public roots are trusted. It means something only
-- when the destination speaks TLS to its relay.

ALTER TABLE destinations
    ADD COLUMN smtp_ca_pem text CHECK (octet_length(smtp_ca_pem) BETWEEN 1 AND 65536),
    ADD CONSTRAINT destinations_smtp_ca_needs_tls CHECK (
        smtp_ca_pem IS NULL OR (kind = 'email' AND smtp_tls IN ('starttls', 'tls'))
    );
