//! The checkpoint log: every checkpoint, as a signed note ([`outbox_core::evidence::note`]),
//! appended to a file outside the database (`--checkpoint-log FILE` on `decider serve` and
//! `dispatcher`), where the database's administrator cannot rewrite it. `verify` and
//! `check` read it back (`--checkpoints FILE`) and refuse any history that disagrees.
//!
//! **Whichever process made a checkpoint, every log gets it.** After each round of the
//! checkpoint loop, a process with a log appends the checkpoints the database holds past
//! the newest one in its file, in order, so each log is complete on its own; point every
//! process's log at a place you keep (a file shipped to a log store, a volume you back up).
//!
//! **A log is a witness.** Before appending, the process holds the database to what the
//! log already says: the newest published checkpoint must still be stored with the same
//! hash, and the next one must chain from it. A checkpoint deleted or made again, or a
//! chain rewritten, stops the log there with an ERROR line (`evidence checkpoint log
//! disagrees with the database`) and the metric, instead of publishing the new history
//! beside the old; the file keeps what was published, for the auditor.
//!
//! Appends are one `write` of a whole note to a file opened for appending, then `fsync`.
//! A crash can still leave the last note cut short: then the log is not appended to
//! until an operator looks (the ERROR names the byte where the cut note starts).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use outbox_core::evidence::chain::{hex, Hash};
use outbox_core::evidence::note::{self as evidence_note, write_note, ParsedLog};
use outbox_core::evidence::signing::{CheckpointSigner, PublicKey};
use outbox_store::evidence_chain as stored;
use outbox_store::StoreError;
use sqlx::PgPool;

use crate::anchor::Anchor;
use crate::problem::Problem;
use crate::stored_form::checkpoint_of;

/// Checkpoints appended per round at most (the rest go in the next round).
const BATCH: i64 = 1_000;

/// Why a log was not appended to.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The file could not be read or written.
    #[error("checkpoint log {path}: {source}")]
    Io {
        /// The log.
        path: String,
        /// What failed.
        source: std::io::Error,
    },
    /// The file is not a checkpoint log, or holds a malformed note.
    #[error("checkpoint log {path}: {why}")]
    Malformed {
        /// The log.
        path: String,
        /// What is wrong, and where.
        why: String,
    },
    /// The database no longer holds the history the log published.
    #[error("evidence checkpoint log disagrees with the database: {0}")]
    Disagrees(String),
    /// The database could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A checkpoint log being appended to.
#[derive(Debug)]
pub struct CheckpointLog {
    path: PathBuf,
    /// The newest checkpoint in the file: its number and hash.
    newest: Option<(u64, Hash)>,
    /// Set once the log disagreed with the database: nothing more is appended.
    stopped: Option<String>,
}

impl CheckpointLog {
    /// Opens the log at `path` (made if missing), reading what it already holds.
    pub fn open(path: &Path) -> Result<CheckpointLog, LogError> {
        let parsed = read_log(path)?;
        if let Some(at) = parsed.torn_tail {
            return Err(LogError::Malformed {
                path: path.display().to_string(),
                why: format!(
                    "the last note, from byte {at}, was cut short (a crash while it was \
                     written); nothing is appended until it is looked at and removed"
                ),
            });
        }
        Ok(CheckpointLog {
            path: path.to_path_buf(),
            newest: parsed
                .checkpoints
                .last()
                .map(|p| (p.checkpoint.seq, p.hash())),
            stopped: None,
        })
    }

    /// The newest checkpoint the log holds, if any.
    pub fn newest(&self) -> Option<(u64, Hash)> {
        self.newest
    }

