//! The database held to checkpoints' numbers and hashes kept outside it ([`Anchor`]).

use outbox_core::evidence::chain::hex;
use outbox_store::evidence_chain as stored;
use outbox_store::StoreError;
use sqlx::PgPool;

use super::{problem, Problem};
use crate::anchor::Anchor;
use crate::stored_form::checkpoint_of;

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
