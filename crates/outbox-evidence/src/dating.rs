//! The dating rule: an entry must not be dated materially before the checkpoint made
//! before the one that covers it (for an entry no checkpoint covers yet, before the newest).
//!
//! **Why it holds.** A checkpoint reads the last position issued, waits for the
//! transactions open then, and covers exactly the positions up to it (see
//! [`crate::checkpoint`]). So an entry with a later position took it after that checkpoint
//! was begun: checkpoint k's entries took theirs after checkpoint k-1 was. An entry is dated
//! moments before it takes its position (a line by the database's clock in the statement
//! that inserts it; an attempt by the dispatcher's clock when it records its batch), so it
//! cannot be dated much before checkpoint k-1 was made, however long its transaction then
//! stays open. One exception: a checkpoint that stopped at
//! [`MAX_POSITIONS`](crate::checkpoint::MAX_POSITIONS) left positions issued before it to
//! the next, so the rule holds entries to the newest checkpoint before them that did not
//! stop there (its **floor**).
//!
//! [`TOLERANCE`] is what "materially" means, and why is said there. The rule applies to
//! every checkpoint's range, so an entry written with an earlier date stays named after
//! the next checkpoint covers it. Alerts from before the chain are the exception: the
//! backfill chained their old entries under new positions, so while it ran (as
//! `evidence_backfill` records) the entries of alerts approved before the first checkpoint
//! are spared.

use chrono::{DateTime, Utc};
use outbox_store::evidence_chain::{self as stored, StoredChain};
use outbox_store::StoreError;
use sqlx::PgConnection;

use crate::checkpoint::MAX_POSITIONS;
use crate::problem::Problem;

/// How much earlier than its floor checkpoint was made an entry may be dated: 5 minutes.
/// The entries of a range took their positions after the floor checkpoint's maker read the
/// last one issued; the maker then waited up to
/// [`WRITERS_WAIT`](crate::checkpoint::WRITERS_WAIT) (10 s) for open transactions before
/// it began the transaction whose time is its `made_at`. An entry is dated before it takes
/// its position by as long as its statement waits for its alert's row lock (another writer's
/// statement or short transaction), and an attempt by as far as its dispatcher's clock runs
/// behind the database's, or as long as the dispatcher was paused between dating its batch
/// and recording it. Five minutes covers all of these with room to spare: a false finding
/// would stand for good, since the rule applies to every range. It leaves whoever can write
/// to the database able to date a new entry at most this much before the newest checkpoint
/// was made.
pub const TOLERANCE: chrono::Duration = chrono::Duration::minutes(5);

/// The checkpoint entries of a range are held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Floor {
    /// Its number.
    pub seq: i64,
    /// When it was made.
    pub made_at: DateTime<Utc>,
    /// Alerts created before this time are spared (the backfill chained their old entries
    /// under new positions, and was running then).
    pub spare_created_before: Option<DateTime<Utc>>,
}

impl Floor {
    /// The earliest date allowed.
    pub fn earliest(&self) -> DateTime<Utc> {
        self.made_at - TOLERANCE
    }
}

/// What the rule needs besides the checkpoints: when the first checkpoint was made, and
/// whether the backfill chained any alert and when it finished.
#[derive(Debug, Clone, Copy, Default)]
pub struct Dating {
    first_made: Option<DateTime<Utc>>,
    backfilled: bool,
    backfill_finished: Option<DateTime<Utc>>,
}

impl Dating {
    /// Reads them.
    pub async fn load(db: &mut PgConnection) -> Result<Dating, StoreError> {
        let first_made = stored::checkpoints_after(&mut *db, 0, 1, false)
            .await?
            .pop()
            .map(|c| c.made_at);
        let (chained, backfill_finished) = stored::backfill_state(&mut *db).await?;
        Ok(Dating {
            first_made,
            backfilled: chained > 0,
            backfill_finished,
        })
    }

    /// The floor of the entries of checkpoint `seq`'s range (`i64::MAX`: of the entries
    /// after the newest checkpoint); `None` when no checkpoint comes before them.
    pub async fn floor(
        &self,
        db: &mut PgConnection,
        seq: i64,
    ) -> Result<Option<Floor>, StoreError> {
        let floor = stored::dating_floor(db, seq, MAX_POSITIONS).await?;
        Ok(floor.map(|(seq, made_at)| Floor {
            seq,
            made_at,
            spare_created_before: self.spares_before(made_at),
        }))
    }

    /// Alerts approved before the first checkpoint may have been chained by the backfill
    /// (when it chained any: a database created with the chain has nothing to backfill); a
    /// range whose floor was made before the backfill finished (give or take the
    /// tolerance, for its last step's transaction) may hold their old entries.
    fn spares_before(&self, floor_made: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let running = self
            .backfill_finished
            .is_none_or(|finished| finished > floor_made - TOLERANCE);
        self.first_made.filter(|_| self.backfilled && running)
    }

