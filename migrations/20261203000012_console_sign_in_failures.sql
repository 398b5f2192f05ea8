-- Failed console sign-ins, counted per account name (as typed, whether or not such an
-- account exists, so the count tells nothing about which names exist) and per client
-- address. Kept in the database rather than in one process's memory so that the limit
-- holds across a restart and across several console processes. A sign-in is counted as
-- failed from the moment it starts, and the row is removed if the password is right: so
-- guesses sent all at once are counted before any of them is checked.
CREATE TABLE console_sign_in_failures (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at              timestamptz NOT NULL DEFAULT now(),
    account_name    text NOT NULL,
    client_addr     inet
);
CREATE INDEX console_sign_in_failures_name_idx ON console_sign_in_failures (account_name, at);
CREATE INDEX console_sign_in_failures_addr_idx ON console_sign_in_failures (client_addr, at);
-- Old rows are removed as new ones come (see the store's `begin_sign_in`).
CREATE INDEX console_sign_in_failures_at_idx ON console_sign_in_failures (at);
