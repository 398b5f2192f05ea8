-- A tamper-evident trail. Every evidence entry (an `alert_events` line, a
-- `delivery_attempts` row) carries the head of its alert's hash chain after it:
-- `entry_hash = SHA-256(previous head || canonical encoding of the entry)`, where the first
-- entry chains from the alert's own record (identity and payload fingerprint). The
-- encoding is `outbox_core::evidence_chain`'s, written here a second time so that the
-- statement that inserts an entry also links it: no extra round trip and no extra row
-- write. The verifier (`outboxctl evidence verify`) recomputes every hash with the Rust
-- definition, so the two are checked against each other on every run, and the test
-- vectors in docs/auditing.md hold both to one definition.
--
-- `chain_pos` is the entry's place in one global order (a sequence): an alert's entries
-- chain in `chain_pos` order, and a checkpoint covers a range of positions.

ALTER TABLE alert_events ADD COLUMN chain_pos bigint, ADD COLUMN entry_hash bytea
    CHECK (octet_length(entry_hash) = 32);
ALTER TABLE delivery_attempts ADD COLUMN chain_pos bigint, ADD COLUMN entry_hash bytea
    CHECK (octet_length(entry_hash) = 32);

CREATE SEQUENCE evidence_chain_pos_seq;

-- A live alert's chain head travels with its outbox row, so that the dispatcher's
-- completion, whose `DELETE` or `UPDATE` of that row is already its fence, reads the head
-- from the row it fences on (the row's newest version, after any wait) and links its
-- attempt in the same statement: no lookup and no trigger on the delivery path. NULL while
-- the alert's chain is not complete (an alert from before this migration that the
-- backfill has not reached): its entries are then left to the trigger below, which reads
-- the head from the entries themselves, and the backfill sets the column when it chains
-- the alert.
ALTER TABLE outbox ADD COLUMN chain_head bytea CHECK (octet_length(chain_head) = 32);

-- Checkpoints read the entries of a range of positions. Entries are inserted in position
-- order, mostly at the end of their table, so a block-range index finds a recent range
-- at almost no cost to each insert (a B-tree would add an entry to every insert).
CREATE INDEX alert_events_chain_pos_idx ON alert_events USING brin (chain_pos);
CREATE INDEX delivery_attempts_chain_pos_idx ON delivery_attempts USING brin (chain_pos);

-- The canonical encoding (outbox_core::evidence_chain, version 1), written out field by
-- field as one expression per kind of record, with only built-in functions: the magic
-- `aoe1`, the kind (length byte, ASCII), the field count (two bytes), then per field its
-- name (length byte, ASCII) as a constant, a type byte (0 null, 1 text, 2 integer, 3 time,
-- 4 bytes) and the value (text and bytes: a four-byte length, then the bytes; integers:
-- eight bytes; times: microseconds since the epoch, eight bytes; all big-endian). A
-- record's fields are those of outbox_core::evidence_entries, in its order.
--
-- Each takes the fields as arguments, so that the planner inlines it into the statement
-- that calls it (the trigger, an approval linking its first line, the backfill): a call
-- of a SQL function per row that is not inlined costs several times the expression. They
-- are STABLE, not IMMUTABLE, because `extract` from a timestamptz is: a function declared
-- IMMUTABLE over a STABLE body is never inlined.
CREATE FUNCTION evidence_alert_bytes(
    id_ uuid,
    tenant_ uuid,
    subject_ text,
    occurrence_ text,
    destination_ uuid,
    revision_ integer,
    payload_sha256_ bytea,
    reason_ text,
    created_at_ timestamptz,
    created_by_ text
) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN '\x616f653105616c657274000a'::bytea
        || '\x0269640400000010'::bytea || uuid_send(id_)
        || '\x0674656e616e740400000010'::bytea || uuid_send(tenant_)
        || '\x077375626a65637401'::bytea || int4send(octet_length(convert_to(subject_, 'UTF8'))) || convert_to(subject_, 'UTF8')
        || '\x0a6f6363757272656e636501'::bytea || int4send(octet_length(convert_to(occurrence_, 'UTF8'))) || convert_to(occurrence_, 'UTF8')
        || '\x0b64657374696e6174696f6e0400000010'::bytea || uuid_send(destination_)
        || '\x087265766973696f6e02'::bytea || int8send(revision_::bigint)
        || '\x0e7061796c6f61645f73686132353604'::bytea || int4send(octet_length(payload_sha256_)) || payload_sha256_
        || CASE WHEN reason_ IS NULL THEN '\x06726561736f6e00'::bytea ELSE '\x06726561736f6e01'::bytea || int4send(octet_length(convert_to(reason_, 'UTF8'))) || convert_to(reason_, 'UTF8') END
        || '\x0a637265617465645f617403'::bytea || int8send((extract(epoch FROM created_at_) * 1000000)::bigint)
        || '\x0a637265617465645f627901'::bytea || int4send(octet_length(convert_to(created_by_, 'UTF8'))) || convert_to(created_by_, 'UTF8');

