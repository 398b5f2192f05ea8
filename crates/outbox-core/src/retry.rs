//! When to try again: exponential backoff with full jitter over a configurable schedule,
//! `Retry-After` honoured up to a cap, and limits on attempts and on elapsed time.

use std::time::Duration;

/// The default delays before attempts 2, 3, ...; the last one repeats.
pub const DEFAULT_SCHEDULE: [Duration; 8] = [
    Duration::from_secs(5),
    Duration::from_secs(30),
    Duration::from_secs(120),
    Duration::from_secs(600),
    Duration::from_secs(1800),
    Duration::from_secs(3600),
    Duration::from_secs(3 * 3600),
    Duration::from_secs(6 * 3600),
];

/// The least a destination's `Retry-After` may ask for before it is capped: an hour, or the
/// schedule's longest delay if that is longer.
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(3600);

/// A retry schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySchedule {
    delays: Vec<Duration>,
}

impl Default for RetrySchedule {
    fn default() -> Self {
        RetrySchedule {
            delays: DEFAULT_SCHEDULE.to_vec(),
        }
    }
}

impl RetrySchedule {
    /// A schedule from explicit delays (at least one).
    pub fn new(delays: Vec<Duration>) -> Option<Self> {
        (!delays.is_empty()).then_some(RetrySchedule { delays })
    }

    /// Reads `5s,30s,2m` as a schedule.
    pub fn parse(text: &str) -> Result<Self, crate::duration::DurationError> {
        let delays = text
            .split(',')
            .map(|part| crate::duration::parse_positive(part.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RetrySchedule { delays })
    }

    /// The ceiling for the delay after `attempts_made` attempts.
    pub fn ceiling(&self, attempts_made: u32) -> Duration {
        let index = (attempts_made.max(1) - 1) as usize;
        self.delays[index.min(self.delays.len() - 1)]
    }

    /// The longest delay in the schedule.
    pub fn max_delay(&self) -> Duration {
        self.delays.iter().copied().max().unwrap_or_default()
    }

    /// The longest `Retry-After` honoured as asked.
    pub fn retry_after_cap(&self) -> Duration {
        self.max_delay().max(RETRY_AFTER_CAP)
    }

    /// The delay before the next attempt after `attempts_made` attempts: "full jitter", a
    /// uniformly random point in `[0, ceiling]` (`unit` in `[0, 1)` picks it), so that a
    /// burst of failures does not come back as a burst. With a `Retry-After`, the
    /// destination's wish wins, capped at [`RetrySchedule::retry_after_cap`].
    pub fn delay(&self, attempts_made: u32, unit: f64, retry_after: Option<Duration>) -> Duration {
        if let Some(wish) = retry_after {
            return wish.min(self.retry_after_cap());
        }
        self.ceiling(attempts_made).mul_f64(unit.clamp(0.0, 1.0))
    }
}

/// Reads a `Retry-After` header: delay-seconds or an HTTP date (relative to `now_unix`).
pub fn parse_retry_after(value: &str, now_unix: i64) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate_to_unix(value)?;
    Some(Duration::from_secs(
        at.saturating_sub(now_unix).max(0) as u64
    ))
}

/// Parses the IMF-fixdate form (`Sun, 06 Nov 1994 08:49:37 GMT`), the only one servers
/// are allowed to send.
fn httpdate_to_unix(value: &str) -> Option<i64> {
    let mut parts = value.split_whitespace();
    let _weekday = parts.next()?;
    let day: i64 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut hms = parts.next()?.split(':').map(|p| p.parse::<i64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if parts.next()? != "GMT" {
        return None;
    }
    // Days from the civil date (proleptic Gregorian), after Howard Hinnant's algorithm.
    let (y, mo) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * mo + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + m * 60 + s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_then_repeat_the_last_step() {
        let s = RetrySchedule::default();
        assert_eq!(s.ceiling(1), Duration::from_secs(5));
        assert_eq!(s.ceiling(2), Duration::from_secs(30));
        assert_eq!(s.ceiling(8), Duration::from_secs(6 * 3600));
        assert_eq!(s.ceiling(40), Duration::from_secs(6 * 3600));
    }

    #[test]
    fn full_jitter_spans_zero_to_the_ceiling() {
        let s = RetrySchedule::default();
        assert_eq!(s.delay(2, 0.0, None), Duration::ZERO);
        assert_eq!(s.delay(2, 1.0, None), Duration::from_secs(30));
        assert_eq!(s.delay(2, 0.5, None), Duration::from_secs(15));
    }

    #[test]
    fn retry_after_wins_but_is_capped() {
        let s = RetrySchedule::parse("1s,2s").unwrap();
        assert_eq!(
            s.delay(1, 0.3, Some(Duration::from_millis(1500))),
            Duration::from_millis(1500)
        );
        assert_eq!(
            s.delay(1, 0.3, Some(Duration::from_secs(86_400))),
            RETRY_AFTER_CAP
        );
        let long = RetrySchedule::default();
        assert_eq!(
            long.delay(1, 0.3, Some(Duration::from_secs(86_400))),
            Duration::from_secs(6 * 3600)
        );
    }

    #[test]
    fn parses_retry_after_both_ways() {
        assert_eq!(parse_retry_after("120", 0), Some(Duration::from_secs(120)));
        // 784111777 is Sun, 06 Nov 1994 08:49:37 GMT.
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", 784_111_777),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 784_111_800),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", 0), None);
    }

    #[test]
    fn schedules_parse_from_text() {
        let s = RetrySchedule::parse("50ms, 100ms").unwrap();
        assert_eq!(s.ceiling(1), Duration::from_millis(50));
        assert_eq!(s.max_delay(), Duration::from_millis(100));
        assert!(RetrySchedule::parse("5s,,1m").is_err());
    }
}
