//! Effective duplicates at one destination, a webhook sink or an inbox alike: every key
//! applied more than once counts, and is an offence unless the destination's policy is
//! `retry` and the alert carries the `possible_duplicate` flag.

use std::collections::HashMap;

use crate::recorded::Capability;
use crate::report::Report;
use crate::tables::AlertsById;

/// Counts the deliveries beyond the first of each key in `applied` (key → times applied)
/// at a destination of `capability`, and records an offence for each key not allowed its
/// copies there. `described(key, times)` says what was seen where (the detail's start).
/// Every key of `applied` belongs to a committed alert.
pub(crate) fn effective_duplicates(
    report: &mut Report,
    by_id: &AlertsById<'_>,
    capability: Capability,
    applied: &HashMap<&str, usize>,
    described: impl Fn(&str, usize) -> String,
) -> usize {
    let retries = capability == Capability::PlainRetry;
    let mut effective = 0;
    for (&key, &times) in applied {
        if times < 2 {
            continue;
        }
        effective += times - 1;
        let alert = by_id[key];
        if !(retries && alert.possible_duplicate) {
            let unflagged = if retries {
                " without the possible_duplicate flag"
            } else {
                ""
            };
            report.offend(
                "effective duplicate",
                Some(alert.id),
                format!("{}{unflagged}", described(key, times)),
            );
        }
    }
    effective
}
