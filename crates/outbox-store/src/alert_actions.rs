//! What operators do to alerts: replay (one, or many all or nothing), resolve, which of
//! these are open now, and the selection of a bulk replay. Every action takes the alert's
//! row lock first, checks the state under it, and appends the operator's name and note to
//! the evidence in the same transaction: an action either happens with its evidence, or
//! not at all. The rules are the lifecycle's; these are the transactions around them.

use outbox_core::Outcome;
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

pub use crate::lifecycle::{pruned_refusal, replayable, Resolution};
use crate::{lifecycle, StoreError};

/// Puts a held or failed alert back in the queue: same notification id, key and payload,
/// a fresh retry budget, and the operator's note in the evidence. The rules are the
/// lifecycle's ([`lifecycle::Standing::replay_refusal`]).
pub async fn replay(
    pool: &PgPool,
    alert_id: Uuid,
    actor: &str,
    note: &str,
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    lifecycle::replay(&mut tx, alert_id, actor, note).await?;
    tx.commit().await?;
    Ok(())
}

/// What an operator may do to an alert right now, as the lifecycle answers: for each
/// action, `None` when it is open, or the reason it is refused. A page or command shows
/// these answers rather than deciding for itself; the action itself asks again under the
/// alert's lock, so an answer that goes stale is refused, never acted on.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OpenActions {
    /// Why a replay is refused.
    pub replay: Option<String>,
    /// Why resolving (as accepted, or abandoning) is refused.
    pub resolve: Option<String>,
    /// Why resolving as "not delivered" is refused.
    pub resolve_not_delivered: Option<String>,
}

/// Reads [`OpenActions`] for one alert, without locking it.
pub async fn open_actions(pool: &PgPool, alert_id: Uuid) -> Result<OpenActions, StoreError> {
    let mut conn = pool.acquire().await?;
    let alert = lifecycle::standing(&mut conn, alert_id, false).await?;
    Ok(OpenActions {
        replay: alert.replay_refusal()?,
        resolve: alert.resolve_refusal(&Resolution::Abandon)?,
        resolve_not_delivered: alert.resolve_refusal(&Resolution::NotDelivered)?,
    })
}

/// Replays every one of `ids` or none: one transaction, the alerts locked in id order
/// (the order dispatchers' completions lock in, so neither waits on the other in a
/// cycle). The first refusal rolls everything back and is the answer. With `dry_run`, the
/// same transaction runs to the end and is rolled back: the answer is exactly what a real
/// run would say at that moment.
pub async fn replay_all(
    pool: &PgPool,
    ids: &[Uuid],
    actor: &str,
    note: &str,
    dry_run: bool,
) -> Result<(), StoreError> {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut tx = pool.begin().await?;
    // Refusals are reported in the order the operator named the alerts, so the first
    // named problem is the one shown: check them all before changing any.
    for id in ids {
        let alert = lifecycle::standing(&mut tx, *id, false).await?;
        if let Some(why) = alert.replay_refusal()? {
            return Err(StoreError::Refused(why));
        }
    }
    for id in &sorted {
        lifecycle::replay(&mut tx, *id, actor, note).await?;
    }
    if dry_run {
        tx.rollback().await?;
    } else {
        tx.commit().await?;
    }
    Ok(())
}

/// Resolves an uncertain or held alert by what the operator established. The rules are
/// the lifecycle's ([`lifecycle::Standing::resolve_refusal`]).
pub async fn resolve(
    pool: &PgPool,
    alert_id: Uuid,
    resolution: &Resolution,
    actor: &str,
    note: &str,
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    lifecycle::resolve(&mut tx, alert_id, resolution, actor, note).await?;
    tx.commit().await?;
    Ok(())
}

/// Ids of settled alerts with `outcome` (held or failed), optionally of one tenant and
/// destination (names), oldest first: the selection of a bulk replay.
pub async fn settled_ids(
    db: impl PgExecutor<'_>,
    outcome: Outcome,
    tenant: Option<&str>,
    destination: Option<&str>,
) -> Result<Vec<Uuid>, StoreError> {
    let ids = sqlx::query_scalar::<_, Uuid>(
        "SELECT a.id FROM alert_outcomes ao JOIN alerts a ON a.id = ao.alert_id \
         JOIN tenants t ON t.id = a.tenant_id JOIN destinations d ON d.id = a.destination_id \
         WHERE ao.outcome = $1 AND a.pruned_at IS NULL AND ($2::text IS NULL OR t.name = $2) \
           AND ($3::text IS NULL OR d.name = $3) \
         ORDER BY ao.settled_at, a.id",
    )
    .bind(outcome)
    .bind(tenant)
    .bind(destination)
    .fetch_all(db)
    .await?;
    Ok(ids)
}
