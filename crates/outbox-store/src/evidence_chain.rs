//! The evidence chain as stored: each alert's entries with the heads they were linked
//! with as they were inserted (approvals and dispatchers' completions in their own
//! statements, from the head a live alert's outbox row carries; every other writer through
//! the trigger of migration `20261209000001`),
//! the checkpoints over those heads, the signing keys, and the backfill of alerts from
//! before the chain. Reads give the rows as they are, for `outbox-evidence` to recompute
//! with `outbox_core`'s definition; nothing here decides whether they match.

use chrono::{DateTime, Utc};
use outbox_core::evidence::chain::Hash;
use outbox_core::evidence::entries::{AlertFacts, AttemptFacts, EntryFacts, EventFacts};
use outbox_core::AttemptKind;
use sqlx::{PgConnection, PgExecutor, PgPool};
use uuid::Uuid;

use crate::lifecycle::{STATE, STATE_JOINS};
use crate::StoreError;

/// An alert's chain as stored: its own record, its entries in chain order, and where it
/// rests now.
#[derive(Debug, Clone)]
pub struct StoredChain {
    /// The alert as the chain starts from it.
    pub alert: AlertFacts,
    /// Its entries: chained ones in position order, then any without a position.
    pub entries: Vec<StoredEntry>,
    /// Its live status (`pending`, `sending`, `uncertain`) or its outcome; `None` when it
    /// has neither (which no writer leaves).
    pub state: Option<String>,
    /// What retention kept of its chain, when it was pruned.
    pub pruned: Option<PrunedChain>,
}

/// One entry with the head stored beside it.
#[derive(Debug, Clone)]
pub struct StoredEntry {
    /// Which table and row: `alert_events` or `delivery_attempts`, and its id.
    pub table: &'static str,
    /// The row's id in its table.
    pub id: i64,
    /// Its place in the global chain order; `None` when it was never chained.
    pub pos: Option<i64>,
    /// The stored head after it; `None` when it was never chained.
    pub hash: Option<Hash>,
    /// Its fields.
    pub facts: EntryFacts,
}

impl StoredEntry {
    /// How a person finds the row: `delivery_attempts row 42`.
    pub fn place(&self) -> String {
        format!("{} row {}", self.table, self.id)
    }
}

/// What retention kept of a pruned alert's chain.
#[derive(Debug, Clone)]
pub struct PrunedChain {
    /// Each entry's position and the hash after it, in order.
    pub entries: Vec<(i64, Hash)>,
}

impl PrunedChain {
    fn from_columns(positions: Vec<i64>, hashes: &[u8]) -> Result<PrunedChain, StoreError> {
        if hashes.len() != 32 * positions.len() {
            return Err(StoreError::Inconsistent(
                "a pruned chain's hashes do not match its positions".into(),
            ));
        }
        Ok(PrunedChain {
            entries: positions
                .into_iter()
                .zip(hashes.chunks_exact(32))
                .map(|(pos, hash)| (pos, Hash::try_from(hash).expect("32-byte chunks")))
                .collect(),
        })
    }
}

/// What retention kept of these alerts' chains, by alert.
pub async fn pruned_chains(
    db: impl PgExecutor<'_>,
    alert_ids: &[Uuid],
) -> Result<std::collections::HashMap<Uuid, PrunedChain>, StoreError> {
    let rows: Vec<(Uuid, Vec<i64>, Vec<u8>)> = sqlx::query_as(
        "SELECT alert_id, positions, entry_hashes FROM evidence_pruned_chains          WHERE alert_id = ANY($1::uuid[])",
    )
    .bind(alert_ids)
    .fetch_all(db)
    .await?;
    rows.into_iter()
        .map(|(id, positions, hashes)| Ok((id, PrunedChain::from_columns(positions, &hashes)?)))
        .collect()
}

