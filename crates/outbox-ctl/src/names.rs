//! Names as operators type them (tenants, destinations, watchlist entries): trimmed,
//! bounded, printable; and the alert ids they name.

use anyhow::{anyhow, bail};
use uuid::Uuid;

/// A name as operators type it: trimmed, 1 to 200 bytes, no control characters.
pub(crate) fn checked_name<'a>(what: &str, name: &'a str) -> anyhow::Result<&'a str> {
    let name = name.trim();
    if name.is_empty() || name.len() > 200 || name.chars().any(char::is_control) {
        bail!("a {what} name must be 1 to 200 printable characters");
    }
    Ok(name)
}

/// Parses alert ids, each once, in the order given.
pub(crate) fn parse_ids(ids: &[String]) -> anyhow::Result<Vec<Uuid>> {
    let mut parsed: Vec<Uuid> = Vec::with_capacity(ids.len());
    for id in ids {
        let id = Uuid::parse_str(id).map_err(|_| anyhow!("`{id}` is not an alert id"))?;
        if !parsed.contains(&id) {
            parsed.push(id);
        }
    }
    Ok(parsed)
}
