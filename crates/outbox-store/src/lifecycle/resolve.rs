//! Resolve, an operator's transition: an uncertain or held alert settled or sent again by
//! what the operator established, and the rule that says when it may not be.

use outbox_core::{AlertState, Outcome};
use sqlx::PgConnection;
use uuid::Uuid;

use super::evidence::{append_event, Event};
use super::queue_moves::{lock_lane_of, requeue_with_fresh_budget, settle};
use super::standing::{standing, Standing};
use crate::StoreError;

/// What an operator found out about an uncertain or held alert.
#[derive(Debug, Clone)]
pub enum Resolution {
    /// The destination has it (with its reference).
    Accepted {
        /// The destination's reference, as the operator found it.
        reference: String,
    },
    /// The destination does not have it: deliver it again.
    NotDelivered,
    /// Give up, visibly.
    Abandon,
}

impl Standing {
    /// Why an operator may not resolve this alert so, or `None` when they may: only an
    /// uncertain or held alert, or a failed one that holds up its ordered lane (resolving
    /// it releases the lane), not while a dispatcher holds it, and never "not delivered"
    /// once a later revision corrected it (that would send the outdated payload again,
    /// after the correction; recording what happened, accepted or abandoned, stays open).
    pub fn resolve_refusal(&self, resolution: &Resolution) -> Result<Option<String>, StoreError> {
        let alert_id = self.alert_id;
        let state = self.state()?;
        let refusal = match state {
            AlertState::Uncertain | AlertState::Held => match (resolution, self.latest_revision) {
                (Resolution::NotDelivered, Some(latest)) => Some(format!(
                    "alert {alert_id} has been corrected by a later revision ({latest}); sending it again would deliver the outdated payload: resolve it as accepted or abandoned"
                )),
                _ => None,
            },
            AlertState::Sending => Some(format!(
                "a dispatcher is working on alert {alert_id} right now; resolve it once it is no longer sending"
            )),
            AlertState::Failed if self.blocks_lane => None,
            AlertState::Pending
            | AlertState::Accepted
            | AlertState::Failed
            | AlertState::Superseded => Some(format!(
                "alert {alert_id} is {state}; only uncertain or held alerts can be resolved (or a failed one holding up its ordered lane)"
            )),
        };
        Ok(refusal)
    }
}

/// Resolves an uncertain or held alert inside the caller's transaction, by what the
/// operator established. Refused (nothing written) by [`Standing::resolve_refusal`].
pub async fn resolve(
    tx: &mut PgConnection,
    alert_id: Uuid,
    resolution: &Resolution,
    actor: &str,
    note: &str,
) -> Result<(), StoreError> {
    lock_lane_of(tx, alert_id).await?;
    let alert = standing(tx, alert_id, true).await?;
    if let Some(why) = alert.resolve_refusal(resolution)? {
        return Err(StoreError::Refused(why));
    }
    let from = alert.state()?;
    let (to, line) = match resolution {
        Resolution::Accepted { reference } => {
            settle(tx, alert_id, Outcome::Accepted, Some(reference)).await?;
            (
                AlertState::Accepted,
                format!("resolved by {actor}: delivery confirmed at the destination (reference {reference}): {note}"),
            )
        }
        Resolution::NotDelivered => {
            requeue_with_fresh_budget(tx, alert_id, alert.destination_id, alert.last_attempt)
                .await?;
            (
                AlertState::Pending,
                format!("resolved by {actor}: confirmed not delivered, so it goes out again with the same key: {note}"),
            )
        }
        Resolution::Abandon => {
            settle(tx, alert_id, Outcome::Failed, None).await?;
            (AlertState::Failed, format!("abandoned by {actor}: {note}"))
        }
    };
    append_event(
        &mut *tx,
        Event {
            alert_id,
            from: Some(from),
            to,
            attempt: None,
            actor: &format!("operator:{actor}"),
            line: &line,
        },
    )
    .await
}