#[derive(sqlx::FromRow)]
struct AlertRow {
    id: Uuid,
    tenant_id: Uuid,
    subject: String,
    occurrence: String,
    destination_id: Uuid,
    revision: i32,
    payload_sha256: Vec<u8>,
    reason: Option<String>,
    created_at: DateTime<Utc>,
    created_by: String,
    state: Option<String>,
    pruned_positions: Option<Vec<i64>>,
    pruned_hashes: Option<Vec<u8>>,
}

#[derive(sqlx::FromRow)]
struct EventRow {
    alert_id: Uuid,
    id: i64,
    chain_pos: Option<i64>,
    entry_hash: Option<Vec<u8>>,
    at: DateTime<Utc>,
    from_state: Option<String>,
    to_state: String,
    attempt: Option<i32>,
    actor: String,
    line: String,
}

#[derive(sqlx::FromRow)]
struct AttemptRow {
    alert_id: Uuid,
    id: i64,
    chain_pos: Option<i64>,
    entry_hash: Option<Vec<u8>>,
    attempt: i32,
    kind: AttemptKind,
    worker: String,
    fencing_token: i64,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
    idempotency_key: String,
    payload_sha256: Vec<u8>,
    outcome: String,
    http_status: Option<i16>,
    destination_reference: Option<String>,
    error_class: Option<String>,
    response_excerpt: Option<String>,
    to_state: Option<String>,
    line: Option<String>,
}

fn hash_of(bytes: Vec<u8>, what: &str) -> Result<Hash, StoreError> {
    Hash::try_from(bytes.as_slice())
        .map_err(|_| StoreError::Inconsistent(format!("{what} is not 32 bytes")))
}

/// An entry's stored head, when it has one.
fn stored_head(bytes: Option<Vec<u8>>) -> Result<Option<Hash>, StoreError> {
    bytes.map(|h| hash_of(h, "an entry's hash")).transpose()
}

/// One alert's chain (`Err(UnknownAlert)` when there is no such alert).
pub async fn chain(pool: &PgPool, alert_id: Uuid) -> Result<StoredChain, StoreError> {
    let mut conn = pool.acquire().await?;
    chains(&mut conn, &[alert_id])
        .await?
        .pop()
        .ok_or(StoreError::UnknownAlert(alert_id))
}

