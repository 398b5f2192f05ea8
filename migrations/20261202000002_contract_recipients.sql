-- A contract's owners: mail addresses its renewal alerts carry in their payload
-- (`recipients`), which every email destination adds to its own recipients for that alert.
-- NULL: no owner named.

ALTER TABLE contracts
    ADD COLUMN recipients text[] CHECK (cardinality(recipients) BETWEEN 1 AND 20);
