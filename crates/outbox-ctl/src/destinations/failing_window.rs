//! The failing window after which a destination is disabled automatically
//! (`--disable-after-failing`): read from the command line, for a destination added or
//! changed by `destination update`.

use outbox_core::duration;
use std::time::Duration;

/// How long every send may fail before a destination is disabled: `None` for never.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailingWindow(pub Option<Duration>);

/// Longest `--disable-after-failing` window (a year; `never` is the way to say longer).
const MAX_FAILING_WINDOW: Duration = Duration::from_secs(365 * 86_400);

/// Reads `--disable-after-failing`: a positive duration, or `never`.
pub(super) fn parse_failing_window(text: &str) -> Result<FailingWindow, String> {
    if text.trim() == "never" {
        return Ok(FailingWindow(None));
    }
    let window = duration::parse_positive(text.trim())
        .map_err(|err| format!("{err}; or `never` to keep the destination on"))?;
    if window > MAX_FAILING_WINDOW {
        return Err("at most 365d; or `never` to keep the destination on".to_owned());
    }
    Ok(FailingWindow(Some(window)))
}

/// What a failing window means, in words.
pub(super) fn failing_window_text(window: Option<Duration>) -> String {
    match window {
        Some(window) => format!(
            "disabled automatically once every send has failed for {}",
            duration::format(window)
        ),
        None => "never disabled automatically".to_owned(),
    }
}
