//! Fields of human-readable log lines, without the OpenTelemetry attributes spans carry
//! for export.
//!
//! A delivery attempt's span holds a dozen attributes by the semantic conventions
//! (`otel.kind`, `messaging.message.id`, `outbox.destination`, ...), all with dotted names;
//! printed in front of every line logged inside it, they would bury the line. Our own log
//! fields never have a dot, so a dot is what tells the two apart. JSON lines keep them all.

use std::fmt;
use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::FormatFields;

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
            write!(self.writer, "{separator}{value:?}")
        } else {
            write!(self.writer, "{separator}{}={value:?}", field.name())
        };
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

    #[test]
    fn dotted_attributes_stay_out_of_human_lines() {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(HumanFields)
            .with_ansi(false)
            .without_time()
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(
                "alert",
                alert_id = 7,
                otel.kind = "consumer",
                messaging.message.id = "m"
            );
            let _entered = span.enter();
            tracing::info!(status = 503, "refused");
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("alert{alert_id=7}"), "{text}");
        assert!(text.contains("refused status=503"), "{text}");
        assert!(
            !text.contains("otel") && !text.contains("messaging"),
            "{text}"
        );
    }
}
