//! How a large bulk approval is cut into transactions, and how two of them run at once.
//!
//! A bulk approval statement ([`crate::alerts::approve_batch`]) spends its time in two
//! places: the client building its arrays, and one server backend on one core inserting
//! the rows. Run one after another, each side idles while the other works. With two
//! transactions in flight, the client prepares one while the server inserts the other,
//! and a second backend uses a second core.
//!
//! Running two side by side is only safe when they cannot meet:
//! - **Identities**: the alerts are sorted by identity and de-duplicated first
//!   ([`sort_by_identity`]), so no identity is in two transactions.
//! - **Lanes**: at a destination that orders per key, the subject is the lane, and a
//!   lane's alerts of one approval take their places in occurrence order only if they
//!   join the lane one transaction after another. So a transaction never shares a subject
//!   with another: chunks end between subjects, and a subject with more alerts than a
//!   chunk holds is a unit of its own whose chunks run in order, each committed before
//!   the next starts.
//! - **Deadlocks**: each transaction still takes its identity locks and inserts its rows
//!   in identity order, so against any other decider's transactions the usual ordered
//!   locking argument holds, transaction by transaction; the approval's own transactions
//!   touch disjoint identities and lanes and never wait for each other.
//!
//! A failed transaction stops the approval: the transactions committed before it stay
//! (each is whole), the rest are not attempted, and approving the same alerts again
//! creates only the missing identities.

use crate::alerts::MonitorAlert;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Sorts alerts by identity (subject, occurrence, destination; byte order, the "C"
/// collation) and drops repeated identities, keeping the first.
pub fn sort_by_identity(alerts: &mut Vec<MonitorAlert>) {
    alerts.sort_by(|a, b| {
        (&a.subject, &a.occurrence, a.destination_id).cmp(&(
            &b.subject,
            &b.occurrence,
            b.destination_id,
        ))
    });
    alerts.dedup_by(|a, b| {
        a.subject == b.subject
            && a.occurrence == b.occurrence
            && a.destination_id == b.destination_id
    });
}

/// A bulk approval cut into transactions: units of work that share no subject, each one
/// or more chunks of at most `chunk_len` alerts approved in order.
#[derive(Debug)]
pub struct ApprovalPlan<'a> {
    units: Vec<Vec<&'a [MonitorAlert]>>,
}

