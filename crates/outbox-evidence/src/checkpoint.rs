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
//! this one ends, so every entry is covered by exactly one checkpoint, and took its
//! position after the checkpoint before that one was begun: what the dating rule
//! ([`crate::dating`]) rests on.
//!
//! **What a checkpoint chains from.** The number and hash of the newest checkpoint are
//! written twice: in its row, and in the tip row the same transaction writes. The maker
//! goes on only when the two agree, and when the database has not gone back behind the
//! newest checkpoint this process has made or found ([`Memory`]). Otherwise a checkpoint
//! was deleted or changed, and making the next one would give its number a second signed
//! checkpoint: the maker refuses ([`Refused`]), with an ERROR line and
//! `outbox_evidence_checkpoints_refused_total` in the loop and a failed
//! `outboxctl evidence checkpoint`, until an operator restores the checkpoints or names the
//! newest one made (`--continue-after`) from a record kept outside the database.

use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_core::evidence::chain::{hex, merkle_root, Checkpoint, Hash, Leaf};
use outbox_core::evidence::signing::{CheckpointSigner, KeyError};
use outbox_runtime::prometheus::Figures;
use outbox_runtime::shutdown::Shutdown;
use outbox_store::evidence_chain as stored;
use outbox_store::StoreError;
use sqlx::{PgConnection, PgPool};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::anchor::Anchor;
pub use crate::stored_form::{checkpoint_of, unpack_leaves};

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
    /// The newest checkpoint is not the one the next would chain from.
    Refused(Refused),
}

/// Why the maker will not make the next checkpoint: the database's newest checkpoint is
/// not the one that was made last (deleted, changed, or the tip rewritten), and a
/// checkpoint made now would give a number that was already signed a second meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// What disagrees, in a sentence.
    pub reason: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}; no checkpoint is made until this is looked into (`outboxctl evidence verify \
             --all` names what is missing): restore the checkpoints from a backup, or go on \
             with `outboxctl evidence checkpoint --continue-after N:HASH`, the newest \
             checkpoint's number and hash as your `evidence checkpoint made` log lines \
             record them",
            self.reason
        )
    }
}

fn refused(reason: String) -> Refused {
    Refused { reason }
}

/// What the maker holds the database's newest checkpoint to besides the tip row, which
/// whoever deletes a checkpoint can rewrite too: the newest checkpoint this process has
/// made or found in order (kept while it runs), and an operator's word to go on after a
/// given checkpoint (`outboxctl evidence checkpoint --continue-after`).
#[derive(Debug, Clone, Default)]
pub struct Memory {
    newest_known: Option<Anchor>,
    continue_after: Option<Anchor>,
}

impl Memory {
    /// Knowing `anchor` already: the newest checkpoint the process's checkpoint log holds,
    /// outside the database. A restart forgets what the process made, the log does not: a
    /// database whose checkpoints (and tip) were rolled back behind it is refused, rather
    /// than given a second checkpoint of a number already published.
    pub fn knowing(anchor: Anchor) -> Memory {
        Memory {
            newest_known: Some(anchor),
            continue_after: None,
        }
    }

    /// The next checkpoint goes on after `anchor` (the newest checkpoint made, as a record
    /// outside the database has it), whatever the database lost since.
    pub fn continuing_after(anchor: Anchor) -> Memory {
        Memory {
            newest_known: None,
            continue_after: Some(anchor),
        }
    }
}

/// Where the next checkpoint goes on from: its number, the last position before its range,
/// and the hash it chains from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Base {
    seq: i64,
    covers_from: i64,
    previous: Hash,
}

