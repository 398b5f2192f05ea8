//! What the store holds, in the core's forms: a stored checkpoint as the checkpoint its
//! hash and signature are over, and its packed leaves as leaves. Read by the checkpoint
//! maker, the checkpoint log and every check, so it sits below all of them.

use outbox_core::evidence::chain::{Checkpoint, Leaf};
use outbox_store::evidence_chain as stored;
use uuid::Uuid;

/// The core's view of a stored checkpoint: what its hash and signature are over.
pub fn checkpoint_of(stored: &stored::StoredCheckpoint) -> Checkpoint {
    Checkpoint {
        seq: stored.seq.unsigned_abs(),
        made_at_micros: stored.made_at.timestamp_micros(),
        size: stored.size.unsigned_abs(),
        root: stored.root,
        previous: stored.previous,
    }
}

/// Leaves packed as stored, back into leaves; `None` when the bytes are not whole leaves.
pub fn unpack_leaves(packed: &[u8]) -> Option<Vec<Leaf>> {
    if !packed.len().is_multiple_of(56) {
        return None;
    }
    Some(
        packed
            .chunks_exact(56)
            .map(|c| Leaf {
                alert_id: Uuid::from_slice(&c[..16]).expect("16 bytes"),
                entries: u64::from_be_bytes(c[16..24].try_into().expect("8 bytes")),
                head: c[24..].try_into().expect("32 bytes"),
            })
            .collect(),
    )
}