impl<'a> ApprovalPlan<'a> {
    /// Cuts `alerts`, sorted by identity ([`sort_by_identity`]), into chunks of at most
    /// `chunk_len` (at least 1) that end between subjects; a subject with more than
    /// `chunk_len` alerts becomes a unit of several chunks.
    pub fn new(alerts: &'a [MonitorAlert], chunk_len: usize) -> ApprovalPlan<'a> {
        debug_assert!(
            alerts.windows(2).all(|w| w[0].subject <= w[1].subject),
            "alerts are sorted by identity"
        );
        let chunk_len = chunk_len.max(1);
        let mut units = Vec::new();
        // The alerts from `start` to the current subject's first alert form the chunk
        // being filled.
        let mut start = 0;
        let mut subject_start = 0;
        while subject_start < alerts.len() {
            let subject = &alerts[subject_start].subject;
            let subject_end = subject_start
                + alerts[subject_start..]
                    .iter()
                    .take_while(|a| &a.subject == subject)
                    .count();
            if subject_end - start > chunk_len && start < subject_start {
                // This subject does not fit beside the chunk's: the chunk ends before it.
                units.push(vec![&alerts[start..subject_start]]);
                start = subject_start;
            }
            if subject_end - start > chunk_len {
                // One subject larger than a chunk: its own unit, its chunks in order.
                units.push(alerts[start..subject_end].chunks(chunk_len).collect());
                start = subject_end;
            }
            subject_start = subject_end;
        }
        if start < alerts.len() {
            units.push(vec![&alerts[start..]]);
        }
        ApprovalPlan { units }
    }

    /// The units of work, each a list of chunks approved one after another.
    pub fn units(&self) -> &[Vec<&'a [MonitorAlert]>] {
        &self.units
    }

    /// Approves every chunk with `approve_chunk` (one transaction each, on a connection
    /// of its own), two units in flight at once: each of two workers takes the next unit
    /// not yet taken, so a worker finishing a small unit early is not left idle. Returns
    /// the sum of what `approve_chunk` returned, or the first error (the other worker's
    /// transaction in flight is then dropped, which rolls it back).
    pub async fn run<F, Fut, E>(&self, approve_chunk: F) -> Result<u64, E>
    where
        F: Fn(&'a [MonitorAlert]) -> Fut,
        Fut: Future<Output = Result<u64, E>>,
    {
        let next_unit = AtomicUsize::new(0);
        let worker = || async {
            let mut created = 0;
            while let Some(unit) = self.units.get(next_unit.fetch_add(1, Ordering::Relaxed)) {
                for &chunk in unit {
                    created += approve_chunk(chunk).await?;
                }
            }
            Ok(created)
        };
        let (first, second) = tokio::try_join!(worker(), worker())?;
        Ok(first + second)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn alert(subject: &str, occurrence: u32) -> MonitorAlert {
        MonitorAlert {
            destination_id: Uuid::nil(),
            subject: subject.to_owned(),
            occurrence: format!("{occurrence:03}"),
            payload_json: "{}".to_owned(),
        }
    }

    /// The plan as (subject, occurrence) lists per chunk, per unit.
    fn shape(plan: &ApprovalPlan<'_>) -> Vec<Vec<Vec<(String, String)>>> {
        plan.units()
            .iter()
            .map(|unit| {
                unit.iter()
                    .map(|chunk| {
                        chunk
                            .iter()
                            .map(|a| (a.subject.clone(), a.occurrence.clone()))
                            .collect()
                    })
                    .collect()
            })
            .collect()
    }

    fn pairs(subject: &str, occurrences: &[&str]) -> Vec<(String, String)> {
        occurrences
            .iter()
            .map(|o| (subject.to_owned(), (*o).to_owned()))
            .collect()
    }

    fn subjects_of(alerts: &[&MonitorAlert]) -> Vec<String> {
        let mut subjects: Vec<String> = alerts.iter().map(|a| a.subject.clone()).collect();
        subjects.dedup();
        subjects
    }

    #[test]
    fn sorting_orders_by_bytes_and_drops_repeated_identities() {
        let mut alerts = vec![alert("b", 1), alert("a", 2), alert("B", 1), alert("a", 2)];
        alerts[3].payload_json = "{\"later\":true}".to_owned();
        sort_by_identity(&mut alerts);
        let identities: Vec<(&str, &str)> = alerts
            .iter()
            .map(|a| (a.subject.as_str(), a.occurrence.as_str()))
            .collect();
        assert_eq!(identities, [("B", "001"), ("a", "002"), ("b", "001")]);
        assert_eq!(
            alerts[1].payload_json, "{}",
            "the first of a repeat is kept"
        );
    }

    #[test]
    fn chunks_end_between_subjects() {
        // Subjects of 2, 2 and 3 alerts, chunks of at most 4: "a" and "b" fit together,
        // "c" starts a chunk of its own rather than being split across two.
        let alerts: Vec<MonitorAlert> = [("a", 2), ("b", 2), ("c", 3)]
            .iter()
            .flat_map(|(s, n)| (0..*n).map(move |o| alert(s, o)))
            .collect();
        let plan = ApprovalPlan::new(&alerts, 4);
        let shape = shape(&plan);
        assert_eq!(shape.len(), 2);
        assert_eq!(shape[0].len(), 1);
        assert_eq!(shape[0][0].len(), 4);
        assert_eq!(shape[1][0].len(), 3);
        assert!(shape[1][0].iter().all(|(s, _)| s == "c"));
    }

    #[test]
    fn a_subject_larger_than_a_chunk_is_one_unit_of_ordered_chunks() {
        let mut alerts: Vec<MonitorAlert> = (0..2).map(|o| alert("a", o)).collect();
        alerts.extend((0..7).map(|o| alert("big", o)));
        alerts.extend((0..1).map(|o| alert("z", o)));
        let plan = ApprovalPlan::new(&alerts, 3);
        let shape = shape(&plan);
        // "a" alone (it cannot share with "big"), "big" in chunks of 3, 3, 1, then "z".
        assert_eq!(shape.len(), 3);
        assert_eq!(shape[0], [pairs("a", &["000", "001"])]);
        let big: Vec<usize> = shape[1].iter().map(Vec::len).collect();
        assert_eq!(big, [3, 3, 1]);
        let occurrences: Vec<&str> = shape[1].iter().flatten().map(|(_, o)| o.as_str()).collect();
        assert_eq!(
            occurrences,
            ["000", "001", "002", "003", "004", "005", "006"],
            "the big subject's chunks keep occurrence order"
        );
        assert_eq!(shape[2], [pairs("z", &["000"])]);
    }

    #[test]
    fn every_alert_is_in_exactly_one_chunk_and_no_subject_in_two_units() {
        // Subjects of 1 to 9 alerts, chunk sizes 1 to 10.
        let alerts: Vec<MonitorAlert> = (0..40u32)
            .flat_map(|s| (0..(s * 7 % 9 + 1)).map(move |o| alert(&format!("s{s:02}"), o)))
            .collect();
        for chunk_len in 1..=10 {
            let plan = ApprovalPlan::new(&alerts, chunk_len);
            let flat: Vec<&MonitorAlert> = plan
                .units()
                .iter()
                .flatten()
                .flat_map(|c| c.iter())
                .collect();
            assert_eq!(flat.len(), alerts.len(), "chunk_len {chunk_len}");
            assert!(flat.iter().zip(&alerts).all(|(a, b)| std::ptr::eq(*a, b)));
            assert!(plan.units().iter().flatten().all(|c| c.len() <= chunk_len));
            let mut seen = std::collections::HashSet::new();
            for unit in plan.units() {
                let in_unit: Vec<&MonitorAlert> = unit.iter().flat_map(|c| c.iter()).collect();
                for subject in subjects_of(&in_unit) {
                    assert!(seen.insert(subject.clone()), "{subject} in two units");
                }
            }
        }
    }

    #[test]
    fn an_empty_approval_has_no_units() {
        assert!(ApprovalPlan::new(&[], 5).units().is_empty());
    }
}