/// Where the next checkpoint goes on from, given the tip row, the newest stored checkpoint
/// (its number and hash, and the last position it covers) and what this process knows; or
/// why it must not be made.
fn next_base(
    tip: Option<Anchor>,
    newest: Option<(Anchor, i64)>,
    memory: &Memory,
) -> Result<Base, Refused> {
    let stored = newest.map(|(anchor, _)| anchor);
    let covers_from = newest.map_or(0, |(_, covers_to)| covers_to);
    if let Some(after) = memory.continue_after {
        return continue_after(after, tip, stored, memory.newest_known, covers_from);
    }
    tip_agrees(tip, stored)?;
    not_behind(memory.newest_known, stored)?;
    Ok(match stored {
        None => Base {
            seq: 1,
            covers_from: 0,
            previous: [0u8; 32],
        },
        Some(s) => Base {
            seq: s.seq + 1,
            covers_from,
            previous: s.hash,
        },
    })
}

/// The tip row and the newest stored checkpoint name the same checkpoint (or none): each
/// way they can differ says what was done.
fn tip_agrees(tip: Option<Anchor>, stored: Option<Anchor>) -> Result<(), Refused> {
    let what = match (tip, stored) {
        (None, None) => return Ok(()),
        (Some(tip), Some(stored)) if tip == stored => return Ok(()),
        (Some(tip), None) => {
            format!(
                "the tip records checkpoint {tip}, but no checkpoint is stored: they were deleted"
            )
        }
        (None, Some(stored)) => format!(
            "checkpoint {} is stored, but the tip records none: the tip was deleted",
            stored.seq
        ),
        (Some(tip), Some(stored)) if stored.seq < tip.seq => format!(
            "the tip records checkpoint {tip}, but the newest stored is checkpoint {}: \
             checkpoint {} was deleted",
            stored.seq, tip.seq
        ),
        (Some(tip), Some(stored)) if stored.seq == tip.seq => format!(
            "the tip records checkpoint {tip}, but the stored checkpoint {} hashes to {}: it \
             was changed",
            stored.seq,
            hex(&stored.hash)
        ),
        (Some(tip), Some(stored)) => format!(
            "checkpoint {} is stored, but the tip records checkpoint {}: the tip was \
             rewritten, or a checkpoint stored by other means",
            stored.seq, tip.seq
        ),
    };
    Err(refused(what))
}

/// The newest stored checkpoint is not older than the newest this process made or found,
/// nor another checkpoint of that number: else both were rewritten, the tip to match.
fn not_behind(known: Option<Anchor>, stored: Option<Anchor>) -> Result<(), Refused> {
    let Some(known) = known else { return Ok(()) };
    let behind = match stored {
        None => "no checkpoint is stored".to_owned(),
        Some(s) if s.seq < known.seq => format!("the newest stored is checkpoint {}", s.seq),
        Some(s) if s.seq == known.seq && s.hash != known.hash => {
            format!("the stored checkpoint {} hashes to {}", s.seq, hex(&s.hash))
        }
        Some(_) => return Ok(()),
    };
    Err(refused(format!(
        "this process made or found checkpoint {known}, but {behind} and the tip agrees: \
         checkpoints were deleted or changed, and the tip rewritten to match"
    )))
}

/// The base after `after`, an operator's word from a record kept outside the database,
/// unless something the maker sees records a later checkpoint or another one of that
/// number: going on after `after` would then sign a number twice. Its range starts where
/// the newest stored checkpoint's ends, so the entries of the lost ones are covered again.
fn continue_after(
    after: Anchor,
    tip: Option<Anchor>,
    stored: Option<Anchor>,
    known: Option<Anchor>,
    covers_from: i64,
) -> Result<Base, Refused> {
    let seen = [
        ("the tip records", tip),
        ("the newest stored is", stored),
        ("this process made", known),
    ];
    for (whose, seen) in seen {
        let Some(seen) = seen else { continue };
        if seen.seq > after.seq || (seen.seq == after.seq && seen.hash != after.hash) {
            return Err(refused(format!(
                "--continue-after {after}: {whose} checkpoint {seen}, so a checkpoint after \
                 {after} would sign a number twice"
            )));
        }
    }
    Ok(Base {
        seq: after.seq + 1,
        covers_from,
        previous: after.hash,
    })
}