CREATE FUNCTION evidence_event_bytes(
    at_ timestamptz,
    from_state_ text,
    to_state_ text,
    attempt_ integer,
    actor_ text,
    line_ text
) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN '\x616f6531056576656e740006'::bytea
        || '\x02617403'::bytea || int8send((extract(epoch FROM at_) * 1000000)::bigint)
        || CASE WHEN from_state_ IS NULL THEN '\x0a66726f6d5f737461746500'::bytea ELSE '\x0a66726f6d5f737461746501'::bytea || int4send(octet_length(convert_to(from_state_, 'UTF8'))) || convert_to(from_state_, 'UTF8') END
        || '\x08746f5f737461746501'::bytea || int4send(octet_length(convert_to(to_state_, 'UTF8'))) || convert_to(to_state_, 'UTF8')
        || CASE WHEN attempt_ IS NULL THEN '\x07617474656d707400'::bytea ELSE '\x07617474656d707402'::bytea || int8send(attempt_::bigint) END
        || '\x056163746f7201'::bytea || int4send(octet_length(convert_to(actor_, 'UTF8'))) || convert_to(actor_, 'UTF8')
        || '\x046c696e6501'::bytea || int4send(octet_length(convert_to(line_, 'UTF8'))) || convert_to(line_, 'UTF8');

CREATE FUNCTION evidence_attempt_bytes(
    attempt_ integer,
    kind_ text,
    worker_ text,
    fencing_token_ bigint,
    started_at_ timestamptz,
    finished_at_ timestamptz,
    idempotency_key_ text,
    payload_sha256_ bytea,
    outcome_ text,
    http_status_ smallint,
    destination_reference_ text,
    error_class_ text,
    response_excerpt_ text,
    to_state_ text,
    line_ text
) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN '\x616f653107617474656d7074000f'::bytea
        || '\x07617474656d707402'::bytea || int8send(attempt_::bigint)
        || '\x046b696e6401'::bytea || int4send(octet_length(convert_to(kind_, 'UTF8'))) || convert_to(kind_, 'UTF8')
        || '\x06776f726b657201'::bytea || int4send(octet_length(convert_to(worker_, 'UTF8'))) || convert_to(worker_, 'UTF8')
        || '\x0d66656e63696e675f746f6b656e02'::bytea || int8send(fencing_token_::bigint)
        || '\x0a737461727465645f617403'::bytea || int8send((extract(epoch FROM started_at_) * 1000000)::bigint)
        || '\x0b66696e69736865645f617403'::bytea || int8send((extract(epoch FROM finished_at_) * 1000000)::bigint)
        || '\x0f6964656d706f74656e63795f6b657901'::bytea || int4send(octet_length(convert_to(idempotency_key_, 'UTF8'))) || convert_to(idempotency_key_, 'UTF8')
        || '\x0e7061796c6f61645f73686132353604'::bytea || int4send(octet_length(payload_sha256_)) || payload_sha256_
        || '\x076f7574636f6d6501'::bytea || int4send(octet_length(convert_to(outcome_, 'UTF8'))) || convert_to(outcome_, 'UTF8')
        || CASE WHEN http_status_ IS NULL THEN '\x0b687474705f73746174757300'::bytea ELSE '\x0b687474705f73746174757302'::bytea || int8send(http_status_::bigint) END
        || CASE WHEN destination_reference_ IS NULL THEN '\x1564657374696e6174696f6e5f7265666572656e636500'::bytea ELSE '\x1564657374696e6174696f6e5f7265666572656e636501'::bytea || int4send(octet_length(convert_to(destination_reference_, 'UTF8'))) || convert_to(destination_reference_, 'UTF8') END
        || CASE WHEN error_class_ IS NULL THEN '\x0b6572726f725f636c61737300'::bytea ELSE '\x0b6572726f725f636c61737301'::bytea || int4send(octet_length(convert_to(error_class_, 'UTF8'))) || convert_to(error_class_, 'UTF8') END
        || CASE WHEN response_excerpt_ IS NULL THEN '\x10726573706f6e73655f6578636572707400'::bytea ELSE '\x10726573706f6e73655f6578636572707401'::bytea || int4send(octet_length(convert_to(response_excerpt_, 'UTF8'))) || convert_to(response_excerpt_, 'UTF8') END
        || CASE WHEN to_state_ IS NULL THEN '\x08746f5f737461746500'::bytea ELSE '\x08746f5f737461746501'::bytea || int4send(octet_length(convert_to(to_state_, 'UTF8'))) || convert_to(to_state_, 'UTF8') END
        || CASE WHEN line_ IS NULL THEN '\x046c696e6500'::bytea ELSE '\x046c696e6501'::bytea || int4send(octet_length(convert_to(line_, 'UTF8'))) || convert_to(line_, 'UTF8') END;

