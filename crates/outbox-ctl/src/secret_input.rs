//! Secrets given to `outboxctl` in a file or on standard input, never as an argument (where
//! `ps` would show them to other users): a destination's signing secrets, an email API's
//! key, an SMTP relay's password. Standard input is read to at most 64 KiB.

use anyhow::{bail, Context};
use std::io::Read;

/// The most of standard input a secret is read from.
const MAX_STDIN_BYTES: u64 = 64 * 1024;

/// The first line (without a carriage return) of the text given as `--NAME-file PATH` or
/// `--NAME-stdin`; `None` when neither was given. A file wins over standard input (the
/// commands refuse both at once before asking). `(what, valid)` says what the line must
/// hold: a line `valid` refuses is refused, naming the flag (never the line).
pub(crate) fn first_line(
    name: &str,
    file: Option<&str>,
    stdin: bool,
    (what, valid): (&str, fn(&str) -> bool),
) -> anyhow::Result<Option<String>> {
    let (text, source) = match (file, stdin) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--{name}-file `{path}` cannot be read"))?;
            (text, format!("--{name}-file"))
        }
        (None, true) => {
            let flag = format!("--{name}-stdin");
            (from_stdin(&flag)?, flag)
        }
        (None, false) => return Ok(None),
    };
    let line = text
        .lines()
        .next()
        .unwrap_or_default()
        .trim_end_matches('\r');
    if !valid(line) {
        bail!("{source} must hold {what} on its first line");
    }
    Ok(Some(line.to_owned()))
}

/// Standard input as text, for the option `flag`.
pub(crate) fn from_stdin(flag: &str) -> anyhow::Result<String> {
    let mut text = String::new();
    std::io::stdin()
        .take(MAX_STDIN_BYTES)
        .read_to_string(&mut text)
        .with_context(|| format!("{flag}: standard input is not readable text"))?;
    Ok(text)
}