/// Most positions (entries) one checkpoint covers.
pub const MAX_POSITIONS: i64 = 250_000;

/// How long a checkpoint waits for the transactions open when it started.
pub const WRITERS_WAIT: Duration = Duration::from_secs(10);

/// Makes one checkpoint now, if there is anything new to cover (or `memory` says to go on
/// after a lost one), no other process is making one, and the newest checkpoint is the one
/// that was made last (else [`Skipped::Refused`]). `memory` learns the newest checkpoint
/// found or made.
pub async fn make_checkpoint(
    pool: &PgPool,
    signer: Option<&CheckpointSigner>,
    memory: &mut Memory,
) -> Result<Result<Made, Skipped>, StoreError> {
    let issued = stored::positions_issued(pool).await?;
    if let Err(skipped) = wait_for_writers(pool).await? {
        return Ok(Err(skipped));
    }
    let mut tx = pool.begin().await?;
    if !stored::try_checkpoint_lock(&mut tx).await? {
        return Ok(Err(Skipped::Busy));
    }
    let base = match chained_base(&mut tx, memory).await? {
        Ok(base) => base,
        Err(skipped) => return Ok(Err(skipped)),
    };
    if issued <= base.covers_from && memory.continue_after.is_none() {
        return Ok(Err(Skipped::NothingNew));
    }
    // At most MAX_POSITIONS per checkpoint, so that one checkpoint's leaves stay a size a
    // verifier holds at once; the maker's loop makes the next one at once when more wait.
    let covers_to = issued.clamp(base.covers_from, base.covers_from + MAX_POSITIONS);
    let (hash, size) = write_checkpoint(&mut tx, base, covers_to, signer).await?;
    tx.commit().await?;
    *memory = Memory {
        newest_known: Some(Anchor {
            seq: base.seq,
            hash,
        }),
        continue_after: None,
    };
    Ok(Ok(Made {
        seq: base.seq,
        size,
        hash,
        covers_to,
        more: covers_to < issued,
        signed: signer.is_some(),
    }))
}

/// Waits, up to [`WRITERS_WAIT`], until the transactions open now have ended, so that
/// every position issued before is committed or gone for good; else skipped, naming the
/// ones still open.
async fn wait_for_writers(pool: &PgPool) -> Result<Result<(), Skipped>, StoreError> {
    let mut open = stored::open_writers(pool).await?;
    let deadline = tokio::time::Instant::now() + WRITERS_WAIT;
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
    Ok(Ok(()))
}

/// Under the maker's lock, where the next checkpoint goes on from ([`next_base`]), or why
/// it must not be made; `memory` learns the newest stored checkpoint, unless an operator
/// said to go on after another.
async fn chained_base(
    tx: &mut PgConnection,
    memory: &mut Memory,
) -> Result<Result<Base, Skipped>, StoreError> {
    // Chained from the newest checkpoint only when the tip (written with it) agrees, and
    // the database has not gone back behind what this process knows.
    let tip = stored::checkpoint_tip(&mut *tx)
        .await?
        .map(|(seq, hash)| Anchor { seq, hash });
    let newest = stored::newest_checkpoint(&mut *tx).await?.map(|c| {
        let hash = checkpoint_of(&c).hash();
        (Anchor { seq: c.seq, hash }, c.covers_to)
    });
    let base = match next_base(tip, newest, memory) {
        Ok(base) => base,
        Err(refused) => return Ok(Err(Skipped::Refused(refused))),
    };
    if memory.continue_after.is_none() {
        memory.newest_known = newest.map(|(anchor, _)| anchor);
    }
    Ok(Ok(base))
}