/// The chains of these alerts (those that exist), in the order of `alert_ids`. Three
/// statements whatever the number of alerts.
pub async fn chains(
    db: &mut PgConnection,
    alert_ids: &[Uuid],
) -> Result<Vec<StoredChain>, StoreError> {
    let alerts: Vec<AlertRow> = sqlx::query_as(&format!(
        "SELECT a.id, a.tenant_id, a.subject, a.occurrence, a.destination_id, a.revision, \
                a.payload_sha256, a.reason, a.created_at, a.created_by, \
                {STATE} AS state, \
                p.positions AS pruned_positions, p.entry_hashes AS pruned_hashes \
         FROM unnest($1::uuid[]) WITH ORDINALITY AS wanted(id, place) \
         JOIN alerts a ON a.id = wanted.id \
         {STATE_JOINS} \
         LEFT JOIN evidence_pruned_chains p ON p.alert_id = a.id \
         ORDER BY wanted.place",
    ))
    .bind(alert_ids)
    .fetch_all(&mut *db)
    .await?;
    let events: Vec<EventRow> = sqlx::query_as(
        "SELECT alert_id, id, chain_pos, entry_hash, at, from_state, to_state, attempt, actor, line \
         FROM alert_events WHERE alert_id = ANY($1::uuid[])",
    )
    .bind(alert_ids)
    .fetch_all(&mut *db)
    .await?;
    let attempts: Vec<AttemptRow> = sqlx::query_as(
        "SELECT alert_id, id, chain_pos, entry_hash, attempt, kind, worker, fencing_token, \
                started_at, finished_at, idempotency_key, payload_sha256, outcome, http_status, \
                destination_reference, error_class, response_excerpt, to_state, line \
         FROM delivery_attempts WHERE alert_id = ANY($1::uuid[])",
    )
    .bind(alert_ids)
    .fetch_all(&mut *db)
    .await?;

    let mut by_alert: std::collections::HashMap<Uuid, Vec<StoredEntry>> = Default::default();
    for row in events {
        let entry = StoredEntry {
            table: "alert_events",
            id: row.id,
            pos: row.chain_pos,
            hash: stored_head(row.entry_hash)?,
            facts: EntryFacts::Event(EventFacts {
                at_micros: row.at.timestamp_micros(),
                from_state: row.from_state,
                to_state: row.to_state,
                attempt: row.attempt,
                actor: row.actor,
                line: row.line,
            }),
        };
        by_alert.entry(row.alert_id).or_default().push(entry);
    }
    for row in attempts {
        let entry = StoredEntry {
            table: "delivery_attempts",
            id: row.id,
            pos: row.chain_pos,
            hash: stored_head(row.entry_hash)?,
            facts: EntryFacts::Attempt(AttemptFacts {
                attempt: row.attempt,
                attempt_kind: row.kind,
                worker: row.worker,
                fencing_token: row.fencing_token,
                started_at_micros: row.started_at.timestamp_micros(),
                finished_at_micros: row.finished_at.timestamp_micros(),
                idempotency_key: row.idempotency_key,
                payload_sha256: hash_of(row.payload_sha256, "an attempt's payload fingerprint")?,
                outcome: row.outcome,
                http_status: row.http_status,
                destination_reference: row.destination_reference,
                error_class: row.error_class,
                response_excerpt: row.response_excerpt,
                to_state: row.to_state,
                line: row.line,
            }),
        };
        by_alert.entry(row.alert_id).or_default().push(entry);
    }

    alerts
        .into_iter()
        .map(|row| {
            let mut entries = by_alert.remove(&row.id).unwrap_or_default();
            // Chain order; entries never chained go last, in their tables' order.
            entries.sort_by_key(|e| (e.pos.is_none(), e.pos, e.table, e.id));
            let pruned = match (row.pruned_positions, row.pruned_hashes) {
                (Some(positions), Some(hashes)) => {
                    Some(PrunedChain::from_columns(positions, &hashes)?)
                }
                _ => None,
            };
            Ok(StoredChain {
                alert: AlertFacts {
                    id: row.id,
                    tenant: row.tenant_id,
                    subject: row.subject,
                    occurrence: row.occurrence,
                    destination: row.destination_id,
                    revision: row.revision,
                    payload_sha256: hash_of(row.payload_sha256, "an alert's payload fingerprint")?,
                    reason: row.reason,
                    created_at_micros: row.created_at.timestamp_micros(),
                    created_by: row.created_by,
                },
                entries,
                state: row.state,
                pruned,
            })
        })
        .collect()
}

/// Up to `limit` alert ids after `after`, in id order: the walk of `verify --all`.
pub async fn alert_ids_after(
    db: impl PgExecutor<'_>,
    after: Uuid,
    limit: i64,
) -> Result<Vec<Uuid>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT id FROM alerts WHERE id > $1 ORDER BY id LIMIT $2")
            .bind(after)
            .bind(limit)
            .fetch_all(db)
            .await?,
    )
}

/// How many alerts there are (the walk's progress bar; an estimate is not enough for a
/// summary that says "all").
pub async fn alert_count(db: impl PgExecutor<'_>) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM alerts")
        .fetch_one(db)
        .await?)
}

