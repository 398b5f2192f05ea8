//! Showing text that others wrote (a destination's answer, a tenant's subject, a contract
//! file's id) to an operator's terminal without letting it act on the terminal.
//!
//! A terminal obeys escape sequences: `ESC ] 0 ; ... BEL` retitles the window, `ESC [ 2 J`
//! clears it, others can rewrite what was printed before. Bidirectional controls
//! (U+202E and friends) make text display in another order than it is stored, so a
//! subject can look like another. Every human-facing view passes such text through
//! [`visible`], which shows these characters as escapes instead of sending them:
//! `\x1b`, `\n`, `\u{202e}`. Nothing is dropped silently, so the operator sees that the
//! text carried them. Machine-readable output (`--json`, the API) stays faithful; see
//! [`to_json_line`] for the one extra care it takes. Log lines take the same care, whichever
//! library writes them (`outbox-runtime` formats every line): human lines through
//! [`visible`], JSON lines through [`json_escaped`].

use std::borrow::Cow;

/// True for the bidirectional formatting characters: embeddings and overrides
/// (U+202A..U+202E), isolates (U+2066..U+2069), and the marks U+200E, U+200F, U+061C.
pub fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
    )
}

/// True for characters a terminal may act on or that break a line apart: C0 controls
/// (including ESC, BEL, CR, LF, TAB), DEL, C1 controls (U+0080..U+009F), the Unicode
/// line and paragraph separators, and the bidirectional controls.
pub fn is_unsafe_on_terminal(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') || is_bidi_control(c)
}

/// `text` with every character that [`is_unsafe_on_terminal`] shown as a visible escape:
/// `\n`, `\r`, `\t` for the usual three, `\xHH` for the other controls below U+0100, and
/// `\u{hhhh}` above. The result is one line and safe to print; text without such
/// characters is returned as it is, without copying.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe_on_terminal) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !is_unsafe_on_terminal(c) {
            shown.push(c);
            continue;
        }
        match c {
            '\n' => shown.push_str("\\n"),
            '\r' => shown.push_str("\\r"),
            '\t' => shown.push_str("\\t"),
            c if (c as u32) < 0x100 => shown.push_str(&format!("\\x{:02x}", c as u32)),
            c => shown.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(shown)
}

/// At most `max_bytes` of `text`, cut at a character boundary and ending in `…` when
/// anything was cut (the ellipsis counts within `max_bytes`): for quoting a caller's text
/// inside a line that has a limit of its own.
pub fn clip(text: &str, max_bytes: usize) -> Cow<'_, str> {
    if text.len() <= max_bytes {
        return Cow::Borrowed(text);
    }
    const ELLIPSIS: &str = "…";
    let mut end = max_bytes.saturating_sub(ELLIPSIS.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}{ELLIPSIS}", &text[..end]))
}

/// Serialises `value` as one line of JSON, like `serde_json::to_string`, except that DEL,
/// the C1 controls, the line separators and the bidirectional controls inside strings are
/// written as `\uXXXX` escapes. The JSON means exactly the same (every parser reads the
/// same strings back), but none of those characters reaches a terminal raw. serde_json
/// already escapes the C0 controls.
pub fn to_json_line<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let mut out = Vec::new();
    let mut serializer =
        serde_json::Serializer::with_formatter(&mut out, EscapingFormatter(CompactFormatter));
    value.serialize(&mut serializer)?;
    // Only valid UTF-8 is ever written: serde_json's own output plus ASCII escapes.
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// [`to_json_line`], indented for people.
pub fn to_json_pretty<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(
        &mut out,
        EscapingFormatter(serde_json::ser::PrettyFormatter::new()),
    );
    value.serialize(&mut serializer)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// `json` (JSON text, or text inside a JSON string) with every character that
/// [`is_unsafe_on_terminal`] written as a `\uXXXX` escape. Outside strings JSON has only
/// ASCII punctuation, digits and letters, so applied to a whole compact document (without
/// its line end) it changes only what strings hold raw, and every parser reads the same
/// strings back. Text without such characters is returned as it is, without copying.
pub fn json_escaped(json: &str) -> Cow<'_, str> {
    if !json.chars().any(is_unsafe_on_terminal) {
        return Cow::Borrowed(json);
    }
    let mut escaped = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if is_unsafe_on_terminal(c) {
            // Every such character is below U+10000: one escape, never a surrogate pair.
            escaped.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}

