//! A checkpoint's number and hash as kept outside the database (a log line, an earlier
//! bundle, a note, `--continue-after`), in its one text form `N:HASH`. The checkpoint
//! maker, the checkpoint log and the checks all speak it, so it sits below them.

use std::fmt;

use outbox_core::evidence::chain::{hex, Hash};

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