/// The checkpoint over the heads of the positions after `base`'s up to `covers_to`,
/// chained from `base`, signed when there is a key, and stored in `tx`: its hash and how
/// many leaves it has.
async fn write_checkpoint(
    tx: &mut PgConnection,
    base: Base,
    covers_to: i64,
    signer: Option<&CheckpointSigner>,
) -> Result<(Hash, usize), StoreError> {
    let Base {
        seq,
        covers_from,
        previous: previous_hash,
    } = base;
    let leaves: Vec<Leaf> = stored::leaves_between(&mut *tx, covers_from, covers_to)
        .await?
        .into_iter()
        .map(|(alert_id, entries, head)| Leaf {
            alert_id,
            entries: entries.unsigned_abs(),
            head,
        })
        .collect();
    let made_at: DateTime<Utc> = stored::transaction_time(&mut *tx).await?;
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
        &mut *tx,
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
    Ok((hash, leaves.len()))
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
    pub signer: Option<Arc<CheckpointSigner>>,
    /// Alerts the backfill chains per step.
    pub backfill_batch: i32,
    /// The checkpoint log every checkpoint is appended to, if one is kept
    /// ([`crate::published`]).
    pub log: Option<std::path::PathBuf>,
    /// What the loop counts, for the process's `/metrics`.
    pub figures: Arc<CheckpointFigures>,
}

/// What the checkpoint loop counts: `outbox_evidence_checkpoints_refused_total`, the
/// checkpoints it would not make ([`Refused`]; each also logged at ERROR), and
/// `outbox_evidence_checkpoint_log_disagreements_total`, the times the checkpoint log found
/// the database no longer holding what it published (the log then stops).
#[derive(Debug, Default)]
pub struct CheckpointFigures {
    refused: AtomicU64,
    log_disagreements: AtomicU64,
}

impl Figures for CheckpointFigures {
    fn render(&self, out: &mut String) {
        outbox_runtime::prometheus::render_one(
            out,
            "outbox_evidence_checkpoints_refused_total",
            "counter",
            "Checkpoints not made because the newest checkpoint was deleted or changed (see \
             the ERROR log line).",
            self.refused.load(Ordering::Relaxed),
        );
        outbox_runtime::prometheus::render_one(
            out,
            "outbox_evidence_checkpoint_log_disagreements_total",
            "counter",
            "Times the checkpoint log found the database no longer holding a checkpoint it \
             published, or holding another one (the log then stops; see the ERROR log line).",
            self.log_disagreements.load(Ordering::Relaxed),
        );
    }
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
            signer: signer_from_env()?.map(Arc::new),
            backfill_batch: BACKFILL_BATCH,
            log,
            figures: Arc::default(),
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
    let mut memory = log
        .as_ref()
        .and_then(crate::published::CheckpointLog::newest)
        .map(|(seq, hash)| {
            Memory::knowing(Anchor {
                seq: i64::try_from(seq).unwrap_or(i64::MAX),
                hash,
            })
        })
        .unwrap_or_default();
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
            match make_checkpoint(&pool, settings.signer.as_deref(), &mut memory).await {
                Ok(Ok(made)) => {
                    warned_open = false;
                    more = made.more;
                    // Logged at INFO on purpose: a log kept elsewhere is a witness of every
                    // checkpoint's hash that the database's administrator cannot rewrite.
                    tracing::info!(
                        checkpoint = made.seq,
                        heads = made.size,
                        hash = %outbox_core::evidence::chain::hex(&made.hash),
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
                // Every time, not once: nothing is checkpointed until someone acts.
                Ok(Err(Skipped::Refused(refused))) => {
                    settings.figures.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(%refused, "evidence checkpoint refused");
                }
                Ok(Err(_)) => {}
                Err(err) => tracing::warn!(error = %err, "evidence checkpoint failed; will retry"),
            }
        }
        if let Some(log) = &mut log {
            publish(log, &pool, &settings).await;
        }
    }
}

