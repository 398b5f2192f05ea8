//! JSON log lines held to the rules of human ones: no raw character a terminal acts on,
//! and no string longer than [`MAX_VALUE_BYTES`] (the cut said).
//!
//! JSON escaping already keeps a newline or an ESC inside its string (`\n`, `\u001b`), so
//! no line can be forged; but DEL, the C1 controls, the line separators and the
//! bidirectional controls stay raw, and nothing bounds a value: a library that quotes a
//! client's 256 KiB request id writes 256 KiB. The JSON formatter's line is taken as it is
//! (its shape and member order unchanged) and passed through
//! `outbox_core::untrusted::json_escaped`, then every string longer than the bound is cut
//! between two of its characters (never inside an escape) and ends with the cut marker.

use crate::log_fields::{cut_marker, MAX_VALUE_BYTES};
use outbox_core::untrusted::json_escaped;
use std::borrow::Cow;
use std::fmt;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Wraps a JSON event formatter, holding its lines to the rules above.
#[derive(Debug, Clone)]
pub(crate) struct Bounded<F>(pub(crate) F);

impl<S, N, F> FormatEvent<S, N> for Bounded<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        writer.write_str(&held_to_the_rules(&line))
    }
}

/// `line` (one JSON document and its line end) with unsafe characters escaped and long
/// strings cut; most lines are short plain ASCII and come back as they are.
fn held_to_the_rules(line: &str) -> Cow<'_, str> {
    // No string is longer than the line, and DEL and every character to escape are at
    // 0x7f or above.
    if line.len() <= MAX_VALUE_BYTES && line.bytes().all(|b| b < 0x7f) {
        return Cow::Borrowed(line);
    }
    let (document, end) = match line.strip_suffix('\n') {
        Some(document) => (document, "\n"),
        None => (line, ""),
    };
    let escaped = json_escaped(document);
    match strings_cut(&escaped) {
        Cow::Borrowed(_) if matches!(escaped, Cow::Borrowed(_)) => Cow::Borrowed(line),
        cut => Cow::Owned(format!("{cut}{end}")),
    }
}

/// `json` (compact JSON text whose strings hold only printable characters and JSON's
/// escapes) with every string past [`MAX_VALUE_BYTES`] cut there and ended by the marker.
fn strings_cut(json: &str) -> Cow<'_, str> {
    let bytes = json.as_bytes();
    let mut out: Option<String> = None;
    // Where the text not yet copied to `out` starts.
    let mut copied = 0;
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] != b'"' {
            at += 1;
            continue;
        }
        // A string: its characters and escapes, each counted whole, up to its closing quote.
        let start = at + 1;
        let mut next = start;
        let mut kept_end = None;
        while next < bytes.len() && bytes[next] != b'"' {
            let width = match bytes[next] {
                b'\\' if bytes.get(next + 1) == Some(&b'u') => 6,
                b'\\' => 2,
                lead => utf8_width(lead),
            };
            if kept_end.is_none() && next + width - start > MAX_VALUE_BYTES {
                kept_end = Some(next);
            }
            next = (next + width).min(bytes.len());
        }
        if let Some(kept_end) = kept_end {
            let out = out.get_or_insert_with(|| String::with_capacity(json.len().min(4096)));
            out.push_str(&json[copied..kept_end]);
            out.push_str(&cut_marker(next - kept_end));
            copied = next;
        }
        // Past the closing quote.
        at = next + 1;
    }
    match out {
        None => Cow::Borrowed(json),
        Some(mut out) => {
            out.push_str(&json[copied..]);
            Cow::Owned(out)
        }
    }
}

/// The length of the UTF-8 character that starts with `lead`.
fn utf8_width(lead: u8) -> usize {
    match lead {
        0xf0.. => 4,
        0xe0.. => 3,
        0xc0.. => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use outbox_core::untrusted::is_unsafe_on_terminal;
    use serde_json::{json, Value};

    fn line_of(value: &Value) -> String {
        format!("{}\n", serde_json::to_string(value).unwrap())
    }

    #[test]
    fn short_plain_lines_are_untouched() {
        let line = line_of(
            &json!({"level": "INFO", "fields": {"message": "approval API listening", "addr": "127.0.0.1:80"}}),
        );
        assert!(matches!(held_to_the_rules(&line), Cow::Borrowed(l) if l == line));
        let accented = line_of(&json!({"fields": {"message": "Preiserhöhung → 2027"}}));
        assert!(matches!(held_to_the_rules(&accented), Cow::Borrowed(l) if l == accented));
    }

    #[test]
    fn controls_a_terminal_acts_on_are_escaped_and_the_line_means_the_same() {
        let value = json!({"fields": {"message": "response error", "id": "1\n2026 INFO forged\u{1b}[2J\u{9b}\u{202e}\u{7f}\u{2028}"}, "target": "rmcp::service"});
        let held = held_to_the_rules(&line_of(&value)).into_owned();
        assert_eq!(held.lines().count(), 1, "{held}");
        assert!(held.ends_with('\n'));
        assert!(
            !held.trim_end().chars().any(is_unsafe_on_terminal),
            "{held}"
        );
        assert_eq!(serde_json::from_str::<Value>(&held).unwrap(), value);
    }

    #[test]
    fn long_strings_are_cut_whole_characters_and_escapes_and_the_cut_is_said() {
        let long = format!(
            "{}\u{1b}{}",
            "a".repeat(MAX_VALUE_BYTES - 3),
            "é".repeat(5000)
        );
        let value = json!({"fields": {"message": "response error", "id": long, "n": 3}, "span": {"name": "mcp", "tool": "x\"y".repeat(400)}});
        let line = line_of(&value);
        let held = held_to_the_rules(&line).into_owned();
        let back: Value = serde_json::from_str(&held).unwrap();
        // The escape `\u001b` did not fit whole in the bound: it is left out whole.
        let id = back["fields"]["id"].as_str().unwrap();
        assert_eq!(
            id,
            format!(
                "{}{}",
                "a".repeat(MAX_VALUE_BYTES - 3),
                cut_marker(6 + 10_000)
            )
        );
        // Escaped quotes count as two bytes and are never split.
        let tool = back["span"]["tool"].as_str().unwrap();
        assert!(
            tool.starts_with(&"x\"y".repeat(MAX_VALUE_BYTES / 4)),
            "{tool}"
        );
        assert!(
            tool.ends_with(&cut_marker(1600 - MAX_VALUE_BYTES)),
            "{tool}"
        );
        // The rest of the line is as it was, in its order.
        assert_eq!(back["fields"]["message"], "response error");
        assert_eq!(back["fields"]["n"], 3);
        let before_id = &line[..line.find("\"id\":").unwrap()];
        assert!(held.starts_with(before_id), "{held}");
        assert!(held.len() < 4 * MAX_VALUE_BYTES, "{}", held.len());
    }
}
