//! The walk over everything, or over what changed since a time: the checkpoints in order,
//! each with its leaves held to what its range gives now and its entries' dates, then every
//! alert's chain, a page at a time, in bounded memory.

use chrono::{DateTime, Utc};
use outbox_core::evidence::chain::{hex, Hash, Leaf};
use outbox_store::evidence_chain::{self as stored, StoredChain, StoredCheckpoint};
use outbox_store::StoreError;
use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};
use uuid::Uuid;

use super::alert::payload_problems;
use super::chain::check_chain;
use super::checkpoints::{check_checkpoint, check_tip, Trust};
use super::{problem, Problem};
use crate::dating::Dating;
use crate::stored_form::unpack_leaves;

/// What a walk found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct WalkSummary {
    /// Alerts whose chains were recomputed.
    pub alerts: u64,
    /// Entries recomputed.
    pub entries: u64,
    /// Checkpoints checked with their leaves.
    pub checkpoints: u64,
    /// The newest checkpoint: number, time, last position covered.
    pub newest_checkpoint: Option<(i64, DateTime<Utc>, i64)>,
    /// Entries after the newest checkpoint (verified by their chains only, so far).
    pub entries_not_checkpointed: u64,
    /// Problems found, the first [`MAX_LISTED`] of them.
    pub problems: Vec<Problem>,
    /// How many problems in all.
    pub problem_count: u64,
}

/// How many problems a walk lists (it counts them all).
pub const MAX_LISTED: usize = 200;

impl WalkSummary {
    fn add(&mut self, found: impl IntoIterator<Item = Problem>) {
        for p in found {
            self.problem_count += 1;
            if self.problems.len() < MAX_LISTED {
                self.problems.push(p);
            }
        }
    }
}

/// Alerts per statement of a walk.
const WALK_PAGE: i64 = 500;

/// Walks everything (`since: None`) or what changed since a time: the checkpoints (each
/// with its leaves, root and signature, chained without gaps, each leaf held against the
/// heads the entries of its range give now, and the tip), and every alert's chain
/// (`since`: the alerts under those checkpoints and those changed after the newest). In
/// bounded memory: one checkpoint's leaves and one page of alerts at a time. `progress`
/// is told `(done, total)` in alerts as the walk goes.
pub async fn verify_walk(
    pool: &PgPool,
    since: Option<DateTime<Utc>>,
    trust: &Trust,
    progress: impl FnMut(u64, u64),
) -> Result<WalkSummary, StoreError> {
    let (first, before_first) = walk_start(pool, since).await?;
    let total = match since {
        None => stored::alert_count(pool).await?.unsigned_abs(),
        Some(_) => 0,
    };
    let mut conn = pool.acquire().await?;
    let dating = Dating::load(&mut conn).await?;
    let mut walk = Walk {
        conn,
        trust,
        dating,
        summary: WalkSummary::default(),
        progress,
    };
    let newest = walk
        .checkpoints(first, before_first, since.is_some())
        .await?;
    let covered_to = newest.as_ref().map_or(0, |c| c.covers_to);
    walk.summary.add(check_tip(pool, newest.as_ref()).await?);
    // The entries after the newest checkpoint, held to it (or to the newest before it that
    // covered all that was issued).
    let dated = walk
        .dating
        .range_problems(&mut walk.conn, i64::MAX, covered_to, None)
        .await?;
    walk.summary.add(dated);
    match since {
        None => walk.every_alert(total).await?,
        Some(_) => walk.alerts_after(covered_to).await?,
    }
    walk.summary.entries_not_checkpointed = stored::entries_after(&mut *walk.conn, covered_to)
        .await?
        .unsigned_abs();
    Ok(walk.summary)
}

/// Where a walk's checkpoints start: at the first (everything), or at the first made
/// since `since` (`None` when none was); with the checkpoint before that one, which it is
/// held against.
async fn walk_start(
    pool: &PgPool,
    since: Option<DateTime<Utc>>,
) -> Result<(Option<i64>, Option<StoredCheckpoint>), StoreError> {
    let first = match since {
        None => Some(1),
        Some(at) => stored::first_checkpoint_since(pool, at).await?,
    };
    let previous = match first {
        Some(first) if first > 1 => stored::checkpoints_after(pool, first - 2, 1, false)
            .await?
            .pop()
            .filter(|c| c.seq == first - 1),
        _ => None,
    };
    Ok((first, previous))
}

