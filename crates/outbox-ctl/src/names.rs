//! Names as operators type them (tenants, destinations, watchlist entries): trimmed,
//! bounded, printable.

use anyhow::bail;

/// A name as operators type it: trimmed, 1 to 200 bytes, no control characters.
pub(crate) fn checked_name<'a>(what: &str, name: &'a str) -> anyhow::Result<&'a str> {
    let name = name.trim();
    if name.is_empty() || name.len() > 200 || name.chars().any(char::is_control) {
        bail!("a {what} name must be 1 to 200 printable characters");
    }
    Ok(name)
}
