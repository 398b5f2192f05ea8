//! Making checkpoints: whichever decider or dispatcher wins an advisory lock, once per
//! interval, builds the Merkle tree over the chain heads that changed since the previous
//! checkpoint, chains it to that checkpoint, signs it when a key is configured, and stores
//! it. The same loop moves the backfill of alerts from before the chain along.
//!
//! **Which entries a checkpoint covers.** Positions come from a sequence, so an entry with
//! a lower position can commit after one with a higher. A checkpoint therefore reads the
//! last position issued, then waits until every transaction that was open at that moment
//! has ended ([`outbox_store::evidence_chain::open_writers`]): every entry up to that
//! position is then committed or gone for good, and the checkpoint covers exactly the
//! positions after the previous checkpoint's, up to it. The next checkpoint starts where
//! this one ends, so every entry is covered by exactly one checkpoint.

use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_core::evidence_chain::{merkle_root, Checkpoint, Hash, Leaf};
use outbox_core::evidence_signing::{CheckpointSigner, KeyError};
use outbox_runtime::shutdown::Shutdown;
use outbox_store::evidence_chain as stored;
use outbox_store::StoreError;
use sqlx::PgPool;
use uuid::Uuid;

/// A checkpoint just made.
#[derive(Debug, Clone)]
pub struct Made {
    /// Its number.
    pub seq: i64,
    /// How many chain heads it commits to.
    pub size: usize,
    /// Its hash (what the next checkpoint chains from, and what an auditor writes down).
    pub hash: Hash,
    /// The last position it covers.
    pub covers_to: i64,
    /// Whether positions issued before it began are left for the next checkpoint (it
    /// stopped at [`MAX_POSITIONS`]).
    pub more: bool,
    /// Whether it was signed.
    pub signed: bool,
}

/// Why no checkpoint was made this time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skipped {
    /// Another process holds the maker's lock.
    Busy,
    /// No entry was chained since the previous checkpoint.
    NothingNew,
    /// Transactions that may still commit entries of the range stayed open past the wait
    /// (their virtual transaction ids).
    WritersStillOpen(Vec<String>),
}

/// Most positions (entries) one checkpoint covers.
pub const MAX_POSITIONS: i64 = 250_000;

/// How long a checkpoint waits for the transactions open when it started.
pub const WRITERS_WAIT: Duration = Duration::from_secs(10);