/// A stored checkpoint.
#[derive(Debug, Clone)]
pub struct StoredCheckpoint {
    /// Its number, from 1 without gaps.
    pub seq: i64,
    /// When it was made.
    pub made_at: DateTime<Utc>,
    /// The positions it covers: after `covers_from`, up to and including `covers_to`.
    pub covers_from: i64,
    /// See `covers_from`.
    pub covers_to: i64,
    /// Its tree's size.
    pub size: i64,
    /// Its tree's root.
    pub root: Hash,
    /// The previous checkpoint's hash (zeros for the first).
    pub previous: Hash,
    /// The leaves, packed (56 bytes each); empty when not asked for.
    pub leaves: Vec<u8>,
    /// The signing key's id, when signed.
    pub key_id: Option<String>,
    /// The signature, when signed.
    pub signature: Option<Vec<u8>>,
}

#[derive(sqlx::FromRow)]
struct CheckpointRow {
    seq: i64,
    made_at: DateTime<Utc>,
    covers_from: i64,
    covers_to: i64,
    size: i64,
    root: Vec<u8>,
    previous: Vec<u8>,
    leaves: Vec<u8>,
    key_id: Option<String>,
    signature: Option<Vec<u8>>,
}

impl TryFrom<CheckpointRow> for StoredCheckpoint {
    type Error = StoreError;

    fn try_from(row: CheckpointRow) -> Result<Self, StoreError> {
        Ok(StoredCheckpoint {
            seq: row.seq,
            made_at: row.made_at,
            covers_from: row.covers_from,
            covers_to: row.covers_to,
            size: row.size,
            root: hash_of(row.root, "a checkpoint's root")?,
            previous: hash_of(row.previous, "a checkpoint's previous hash")?,
            leaves: row.leaves,
            key_id: row.key_id,
            signature: row.signature,
        })
    }
}

const CHECKPOINT_COLUMNS: &str =
    "seq, made_at, covers_from, covers_to, size, root, previous, leaves, key_id, signature";
const CHECKPOINT_COLUMNS_NO_LEAVES: &str = "seq, made_at, covers_from, covers_to, size, root, \
     previous, ''::bytea AS leaves, key_id, signature";

/// Checkpoints numbered after `after`, up to `limit` of them, in order, with or without
/// their leaves.
pub async fn checkpoints_after(
    db: impl PgExecutor<'_>,
    after: i64,
    limit: i64,
    with_leaves: bool,
) -> Result<Vec<StoredCheckpoint>, StoreError> {
    let columns = if with_leaves {
        CHECKPOINT_COLUMNS
    } else {
        CHECKPOINT_COLUMNS_NO_LEAVES
    };
    sqlx::query_as::<_, CheckpointRow>(&format!(
        "SELECT {columns} FROM evidence_checkpoints WHERE seq > $1 ORDER BY seq LIMIT $2"
    ))
    .bind(after)
    .bind(limit)
    .fetch_all(db)
    .await?
    .into_iter()
    .map(StoredCheckpoint::try_from)
    .collect()
}

/// The checkpoint numbered `seq`, with its leaves.
pub async fn checkpoint(
    db: impl PgExecutor<'_>,
    seq: i64,
) -> Result<Option<StoredCheckpoint>, StoreError> {
    sqlx::query_as::<_, CheckpointRow>(&format!(
        "SELECT {CHECKPOINT_COLUMNS} FROM evidence_checkpoints WHERE seq = $1"
    ))
    .bind(seq)
    .fetch_optional(db)
    .await?
    .map(StoredCheckpoint::try_from)
    .transpose()
}

/// The checkpoint whose range holds position `pos` (with its leaves), if one does yet.
pub async fn checkpoint_covering(
    db: impl PgExecutor<'_>,
    pos: i64,
) -> Result<Option<StoredCheckpoint>, StoreError> {
    sqlx::query_as::<_, CheckpointRow>(&format!(
        "SELECT {CHECKPOINT_COLUMNS} FROM evidence_checkpoints \
         WHERE covers_to >= $1 AND covers_from < $1 ORDER BY covers_to LIMIT 1"
    ))
    .bind(pos)
    .fetch_optional(db)
    .await?
    .map(StoredCheckpoint::try_from)
    .transpose()
}