    /// Appends every checkpoint the database holds past the log's newest, each signed as a
    /// note by `writer` when given; returns how many. Fails, and appends nothing then or
    /// ever after in this process, when the database disagrees with what the log holds.
    pub async fn publish_new(
        &mut self,
        pool: &PgPool,
        writer: Option<&CheckpointSigner>,
    ) -> Result<usize, LogError> {
        if let Some(why) = &self.stopped {
            return Err(LogError::Disagrees(why.clone()));
        }
        let after = self
            .newest
            .map_or(0, |(seq, _)| i64::try_from(seq).unwrap_or(i64::MAX));
        // The newest published checkpoint itself, then those after it.
        let rows = stored::checkpoints_after(pool, after - 1, BATCH + 1, false).await?;
        let mut rows = rows.into_iter().peekable();
        if let Some((seq, published)) = self.newest {
            let stored_hash = match rows.peek() {
                Some(row) if row.seq == after => {
                    let hash = checkpoint_of(row).hash();
                    rows.next();
                    Some(hash)
                }
                _ => None,
            };
            match stored_hash {
                Some(hash) if hash == published => {}
                Some(hash) => {
                    return Err(self.stop(format!(
                        "checkpoint {seq} was published with hash {}, the database now holds \
                         hash {}",
                        hex(&published),
                        hex(&hash)
                    )))
                }
                None => {
                    return Err(self.stop(format!(
                        "checkpoint {seq}, published with hash {}, is no longer in the database",
                        hex(&published)
                    )))
                }
            }
        }
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.path)
            .map_err(|source| self.io(source))?;
        let mut appended = 0;
        for row in rows {
            let checkpoint = checkpoint_of(&row);
            let previous = self.newest.map_or([0u8; 32], |(_, hash)| hash);
            let expected_seq = self.newest.map_or(1, |(seq, _)| seq + 1);
            if checkpoint.seq != expected_seq || checkpoint.previous != previous {
                return Err(self.stop(format!(
                    "checkpoint {} does not follow checkpoint {} as published (it chains from \
                     {})",
                    checkpoint.seq,
                    expected_seq - 1,
                    hex(&checkpoint.previous)
                )));
            }
            let signed_by = row.key_id.as_deref().zip(row.signature.as_deref());
            let note = write_note(&checkpoint, signed_by, writer);
            file.write_all(note.as_bytes())
                .and_then(|()| file.sync_data())
                .map_err(|source| self.io(source))?;
            self.newest = Some((checkpoint.seq, checkpoint.hash()));
            appended += 1;
        }
        Ok(appended)
    }

    /// Whether the log stopped, having disagreed with the database.
    pub fn is_stopped(&self) -> bool {
        self.stopped.is_some()
    }

    /// Whether the log's file can be appended to (made if missing).
    pub fn check_writable(&self) -> Result<(), LogError> {
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.path)
            .map(drop)
            .map_err(|source| self.io(source))
    }

    fn stop(&mut self, why: String) -> LogError {
        self.stopped = Some(why.clone());
        LogError::Disagrees(why)
    }

    fn io(&self, source: std::io::Error) -> LogError {
        LogError::Io {
            path: self.path.display().to_string(),
            source,
        }
    }
}

/// Reads the checkpoint log at `path` (empty when it does not exist yet), refusing one
/// larger than [`evidence_note::MAX_LOG_BYTES`].
pub fn read_log(path: &Path) -> Result<ParsedLog, LogError> {
    let bytes = log_bytes(path)?;
    // A crash may cut the last note inside a character: text up to there, and the cut
    // note is a torn tail. Invalid bytes anywhere else are not a log.
    let text = match std::str::from_utf8(&bytes) {
        Ok(text) => text,
        Err(err) if err.error_len().is_none() => {
            std::str::from_utf8(&bytes[..err.valid_up_to()]).unwrap_or_default()
        }
        Err(err) => {
            return Err(LogError::Malformed {
                path: path.display().to_string(),
                why: format!("not UTF-8 at byte {}", err.valid_up_to()),
            })
        }
    };
    let mut parsed = evidence_note::parse_log(text).map_err(|why| LogError::Malformed {
        path: path.display().to_string(),
        why,
    })?;
    if text.len() < bytes.len() && parsed.torn_tail.is_none() {
        parsed.torn_tail = Some(text.len());
    }
    Ok(parsed)
}

/// The bytes of the log at `path` (none when it does not exist yet), at most
/// [`evidence_note::MAX_LOG_BYTES`] of them: a larger log is refused.
fn log_bytes(path: &Path) -> Result<Vec<u8>, LogError> {
    let io = |source| LogError::Io {
        path: path.display().to_string(),
        source,
    };
    let too_large = |len: u64| LogError::Malformed {
        path: path.display().to_string(),
        why: format!(
            "{len} bytes, more than the {} a log may hold",
            evidence_note::MAX_LOG_BYTES
        ),
    };
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(io(err)),
    };
    // The size is the opened file's, and the read stops one byte past the bound: a log
    // that grows meanwhile (a process appending) is never read past it.
    let len = file.metadata().map_err(io)?.len();
    if len > evidence_note::MAX_LOG_BYTES {
        return Err(too_large(len));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or_default());
    (&file)
        .take(evidence_note::MAX_LOG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    let read = bytes.len() as u64;
    if read > evidence_note::MAX_LOG_BYTES {
        let len = file.metadata().map_or(read, |meta| meta.len().max(read));
        return Err(too_large(len));
    }
    Ok(bytes)
}

