//! One alert verified (`outboxctl evidence verify --alert`, the console's alert page): its
//! chain, its stored payload, every checkpoint that recorded it or covers its entries, the
//! dating of its entries and, when asked, the checkpoints from there to the tip; an alert
//! gone although checkpoints record it is named deleted.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use outbox_core::evidence::chain::{hex, Hash};
use outbox_store::evidence_chain::{self as stored, StoredCheckpoint};
use outbox_store::StoreError;
use sqlx::PgPool;
use uuid::Uuid;

use super::chain::check_chain;
use super::checkpoints::{check_checkpoint, check_checkpoints_from, find_leaf, leaf_agrees, Trust};
use super::{problem, Problem};
use crate::dating::Dating;

/// What `verify --alert` found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AlertReport {
    /// The alert.
    pub alert_id: Uuid,
    /// Entries in its chain.
    pub entries: usize,
    /// The newest checkpoint its chain was found under: number, time, entries covered.
    pub checkpoint: Option<(i64, DateTime<Utc>, usize)>,
    /// Whether the alert was pruned.
    pub pruned: bool,
    /// Everything that does not match; empty when the alert verifies.
    pub problems: Vec<Problem>,
}

/// Verifies one alert: its chain, its state, its stored payload against its fingerprint,
/// every checkpoint that ever recorded it or whose range holds one of its entries (leaf,
/// root, signature), the dating of its entries ([`crate::dating`]) and, with `to_tip`, the
/// chain of checkpoints from the first of those to the newest and its tip (a page view
/// leaves that walk out). `Err(UnknownAlert)` when there is no such alert.
pub async fn verify_alert(
    pool: &PgPool,
    alert_id: Uuid,
    trust: &Trust,
    to_tip: bool,
) -> Result<AlertReport, StoreError> {
    let chain = match stored::chain(pool, alert_id).await {
        Err(StoreError::UnknownAlert(_)) => return deleted_alert(pool, alert_id).await,
        chain => chain?,
    };
    let check = check_chain(&chain);
    let mut problems = check.problems.clone();
    let mut conn = pool.acquire().await?;
    problems.extend(payload_problems(&mut conn, &[alert_id]).await?);

    let covering = covering_checkpoints(&mut conn, alert_id, &check.heads).await?;
    let mut newest_covered = None;
    for c in covering.values() {
        match leaf_agrees(alert_id, c, &check.heads) {
            Ok(covered) => newest_covered = Some((c.seq, c.made_at, covered)),
            Err(what) => problems.push(problem(format!("checkpoint {}", c.seq), what)),
        }
        let before = if c.seq > 1 {
            stored::checkpoints_after(&mut *conn, c.seq - 2, 1, false)
                .await?
                .pop()
        } else {
            None
        };
        let before = before.filter(|b| b.seq == c.seq - 1);
        problems.extend(check_checkpoint(c, before.as_ref(), true, trust));
    }
    // From the first covering checkpoint on, the chain of checkpoints up to the tip.
    if let Some(first) = covering.keys().next().copied().filter(|_| to_tip) {
        problems.extend(check_checkpoints_from(pool, first, trust).await?);
    }
    let ranges: Vec<(i64, i64, i64)> = covering
        .values()
        .map(|c| (c.seq, c.covers_from, c.covers_to))
        .collect();
    let newest = stored::newest_checkpoint(&mut *conn).await?;
    let dating = Dating::load(&mut conn).await?;
    problems.extend(
        dating
            .chain_problems(&mut conn, &chain, &ranges, newest.map(|n| n.covers_to))
            .await?,
    );
    Ok(AlertReport {
        alert_id,
        entries: check.entries,
        checkpoint: newest_covered,
        pruned: check.pruned,
        problems,
    })
}

/// Every checkpoint that has a leaf for the alert (through the index over leaves, so a
/// chain rewritten under fresh positions still meets the checkpoints that recorded it
/// before), and every one whose range holds one of its entries' positions, by number, with
/// their leaves.
async fn covering_checkpoints(
    conn: &mut sqlx::PgConnection,
    alert_id: Uuid,
    heads: &[(Option<i64>, Hash)],
) -> Result<BTreeMap<i64, StoredCheckpoint>, StoreError> {
    let mut covering: BTreeMap<i64, StoredCheckpoint> = BTreeMap::new();
    for seq in stored::checkpoints_with_leaf_for(&mut *conn, alert_id).await? {
        if let Some(c) = stored::checkpoint(&mut *conn, seq).await? {
            covering.insert(c.seq, c);
        }
    }
    for pos in heads.iter().filter_map(|(pos, _)| *pos) {
        if covering
            .values()
            .any(|c| c.covers_from < pos && pos <= c.covers_to)
        {
            continue;
        }
        if let Some(c) = stored::checkpoint_covering(&mut *conn, pos).await? {
            covering.insert(c.seq, c);
        }
    }
    Ok(covering)
}

/// The stored payloads of these alerts that are not the approved ones, as problems.
pub(super) async fn payload_problems(
    conn: &mut sqlx::PgConnection,
    alert_ids: &[Uuid],
) -> Result<Vec<Problem>, StoreError> {
    Ok(stored::altered_payloads(conn, alert_ids)
        .await?
        .into_iter()
        .map(|(alert, stored, approved)| {
            problem(
                format!("alert {alert}"),
                format!(
                    "its stored payload is not the approved one: SHA-256 {}, approved {}",
                    hex(&stored),
                    hex(&approved)
                ),
            )
        })
        .collect())
}

/// An alert the database does not have: `Err(UnknownAlert)` when no checkpoint records it
/// either, else a report naming the checkpoints that do (it was deleted).
async fn deleted_alert(pool: &PgPool, alert_id: Uuid) -> Result<AlertReport, StoreError> {
    let mut recording = Vec::new();
    // Each checkpoint the index names is read (one at a time) to find the leaf itself.
    for seq in stored::checkpoints_with_leaf_for(pool, alert_id).await? {
        if let Some(c) = stored::checkpoint(pool, seq).await? {
            if find_leaf(&c.leaves, alert_id).is_some() {
                recording.push(seq);
            }
        }
    }
    if recording.is_empty() {
        return Err(StoreError::UnknownAlert(alert_id));
    }
    Ok(AlertReport {
        alert_id,
        entries: 0,
        checkpoint: None,
        pruned: false,
        problems: vec![problem(
            format!("alert {alert_id}"),
            format!(
                "is not in the database, but {}: it was deleted",
                record_it(&recording)
            ),
        )],
    })
}

/// "checkpoint 3 records it", "checkpoints 3 to 5 record it", "checkpoints 3, 7 record it".
pub(super) fn record_it(seqs: &[i64]) -> String {
    match seqs {
        [one] => format!("checkpoint {one} records it"),
        [first, .., last] if seqs.windows(2).all(|w| w[1] == w[0] + 1) => {
            format!("checkpoints {first} to {last} record it")
        }
        _ => format!(
            "checkpoints {} record it",
            seqs.iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