/// The checkpoints with a leaf for `alert`, by number: every one that ever recorded it,
/// whatever positions its entries have now. Found through the index over each checkpoint's
/// leaves (migration `20261216000031`), which is derived from the leaves and so cannot
/// disagree with them; the caller reads the leaf itself from the leaves.
pub async fn checkpoints_with_leaf_for(
    db: impl PgExecutor<'_>,
    alert: Uuid,
) -> Result<Vec<i64>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT seq FROM evidence_checkpoints \
         WHERE evidence_leaf_alerts(leaves) @> ARRAY[$1::uuid] ORDER BY seq",
    )
    .bind(alert)
    .fetch_all(db)
    .await?)
}

/// The newest checkpoint numbered before `before` that covered every position issued
/// before it was made, with when it was made: one whose range holds `max_positions`
/// positions stopped there and may have left earlier positions to the next. Every entry
/// of a later checkpoint's range took its position after this one was begun.
pub async fn dating_floor(
    db: impl PgExecutor<'_>,
    before: i64,
    max_positions: i64,
) -> Result<Option<(i64, DateTime<Utc>)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT seq, made_at FROM evidence_checkpoints \
         WHERE seq < $1 AND covers_to - covers_from < $2 ORDER BY seq DESC LIMIT 1",
    )
    .bind(before)
    .bind(max_positions)
    .fetch_optional(db)
    .await?)
}

/// An entry dated before a given time, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatedEntry {
    /// Its alert.
    pub alert_id: Uuid,
    /// `alert_events` or `delivery_attempts`.
    pub table: &'static str,
    /// The row's id in its table.
    pub id: i64,
    /// Its place in its alert's chain, from 1.
    pub index: i64,
    /// Its chain position.
    pub pos: i64,
    /// Its date: a line's `at`, an attempt's `finished_at`.
    pub at: DateTime<Utc>,
}

/// The entries with a position after `after`, up to `up_to` (`None`: every later one),
/// dated before `before` (a line by its `at`, an attempt by its `finished_at`), in position
/// order; with `spare_created_before`, not those of alerts created before that time.
pub async fn entries_dated_before(
    db: impl PgExecutor<'_>,
    after: i64,
    up_to: Option<i64>,
    before: DateTime<Utc>,
    spare_created_before: Option<DateTime<Utc>>,
) -> Result<Vec<DatedEntry>, StoreError> {
    let rows: Vec<(bool, Uuid, i64, i64, i64, DateTime<Utc>)> = sqlx::query_as(
        "WITH dated AS ( \
             SELECT false AS attempt, alert_id, id, chain_pos, at FROM alert_events \
             WHERE chain_pos > $1 AND chain_pos <= $2 AND at < $3 \
             UNION ALL \
             SELECT true, alert_id, id, chain_pos, finished_at FROM delivery_attempts \
             WHERE chain_pos > $1 AND chain_pos <= $2 AND finished_at < $3 \
         ) \
         SELECT x.attempt, x.alert_id, x.id, \
                (SELECT count(*) FROM alert_events e \
                 WHERE e.alert_id = x.alert_id AND e.chain_pos <= x.chain_pos) \
              + (SELECT count(*) FROM delivery_attempts d \
                 WHERE d.alert_id = x.alert_id AND d.chain_pos <= x.chain_pos), \
                x.chain_pos, x.at \
         FROM dated x JOIN alerts a ON a.id = x.alert_id \
         WHERE $4::timestamptz IS NULL OR a.created_at >= $4 \
         ORDER BY x.chain_pos",
    )
    .bind(after)
    .bind(up_to.unwrap_or(i64::MAX))
    .bind(before)
    .bind(spare_created_before)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(attempt, alert_id, id, index, pos, at)| DatedEntry {
            alert_id,
            table: if attempt {
                "delivery_attempts"
            } else {
                "alert_events"
            },
            id,
            index,
            pos,
            at,
        })
        .collect())
}