/// Makes one checkpoint now, if there is anything new to cover and no other process is
/// making one.
pub async fn make_checkpoint(
    pool: &PgPool,
    signer: Option<&CheckpointSigner>,
) -> Result<Result<Made, Skipped>, StoreError> {
    let issued = stored::positions_issued(pool).await?;
    let writers = stored::open_writers(pool).await?;
    let deadline = tokio::time::Instant::now() + WRITERS_WAIT;
    let mut open = writers;
    while !open.is_empty() {
        open = stored::still_open(pool, &open).await?;
        if open.is_empty() {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(Err(Skipped::WritersStillOpen(open)));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut tx = pool.begin().await?;
    if !stored::try_checkpoint_lock(&mut tx).await? {
        return Ok(Err(Skipped::Busy));
    }
    let previous = stored::newest_checkpoint(&mut *tx).await?;
    let (seq, covers_from, previous_hash) = match &previous {
        Some(p) => (p.seq + 1, p.covers_to, checkpoint_of(p).hash()),
        None => (1, 0, [0u8; 32]),
    };
    if issued <= covers_from {
        return Ok(Err(Skipped::NothingNew));
    }
    // At most MAX_POSITIONS per checkpoint, so that one checkpoint's leaves stay a size a
    // verifier holds at once; the maker's loop makes the next one at once when more wait.
    let covers_to = issued.min(covers_from + MAX_POSITIONS);
    let leaves: Vec<Leaf> = stored::leaves_between(&mut tx, covers_from, covers_to)
        .await?
        .into_iter()
        .map(|(alert_id, entries, head)| Leaf {
            alert_id,
            entries: entries.unsigned_abs(),
            head,
        })
        .collect();
    let made_at: DateTime<Utc> = stored::transaction_time(&mut tx).await?;
    let leaf_hashes: Vec<Hash> = leaves.iter().map(Leaf::hash).collect();
    let checkpoint = Checkpoint {
        seq: seq.unsigned_abs(),
        made_at_micros: made_at.timestamp_micros(),
        size: leaves.len() as u64,
        root: merkle_root(&leaf_hashes),
        previous: previous_hash,
    };
    let packed: Vec<u8> = leaves.iter().flat_map(|l| l.data()).collect();
    let signature = signer.map(|s| s.sign(&checkpoint));
    let hash = checkpoint.hash();
    stored::insert_checkpoint(
        &mut tx,
        stored::NewCheckpoint {
            seq,
            made_at,
            covers_from,
            covers_to,
            size: leaves.len() as i64,
            root: &checkpoint.root,
            previous: &checkpoint.previous,
            leaves: &packed,
            signed: signer
                .zip(signature.as_ref())
                .map(|(s, sig)| (s.key_id(), sig.as_slice())),
            hash: &hash,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(Ok(Made {
        seq,
        size: leaves.len(),
        hash,
        covers_to,
        more: covers_to < issued,
        signed: signer.is_some(),
    }))
}

/// The core's view of a stored checkpoint: what its hash and signature are over.
pub fn checkpoint_of(stored: &stored::StoredCheckpoint) -> Checkpoint {
    Checkpoint {
        seq: stored.seq.unsigned_abs(),
        made_at_micros: stored.made_at.timestamp_micros(),
        size: stored.size.unsigned_abs(),
        root: stored.root,
        previous: stored.previous,
    }
}

/// Leaves packed as stored, back into leaves; `None` when the bytes are not whole leaves.
pub fn unpack_leaves(packed: &[u8]) -> Option<Vec<Leaf>> {
    if !packed.len().is_multiple_of(56) {
        return None;
    }
    Some(
        packed
            .chunks_exact(56)
            .map(|c| Leaf {
                alert_id: Uuid::from_slice(&c[..16]).expect("16 bytes"),
                entries: u64::from_be_bytes(c[16..24].try_into().expect("8 bytes")),
                head: c[24..].try_into().expect("32 bytes"),
            })
            .collect(),
    )
}

/// The environment variable holding the checkpoint signing key (`ed25519:…`).
pub const SIGNING_KEY_VARIABLE: &str = "OUTBOX_EVIDENCE_SIGNING_KEY";

/// The signing key from [`SIGNING_KEY_VARIABLE`], if it is set and not empty.
pub fn signer_from_env() -> Result<Option<CheckpointSigner>, KeyError> {
    match std::env::var(SIGNING_KEY_VARIABLE) {
        Ok(text) if !text.trim().is_empty() => CheckpointSigner::from_text(text.trim()).map(Some),
        _ => Ok(None),
    }
}

/// How the loop is set up.
#[derive(Clone)]
pub struct Settings {
    /// Time between checkpoints.
    pub interval: Duration,
    /// The signing key, if one is configured.
    pub signer: Option<std::sync::Arc<CheckpointSigner>>,
    /// Alerts the backfill chains per step.
    pub backfill_batch: i32,
    /// The checkpoint log every checkpoint is appended to, if one is kept
    /// ([`crate::published`]).
    pub log: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("interval", &self.interval)
            .field(
                "key_id",
                &self.signer.as_ref().map(|s| s.key_id().to_owned()),
            )
            .field("backfill_batch", &self.backfill_batch)
            .field("log", &self.log)
            .finish()
    }
}

/// Alerts the backfill chains per transaction.
pub const BACKFILL_BATCH: i32 = 1_000;

/// `--checkpoint-interval`'s default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

/// Reads `--checkpoint-interval`: a duration (`1m`, `30s`) or `off`.
pub fn parse_interval(text: &str) -> Result<CheckpointInterval, String> {
    if text == "off" {
        return Ok(CheckpointInterval(None));
    }
    outbox_core::duration::parse_positive(text)
        .map(|d| CheckpointInterval(Some(d)))
        .map_err(|err| format!("{err}, or `off`"))
}

/// `--checkpoint-interval`: how often, or never (`off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointInterval(pub Option<Duration>);

impl std::fmt::Display for CheckpointInterval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(d) => write!(f, "{}s", d.as_secs_f64()),
            None => f.write_str("off"),
        }
    }
}