    /// The entries of checkpoint `seq`'s range, positions after `after` up to `up_to`
    /// (`None` and `seq` `i64::MAX`: every entry after the newest checkpoint), dated before
    /// their floor allows.
    pub async fn range_problems(
        &self,
        db: &mut PgConnection,
        seq: i64,
        after: i64,
        up_to: Option<i64>,
    ) -> Result<Vec<Problem>, StoreError> {
        let Some(floor) = self.floor(db, seq).await? else {
            return Ok(vec![]);
        };
        let found = stored::entries_dated_before(
            db,
            after,
            up_to,
            floor.earliest(),
            floor.spare_created_before,
        )
        .await?;
        Ok(found
            .into_iter()
            .map(|e| {
                let place = format!(
                    "alert {}, entry {} ({} row {})",
                    e.alert_id, e.index, e.table, e.id
                );
                backdated(place, e.at.timestamp_micros(), floor.seq, floor.made_at)
            })
            .collect())
    }

    /// One alert's entries held to the rule, given the checkpoints whose ranges hold them
    /// (number and range) and the newest checkpoint's last position.
    pub async fn chain_problems(
        &self,
        db: &mut PgConnection,
        chain: &StoredChain,
        ranges: &[(i64, i64, i64)],
        newest_covers_to: Option<i64>,
    ) -> Result<Vec<Problem>, StoreError> {
        let mut floors: std::collections::BTreeMap<i64, Option<Floor>> = Default::default();
        let mut problems = Vec::new();
        for (index, entry) in chain.entries.iter().enumerate() {
            let Some(pos) = entry.pos else { continue };
            let under = ranges
                .iter()
                .find(|(_, from, to)| *from < pos && pos <= *to)
                .map(|(seq, _, _)| *seq);
            let seq = match (under, newest_covers_to) {
                (Some(seq), _) => seq,
                (None, Some(newest)) if pos > newest => i64::MAX,
                (None, None) => i64::MAX,
                // In a range no stored checkpoint holds: the missing checkpoint is named.
                (None, Some(_)) => continue,
            };
            let floor = match floors.get(&seq) {
                Some(floor) => *floor,
                None => {
                    let floor = self.floor(db, seq).await?;
                    floors.insert(seq, floor);
                    floor
                }
            };
            let Some(floor) = floor else { continue };
            let created = chain.alert.created_at_micros;
            if floor
                .spare_created_before
                .is_some_and(|t| created < t.timestamp_micros())
            {
                continue;
            }
            let at = entry.facts.at_micros();
            if at < floor.earliest().timestamp_micros() {
                let place = format!(
                    "alert {}, entry {} ({})",
                    chain.alert.id,
                    index + 1,
                    entry.place()
                );
                problems.push(backdated(place, at, floor.seq, floor.made_at));
            }
        }
        Ok(problems)
    }
}

/// Whether an entry dated `at_micros` may be under a range whose floor checkpoint was
/// made at `floor_made_micros`: a bundle's check applies this too.
pub fn allowed(at_micros: i64, floor_made_micros: i64) -> bool {
    at_micros >= floor_made_micros - TOLERANCE.num_microseconds().unwrap_or(i64::MAX)
}

/// What an entry dated too early is told.
pub fn backdated_what(at_micros: i64, floor_seq: i64, floor_made_micros: i64) -> String {
    format!(
        "is dated {}, more than {} minutes before checkpoint {floor_seq} was made ({}), yet \
         was written after it: it was written later with an earlier date",
        time(at_micros),
        TOLERANCE.num_minutes(),
        time(floor_made_micros)
    )
}

fn backdated(place: String, at_micros: i64, floor_seq: i64, floor_made: DateTime<Utc>) -> Problem {
    Problem {
        place,
        what: backdated_what(at_micros, floor_seq, floor_made.timestamp_micros()),
    }
}

fn time(micros: i64) -> String {
    DateTime::from_timestamp_micros(micros)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| format!("{micros} µs"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minutes: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_796_000_000 + minutes * 60, 0).unwrap()
    }

    #[test]
    fn an_entry_may_be_dated_up_to_the_tolerance_before_its_floor_and_no_earlier() {
        let made = at(60).timestamp_micros();
        assert!(allowed(made, made));
        assert!(allowed(made - 5 * 60_000_000, made));
        assert!(!allowed(made - 5 * 60_000_000 - 1, made));
        let what = backdated_what(at(0).timestamp_micros(), 7, made);
        assert!(what.contains("before checkpoint 7 was made"), "{what}");
    }

    #[test]
    fn alerts_from_before_the_first_checkpoint_are_spared_only_while_the_backfill_ran() {
        let running = Dating {
            first_made: Some(at(0)),
            backfilled: true,
            backfill_finished: None,
        };
        assert_eq!(running.spares_before(at(100)), Some(at(0)));
        let finished = Dating {
            backfill_finished: Some(at(50)),
            ..running
        };
        // Made within the tolerance after the backfill finished: its last step may still
        // have been writing.
        assert_eq!(finished.spares_before(at(54)), Some(at(0)));
        assert_eq!(finished.spares_before(at(56)), None);
        // Nothing was backfilled: nothing is spared.
        let fresh = Dating {
            backfilled: false,
            ..finished
        };
        assert_eq!(fresh.spares_before(at(54)), None);
    }
}