/// Those of these alerts whose stored payload is not the one approved: the SHA-256 of its
/// text (UTF-8) against `payload_sha256`, which the chain holds. Pruned alerts (their
/// payload emptied, their chain kept in `evidence_pruned_chains`) are left out.
pub async fn altered_payloads(
    db: impl PgExecutor<'_>,
    alert_ids: &[Uuid],
) -> Result<Vec<(Uuid, Hash, Hash)>, StoreError> {
    let rows: Vec<(Uuid, Vec<u8>, Vec<u8>)> = sqlx::query_as(
        "SELECT a.id, sha256(convert_to(a.payload, 'UTF8')), a.payload_sha256 \
         FROM alerts a \
         WHERE a.id = ANY($1::uuid[]) \
           AND sha256(convert_to(a.payload, 'UTF8')) <> a.payload_sha256 \
           AND NOT EXISTS (SELECT 1 FROM evidence_pruned_chains p WHERE p.alert_id = a.id) \
         ORDER BY a.id",
    )
    .bind(alert_ids)
    .fetch_all(db)
    .await?;
    rows.into_iter()
        .map(|(id, stored, approved)| {
            Ok((
                id,
                hash_of(stored, "a payload's SHA-256")?,
                hash_of(approved, "an alert's payload fingerprint")?,
            ))
        })
        .collect()
}

/// The first checkpoint made after `at` (the `--since` walk's start), without leaves.
pub async fn first_checkpoint_since(
    db: impl PgExecutor<'_>,
    at: DateTime<Utc>,
) -> Result<Option<i64>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT min(seq) FROM evidence_checkpoints WHERE made_at >= $1")
            .bind(at)
            .fetch_one(db)
            .await?,
    )
}

/// The newest checkpoint as the tip row records it (number and hash), if any was made.
pub async fn checkpoint_tip(db: impl PgExecutor<'_>) -> Result<Option<(i64, Hash)>, StoreError> {
    let row: Option<(i64, Vec<u8>)> =
        sqlx::query_as("SELECT seq, hash FROM evidence_checkpoint_tip")
            .fetch_optional(db)
            .await?;
    row.map(|(seq, hash)| Ok((seq, hash_of(hash, "the checkpoint tip's hash")?)))
        .transpose()
}

/// Every public key checkpoints name, as stored: `(key id, key text)`.
pub async fn stored_keys(db: impl PgExecutor<'_>) -> Result<Vec<(String, String)>, StoreError> {
    Ok(
        sqlx::query_as("SELECT key_id, public_key FROM evidence_keys ORDER BY first_used_at")
            .fetch_all(db)
            .await?,
    )
}

/// Records a signing key's public half (once; later calls change nothing).
pub async fn register_key(
    db: impl PgExecutor<'_>,
    key_id: &str,
    public_key: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO evidence_keys (key_id, public_key) VALUES ($1, $2) \
         ON CONFLICT (key_id) DO NOTHING",
    )
    .bind(key_id)
    .bind(public_key)
    .execute(db)
    .await?;
    Ok(())
}

/// The newest chain position handed out so far (0 before the first). Entries up to it may
/// still be uncommitted; [`open_writers`] says whose transactions to wait for.
pub async fn positions_issued(db: impl PgExecutor<'_>) -> Result<i64, StoreError> {
    let (last, called): (i64, bool) =
        sqlx::query_as("SELECT last_value, is_called FROM evidence_chain_pos_seq")
            .fetch_one(db)
            .await?;
    Ok(if called { last } else { 0 })
}