/// A walk under way: its connection, the rule its entries' dates are held to, and what it
/// found so far.
struct Walk<'a, P> {
    conn: PoolConnection<Postgres>,
    trust: &'a Trust,
    dating: Dating,
    summary: WalkSummary,
    progress: P,
}

impl<P: FnMut(u64, u64)> Walk<'_, P> {
    /// The checkpoints from `first` on (none when `None`), one at a time, each held
    /// against the one before it, the first against `previous`; with `alerts_under`, the
    /// alerts each records are walked under it. Returns the newest, or `previous` when
    /// none follows it.
    async fn checkpoints(
        &mut self,
        first: Option<i64>,
        mut previous: Option<StoredCheckpoint>,
        alerts_under: bool,
    ) -> Result<Option<StoredCheckpoint>, StoreError> {
        let mut after = first.map_or(i64::MAX, |f| f - 1);
        while let Some(c) = stored::checkpoints_after(&mut *self.conn, after, 1, true)
            .await?
            .pop()
        {
            after = c.seq;
            let before = previous.as_ref().filter(|p| p.seq == c.seq - 1);
            self.checkpoint(&c, before, alerts_under).await?;
            self.summary.newest_checkpoint = Some((c.seq, c.made_at, c.covers_to));
            previous = Some(c);
        }
        Ok(previous)
    }

    /// One checkpoint, with its leaves: on its own and against the one before it, each
    /// leaf against what the entries of its range give now, and its entries' dates; with
    /// `alerts_under`, the chains of the alerts it records.
    async fn checkpoint(
        &mut self,
        c: &StoredCheckpoint,
        before: Option<&StoredCheckpoint>,
        alerts_under: bool,
    ) -> Result<(), StoreError> {
        self.summary.checkpoints += 1;
        self.summary
            .add(check_checkpoint(c, before, true, self.trust));
        // Each leaf against what the entries of its range give now (stored heads; the
        // alerts' own walk recomputes those).
        let recorded = unpack_leaves(&c.leaves).unwrap_or_default();
        let now = leaves_now(&mut self.conn, c, &recorded).await?;
        self.summary.add(compare_leaves(c.seq, &recorded, &now));
        // Its entries held to the checkpoint before it ([`crate::dating`]).
        let dated =
            self.dating
                .range_problems(&mut self.conn, c.seq, c.covers_from, Some(c.covers_to));
        self.summary.add(dated.await?);
        if alerts_under {
            let ids: Vec<Uuid> = recorded.iter().map(|l| l.alert_id).collect();
            let range = Some((c.covers_from, c.covers_to));
            for page in ids.chunks(WALK_PAGE as usize) {
                walk_page(&mut self.conn, page, range, &mut self.summary).await?;
                (self.progress)(self.summary.alerts, self.summary.alerts);
            }
        }
        Ok(())
    }

    /// Every alert's chain, a page at a time in alert id order, out of `total`.
    async fn every_alert(&mut self, total: u64) -> Result<(), StoreError> {
        let mut after = Uuid::nil();
        loop {
            let page = stored::alert_ids_after(&mut *self.conn, after, WALK_PAGE).await?;
            let Some(last) = page.last() else { break };
            after = *last;
            walk_page(&mut self.conn, &page, None, &mut self.summary).await?;
            (self.progress)(self.summary.alerts, total);
        }
        Ok(())
    }

    /// The chains of the alerts with an entry after position `covered_to` (the newest
    /// checkpoint's end), a page at a time.
    async fn alerts_after(&mut self, covered_to: i64) -> Result<(), StoreError> {
        let tail = stored::alerts_with_entries_after(&mut *self.conn, covered_to).await?;
        for page in tail.chunks(WALK_PAGE as usize) {
            walk_page(&mut self.conn, page, None, &mut self.summary).await?;
            (self.progress)(self.summary.alerts, self.summary.alerts);
        }
        Ok(())
    }
}