/// Why the checkpoint loop's settings were refused.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The signing key's text.
    #[error("{SIGNING_KEY_VARIABLE}: {0}")]
    Key(#[from] KeyError),
    /// A checkpoint log that cannot be read or appended to.
    #[error(transparent)]
    Log(#[from] crate::published::LogError),
    /// A checkpoint log without checkpoints to append.
    #[error("--checkpoint-log needs checkpoints: give a --checkpoint-interval other than `off`")]
    LogWithoutCheckpoints,
}

impl CheckpointInterval {
    /// The loop's settings, with the signing key from the environment and the checkpoint
    /// log at `log` (read now, so that an unreadable, unwritable or damaged log stops the
    /// process at start); `None` when off.
    pub fn settings(
        self,
        log: Option<std::path::PathBuf>,
    ) -> Result<Option<Settings>, SettingsError> {
        let Some(interval) = self.0 else {
            return match log {
                Some(_) => Err(SettingsError::LogWithoutCheckpoints),
                None => Ok(None),
            };
        };
        if let Some(path) = &log {
            crate::published::CheckpointLog::open(path)?.check_writable()?;
        }
        Ok(Some(Settings {
            interval,
            signer: signer_from_env()?.map(std::sync::Arc::new),
            backfill_batch: BACKFILL_BATCH,
            log,
        }))
    }
}

/// Records the signing key's public half, so verifiers find it after rotation.
pub async fn register(pool: &PgPool, settings: &Settings) -> Result<(), StoreError> {
    if let Some(signer) = &settings.signer {
        stored::register_key(pool, signer.key_id(), &signer.public_key().to_text()).await?;
    }
    Ok(())
}

/// Makes checkpoints (and moves the backfill along) every interval until `stop`. Errors
/// are logged and retried at the next interval: a database that is away (a failover)
/// delays checkpoints, it does not stop them.
pub async fn run(pool: PgPool, settings: Settings, mut stop: Shutdown) {
    if let Err(err) = register(&pool, &settings).await {
        tracing::warn!(error = %err, "could not record the evidence signing key; will retry");
    }
    let mut registered = false;
    let mut warned_open: bool = false;
    let mut log = settings.log.as_deref().and_then(|path| {
        crate::published::CheckpointLog::open(path)
            .map_err(|err| tracing::error!(error = %err, "evidence checkpoint log not kept"))
            .ok()
    });
    loop {
        tokio::select! {
            _ = stop.wait() => return,
            _ = tokio::time::sleep(settings.interval) => {}
        }
        if !registered {
            registered = register(&pool, &settings).await.is_ok();
        }
        let budget = (settings.interval / 4).min(Duration::from_secs(15));
        if let Err(err) = backfill(&pool, settings.backfill_batch, budget, &stop).await {
            tracing::warn!(error = %err, "evidence backfill step failed; will retry");
        }
        let mut more = true;
        while more && !stop.is_set() {
            more = false;
            match make_checkpoint(&pool, settings.signer.as_deref()).await {
                Ok(Ok(made)) => {
                    warned_open = false;
                    more = made.more;
                    // Logged at INFO on purpose: a log kept elsewhere is a witness of every
                    // checkpoint's hash that the database's administrator cannot rewrite.
                    tracing::info!(
                        checkpoint = made.seq,
                        heads = made.size,
                        hash = %outbox_core::evidence_chain::hex(&made.hash),
                        signed = made.signed,
                        "evidence checkpoint made"
                    );
                }
                Ok(Err(Skipped::WritersStillOpen(open))) if !warned_open => {
                    warned_open = true;
                    tracing::warn!(
                        transactions = ?open,
                        "evidence checkpoint waits for transactions open longer than {}s; will retry",
                        WRITERS_WAIT.as_secs()
                    );
                }
                Ok(Err(_)) => {}
                Err(err) => tracing::warn!(error = %err, "evidence checkpoint failed; will retry"),
            }
        }
        if let Some(log) = &mut log {
            publish(log, &pool, settings.signer.as_deref()).await;
        }
    }
}

/// Appends what is new to the checkpoint log. A log that disagrees with the database is
/// said once, at ERROR, and counted; other failures are retried at the next round.
async fn publish(
    log: &mut crate::published::CheckpointLog,
    pool: &PgPool,
    signer: Option<&CheckpointSigner>,
) {
    use crate::published::LogError;
    let already_stopped = log.is_stopped();
    match log.publish_new(pool, signer).await {
        Ok(_) => {}
        Err(err @ LogError::Disagrees(_)) => {
            if !already_stopped {
                crate::published::count_disagreement();
                tracing::error!(error = %err, "evidence checkpoint log stopped");
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, "evidence checkpoint log not appended; will retry")
        }
    }
}

/// Backfill steps for at most `budget` (a quarter of the interval, at most 15 s), so
/// checkpoints keep their pace while a large backfill runs.
async fn backfill(
    pool: &PgPool,
    batch: i32,
    budget: Duration,
    stop: &Shutdown,
) -> Result<(), StoreError> {
    let started = tokio::time::Instant::now();
    while started.elapsed() < budget && !stop.is_set() {
        if stored::backfill_step(pool, batch).await? < batch {
            return Ok(());
        }
    }
    Ok(())
}

/// The whole backfill at once (`outboxctl evidence checkpoint --backfill`).
pub async fn backfill_all(pool: &PgPool) -> Result<(), StoreError> {
    while stored::backfill_step(pool, BACKFILL_BATCH).await? >= BACKFILL_BATCH {}
    Ok(())
}