/// The transactions of client sessions (other than this one) that may be writing
/// evidence now, by virtual transaction id: a checkpoint covers positions up to what was
/// issued before it asked, once all of these have ended, so no entry of its range commits
/// after it. Sessions idle inside a transaction that has written nothing are left out, and
/// so are sessions connected to other databases of the server (`pg_locks` shows every
/// database's), which cannot write this one's evidence: a long transaction there must not
/// hold up this database's checkpoints. A session `pg_stat_activity` does not show (yet)
/// is counted.
pub async fn open_writers(db: impl PgExecutor<'_>) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT l.virtualxid FROM pg_locks l \
         LEFT JOIN pg_stat_activity s ON s.pid = l.pid \
         WHERE l.locktype = 'virtualxid' AND l.granted AND l.pid <> pg_backend_pid() \
           AND coalesce(s.backend_type, 'client backend') = 'client backend' \
           AND (s.pid IS NULL OR s.datid = (SELECT oid FROM pg_database \
                                            WHERE datname = current_database())) \
           AND NOT (s.state IS NOT NULL AND s.state <> 'active' AND s.backend_xid IS NULL)",
    )
    .fetch_all(db)
    .await?)
}

/// Which of these transactions are still open.
pub async fn still_open(
    db: impl PgExecutor<'_>,
    writers: &[String],
) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT virtualxid FROM pg_locks WHERE locktype = 'virtualxid' AND granted \
           AND virtualxid = ANY($1::text[])",
    )
    .bind(writers)
    .fetch_all(db)
    .await?)
}

/// Tries to become the one process making the next checkpoint, for the rest of the
/// transaction on `db`.
pub async fn try_checkpoint_lock(db: &mut PgConnection) -> Result<bool, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT pg_try_advisory_xact_lock(hashtext('outbox.evidence.checkpoint'))",
    )
    .fetch_one(db)
    .await?)
}

/// The transaction's own time (`now()`): a checkpoint is dated by the database's clock, in
/// the transaction that stores it.
pub async fn transaction_time(db: &mut PgConnection) -> Result<DateTime<Utc>, StoreError> {
    Ok(sqlx::query_scalar("SELECT now()").fetch_one(db).await?)
}

/// The newest stored checkpoint with its hash inputs (no leaves): the maker reads it under
/// its lock, a verifier to know what the newest covers.
pub async fn newest_checkpoint(
    db: impl PgExecutor<'_>,
) -> Result<Option<StoredCheckpoint>, StoreError> {
    sqlx::query_as::<_, CheckpointRow>(&format!(
        "SELECT {CHECKPOINT_COLUMNS_NO_LEAVES} FROM evidence_checkpoints ORDER BY seq DESC LIMIT 1"
    ))
    .fetch_optional(db)
    .await?
    .map(StoredCheckpoint::try_from)
    .transpose()
}

/// The leaves of a checkpoint covering positions `(from, to]`: each alert with an entry in
/// that range, with how many entries it had up to `to` and its head after the last of
/// them, in alert id order.
pub async fn leaves_between(
    db: &mut PgConnection,
    from: i64,
    to: i64,
) -> Result<Vec<(Uuid, i64, Hash)>, StoreError> {
    let rows: Vec<(Uuid, i64, Vec<u8>)> = sqlx::query_as(
        "WITH changed AS ( \
             SELECT alert_id FROM alert_events WHERE chain_pos > $1 AND chain_pos <= $2 \
             UNION \
             SELECT alert_id FROM delivery_attempts WHERE chain_pos > $1 AND chain_pos <= $2 \
         ) \
         SELECT c.alert_id, h.entries, h.head \
         FROM changed c \
         CROSS JOIN LATERAL ( \
             SELECT count(*) AS entries, (array_agg(x.entry_hash ORDER BY x.chain_pos DESC))[1] AS head \
             FROM (SELECT chain_pos, entry_hash FROM alert_events \
                   WHERE alert_id = c.alert_id AND chain_pos <= $2 \
                   UNION ALL \
                   SELECT chain_pos, entry_hash FROM delivery_attempts \
                   WHERE alert_id = c.alert_id AND chain_pos <= $2) x \
         ) h \
         ORDER BY c.alert_id",
    )
    .bind(from)
    .bind(to)
    .fetch_all(db)
    .await?;
    rows.into_iter()
        .map(|(alert, entries, head)| Ok((alert, entries, hash_of(head, "a chain head")?)))
        .collect()
}