-- The same records from whole rows (the backfill, and whoever checks by hand).
CREATE FUNCTION evidence_event_record(e alert_events) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN evidence_event_bytes(e.at, e.from_state, e.to_state, e.attempt, e.actor, e.line);

CREATE FUNCTION evidence_attempt_record(d delivery_attempts) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN evidence_attempt_bytes(d.attempt, d.kind, d.worker, d.fencing_token, d.started_at,
        d.finished_at, d.idempotency_key, d.payload_sha256, d.outcome, d.http_status,
        d.destination_reference, d.error_class, d.response_excerpt, d.to_state, d.line);

-- Where an alert's chain starts: SHA-256 of the chain's domain, a zero byte, and the
-- alert's own record.
CREATE FUNCTION evidence_genesis(a alerts) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    -- The domain: "alert-outbox evidence chain v1" and a zero byte.
    RETURN sha256('\x616c6572742d6f7574626f782065766964656e636520636861696e20763100'::bytea
        || evidence_alert_bytes(a.id, a.tenant_id, a.subject, a.occurrence, a.destination_id,
               a.revision, a.payload_sha256, a.reason, a.created_at, a.created_by));

-- The head an alert's next entry chains from: its newest entry's hash, or where its chain
-- starts when it has none; NULL when its newest entry is not chained yet (an alert from
-- before this migration that the backfill has not reached).
CREATE FUNCTION evidence_chain_head(alert uuid) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (SELECT CASE WHEN newest.found THEN newest.hash ELSE evidence_genesis(a) END
            FROM alerts a
            LEFT JOIN LATERAL (
                SELECT true AS found, x.hash FROM (
                    SELECT e.chain_pos AS pos, e.entry_hash AS hash FROM alert_events e
                    WHERE e.alert_id = a.id
                    UNION ALL
                    SELECT d.chain_pos, d.entry_hash FROM delivery_attempts d
                    WHERE d.alert_id = a.id
                ) x ORDER BY x.pos DESC NULLS FIRST LIMIT 1
            ) newest ON true
            WHERE a.id = alert);

