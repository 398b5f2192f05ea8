//! What the sink reads from a message received over SMTP: the few header fields it records
//! (`Message-ID`, `Subject`, `To`, `X-Alert-Id`, `Traceparent`) and where the body starts. It does not
//! validate the message: a real inbox stores what it is given, and so does the sink.

use base64::Engine;

use crate::records::trace_header;

/// The header fields the sink records, and the offset of the body in the data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Headers {
    /// `Message-ID`, without its angle brackets.
    pub message_id: Option<String>,
    /// `Subject`, with RFC 2047 encoded words decoded.
    pub subject: Option<String>,
    /// `X-Alert-Id`, as written.
    pub alert_id: Option<String>,
    /// `To`, unfolded, as written (encoded words left as they are).
    pub to: Option<String>,
    /// `Traceparent`, unfolded, as [`trace_header`] shows it.
    pub trace_parent: Option<String>,
    /// Offset of the first byte after the blank line that ends the header section (the
    /// end of the data when there is no blank line).
    pub body_offset: usize,
}

/// Reads the header section of `data` (lines up to the first empty one; folded lines
/// joined). The first occurrence of each field wins.
pub(crate) fn read_headers(data: &[u8]) -> Headers {
    let mut headers = Headers {
        body_offset: data.len(),
        ..Headers::default()
    };
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut offset = 0;
    while offset < data.len() {
        let end = data[offset..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(data.len(), |i| offset + i + 1);
        let line = trim_line_end(&data[offset..end]);
        offset = end;
        if line.is_empty() {
            headers.body_offset = end;
            break;
        }
        let text = String::from_utf8_lossy(line);
        if line[0] == b' ' || line[0] == b'\t' {
            // A folded line continues the previous field.
            if let Some((_, value)) = fields.last_mut() {
                value.push_str(&text);
            }
        } else if let Some((name, value)) = text.split_once(':') {
            fields.push((name.trim().to_ascii_lowercase(), value.to_owned()));
        }
    }
    let field = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.trim().to_owned())
    };
    headers.message_id = field("message-id").map(|id| bare_message_id(&id).to_owned());
    headers.subject = field("subject").map(|s| decode_encoded_words(&s));
    headers.alert_id = field("x-alert-id");
    headers.to = field("to");
    // Bytes that were not UTF-8 arrive here as U+FFFD, which is not ASCII either, so the
    // check on the text catches them as it would on the bytes.
    headers.trace_parent = field("traceparent").map(|v| trace_header(v.as_bytes()));
    headers
}

/// A Message-ID without surrounding blanks and angle brackets, so that `<a@b>` and `a@b`
/// name the same message.
pub(crate) fn bare_message_id(id: &str) -> &str {
    let id = id.trim();
    let id = id.strip_prefix('<').unwrap_or(id);
    id.strip_suffix('>').unwrap_or(id)
}

fn trim_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Decodes RFC 2047 encoded words (`=?utf-8?B?...?=`, `=?iso-8859-1?Q?...?=`) in a header
/// value. Blanks between two encoded words are dropped, as the RFC says; consecutive words
/// in one charset are decoded together, since a character may be split across them. A word
/// in a charset other than UTF-8, US-ASCII or ISO-8859-1, or badly formed, is kept as
/// written.
pub(crate) fn decode_encoded_words(value: &str) -> String {
    let mut out = String::new();
    // Bytes of the current run of encoded words, with their charset.
    let mut pending: Option<(String, Vec<u8>)> = None;
    let mut rest = value;
    loop {
        let Some(start) = rest.find("=?") else {
            flush(&mut pending, &mut out);
            out.push_str(rest);
            return out;
        };
        let (before, candidate) = rest.split_at(start);
        match encoded_word(candidate) {
            Some((charset, bytes, used)) => {
                let joins_run = pending.is_some() && before.trim().is_empty();
                let same_charset = pending.as_ref().is_some_and(|(c, _)| *c == charset);
                if !joins_run || !same_charset {
                    flush(&mut pending, &mut out);
                    if !joins_run {
                        out.push_str(before);
                    }
                }
                match &mut pending {
                    Some((_, run)) => run.extend_from_slice(&bytes),
                    None => pending = Some((charset, bytes)),
                }
                rest = &candidate[used..];
            }
            None => {
                flush(&mut pending, &mut out);
                out.push_str(before);
                out.push_str("=?");
                rest = &candidate[2..];
            }
        }
    }
}