/// Appends what is new to the checkpoint log. A log that disagrees with the database is
/// said once, at ERROR, and counted; other failures are retried at the next round.
async fn publish(log: &mut crate::published::CheckpointLog, pool: &PgPool, settings: &Settings) {
    use crate::published::LogError;
    let already_stopped = log.is_stopped();
    match log.publish_new(pool, settings.signer.as_deref()).await {
        Ok(_) => {}
        Err(err @ LogError::Disagrees(_)) => {
            if !already_stopped {
                settings
                    .figures
                    .log_disagreements
                    .fetch_add(1, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn anchor(seq: i64, byte: u8) -> Anchor {
        Anchor {
            seq,
            hash: [byte; 32],
        }
    }

    /// The newest stored checkpoint `seq` (hash of `byte`s), covering up to `seq * 10`.
    fn newest(seq: i64, byte: u8) -> Option<(Anchor, i64)> {
        Some((anchor(seq, byte), seq * 10))
    }

    #[test]
    fn the_next_checkpoint_chains_from_the_newest_when_the_tip_agrees() {
        let none = Memory::default();
        let first = next_base(None, None, &none).unwrap();
        assert_eq!(
            (first.seq, first.covers_from, first.previous),
            (1, 0, [0; 32])
        );
        let next = next_base(Some(anchor(5, 5)), newest(5, 5), &none).unwrap();
        assert_eq!(
            (next.seq, next.covers_from, next.previous),
            (6, 50, [5; 32])
        );
    }

    #[test]
    fn a_deleted_or_changed_newest_checkpoint_is_refused_not_signed_again() {
        let none = Memory::default();
        let cases = [
            (Some(anchor(5, 5)), newest(4, 4), "checkpoint 5 was deleted"),
            (Some(anchor(5, 5)), None, "they were deleted"),
            (Some(anchor(5, 5)), newest(5, 9), "it was changed"),
            (None, newest(5, 5), "the tip was deleted"),
            (Some(anchor(4, 4)), newest(5, 5), "the tip was rewritten"),
        ];
        for (tip, stored, needle) in cases {
            let refused = next_base(tip, stored, &none).unwrap_err();
            assert!(refused.reason.contains(needle), "{refused}");
            assert!(
                refused.to_string().contains("--continue-after"),
                "{refused}"
            );
        }
    }

    #[test]
    fn a_database_gone_back_behind_what_the_process_made_is_refused_even_with_a_matching_tip() {
        let made_five = Memory {
            newest_known: Some(anchor(5, 5)),
            continue_after: None,
        };
        for (tip, stored) in [
            (Some(anchor(4, 4)), newest(4, 4)),
            (None, None),
            (Some(anchor(5, 9)), newest(5, 9)),
        ] {
            let refused = next_base(tip, stored, &made_five).unwrap_err();
            assert!(
                refused.reason.contains("made or found checkpoint 5:"),
                "{refused}"
            );
        }
        // Checkpoints other processes made since: fine.
        assert_eq!(
            next_base(Some(anchor(7, 7)), newest(7, 7), &made_five)
                .unwrap()
                .seq,
            8
        );
    }

    #[test]
    fn going_on_after_a_lost_checkpoint_never_reuses_a_number() {
        let after_five = Memory::continuing_after(anchor(5, 5));
        // Checkpoint 5 lost: 6 chains from its hash and covers again what 5 covered.
        let base = next_base(Some(anchor(5, 5)), newest(4, 4), &after_five).unwrap();
        assert_eq!(
            (base.seq, base.covers_from, base.previous),
            (6, 40, [5; 32])
        );
        let base = next_base(Some(anchor(4, 4)), newest(4, 4), &after_five).unwrap();
        assert_eq!(base.seq, 6);
        // Anything that records a later checkpoint, or another 5, forbids it.
        for (tip, stored) in [
            (Some(anchor(6, 6)), newest(4, 4)),
            (Some(anchor(4, 4)), newest(6, 6)),
            (Some(anchor(5, 9)), newest(4, 4)),
        ] {
            let refused = next_base(tip, stored, &after_five).unwrap_err();
            assert!(refused.reason.contains("sign a number twice"), "{refused}");
        }
    }
}
