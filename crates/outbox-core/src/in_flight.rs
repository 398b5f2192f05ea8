//! A destination's in-flight bound: the most of its alerts in `sending` at once, across
//! every dispatcher. Those are the alerts one crash can leave uncertain there, so the
//! default depends on whether anything can settle an uncertain send without a person.

use crate::OnUncertain;

/// The default bound of a destination that can settle an uncertain send by itself (it
/// answers a lookup by key, or de-duplicates a resend inside its retention window).
pub const DEFAULT_MAX_IN_FLIGHT: u32 = 16;

/// The default bound of a destination that cannot (no lookup, no de-duplication window:
/// a plain webhook, an SMTP relay). A crash there leaves every alert in flight for an
/// operator (`hold`) or for a resend that may duplicate (`retry`), so it should leave few;
/// 4 requests at once still hide a slow answer (4 per round trip: 20 alerts/s at 200 ms),
/// plenty for alerts people read.
pub const DEFAULT_MAX_IN_FLIGHT_UNSETTLEABLE: u32 = 4;

/// The default bound for a destination with these capabilities.
pub fn default_max_in_flight(has_lookup: bool, has_dedup_window: bool) -> u32 {
    if has_lookup || has_dedup_window {
        DEFAULT_MAX_IN_FLIGHT
    } else {
        DEFAULT_MAX_IN_FLIGHT_UNSETTLEABLE
    }
}

/// What the bound means for an operator: what one crash can leave behind at a destination
/// with this bound and these capabilities.
pub fn crash_consequence(
    max_in_flight: i32,
    has_lookup: bool,
    has_dedup_window: bool,
    on_uncertain: OnUncertain,
) -> String {
    let settled_by = settled_by(has_lookup, has_dedup_window, on_uncertain);
    format!("a crash can leave at most {max_in_flight} alerts uncertain here ({settled_by})")
}

/// What becomes of the alerts a crash left uncertain at a destination with these
/// capabilities: `held for an operator`, `settled by a lookup`, ...
pub fn settled_by(
    has_lookup: bool,
    has_dedup_window: bool,
    on_uncertain: OnUncertain,
) -> &'static str {
    if has_lookup {
        "settled by a lookup"
    } else if has_dedup_window {
        "resent inside the de-duplication window"
    } else {
        match on_uncertain {
            OnUncertain::Hold => "held for an operator",
            OnUncertain::Retry => "resent, possibly as duplicates",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_nothing_can_settle_default_to_the_small_bound() {
        assert_eq!(default_max_in_flight(false, false), 4);
        assert_eq!(default_max_in_flight(true, false), 16);
        assert_eq!(default_max_in_flight(false, true), 16);
        assert_eq!(
            crash_consequence(4, false, false, OnUncertain::Hold),
            "a crash can leave at most 4 alerts uncertain here (held for an operator)"
        );
        assert!(crash_consequence(16, true, false, OnUncertain::Hold).contains("lookup"));
    }
}