-- Links each new entry to its alert's chain: the head it chains from is its alert's
-- newest entry's, or the alert's own record when it has none. When the alert's older
-- entries are not chained yet (an alert from before this migration that the backfill has
-- not reached), the new entry stays unchained too, and the backfill chains them all in
-- order. An insert that brings its own hash is left as it is (the trigger's WHEN); the
-- verifier checks it like any other.
--
-- Every writer of an alert's entries holds that alert's outbox row locked while it is
-- live (dispatchers, sweeps, operators, revisions), or its alert row once it has settled
-- (operators, revisions), so no two transactions extend one chain at once. The trigger
-- takes the outbox row's lock itself before it reads (a writer that forgot to cannot fork
-- the chain of a live alert), and reads the newest entry with a fresh snapshot (a
-- volatile function's query), after that lock was granted. Entries written by one
-- statement see each other (a row trigger sees the rows its statement inserted before),
-- so they chain in the order they are inserted.
--
-- The live row's `chain_head` follows: when it is kept, it must be the head the entries
-- say (anything else means a writer linked an entry without moving it, and the entry
-- would fork the chain: refused), and it moves to the new entry. A statement that changes
-- an outbox row and inserts a line for it through this trigger changes the row first
-- (its insert reads the rows its update returns), so that this later update of the same
-- row comes after it.
CREATE FUNCTION evidence_chain_link() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    previous bytea;
    live_head bytea;
BEGIN
    SELECT o.chain_head INTO live_head FROM outbox o WHERE o.alert_id = NEW.alert_id
        FOR NO KEY UPDATE;
    previous := evidence_chain_head(NEW.alert_id);
    IF previous IS NULL THEN
        RETURN NEW;
    END IF;
    IF live_head IS NOT NULL AND live_head <> previous THEN
        RAISE EXCEPTION 'alert %: its outbox row names chain head %, its newest entry %',
            NEW.alert_id, encode(live_head, 'hex'), encode(previous, 'hex')
            USING ERRCODE = 'data_corrupted';
    END IF;
    NEW.chain_pos := nextval('evidence_chain_pos_seq');
    -- One function for both tables: each branch names only its own table's columns.
    IF TG_TABLE_NAME = 'alert_events' THEN
        NEW.entry_hash := sha256(previous || evidence_event_bytes(NEW.at, NEW.from_state,
            NEW.to_state, NEW.attempt, NEW.actor, NEW.line));
    ELSE
        NEW.entry_hash := sha256(previous || evidence_attempt_bytes(NEW.attempt, NEW.kind,
            NEW.worker, NEW.fencing_token, NEW.started_at, NEW.finished_at, NEW.idempotency_key,
            NEW.payload_sha256, NEW.outcome, NEW.http_status, NEW.destination_reference,
            NEW.error_class, NEW.response_excerpt, NEW.to_state, NEW.line));
    END IF;
    IF live_head IS NOT NULL THEN
        UPDATE outbox SET chain_head = NEW.entry_hash WHERE alert_id = NEW.alert_id;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER alert_events_chain BEFORE INSERT ON alert_events
    FOR EACH ROW WHEN (NEW.entry_hash IS NULL) EXECUTE FUNCTION evidence_chain_link();
CREATE TRIGGER delivery_attempts_chain BEFORE INSERT ON delivery_attempts
    FOR EACH ROW WHEN (NEW.entry_hash IS NULL) EXECUTE FUNCTION evidence_chain_link();

-- Evidence stays insert-only, with one exception: the backfill's setting of a chain
-- position and hash on an entry that had none, leaving every other column as it was.
CREATE OR REPLACE FUNCTION reject_evidence_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.entry_hash IS NULL AND NEW.entry_hash IS NOT NULL AND NEW.chain_pos IS NOT NULL
       AND to_jsonb(OLD) - 'entry_hash' - 'chain_pos' = to_jsonb(NEW) - 'entry_hash' - 'chain_pos' THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% is insert-only: evidence is never edited', TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;

-- Alerts approved before this migration get their chains from a background step
-- (`evidence_chain_backfill`, run by whichever process makes checkpoints), walking
-- alerts in id order up to the newest that existed here; alerts approved since are
-- chained from their first entry. One row: where the walk is.
CREATE TABLE evidence_backfill (
    single      boolean PRIMARY KEY DEFAULT true CHECK (single),
    up_to       uuid,
    after       uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    chained     bigint NOT NULL DEFAULT 0,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
INSERT INTO evidence_backfill (up_to, finished_at)
SELECT newest, CASE WHEN newest IS NULL THEN now() END
FROM (SELECT (SELECT id FROM alerts ORDER BY id DESC LIMIT 1) AS newest) n;

-- One step of the backfill: chains the entries of up to `batch` alerts after the cursor,
-- each under the locks its writers take (its outbox row, then its alert row), in the
-- order of its trail (time, events before attempt lines, insertion). Returns how many
-- alerts it walked; 0 once finished.
CREATE FUNCTION evidence_chain_backfill(batch integer) RETURNS integer
    LANGUAGE plpgsql AS $$
DECLARE
    state evidence_backfill;
    alert uuid;
    walked integer := 0;
    head bytea;
    entry record;
BEGIN
    SELECT * INTO state FROM evidence_backfill FOR UPDATE;
    IF state.finished_at IS NOT NULL THEN
        RETURN 0;
    END IF;
    FOR alert IN SELECT a.id FROM alerts a WHERE a.id > state.after AND a.id <= state.up_to
                 ORDER BY a.id LIMIT batch LOOP
        walked := walked + 1;
        state.after := alert;
        PERFORM 1 FROM outbox o WHERE o.alert_id = alert FOR UPDATE;
        PERFORM 1 FROM alerts a WHERE a.id = alert FOR NO KEY UPDATE;
        IF NOT EXISTS (SELECT 1 FROM alert_events e WHERE e.alert_id = alert AND e.entry_hash IS NULL)
           AND NOT EXISTS (SELECT 1 FROM delivery_attempts d WHERE d.alert_id = alert AND d.entry_hash IS NULL) THEN
            CONTINUE;
        END IF;
        SELECT evidence_genesis(a) INTO head FROM alerts a WHERE a.id = alert;
        FOR entry IN
            SELECT 0 AS source, e.id, e.at FROM alert_events e WHERE e.alert_id = alert
            UNION ALL
            SELECT 1, d.id, coalesce(d.finished_at, d.started_at) FROM delivery_attempts d WHERE d.alert_id = alert
            ORDER BY 3, 1, 2
        LOOP
            IF entry.source = 0 THEN
                UPDATE alert_events e
                   SET chain_pos = nextval('evidence_chain_pos_seq'),
                       entry_hash = sha256(head || evidence_event_record(e))
                 WHERE e.alert_id = alert AND e.id = entry.id
                 RETURNING e.entry_hash INTO head;
            ELSE
                UPDATE delivery_attempts d
                   SET chain_pos = nextval('evidence_chain_pos_seq'),
                       entry_hash = sha256(head || evidence_attempt_record(d))
                 WHERE d.alert_id = alert AND d.id = entry.id
                 RETURNING d.entry_hash INTO head;
            END IF;
        END LOOP;
        -- A live alert's row keeps its head from now on (see outbox.chain_head).
        UPDATE outbox SET chain_head = head WHERE alert_id = alert;
        state.chained := state.chained + 1;
    END LOOP;
    UPDATE evidence_backfill SET after = state.after, chained = state.chained,
        finished_at = CASE WHEN walked < batch THEN now() END;
    RETURN walked;
END
$$;

-- What retention keeps of a pruned alert's chain: the position and the hash of each of its
-- entries in order (so its head, and its leaf in every checkpoint that covered it, can
-- still be shown), and when it was pruned. Its lines are gone; docs/auditing.md says what
-- it still proves.
CREATE TABLE evidence_pruned_chains (
    alert_id        uuid PRIMARY KEY,
    positions       bigint[] NOT NULL,
    entry_hashes    bytea NOT NULL
                    CHECK (octet_length(entry_hashes) = 32 * cardinality(positions)),
    pruned_at       timestamptz NOT NULL DEFAULT now()
);

-- The public keys checkpoints were signed with, kept for verification after rotation.
CREATE TABLE evidence_keys (
    key_id          text PRIMARY KEY CHECK (key_id ~ '^[0-9a-f]{16}$'),
    public_key      text NOT NULL UNIQUE,
    first_used_at   timestamptz NOT NULL DEFAULT now()
);

-- Checkpoints: a Merkle tree over the chain heads that changed in a range of positions,
-- chained to the previous checkpoint and signed when a key is configured. Insert-only.
-- `leaves` packs the tree's leaves in order (alert id, entry count, head: 56 bytes each),
-- so that one alert's inclusion proof can be rebuilt without a row per leaf.
CREATE TABLE evidence_checkpoints (
    seq             bigint PRIMARY KEY CHECK (seq >= 1),
    made_at         timestamptz NOT NULL,
    covers_from     bigint NOT NULL,
    covers_to       bigint NOT NULL CHECK (covers_to >= covers_from),
    size            bigint NOT NULL CHECK (size >= 0),
    root            bytea NOT NULL CHECK (octet_length(root) = 32),
    previous        bytea NOT NULL CHECK (octet_length(previous) = 32),
    leaves          bytea NOT NULL CHECK (octet_length(leaves) = 56 * size),
    key_id          text REFERENCES evidence_keys (key_id),
    signature       bytea CHECK (octet_length(signature) = 64),
    CHECK ((key_id IS NULL) = (signature IS NULL))
);
ALTER TABLE evidence_checkpoints ALTER COLUMN leaves SET STORAGE EXTERNAL;
CREATE INDEX evidence_checkpoints_covers_to_idx ON evidence_checkpoints (covers_to);

CREATE FUNCTION reject_checkpoint_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is insert-only', TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END
$$;
CREATE TRIGGER evidence_checkpoints_insert_only BEFORE UPDATE OR DELETE ON evidence_checkpoints
    FOR EACH ROW EXECUTE FUNCTION reject_checkpoint_change();
CREATE TRIGGER evidence_keys_insert_only BEFORE UPDATE OR DELETE ON evidence_keys
    FOR EACH ROW EXECUTE FUNCTION reject_checkpoint_change();

-- The newest checkpoint's number and hash, written in the transaction that inserts it: a
-- newest checkpoint deleted afterwards is missed by comparing the two. (Whoever can also
-- rewrite this row can hide that; docs/auditing.md says why checkpoints are also logged
-- and exported.)
CREATE TABLE evidence_checkpoint_tip (
    single      boolean PRIMARY KEY DEFAULT true CHECK (single),
    seq         bigint NOT NULL,
    hash        bytea NOT NULL CHECK (octet_length(hash) = 32)
);