use serde_json::ser::{CompactFormatter, Formatter};

/// Wraps a formatter and escapes, inside strings, what serde_json leaves raw but a
/// terminal would act on.
struct EscapingFormatter<F>(F);

impl<F: Formatter> Formatter for EscapingFormatter<F> {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        writer.write_all(json_escaped(fragment).as_bytes())
    }

    // Everything else is the wrapped formatter's.
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn end_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_key(w)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
}

#[cfg(test)]
mod clip_tests {
    use super::clip;

    #[test]
    fn clip_keeps_short_text_and_cuts_long_text_at_a_character() {
        assert_eq!(clip("renewal", 7), "renewal");
        assert_eq!(clip("renewal", 6), "ren…");
        // "é" is two bytes: the cut never splits it.
        let cut = clip("ééééé", 8);
        assert_eq!(cut, "éé…");
        assert!(cut.len() <= 8);
        for max in 3..40 {
            let text = "a renewal of 12 000 € — revised ".repeat(3);
            assert!(clip(&text, max).len() <= max, "{max}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_shown_not_sent() {
        let hostile = "ok\u{1b}]0;pwned\u{7}\u{1b}[2J done";
        assert_eq!(visible(hostile), "ok\\x1b]0;pwned\\x07\\x1b[2J done");
    }

    #[test]
    fn line_breaks_del_and_c1_are_shown() {
        assert_eq!(visible("a\nb\rc\td"), "a\\nb\\rc\\td");
        assert_eq!(visible("x\u{7f}y\u{9b}z\u{85}"), "x\\x7fy\\x9bz\\x85");
        assert_eq!(visible("p\u{2028}q"), "p\\u{2028}q");
    }

    #[test]
    fn bidi_controls_are_shown() {
        for c in [
            '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}', '\u{202e}', '\u{2066}', '\u{2067}',
            '\u{2068}', '\u{2069}', '\u{200e}', '\u{200f}', '\u{061c}',
        ] {
            assert!(is_bidi_control(c), "{c:?}");
            let text = format!("a{c}b");
            assert_eq!(visible(&text), format!("a\\u{{{:x}}}b", c as u32));
        }
    }

    #[test]
    fn ordinary_text_is_untouched_and_not_copied() {
        let text = "Acme GmbH – Preiserhöhung 12 % → 2027 «ok» مرحبا";
        assert!(matches!(visible(text), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn json_text_keeps_its_meaning_and_loses_its_raw_controls() {
        let value = serde_json::json!({"id": "a\u{9b}b\u{202e}c\u{7f}\u{2028}é", "n": 1});
        let line = serde_json::to_string(&value).unwrap();
        let escaped = json_escaped(&line);
        assert!(!escaped.chars().any(is_unsafe_on_terminal), "{escaped}");
        assert!(
            escaped.contains("\\u009b") && escaped.contains("\\u202e"),
            "{escaped}"
        );
        let back: serde_json::Value = serde_json::from_str(&escaped).unwrap();
        assert_eq!(back, value);
        let plain = r#"{"message":"approval API listening"}"#;
        assert!(matches!(json_escaped(plain), Cow::Borrowed(t) if t == plain));
    }

    #[test]
    fn json_stays_faithful_but_carries_no_raw_controls() {
        let value = serde_json::json!({"answer": "a\u{1b}[2J\u{7}\u{202e}b\u{7f}\u{9b}\u{2029}é"});
        let line = to_json_line(&value).unwrap();
        assert!(!line.chars().any(is_unsafe_on_terminal), "{line}");
        assert!(
            line.contains("\\u202e") && line.contains("\\u001b"),
            "{line}"
        );
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back, value);
        let pretty = to_json_pretty(&value).unwrap();
        assert!(pretty.contains('\n'));
        assert!(!pretty
            .chars()
            .any(|c| c != '\n' && is_unsafe_on_terminal(c)));
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&pretty).unwrap(),
            value
        );
    }
}
