-- A tenant's language for email: an email destination without a locale of its own mails
-- in its tenant's; English when neither names one.
ALTER TABLE tenants ADD COLUMN locale text CHECK (locale IN ('en', 'es'));
