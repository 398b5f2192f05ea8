//! Fields of human-readable log lines: each value shown as text and bounded, without the
//! OpenTelemetry attributes spans carry for export.
//!
//! Whatever a library logs may quote what a client sent (the MCP library logs a JSON-RPC
//! request's `id` as it came), so every value, the message included, is shown through
//! `outbox_core::untrusted::visible`: a newline cannot start a forged line, and terminal
//! escapes and bidirectional controls are shown, not sent. Each value is also cut at
//! [`MAX_VALUE_BYTES`], and the cut said, so a request cannot make a line longer than it.
//! This is the one place human lines' fields are written (the event's and its spans'),
//! whichever crate logs them; `log_json` holds JSON lines to the same rules.
//!
//! A delivery attempt's span holds a dozen attributes by the semantic conventions
//! (`otel.kind`, `messaging.message.id`, `outbox.destination`, ...), all with dotted names;
//! printed in front of every line logged inside it, they would bury the line. Our own log
//! fields never have a dot, so a dot is what tells the two apart. JSON lines keep them all.

use outbox_core::untrusted::visible;
use std::fmt::{self, Write as _};
use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::FormatFields;

/// Most bytes of one value in a log line (as shown, escapes included); the rest is left
/// out and [`cut_marker`] says how much. An error with its causes fits; a request's echo
/// of a client's 256 KiB does not.
pub(crate) const MAX_VALUE_BYTES: usize = 512;

/// What ends a value that was cut: how many bytes were left out.
pub(crate) fn cut_marker(cut_bytes: usize) -> String {
    format!("…[{cut_bytes} bytes cut]")
}

/// `name=value` pairs separated by spaces, the message bare, dotted names left out.
#[derive(Debug, Default)]
pub(crate) struct HumanFields;

impl<'writer> FormatFields<'writer> for HumanFields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut visitor = HumanVisitor {
            writer: &mut writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct HumanVisitor<'a, 'writer> {
    writer: &'a mut Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl Visit for HumanVisitor<'_, '_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() || field.name().contains('.') {
            return;
        }
        let separator = if self.first { "" } else { " " };
        self.first = false;
        self.result = if field.name() == "message" {
            self.writer.write_str(separator)
        } else {
            write!(self.writer, "{separator}{}=", field.name())
        }
        .and_then(|()| write_visible(self.writer, value));
    }
}

/// Writes `value` as [`visible`] shows it, at most [`MAX_VALUE_BYTES`] of it.
fn write_visible(out: &mut impl fmt::Write, value: &dyn fmt::Debug) -> fmt::Result {
    let mut shown = Bounded {
        out,
        room: MAX_VALUE_BYTES,
        cut: 0,
    };
    write!(shown, "{value:?}")?;
    if shown.cut > 0 {
        let marker = cut_marker(shown.cut);
        shown.out.write_str(&marker)?;
    }
    Ok(())
}

/// Escapes what is written through it and passes on at most `room` bytes of the result,
/// counting the rest. Escaping each piece alone shows the same as escaping the whole: the
/// escapes are per character.
struct Bounded<'a, W: fmt::Write> {
    out: &'a mut W,
    room: usize,
    cut: usize,
}

impl<W: fmt::Write> fmt::Write for Bounded<'_, W> {
    fn write_str(&mut self, piece: &str) -> fmt::Result {
        let shown = visible(piece);
        if shown.len() <= self.room {
            self.room -= shown.len();
            return self.out.write_str(&shown);
        }
        let mut end = self.room;
        while !shown.is_char_boundary(end) {
            end -= 1;
        }
        self.room = 0;
        self.cut += shown.len() - end;
        self.out.write_str(&shown[..end])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn human_lines(log: impl FnOnce()) -> String {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(HumanFields)
            .with_ansi(false)
            .without_time()
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, log);
        let bytes = lines.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn what_a_library_quotes_cannot_start_a_line_or_act_on_a_terminal() {
        let forged =
            "1\n2026-12-07T00:00:00Z  INFO evidence checkpoint made\u{1b}[2J\u{202e}\u{9b}";
        let text = human_lines(|| {
            tracing::warn!(id = %forged, "response error");
            tracing::warn!("quoted: {forged}");
            let span = tracing::info_span!("request", id = %forged);
            let _entered = span.enter();
            tracing::info!(plain = "kept", "inside");
        });
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(
            !text
                .chars()
                .any(|c| c != '\n' && outbox_core::untrusted::is_unsafe_on_terminal(c)),
            "{text}"
        );
        assert!(
            text.contains(
                r"1\n2026-12-07T00:00:00Z  INFO evidence checkpoint made\x1b[2J\u{202e}\x9b"
            ),
            "{text}"
        );
        assert!(text.contains(r#"plain="kept""#), "{text}");
    }

    #[test]
    fn a_value_is_cut_at_its_bound_and_the_cut_is_said() {
        let long = "é".repeat(2000);
        let text = human_lines(|| tracing::warn!(id = %long, "x{long}"));
        assert_eq!(text.lines().count(), 1, "{text}");
        let line = text.lines().next().unwrap();
        assert!(line.len() < 3 * MAX_VALUE_BYTES, "{}", line.len());
        // Each value kept its first 512 bytes, whole characters only, then the marker.
        let kept = "é".repeat(MAX_VALUE_BYTES / 2);
        assert!(
            line.contains(&format!(
                "x{}{}",
                &kept[..MAX_VALUE_BYTES - 2],
                cut_marker(3490)
            )),
            "{line}"
        );
        assert!(
            line.contains(&format!("id={kept}{}", cut_marker(3488))),
            "{line}"
        );
        // Short values are untouched.
        let short = human_lines(|| tracing::info!(n = 7, "ok"));
        assert!(short.ends_with(": ok n=7\n"), "{short}");
    }

    #[test]
    fn dotted_attributes_stay_out_of_human_lines() {
        let text = human_lines(|| {
            let span = tracing::info_span!(
                "alert",
                alert_id = 7,
                otel.kind = "consumer",
                messaging.message.id = "m"
            );
            let _entered = span.enter();
            tracing::info!(status = 503, "refused");
        });
        assert!(text.contains("alert{alert_id=7}"), "{text}");
        assert!(text.contains("refused status=503"), "{text}");
        assert!(
            !text.contains("otel") && !text.contains("messaging"),
            "{text}"
        );
    }
}
