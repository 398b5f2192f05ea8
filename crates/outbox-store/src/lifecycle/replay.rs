//! Replay, an operator's transition: a held or failed alert sent again with a fresh retry
//! budget, and the rule that says when it may not be.

use outbox_core::AlertState;
use sqlx::PgConnection;
use uuid::Uuid;

use super::evidence::{append_event, Event};
use super::queue_moves::requeue_with_fresh_budget;
use super::standing::{standing, Standing};
use crate::StoreError;

impl Standing {
    /// Why this alert may not be replayed, or `None` when it may: only a held or failed
    /// alert, not corrected by a later revision (its payload is outdated), not pruned
    /// (its payload is gone), and not one its ordered lane has moved on from (failed and
    /// skipped, or abandoned: sent now, it would arrive after alerts approved later).
    pub fn replay_refusal(&self) -> Result<Option<String>, StoreError> {
        let alert_id = self.alert_id;
        let state = self.state()?;
        let refusal = if replayable(state) {
            if let Some(latest) = self.latest_revision {
                Some(format!(
                    "alert {alert_id} has been corrected by a later revision ({latest}); replaying it would send the outdated payload"
                ))
            } else if self.pruned {
                Some(pruned_refusal(alert_id))
            } else if self.in_ordered_lane && !self.blocks_lane {
                Some(format!(
                    "alert {alert_id}'s ordered lane has moved on without it; replaying it would deliver it after alerts approved later, so it is refused"
                ))
            } else {
                None
            }
        } else {
            match state {
                AlertState::Accepted => Some(format!(
                    "alert {alert_id} was accepted by the destination{}; replaying it would deliver it twice, so it is refused",
                    self.destination_reference
                        .as_deref()
                        .map(|r| format!(" (reference {r})"))
                        .unwrap_or_default()
                )),
                AlertState::Superseded => Some(format!(
                    "alert {alert_id} was superseded by a revision and is never sent; replay the revision instead"
                )),
                _ => Some(format!(
                    "alert {alert_id} is {state}; only held or failed alerts can be replayed"
                )),
            }
        };
        Ok(refusal)
    }
}

/// Whether alerts in `state` may be replayed at all: held and failed ones, which have come
/// to rest without being delivered. [`Standing::replay_refusal`] adds what else must hold;
/// a bulk replay's selection asks this before it counts anything.
pub fn replayable(state: AlertState) -> bool {
    matches!(state, AlertState::Held | AlertState::Failed)
}

/// Why a pruned alert cannot be replayed.
pub fn pruned_refusal(alert_id: Uuid) -> String {
    format!(
        "alert {alert_id} was pruned by retention: its payload is gone, so it cannot be sent again"
    )
}

/// Replays a held or failed alert inside the caller's transaction: same notification id,
/// key and payload, a fresh retry budget, the operator's note in the evidence. Refused
/// (nothing written) by [`Standing::replay_refusal`].
pub async fn replay(
    tx: &mut PgConnection,
    alert_id: Uuid,
    actor: &str,
    note: &str,
) -> Result<(), StoreError> {
    let alert = standing(tx, alert_id, true).await?;
    if let Some(why) = alert.replay_refusal()? {
        return Err(StoreError::Refused(why));
    }
    let from = alert.state()?;
    requeue_with_fresh_budget(tx, alert_id, alert.destination_id, alert.last_attempt).await?;
    // A held alert's last attempt may have arrived: resending it is the operator's call,
    // and the alert says so from now on.
    let warning = if from == AlertState::Held {
        sqlx::query("UPDATE alerts SET possible_duplicate = true WHERE id = $1")
            .bind(alert_id)
            .execute(&mut *tx)
            .await?;
        "; flagged as a possible duplicate, since the held attempt may have arrived"
    } else {
        ""
    };
    append_event(
        &mut *tx,
        Event {
            alert_id,
            from: Some(from),
            to: AlertState::Pending,
            attempt: None,
            actor: &format!("operator:{actor}"),
            line: &format!(
                "replayed by {actor} (was {from}): {note}; same notification id, key and payload{warning}"
            ),
        },
    )
    .await
}
