//! Earlier bundles of the same alert, kept by an auditor: what the alert's history showed
//! when each was exported. A later bundle, or the database's chain, must extend it: the
//! same heads for the entries it held, and the same checkpoint under each number it named.
//! A history rewritten after an earlier bundle was exported (entries changed or removed,
//! another checkpoint signed under a number it named) is refused, naming what differs.

use outbox_core::evidence::chain::{hex, Checkpoint, Hash};
use uuid::Uuid;

use crate::bundle::{Bundle, BundleCheckpoint};

/// The number and hash of a bundle's checkpoint, if it has one.
pub fn checkpoint_of_bundle(bundle: &Bundle) -> Option<(u64, Hash)> {
    bundle.checkpoint.as_ref().map(|c: &BundleCheckpoint| {
        let hash = Checkpoint {
            seq: c.seq,
            made_at_micros: c.made_at_micros,
            size: c.size,
            root: c.root,
            previous: c.previous,
        }
        .hash();
        (c.seq, hash)
    })
}

/// Whether the history of `alert` (its entries' heads in chain order, and the checkpoint
/// it is now under) extends what `earlier` showed; `Ok` says how far they agree.
pub fn extends(
    earlier: &Bundle,
    alert: Uuid,
    heads: &[Hash],
    checkpoint: Option<(u64, Hash)>,
) -> Result<String, String> {
    if earlier.alert.id != alert {
        return Err(format!(
            "the earlier bundle is of alert {}, not of alert {alert}",
            earlier.alert.id
        ));
    }
    if earlier.entries.len() > heads.len() {
        return Err(format!(
            "the earlier bundle holds {} entries, the history now {}: entries were removed \
             after it was exported",
            earlier.entries.len(),
            heads.len()
        ));
    }
    for (n, (then, now)) in earlier.entries.iter().zip(heads).enumerate() {
        if then.head != *now {
            return Err(format!(
                "entry {} gives head {} now, the earlier bundle's gave {}: the history was \
                 rewritten after it was exported",
                n + 1,
                hex(now),
                hex(&then.head)
            ));
        }
    }
    let anchored = match (checkpoint_of_bundle(earlier), checkpoint) {
        (Some((then_seq, then_hash)), Some((seq, hash))) if seq == then_seq => {
            if hash != then_hash {
                return Err(format!(
                    "checkpoint {seq} hashes to {}, the earlier bundle's checkpoint {seq} to \
                     {}: another checkpoint was signed under its number",
                    hex(&hash),
                    hex(&then_hash)
                ));
            }
            format!(", under the same checkpoint {seq}")
        }
        (Some((then_seq, _)), Some((seq, _))) if seq < then_seq => {
            return Err(format!(
                "it is under checkpoint {seq}, older than the earlier bundle's checkpoint \
                 {then_seq}"
            ))
        }
        (Some((then_seq, _)), None) => {
            return Err(format!(
                "no checkpoint covers it, though the earlier bundle was under checkpoint \
                 {then_seq}"
            ))
        }
        _ => String::new(),
    };
    Ok(format!(
        "it extends the earlier bundle ({} of its {} entries as that one had them{anchored})",
        earlier.entries.len(),
        heads.len()
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn bundle_of(heads: &[u8], checkpoint: Option<BundleCheckpoint>) -> Bundle {
        let text = include_str!("../../../tests/fixtures/evidence/bundle-vector.json");
        let mut bundle: Bundle = serde_json::from_str(text).unwrap();
        let entry = bundle.entries[0].clone();
        bundle.entries = heads
            .iter()
            .map(|&h| crate::bundle::BundleEntry {
                head: [h; 32],
                ..entry.clone()
            })
            .collect();
        bundle.checkpoint = checkpoint;
        bundle
    }

    fn checkpoint(seq: u64, size: u64) -> BundleCheckpoint {
        let text = include_str!("../../../tests/fixtures/evidence/bundle-vector.json");
        let bundle: Bundle = serde_json::from_str(text).unwrap();
        BundleCheckpoint {
            seq,
            size,
            ..bundle.checkpoint.unwrap()
        }
    }

    #[test]
    fn a_history_that_extends_the_earlier_bundle_agrees() {
        let earlier = bundle_of(&[1, 2], Some(checkpoint(3, 2)));
        let id = earlier.alert.id;
        let now = checkpoint_of_bundle(&earlier);
        assert!(extends(&earlier, id, &[[1; 32], [2; 32], [3; 32]], now).is_ok());
        let later = checkpoint_of_bundle(&bundle_of(&[], Some(checkpoint(4, 2))));
        assert!(extends(&earlier, id, &[[1; 32], [2; 32]], later).is_ok());
    }

    #[test]
    fn a_rewritten_shortened_or_re_signed_history_is_refused() {
        let earlier = bundle_of(&[1, 2], Some(checkpoint(3, 2)));
        let id = earlier.alert.id;
        let now = checkpoint_of_bundle(&earlier);
        let why = extends(&earlier, id, &[[1; 32], [9; 32]], now).unwrap_err();
        assert!(why.contains("entry 2"), "{why}");
        let why = extends(&earlier, id, &[[1; 32]], now).unwrap_err();
        assert!(why.contains("entries were removed"), "{why}");
        let another_three = checkpoint_of_bundle(&bundle_of(&[], Some(checkpoint(3, 5))));
        let why = extends(&earlier, id, &[[1; 32], [2; 32]], another_three).unwrap_err();
        assert!(why.contains("another checkpoint was signed"), "{why}");
        let older = checkpoint_of_bundle(&bundle_of(&[], Some(checkpoint(2, 2))));
        let why = extends(&earlier, id, &[[1; 32], [2; 32]], older).unwrap_err();
        assert!(why.contains("older than"), "{why}");
        let why = extends(&earlier, Uuid::nil(), &[[1; 32], [2; 32]], now).unwrap_err();
        assert!(why.contains("not of alert"), "{why}");
    }
}