/// The checkpoints a log holds, as anchors (`N:HASH`) to hold the database or a bundle to,
/// with what is wrong in the log itself: when `trusted` keys are given, a note none of them
/// vouches for (nor a signature by one of them that does not verify); numbers that do not
/// rise; a note that does not chain from the one before it. A cut-short last note is left
/// out (it was never whole).
pub fn anchors_of(parsed: &ParsedLog, trusted: &[PublicKey]) -> (Vec<Anchor>, Vec<Problem>) {
    let mut anchors = Vec::with_capacity(parsed.checkpoints.len());
    let mut problems = Vec::new();
    let mut before: Option<(u64, Hash)> = None;
    for note in &parsed.checkpoints {
        let seq = note.checkpoint.seq;
        let place = format!("checkpoint log, checkpoint {seq}");
        if !trusted.is_empty() {
            match note.trusted_by(trusted) {
                Ok(true) => {}
                Ok(false) => {
                    problems.push(Problem {
                        place,
                        what: "no key given signed it (the note or the checkpoint)".to_owned(),
                    });
                    continue;
                }
                Err(why) => {
                    problems.push(Problem { place, what: why });
                    continue;
                }
            }
        }
        match before {
            Some((previous_seq, _)) if seq <= previous_seq => problems.push(Problem {
                place: place.clone(),
                what: format!("follows checkpoint {previous_seq} in the log"),
            }),
            Some((previous_seq, previous_hash))
                if seq == previous_seq + 1 && note.checkpoint.previous != previous_hash =>
            {
                problems.push(Problem {
                    place: place.clone(),
                    what: format!(
                        "chains from {}, not from checkpoint {previous_seq} before it ({})",
                        hex(&note.checkpoint.previous),
                        hex(&previous_hash)
                    ),
                });
            }
            _ => {}
        }
        before = Some((seq, note.hash()));
        anchors.push(Anchor {
            seq: i64::try_from(seq).unwrap_or(i64::MAX),
            hash: note.hash(),
        });
    }
    (anchors, problems)
}

/// Holds the database's checkpoints to `anchors` (from a log, in rising order), a page of
/// checkpoints at a time: each must still be stored, with its hash.
pub async fn hold_database_to(
    pool: &PgPool,
    anchors: &[Anchor],
) -> Result<Vec<Problem>, StoreError> {
    let mut problems = Vec::new();
    for page in anchors.chunks(BATCH as usize) {
        let (Some(first), Some(last)) = (page.first(), page.last()) else {
            continue;
        };
        let span = (last.seq - first.seq + 1).clamp(1, 100 * BATCH);
        let stored: std::collections::HashMap<i64, Hash> =
            stored::checkpoints_after(pool, first.seq - 1, span, false)
                .await?
                .iter()
                .map(|c| (c.seq, checkpoint_of(c).hash()))
                .collect();
        for anchor in page {
            let place = format!("checkpoint {}", anchor.seq);
            match stored.get(&anchor.seq) {
                Some(hash) if *hash == anchor.hash => {}
                Some(hash) => problems.push(Problem {
                    place,
                    what: format!(
                        "the checkpoint log has hash {}, the stored one hashes to {}",
                        hex(&anchor.hash),
                        hex(hash)
                    ),
                }),
                None => problems.push(Problem {
                    place,
                    what: format!(
                        "is missing, though the checkpoint log has it with hash {}",
                        hex(&anchor.hash)
                    ),
                }),
            }
        }
    }
    Ok(problems)
}

/// What a log's anchors say of checkpoint `seq` with hash `hash` (a bundle's).
pub fn log_says(anchors: &[Anchor], seq: u64, hash: &Hash) -> Result<String, String> {
    let seq = i64::try_from(seq).unwrap_or(i64::MAX);
    match anchors.iter().find(|a| a.seq == seq) {
        Some(a) if a.hash == *hash => Ok(format!("checkpoint {seq} is in the checkpoint log")),
        Some(a) => Err(format!(
            "checkpoint {seq} has hash {}, the checkpoint log has {}: another checkpoint of \
             that number was published",
            hex(hash),
            hex(&a.hash)
        )),
        None => match (anchors.first(), anchors.last()) {
            (Some(first), _) if seq < first.seq => Ok(format!(
                "the checkpoint log starts at checkpoint {}, after checkpoint {seq}",
                first.seq
            )),
            (_, Some(last)) if seq > last.seq => Ok(format!(
                "the checkpoint log ends at checkpoint {}, before checkpoint {seq}",
                last.seq
            )),
            (None, None) => Ok("the checkpoint log is empty".to_owned()),
            _ => Err(format!(
                "checkpoint {seq} is missing from the checkpoint log, which holds those around it"
            )),
        },
    }
}
