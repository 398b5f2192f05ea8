//! Secrets given to `outboxctl` in a file or on standard input, never as an argument (where
//! `ps` would show them to other users): a destination's signing secrets, an email API's
//! key, an SMTP relay's password. Standard input is read to at most 64 KiB.

use anyhow::Context;
use std::io::Read;

/// The most of standard input a secret is read from.
const MAX_STDIN_BYTES: u64 = 64 * 1024;

/// The text given as `--NAME-file PATH` or `--NAME-stdin`, with the flag it came from;
/// `None` when neither was given. A file wins over standard input (the commands refuse
/// both at once before asking).
pub(crate) fn read(
    name: &str,
    file: Option<&str>,
    stdin: bool,
) -> anyhow::Result<Option<(String, String)>> {
    match (file, stdin) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--{name}-file `{path}` cannot be read"))?;
            Ok(Some((text, format!("--{name}-file"))))
        }
        (None, true) => {
            let flag = format!("--{name}-stdin");
            Ok(Some((from_stdin(&flag)?, flag)))
        }
        (None, false) => Ok(None),
    }
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

/// The first line of a secret's text, without a carriage return.
pub(crate) fn first_line(text: &str) -> &str {
    text.lines()
        .next()
        .unwrap_or_default()
        .trim_end_matches('\r')
}
