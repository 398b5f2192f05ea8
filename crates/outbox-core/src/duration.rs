//! Human durations for flags such as `--timeout 10s` or `--idempotency-retention 24h`.

use std::time::Duration;

/// Why a duration could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not of the form `<number><unit>` (e.g. `500ms`, `10s`, `24h`, `30d`).
    #[error("invalid duration `{0}`: expected a number and a unit, e.g. 500ms, 10s, 24h, 30d")]
    Malformed(String),
    /// Zero where a positive duration is required.
    #[error("duration `{0}` must be greater than zero")]
    Zero(String),
}

/// Reads a duration that may be zero (`0s`, `500ms`, `5s`).
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    humantime::parse_duration(text).map_err(|_| DurationError::Malformed(text.to_owned()))
}

/// Reads a positive duration such as `500ms`, `10s`, `2m`, `24h`, `30d` or `1h 30m`.
pub fn parse_positive(text: &str) -> Result<Duration, DurationError> {
    let duration =
        humantime::parse_duration(text).map_err(|_| DurationError::Malformed(text.to_owned()))?;
    if duration.is_zero() {
        return Err(DurationError::Zero(text.to_owned()));
    }
    Ok(duration)
}

/// Formats a duration the way [`parse_positive`] reads it (`1day 12h`, `10s`).
pub fn format(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_common_units() {
        assert_eq!(parse_positive("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_positive("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_positive("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_positive("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_positive("1h 30m"), Ok(Duration::from_secs(5_400)));
    }

    #[test]
    fn rejects_nonsense_and_zero() {
        assert!(matches!(
            parse_positive("soon"),
            Err(DurationError::Malformed(_))
        ));
        assert!(matches!(
            parse_positive("10"),
            Err(DurationError::Malformed(_))
        ));
        assert_eq!(parse_positive("0s"), Err(DurationError::Zero("0s".into())));
    }

    #[test]
    fn format_round_trips() {
        let d = Duration::from_secs(36 * 3600);
        assert_eq!(parse_positive(&format(d)), Ok(d));
    }
}
