//! Contract renewal tiers. A contract's *action date* is its renewal date minus its notice
//! period; alerts fire at tiers (default 60, 30 and 15 days before the action date),
//! counted in whole days in the tenant's time zone. Only the most urgent tier already
//! crossed is due: a contract first seen 10 days before its action date gets the 15-day
//! alert alone, and a decider that was down across a tier does not catch up on it.

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Unit};

/// The tiers used when neither tenant nor contract sets them.
pub const DEFAULT_TIERS: [u32; 3] = [60, 30, 15];

/// Why tiers or a time zone are not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenewalError {
    /// Not an IANA time zone name known to the bundled database.
    #[error("unknown time zone `{0}` (expected an IANA name such as Europe/Berlin)")]
    UnknownTimeZone(String),
    /// Tiers must be distinct whole days between 0 and 3660.
    #[error("invalid tiers `{0}`: expected distinct whole days between 0 and 3660, e.g. 60,30,15")]
    InvalidTiers(String),
}

/// Loads an IANA time zone.
pub fn time_zone(name: &str) -> Result<TimeZone, RenewalError> {
    TimeZone::get(name).map_err(|_| RenewalError::UnknownTimeZone(name.to_owned()))
}

/// Reads tiers such as `60,30,15` (or `60;30;15`), most distant first after sorting.
pub fn parse_tiers(text: &str) -> Result<Vec<u32>, RenewalError> {
    let invalid = || RenewalError::InvalidTiers(text.to_owned());
    let mut tiers = text
        .split([',', ';'])
        .map(|part| part.trim().parse::<u32>().map_err(|_| invalid()))
        .collect::<Result<Vec<_>, _>>()?;
    check_tiers(&mut tiers).map_err(|_| invalid())?;
    Ok(tiers)
}

/// Sorts tiers (most distant first) and checks them.
pub fn check_tiers(tiers: &mut [u32]) -> Result<(), RenewalError> {
    tiers.sort_unstable_by(|a, b| b.cmp(a));
    let distinct = tiers.windows(2).all(|w| w[0] != w[1]);
    if tiers.is_empty() || !distinct || tiers.iter().any(|t| *t > 3660) {
        return Err(RenewalError::InvalidTiers(
            tiers
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ));
    }
    Ok(())
}

/// The calendar date of `now` in `zone`: "today" for the tenant.
pub fn today(now: Timestamp, zone: &TimeZone) -> Date {
    now.to_zoned(zone.clone()).date()
}

/// The renewal date minus the notice period.
pub fn action_date(renewal: Date, notice_days: u32) -> Date {
    renewal
        .checked_sub(jiff::Span::new().days(i64::from(notice_days)))
        .unwrap_or(renewal)
}

/// Whole days from `today` to `action`: calendar days, so a DST change cannot move it.
pub fn days_until(today: Date, action: Date) -> i64 {
    today
        .until((Unit::Day, action))
        .map(|span| i64::from(span.get_days()))
        .unwrap_or(i64::MIN)
}

/// The tier due on a day `days_remaining` before the action date: the smallest tier that
/// has been crossed (`days_remaining <= tier`), or none before the first tier and none
/// once the action date has passed.
pub fn due_tier(days_remaining: i64, tiers: &[u32]) -> Option<u32> {
    if days_remaining < 0 {
        return None;
    }
    tiers
        .iter()
        .copied()
        .filter(|tier| days_remaining <= i64::from(*tier))
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;

    #[test]
    fn daily_runs_from_day_70_to_day_0_fire_on_60_30_and_15() {
        let mut fired = Vec::new();
        let mut last = None;
        for day in (0..=70).rev() {
            // An alert is new when the due tier changes (the identity includes the tier).
            if let Some(tier) = due_tier(day, &DEFAULT_TIERS) {
                if last != Some(tier) {
                    fired.push((day, tier));
                }
                last = Some(tier);
            }
        }
        assert_eq!(fired, vec![(60, 60), (30, 30), (15, 15)]);
    }

    #[test]
    fn only_the_most_urgent_crossed_tier_is_due() {
        assert_eq!(due_tier(10, &DEFAULT_TIERS), Some(15));
        assert_eq!(due_tier(14, &DEFAULT_TIERS), Some(15));
        assert_eq!(due_tier(31, &DEFAULT_TIERS), Some(60));
        assert_eq!(due_tier(61, &DEFAULT_TIERS), None);
        assert_eq!(due_tier(0, &DEFAULT_TIERS), Some(15));
        assert_eq!(due_tier(-1, &DEFAULT_TIERS), None, "nothing after the date");
    }

    #[test]
    fn the_action_date_comes_notice_days_early() {
        assert_eq!(action_date(date(2027, 3, 31), 30), date(2027, 3, 1));
        assert_eq!(action_date(date(2027, 3, 31), 0), date(2027, 3, 31));
    }

    #[test]
    fn days_are_counted_in_the_tenants_zone() {
        // 2027-01-01T10:00Z is already 2027-01-01 23:00 in Auckland, still 02:00 on
        // 2027-01-01 in Los Angeles; at 12:00Z Auckland has moved to 2 January.
        let instant: Timestamp = "2027-01-01T12:00:00Z".parse().unwrap();
        let auckland = time_zone("Pacific/Auckland").unwrap();
        let los_angeles = time_zone("America/Los_Angeles").unwrap();
        assert_eq!(today(instant, &auckland), date(2027, 1, 2));
        assert_eq!(today(instant, &los_angeles), date(2027, 1, 1));
        let action = date(2027, 1, 31);
        assert_eq!(days_until(today(instant, &auckland), action), 29);
        assert_eq!(days_until(today(instant, &los_angeles), action), 30);
    }

    #[test]
    fn a_dst_change_does_not_shift_a_tier() {
        // Europe/Berlin leaves summer time on 2027-10-31; the day count is calendar days.
        let berlin = time_zone("Europe/Berlin").unwrap();
        let action = date(2027, 11, 30);
        let before: Timestamp = "2027-10-30T22:30:00Z".parse().unwrap(); // 31 Oct 00:30 CEST
        let after: Timestamp = "2027-10-31T23:30:00Z".parse().unwrap(); // 1 Nov 00:30 CET
        assert_eq!(days_until(today(before, &berlin), action), 30);
        assert_eq!(days_until(today(after, &berlin), action), 29);
    }

    #[test]
    fn tiers_parse_and_refuse_nonsense() {
        assert_eq!(parse_tiers("15,60,30"), Ok(vec![60, 30, 15]));
        assert_eq!(parse_tiers("90;7"), Ok(vec![90, 7]));
        assert!(parse_tiers("30,30").is_err());
        assert!(parse_tiers("").is_err());
        assert!(parse_tiers("soon").is_err());
        assert!(time_zone("Mars/Olympus").is_err());
    }
}
