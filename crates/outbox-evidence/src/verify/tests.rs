use chrono::DateTime;
use outbox_core::evidence::chain::Leaf;
use outbox_store::evidence_chain::StoredCheckpoint;
use uuid::Uuid;

use super::alert::record_it;
use super::walk::compare_leaves;
use super::*;

#[test]
fn a_row_being_sent_may_follow_a_line_that_left_it_pending_or_uncertain() {
    assert!(state_agrees("sending", "pending"));
    assert!(state_agrees("sending", "uncertain"));
    assert!(state_agrees("held", "held"));
    assert!(!state_agrees("accepted", "held"));
    assert!(!state_agrees("pending", "sending"));
    // Texts that are no state agree with nothing, not even themselves.
    assert!(!state_agrees("delivered", "delivered"));
}

#[test]
fn the_checkpoints_recording_a_deleted_alert_are_named_as_a_range_or_a_list() {
    assert_eq!(record_it(&[4]), "checkpoint 4 records it");
    assert_eq!(record_it(&[4, 5, 6]), "checkpoints 4 to 6 record it");
    assert_eq!(record_it(&[4, 7]), "checkpoints 4, 7 record it");
}

#[test]
fn leaves_compare_by_alert_and_name_every_difference() {
    let a = Uuid::from_u128(1);
    let b = Uuid::from_u128(2);
    let c = Uuid::from_u128(3);
    let leaf = |alert_id, entries, head| Leaf {
        alert_id,
        entries,
        head,
    };
    let recorded = [leaf(a, 2, [1; 32]), leaf(b, 1, [2; 32])];
    assert!(compare_leaves(1, &recorded, &[(a, 2, [1; 32]), (b, 1, [2; 32])]).is_empty());
    let found = compare_leaves(1, &recorded, &[(a, 3, [9; 32]), (c, 1, [3; 32])]);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found[0].what.contains("with 2 entries"), "{found:?}");
    assert!(found[1].what.contains(&b.to_string()), "{found:?}");
    assert!(found[2].what.contains("has no leaf"), "{found:?}");
}

#[test]
fn a_checkpoints_leaf_must_be_the_chains_head_after_its_entries_inside_its_range() {
    let alert = Uuid::from_u128(7);
    let checkpoint = |entries, head| StoredCheckpoint {
        seq: 1,
        made_at: DateTime::from_timestamp(1_796_000_000, 0).unwrap(),
        covers_from: 10,
        covers_to: 20,
        size: 1,
        root: [0; 32],
        previous: [0; 32],
        leaves: Leaf {
            alert_id: alert,
            entries,
            head,
        }
        .data()
        .to_vec(),
        key_id: None,
        signature: None,
    };
    let heads = [
        (Some(11), [1; 32]),
        (Some(15), [2; 32]),
        (Some(25), [3; 32]),
    ];
    assert_eq!(leaf_agrees(alert, &checkpoint(2, [2; 32]), &heads), Ok(2));
    // Another head after as many entries: the chain was rewritten since.
    let err = leaf_agrees(alert, &checkpoint(2, [9; 32]), &heads).unwrap_err();
    assert!(err.contains("its chain was rewritten"), "{err}");
    // The same heads under other positions: moved out of the checkpoint's range.
    let moved = [
        (Some(31), [1; 32]),
        (Some(32), [2; 32]),
        (Some(33), [3; 32]),
    ];
    let err = leaf_agrees(alert, &checkpoint(2, [2; 32]), &moved).unwrap_err();
    assert!(err.contains("positions were rewritten"), "{err}");
    // An entry of its range that the leaf does not count.
    let err = leaf_agrees(alert, &checkpoint(1, [1; 32]), &heads).unwrap_err();
    assert!(err.contains("positions were rewritten"), "{err}");
    // More entries than the chain holds now.
    let err = leaf_agrees(alert, &checkpoint(4, [2; 32]), &heads).unwrap_err();
    assert!(err.contains("its chain now holds 3 entries"), "{err}");
    assert!(leaf_agrees(Uuid::from_u128(8), &checkpoint(2, [2; 32]), &heads).is_err());
}