fn flush(pending: &mut Option<(String, Vec<u8>)>, out: &mut String) {
    if let Some((charset, bytes)) = pending.take() {
        if charset == "iso-8859-1" || charset == "latin1" {
            out.extend(bytes.iter().map(|&b| char::from(b)));
        } else {
            out.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
}

/// The charset (lower case), decoded bytes and length of the encoded word at the start of
/// `text`, or `None` when there is none there.
fn encoded_word(text: &str) -> Option<(String, Vec<u8>, usize)> {
    let inner = text.strip_prefix("=?")?;
    let (charset, inner) = inner.split_once('?')?;
    let (encoding, inner) = inner.split_once('?')?;
    let end = inner.find("?=")?;
    let encoded = &inner[..end];
    if encoded.contains(char::is_whitespace) {
        return None;
    }
    // `charset*language` (RFC 2231): the language does not matter here.
    let charset = charset.split('*').next()?.to_ascii_lowercase();
    if !matches!(
        charset.as_str(),
        "utf-8" | "utf8" | "us-ascii" | "iso-8859-1" | "latin1"
    ) {
        return None;
    }
    let bytes = match encoding {
        "B" | "b" => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()?,
        "Q" | "q" => decode_q(encoded)?,
        _ => return None,
    };
    let used = 2 + charset.len() + 1 + encoding.len() + 1 + end + 2;
    Some((charset, bytes, used))
}

/// The "Q" encoding: `_` is a space, `=XX` a byte in hex.
fn decode_q(encoded: &str) -> Option<Vec<u8>> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'_' => out.push(b' '),
            b'=' => {
                let hex = encoded.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_recorded_fields_and_the_body_offset() {
        let data = b"From: a@x\r\nMessage-ID:\r\n <id-1@alerts.example>\r\nSubject: Renewal\r\n\tdue\r\nTo: a@x.example,\r\n b@x.example\r\nx-alert-id: 0190-abc\r\n\r\nBody line\r\n";
        let headers = read_headers(data);
        assert_eq!(headers.to.as_deref(), Some("a@x.example, b@x.example"));
        assert_eq!(headers.message_id.as_deref(), Some("id-1@alerts.example"));
        assert_eq!(headers.subject.as_deref(), Some("Renewal\tdue"));
        assert_eq!(headers.alert_id.as_deref(), Some("0190-abc"));
        assert_eq!(&data[headers.body_offset..], b"Body line\r\n");

        let bare = read_headers(b"Subject: only headers\n");
        assert_eq!(bare.message_id, None);
        assert_eq!(bare.body_offset, 22);
    }

    #[test]
    fn reads_the_traceparent_field() {
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let data = format!("Subject: s\r\ntraceparent: {parent} \r\n\r\nBody\r\n");
        assert_eq!(
            read_headers(data.as_bytes()).trace_parent.as_deref(),
            Some(parent)
        );
        assert_eq!(read_headers(b"Subject: s\r\n\r\n").trace_parent, None);
        // A folded value keeps the blank that starts its second line: a tab is not printable.
        let folded =
            b"Traceparent: 00-0af7651916cd43dd8448eb211c80319c-\r\n\tb7ad6b7169203331-01\r\n\r\n";
        assert_eq!(
            read_headers(folded).trace_parent.as_deref(),
            Some(crate::records::INVALID_TRACE_HEADER)
        );
        let not_utf8 = b"Traceparent: 00-\xff\r\n\r\n";
        assert_eq!(
            read_headers(not_utf8).trace_parent.as_deref(),
            Some(crate::records::INVALID_TRACE_HEADER)
        );
    }

    #[test]
    fn message_ids_compare_without_brackets() {
        assert_eq!(bare_message_id(" <a@b> "), "a@b");
        assert_eq!(bare_message_id("a@b"), "a@b");
    }

    #[test]
    fn decodes_encoded_words() {
        assert_eq!(
            decode_encoded_words("=?utf-8?b?UmVub3ZhY2nDs24=?= de contrato"),
            "Renovación de contrato"
        );
        // Blanks between encoded words vanish; a character split across two words survives.
        assert_eq!(
            decode_encoded_words("=?UTF-8?B?UmVub3ZhY2k=?= =?UTF-8?B?w7Nu?="),
            "Renovación"
        );
        assert_eq!(
            decode_encoded_words("Aviso: =?ISO-8859-1?Q?Renovaci=F3n_pr=F3xima?= hoy"),
            "Aviso: Renovación próxima hoy"
        );
        assert_eq!(decode_encoded_words("plain =? text"), "plain =? text");
        assert_eq!(
            decode_encoded_words("=?koi8-r?B?8NLJ?= stays"),
            "=?koi8-r?B?8NLJ?= stays"
        );
        assert_eq!(
            decode_encoded_words("=?utf-8?Q?bad=Z?="),
            "=?utf-8?Q?bad=Z?="
        );
    }
}

/// `data` without the trace context fields at its very top (`Traceparent:` and
/// `Tracestate:`, one line each): a sender that carries trace context in mail puts them
/// there with a new span id on every attempt, so they are left out of the fingerprint that
/// tells a resend of the same stored message from a changed one.
pub(crate) fn without_leading_trace_fields(data: &[u8]) -> &[u8] {
    let mut rest = data;
    while let Some(end) = rest.windows(2).position(|pair| pair == b"\r\n") {
        let line = rest[..end].to_ascii_lowercase();
        if !(line.starts_with(b"traceparent:") || line.starts_with(b"tracestate:")) {
            break;
        }
        rest = &rest[end + 2..];
    }
    rest
}

#[cfg(test)]
mod trace_field_tests {
    use super::without_leading_trace_fields;

    #[test]
    fn only_the_leading_trace_fields_are_left_out() {
        let message = b"Traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\
TRACESTATE: a=1\r\nSubject: x\r\nTraceparent: kept\r\n\r\nbody\r\n";
        assert_eq!(
            without_leading_trace_fields(message),
            b"Subject: x\r\nTraceparent: kept\r\n\r\nbody\r\n"
        );
        assert_eq!(
            without_leading_trace_fields(b"Subject: x\r\n"),
            b"Subject: x\r\n"
        );
        assert_eq!(
            without_leading_trace_fields(b"Traceparent: x"),
            b"Traceparent: x"
        );
    }
}
