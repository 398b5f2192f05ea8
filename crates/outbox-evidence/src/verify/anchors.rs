//! Checkpoints' numbers and hashes kept outside the database ([`Anchor`]), and the
//! database held to them.

use std::fmt;

use outbox_core::evidence::chain::{hex, Hash};
use outbox_store::evidence_chain as stored;
use outbox_store::StoreError;
use sqlx::PgPool;

use super::{problem, Problem};
use crate::checkpoint::checkpoint_of;

/// A checkpoint's number and hash kept outside the database (a log line, an earlier
/// bundle, a note): the database must still hold that checkpoint, unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    /// The checkpoint's number.
    pub seq: i64,
    /// Its hash.
    pub hash: Hash,
}

impl fmt::Display for Anchor {
    /// `N:HASH`, as `--checkpoint` and `--continue-after` read it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.seq, hex(&self.hash))
    }
}

impl std::str::FromStr for Anchor {
    type Err = String;

    /// `N:HASH`, as the `evidence checkpoint made` log line gives them.
    fn from_str(text: &str) -> Result<Anchor, String> {
        let (seq, hash) = text
            .split_once(':')
            .ok_or_else(|| "expected NUMBER:HASH (a checkpoint's number and hash)".to_owned())?;
        let seq = seq
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| "a checkpoint's number is a positive integer".to_owned())?;
        let hash = outbox_core::evidence::entries::hex32::parse(hash)
            .ok_or_else(|| "a checkpoint's hash is 64 hex digits".to_owned())?;
        Ok(Anchor { seq, hash })
    }
}

/// Holds the database's checkpoints to anchors kept elsewhere.
pub async fn check_anchors(pool: &PgPool, anchors: &[Anchor]) -> Result<Vec<Problem>, StoreError> {
    let mut problems = Vec::new();
    for anchor in anchors {
        let place = format!("checkpoint {}", anchor.seq);
        let stored = stored::checkpoints_after(pool, anchor.seq - 1, 1, false)
            .await?
            .pop()
            .filter(|c| c.seq == anchor.seq);
        match stored {
            None => problems.push(problem(
                place,
                format!(
                    "is missing, though it was made with hash {}",
                    hex(&anchor.hash)
                ),
            )),
            Some(c) if checkpoint_of(&c).hash() != anchor.hash => problems.push(problem(
                place,
                format!(
                    "was made with hash {}, the stored one hashes to {}",
                    hex(&anchor.hash),
                    hex(&checkpoint_of(&c).hash())
                ),
            )),
            Some(_) => {}
        }
    }
    Ok(problems)
}
