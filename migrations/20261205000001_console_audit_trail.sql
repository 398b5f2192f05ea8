-- The audit log gains what was missing from it: sign-ins and sign-outs, failed sign-ins
-- (aggregated), and what `outboxctl` does to accounts, tokens, destinations and secrets.
-- Actors are recorded with where they acted from (`console:NAME`, `cli:NAME`); rows
-- written before say only `NAME` and stay as they are.

-- The tenants a line concerns, all of which an account's grant must cover for it to see
-- the line (a bulk replay over one tenant, or over the tenants of its starter's grant).
-- NULL: the line's `tenant_id` alone, as rows written before (and the dispatchers'
-- automatic disables) have it; both NULL, no tenant in particular, shown to accounts of
-- every tenant only.
ALTER TABLE console_audit ADD COLUMN tenant_ids uuid[];

-- Failed sign-ins are one line per account name (as typed), client address and window
-- of the sign-in limit, counted: a flood of guesses adds to a count, not to the table
-- (past an address's limit, the names it tries share one line).
ALTER TABLE console_audit ADD COLUMN count integer NOT NULL DEFAULT 1 CHECK (count >= 1);
ALTER TABLE console_audit ADD COLUMN window_start timestamptz;
ALTER TABLE console_audit ADD COLUMN last_at timestamptz;
CREATE UNIQUE INDEX console_audit_failed_sign_ins_idx
    ON console_audit (operator, target, window_start)
    WHERE action = 'sign-in failed';