/// The leaves checkpoint `c`'s range gives now: from the entries, and for alerts pruned
/// since, from the positions and hashes retention kept.
async fn leaves_now(
    conn: &mut sqlx::PgConnection,
    c: &StoredCheckpoint,
    recorded: &[Leaf],
) -> Result<Vec<(Uuid, i64, Hash)>, StoreError> {
    let mut now = stored::leaves_between(conn, c.covers_from, c.covers_to).await?;
    let live: std::collections::HashSet<Uuid> = now.iter().map(|(alert, _, _)| *alert).collect();
    let gone: Vec<Uuid> = recorded
        .iter()
        .map(|l| l.alert_id)
        .filter(|alert| !live.contains(alert))
        .collect();
    if gone.is_empty() {
        return Ok(now);
    }
    for (alert, chain) in stored::pruned_chains(&mut *conn, &gone).await? {
        let covered: Vec<&(i64, Hash)> = chain
            .entries
            .iter()
            .filter(|(pos, _)| *pos <= c.covers_to)
            .collect();
        let in_range = covered.iter().any(|(pos, _)| *pos > c.covers_from);
        if let (true, Some((_, head))) = (in_range, covered.last()) {
            now.push((alert, covered.len() as i64, *head));
        }
    }
    now.sort_by_key(|(alert, _, _)| *alert);
    Ok(now)
}

/// Recomputes these alerts' chains, and holds their stored payloads to their
/// fingerprints, into `summary`. With `last_in` (positions after the first, up to the
/// second), only the alerts whose newest entry lies there: a walk of several checkpoints
/// meets an alert under each one that covers an entry of it, and checks and counts it once,
/// under the one that covers its newest entry (or in the tail after the newest checkpoint,
/// walked without `last_in`).
async fn walk_page(
    conn: &mut sqlx::PgConnection,
    ids: &[Uuid],
    last_in: Option<(i64, i64)>,
    summary: &mut WalkSummary,
) -> Result<(), StoreError> {
    let mut walked = Vec::with_capacity(ids.len());
    for chain in stored::chains(&mut *conn, ids).await? {
        if let Some((after, up_to)) = last_in {
            if !newest_position(&chain).is_some_and(|pos| after < pos && pos <= up_to) {
                continue;
            }
        }
        let check = check_chain(&chain);
        summary.alerts += 1;
        summary.entries += check.entries as u64;
        summary.add(check.problems);
        walked.push(chain.alert.id);
    }
    summary.add(payload_problems(conn, &walked).await?);
    Ok(())
}

/// The position of an alert's newest chained entry (for a pruned alert, of the newest
/// entry retention kept).
fn newest_position(chain: &StoredChain) -> Option<i64> {
    let kept = chain
        .pruned
        .iter()
        .flat_map(|p| p.entries.iter().map(|(pos, _)| *pos));
    chain.entries.iter().filter_map(|e| e.pos).chain(kept).max()
}

/// A checkpoint's recorded leaves against the leaves its range gives now, both in alert id
/// order: every difference named.
pub(super) fn compare_leaves(
    seq: i64,
    recorded: &[Leaf],
    now: &[(Uuid, i64, Hash)],
) -> Vec<Problem> {
    let place = format!("checkpoint {seq}");
    let mut problems = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < recorded.len() || j < now.len() {
        match (recorded.get(i), now.get(j)) {
            (Some(r), Some((alert, entries, head))) if r.alert_id == *alert => {
                if r.entries != entries.unsigned_abs() || r.head != *head {
                    problems.push(problem(
                        &place,
                        format!(
                            "recorded alert {alert} with {} entries and head {}; its entries \
                             now give {entries} entries and head {}",
                            r.entries,
                            hex(&r.head),
                            hex(head)
                        ),
                    ));
                }
                i += 1;
                j += 1;
            }
            (Some(r), other) if other.is_none_or(|(alert, _, _)| r.alert_id < *alert) => {
                problems.push(problem(
                    &place,
                    format!(
                        "recorded alert {} with {} entries, but no entry of that alert is in \
                         its range any more",
                        r.alert_id, r.entries
                    ),
                ));
                i += 1;
            }
            (_, Some((alert, entries, _))) => {
                problems.push(problem(
                    &place,
                    format!(
                        "has no leaf for alert {alert}, yet {entries} of its entries reach into \
                         its range (an entry inserted afterwards with an old position?)"
                    ),
                ));
                j += 1;
            }
            (None, None) => break,
            (Some(_), None) => unreachable!("handled above"),
        }
    }
    problems
}