/// A checkpoint to store.
#[derive(Debug, Clone)]
pub struct NewCheckpoint<'a> {
    /// Its number.
    pub seq: i64,
    /// When it was made (as signed: microsecond precision).
    pub made_at: DateTime<Utc>,
    /// Positions after this...
    pub covers_from: i64,
    /// ...up to this.
    pub covers_to: i64,
    /// Tree size.
    pub size: i64,
    /// Tree root.
    pub root: &'a Hash,
    /// Previous checkpoint's hash.
    pub previous: &'a Hash,
    /// Packed leaves.
    pub leaves: &'a [u8],
    /// Key id and signature, when signed.
    pub signed: Option<(&'a str, &'a [u8])>,
    /// This checkpoint's own hash, for the tip row.
    pub hash: &'a Hash,
}

/// Stores a checkpoint and moves the tip to it, on the maker's transaction.
pub async fn insert_checkpoint(
    db: &mut PgConnection,
    checkpoint: NewCheckpoint<'_>,
) -> Result<(), StoreError> {
    sqlx::query(
        "WITH stored AS ( \
             INSERT INTO evidence_checkpoints (seq, made_at, covers_from, covers_to, size, root, \
                 previous, leaves, key_id, signature) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
         ) \
         INSERT INTO evidence_checkpoint_tip (seq, hash) VALUES ($1, $11) \
         ON CONFLICT (single) DO UPDATE SET seq = EXCLUDED.seq, hash = EXCLUDED.hash",
    )
    .bind(checkpoint.seq)
    .bind(checkpoint.made_at)
    .bind(checkpoint.covers_from)
    .bind(checkpoint.covers_to)
    .bind(checkpoint.size)
    .bind(checkpoint.root.as_slice())
    .bind(checkpoint.previous.as_slice())
    .bind(checkpoint.leaves)
    .bind(checkpoint.signed.map(|(key, _)| key))
    .bind(checkpoint.signed.map(|(_, signature)| signature))
    .bind(checkpoint.hash.as_slice())
    .execute(db)
    .await?;
    Ok(())
}

/// One step of chaining alerts approved before the chain existed (up to `batch` alerts,
/// in one transaction); returns how many it walked, 0 once the backfill is finished.
pub async fn backfill_step(pool: &PgPool, batch: i32) -> Result<i32, StoreError> {
    Ok(sqlx::query_scalar("SELECT evidence_chain_backfill($1)")
        .bind(batch)
        .fetch_one(pool)
        .await?)
}

/// Where the backfill stands: alerts chained so far, and when it finished (if it has).
pub async fn backfill_state(
    db: impl PgExecutor<'_>,
) -> Result<(i64, Option<DateTime<Utc>>), StoreError> {
    Ok(
        sqlx::query_as("SELECT chained, finished_at FROM evidence_backfill")
            .fetch_one(db)
            .await?,
    )
}

/// Alerts with an entry after position `pos` (those no checkpoint covers entirely yet),
/// in id order.
pub async fn alerts_with_entries_after(
    db: impl PgExecutor<'_>,
    pos: i64,
) -> Result<Vec<Uuid>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT alert_id FROM alert_events WHERE chain_pos > $1 \
         UNION SELECT alert_id FROM delivery_attempts WHERE chain_pos > $1 \
         ORDER BY 1",
    )
    .bind(pos)
    .fetch_all(db)
    .await?)
}

/// How many entries have a position after `pos`.
pub async fn entries_after(db: impl PgExecutor<'_>, pos: i64) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM alert_events WHERE chain_pos > $1) \
              + (SELECT count(*) FROM delivery_attempts WHERE chain_pos > $1)",
    )
    .bind(pos)
    .fetch_one(db)
    .await?)
}
