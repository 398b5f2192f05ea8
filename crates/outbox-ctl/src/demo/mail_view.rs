//! A stored email read back for people: the header fields that matter and the plain-text
//! part, decoded. Only what the dispatcher writes is read (a `multipart/alternative`
//! message from lettre, parts in 7bit, 8bit, quoted-printable or base64); anything else
//! shows as "no text part" rather than a guess.

use base64::Engine;

/// The header fields a reader checks first, in the order shown.
const SHOWN_HEADERS: [&str; 8] = [
    "From",
    "To",
    "Subject",
    "Message-ID",
    "In-Reply-To",
    "References",
    "X-Alert-Id",
    "X-Alert-Revision",
];

/// A message's header section as `(name, value)` fields, folded lines joined, and the
/// body after the blank line.
fn split(message: &str) -> (Vec<(String, String)>, &str) {
    let (head, body) = message
        .split_once("\r\n\r\n")
        .or_else(|| message.split_once("\n\n"))
        .unwrap_or((message, ""));
    let mut fields: Vec<(String, String)> = Vec::new();
    for line in head.lines() {
        if line.starts_with([' ', '\t']) {
            if let Some((_, value)) = fields.last_mut() {
                value.push(' ');
                value.push_str(line.trim());
            }
        } else if let Some((name, value)) = line.split_once(':') {
            fields.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    (fields, body)
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// The header fields of [`SHOWN_HEADERS`] that `message` has, as written (a `Subject` in
/// RFC 2047 encoded words stays encoded: the caller shows the decoded one it has).
pub(crate) fn headers(message: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(message);
    let (fields, _) = split(&text);
    SHOWN_HEADERS
        .iter()
        .filter_map(|name| field(&fields, name).map(|v| ((*name).to_owned(), v.to_owned())))
        .collect()
}

/// The decoded `text/plain` part of `message` (the message itself when it is not
/// multipart), or `None` when there is none that can be read.
pub(crate) fn text_part(message: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(message);
    let (fields, body) = split(&text);
    let content_type = field(&fields, "Content-Type").unwrap_or("text/plain");
    if !content_type.to_ascii_lowercase().starts_with("multipart/") {
        return content_type
            .to_ascii_lowercase()
            .starts_with("text/plain")
            .then(|| decode(field(&fields, "Content-Transfer-Encoding"), body))
            .flatten();
    }
    let boundary = boundary(content_type)?;
    let delimiter = format!("--{boundary}");
    body.split(delimiter.as_str())
        .skip(1)
        .take_while(|part| !part.starts_with("--"))
        .find_map(|part| text_part(part.trim_start_matches(['\r', '\n']).as_bytes()))
}

/// The `boundary` parameter of a multipart content type.
fn boundary(content_type: &str) -> Option<&str> {
    let (_, rest) = content_type.split_once("boundary=")?;
    let rest = rest.trim_start();
    let value = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => rest.split([';', ' ']).next()?,
    };
    (!value.is_empty()).then_some(value)
}

/// A part's body decoded by its transfer encoding.
fn decode(encoding: Option<&str>, body: &str) -> Option<String> {
    let body = body.trim_end_matches(['\r', '\n']);
    let bytes = match encoding.map(str::to_ascii_lowercase).as_deref() {
        None | Some("7bit" | "8bit" | "binary") => body.as_bytes().to_vec(),
        Some("quoted-printable") => {
            quoted_printable::decode(body, quoted_printable::ParseMode::Robust).ok()?
        }
        Some("base64") => {
            let joined: String = body.split_whitespace().collect();
            base64::engine::general_purpose::STANDARD
                .decode(joined)
                .ok()?
        }
        Some(_) => return None,
    };
    Some(String::from_utf8_lossy(&bytes).replace("\r\n", "\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MESSAGE: &str = "From: alerts@demo.example\r\nTo: cfo@demo.example\r\n\
Subject: =?utf-8?b?UmVub3ZhY2nDs24=?=\r\nMessage-ID: <a1@demo.example>\r\n\
Content-Type: multipart/alternative;\r\n boundary=\"XyZ\"\r\nX-Alert-Id: a1\r\n\r\n\
--XyZ\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n\
quedan 30 d=C3=ADas, una l=C3=ADnea muy larga que sigue=\r\n aqu=C3=AD\r\n\
--XyZ\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<p>html</p>\r\n--XyZ--\r\n";

    #[test]
    fn the_text_part_is_found_and_decoded() {
        assert_eq!(
            text_part(MESSAGE.as_bytes()).as_deref(),
            Some("quedan 30 días, una línea muy larga que sigue aquí")
        );
    }

    #[test]
    fn the_headers_that_matter_are_listed_in_order_with_folds_joined() {
        let shown = headers(MESSAGE.as_bytes());
        let names: Vec<&str> = shown.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["From", "To", "Subject", "Message-ID", "X-Alert-Id"]);
        assert_eq!(shown[3].1, "<a1@demo.example>");
    }

    #[test]
    fn base64_and_plain_single_parts_are_read_and_unknown_encodings_are_not() {
        let base64 =
            "Content-Type: text/plain\r\nContent-Transfer-Encoding: base64\r\n\r\naG9s\r\nYQ==\r\n";
        assert_eq!(text_part(base64.as_bytes()).as_deref(), Some("hola"));
        assert_eq!(
            text_part(b"Subject: x\r\n\r\nplain\r\n").as_deref(),
            Some("plain")
        );
        let odd =
            "Content-Type: text/plain\r\nContent-Transfer-Encoding: x-uuencode\r\n\r\nbegin\r\n";
        assert_eq!(text_part(odd.as_bytes()), None);
        assert_eq!(text_part(b"Content-Type: text/html\r\n\r\n<p>x</p>"), None);
    }
}
