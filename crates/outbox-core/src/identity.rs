//! An alert's identity is `(tenant, subject, occurrence, destination, revision)`: the
//! decision "notify this destination about this occurrence of this subject". Any number of
//! approvals of one identity make one alert. This module checks the caller-supplied parts.

use crate::json_limits::{check_json_limits, JsonLimitError, MAX_PAYLOAD_DEPTH};
use crate::recipients::{payload_recipients, RecipientError};
use crate::untrusted::is_bidi_control;

/// Longest subject, occurrence or destination name accepted, in bytes of UTF-8.
pub const MAX_IDENTITY_FIELD_BYTES: usize = 512;
/// Largest payload accepted, in bytes of its JSON text.
pub const MAX_PAYLOAD_BYTES: usize = 256 * 1024;
/// Longest reason for a revision, in bytes.
pub const MAX_REASON_BYTES: usize = 2000;

/// Why an identity field (or a revision reason) is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// The field is absent or only whitespace.
    #[error("field `{field}` is required and must not be empty")]
    Empty {
        /// The field's name in the request.
        field: &'static str,
    },
    /// The field exceeds its byte limit.
    #[error("field `{field}` is {len} bytes long; the limit is {max} bytes")]
    TooLong {
        /// The field's name in the request.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// The field contains a NUL or another control character, which PostgreSQL text
    /// cannot hold or which would make logs and tables unreadable.
    #[error("field `{field}` contains a control character")]
    ControlCharacter {
        /// The field's name in the request.
        field: &'static str,
    },
    /// The field contains a bidirectional control (U+202E and friends), which makes
    /// text display in another order than it is stored: two identities that look the
    /// same would differ, and a table would show something else than what is stored.
    #[error(
        "field `{field}` contains a bidirectional control character (U+{code:04X}), \
         which would make it display differently from what it is"
    )]
    BidiControl {
        /// The field's name in the request.
        field: &'static str,
        /// The character's code point.
        code: u32,
    },
}

/// Why a payload is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// Over [`MAX_PAYLOAD_BYTES`].
    #[error("the payload is {0} bytes; the limit is {MAX_PAYLOAD_BYTES} bytes")]
    TooLarge(usize),
    /// Not a JSON object.
    #[error("the payload must be a JSON object")]
    NotAnObject,
    /// `{}`.
    #[error("field `payload` is required and must not be empty")]
    Empty,
    /// Nested too deeply, or a number PostgreSQL cannot store.
    #[error("field `payload`: {0}")]
    BeyondLimits(#[from] JsonLimitError),
    /// `recipients` names an address the rules of [`crate::recipients`] refuse, or too
    /// many.
    #[error("field `payload`: {0}")]
    Recipients(#[from] RecipientError),
}

/// Checks a payload's JSON text: an object with at least one member, at most
/// [`MAX_PAYLOAD_BYTES`], nested at most [`MAX_PAYLOAD_DEPTH`] levels, with numbers that
/// PostgreSQL can store (see [`crate::json_limits`]), whose `recipients`, if any, are mail
/// addresses by the rules of [`crate::recipients`]. Members are only counted, not
/// converted, so numbers keep their exact spelling and precision. Every path that stores
/// a payload (the API, revisions, `outboxctl revise`, the monitors) passes here, or holds
/// a [`CheckedPayload`] that did.
pub fn check_payload(text: &str) -> Result<(), PayloadError> {
    if text.len() > MAX_PAYLOAD_BYTES {
        return Err(PayloadError::TooLarge(text.len()));
    }
    // Before parsing: the limits scan cannot be made to recurse, the parser could.
    check_json_limits(text.as_bytes(), MAX_PAYLOAD_DEPTH)?;
    // Validates the syntax without building anything.
    serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|_| PayloadError::NotAnObject)?;
    check_object_shape(text)?;
    payload_recipients(text)?;
    Ok(())
}

/// A payload's JSON text that passed every check of [`check_payload`]. Only this module
/// makes one, so a function that takes one (the store's approval) need not scan the text
/// again: a payload is scanned once per approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckedPayload<'a>(&'a str);

impl<'a> CheckedPayload<'a> {
    /// Checks `text` with [`check_payload`].
    pub fn check(text: &'a str) -> Result<Self, PayloadError> {
        check_payload(text)?;
        Ok(CheckedPayload(text))
    }

    /// For a payload that is a member of a JSON document which has already been scanned
    /// by [`check_json_limits`] with one level more than [`MAX_PAYLOAD_DEPTH`] (the member
    /// sits one level down) and then parsed: the API's request body. `text` is the member's
    /// text exactly as the parser delimited it, so it is valid JSON within the limits, and
    /// only its size, shape and recipients remain to be checked.
    pub fn within_scanned_document(text: &'a str) -> Result<Self, PayloadError> {
        if text.len() > MAX_PAYLOAD_BYTES {
            return Err(PayloadError::TooLarge(text.len()));
        }
        check_object_shape(text)?;
        payload_recipients(text)?;
        Ok(CheckedPayload(text))
    }

    /// The JSON text.
    pub fn as_str(&self) -> &'a str {
        self.0
    }

    /// An owned copy, for a write that outlives the request it came with (a group of
    /// approvals written together).
    pub fn to_buf(&self) -> CheckedPayloadBuf {
        CheckedPayloadBuf(self.0.to_owned())
    }
}

/// An owned [`CheckedPayload`]: made only from one, so it holds a checked payload too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedPayloadBuf(String);

impl CheckedPayloadBuf {
    /// The payload, borrowed.
    pub fn as_checked(&self) -> CheckedPayload<'_> {
        CheckedPayload(&self.0)
    }
}

/// Whether valid JSON text is an object with at least one member: it opens with `{`, and
/// the next character that is not whitespace does not close it.
fn check_object_shape(text: &str) -> Result<(), PayloadError> {
    let is_json_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let mut bytes = text.bytes().skip_while(is_json_space);
    if bytes.next() != Some(b'{') {
        return Err(PayloadError::NotAnObject);
    }
    if bytes.find(|b| !is_json_space(b)) == Some(b'}') {
        return Err(PayloadError::Empty);
    }
    Ok(())
}

/// Checks one identity field: present, not blank, within [`MAX_IDENTITY_FIELD_BYTES`],
/// free of control characters and of bidirectional controls. Identity fields are compared byte for byte, so no
/// trimming or case folding happens here: what the caller sent is the identity.
pub fn check_identity_field(field: &'static str, value: &str) -> Result<(), IdentityError> {
    check_text(field, value, MAX_IDENTITY_FIELD_BYTES)
}

/// Longest ordering key, in bytes (`alerts.ordering_key`'s CHECK says the same).
pub const MAX_ORDERING_KEY_BYTES: usize = 200;

/// Checks an approval's ordering key by the identity fields' rules (present, not blank,
/// no control or bidirectional characters), within [`MAX_ORDERING_KEY_BYTES`]. Keys are
/// compared byte for byte, like identities.
pub fn check_ordering_key(value: &str) -> Result<(), IdentityError> {
    check_text("ordering_key", value, MAX_ORDERING_KEY_BYTES)
}

/// Checks a revision's reason: present, not blank, within [`MAX_REASON_BYTES`].
pub fn check_reason(value: &str) -> Result<(), IdentityError> {
    check_text("reason", value, MAX_REASON_BYTES)
}

fn check_text(field: &'static str, value: &str, max: usize) -> Result<(), IdentityError> {
    if value.trim().is_empty() {
        return Err(IdentityError::Empty { field });
    }
    if value.len() > max {
        return Err(IdentityError::TooLong {
            field,
            len: value.len(),
            max,
        });
    }
    // Newlines are fine in a reason, not in an identity.
    let allows_newlines = field == "reason";
    if value
        .chars()
        .any(|c| c.is_control() && !(allows_newlines && (c == '\n' || c == '\t')))
    {
        return Err(IdentityError::ControlCharacter { field });
    }
    // A reason is prose (right-to-left scripts may need the marks); it is shown escaped.
    if !allows_newlines {
        if let Some(c) = value.chars().find(|c| is_bidi_control(*c)) {
            return Err(IdentityError::BidiControl {
                field,
                code: c as u32,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_fields() {
        assert_eq!(check_identity_field("subject", "contract:ACME-7"), Ok(()));
        assert_eq!(check_identity_field("occurrence", "2027-01-31/30d"), Ok(()));
    }

    #[test]
    fn ordering_keys_follow_the_identity_rules_within_200_bytes() {
        assert_eq!(check_ordering_key("contract:ACME-7"), Ok(()));
        assert_eq!(check_ordering_key(&"k".repeat(200)), Ok(()));
        assert_eq!(
            check_ordering_key(&"k".repeat(201)),
            Err(IdentityError::TooLong {
                field: "ordering_key",
                len: 201,
                max: 200
            })
        );
        assert_eq!(
            check_ordering_key(" "),
            Err(IdentityError::Empty {
                field: "ordering_key"
            })
        );
        assert!(check_ordering_key("a\u{202e}b").is_err());
    }

    #[test]
    fn rejects_blank_fields() {
        for value in ["", "   ", "\t"] {
            assert_eq!(
                check_identity_field("subject", value),
                Err(IdentityError::Empty { field: "subject" })
            );
        }
    }

    #[test]
    fn limit_is_in_bytes_not_characters() {
        let ok = "é".repeat(256); // 512 bytes
        assert_eq!(check_identity_field("subject", &ok), Ok(()));
        let too_long = "é".repeat(257);
        assert_eq!(
            check_identity_field("subject", &too_long),
            Err(IdentityError::TooLong {
                field: "subject",
                len: 514,
                max: 512
            })
        );
    }

    #[test]
    fn rejects_control_characters_but_a_reason_may_have_lines() {
        assert_eq!(
            check_identity_field("occurrence", "a\u{0}b"),
            Err(IdentityError::ControlCharacter {
                field: "occurrence"
            })
        );
        assert!(check_identity_field("subject", "a\nb").is_err());
        assert_eq!(check_reason("wrong amount\nwas 100, is 120"), Ok(()));
    }

    #[test]
    fn rejects_bidi_controls_in_identities() {
        assert_eq!(
            check_identity_field("subject", "invoice-\u{202e}fdp.exe"),
            Err(IdentityError::BidiControl {
                field: "subject",
                code: 0x202e
            })
        );
        for c in ['\u{2066}', '\u{200f}', '\u{061c}', '\u{202a}'] {
            assert!(check_identity_field("occurrence", &format!("a{c}b")).is_err());
        }
        // C1 controls and DEL are control characters too.
        assert!(check_identity_field("subject", "a\u{9b}b").is_err());
        assert!(check_identity_field("subject", "a\u{7f}b").is_err());
        // Right-to-left text itself is fine.
        assert_eq!(check_identity_field("subject", "عقد-7"), Ok(()));
    }

    #[test]
    fn payloads_beyond_postgresql_limits_are_refused() {
        let deep = format!("{{\"a\": {}1{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(
            check_payload(&deep),
            Err(PayloadError::BeyondLimits(JsonLimitError::TooDeep {
                max: 64
            }))
        ));
        for number in ["1e999999".to_owned(), "9".repeat(200_000)] {
            let text = format!("{{\"n\": {number}}}");
            assert!(
                matches!(
                    check_payload(&text),
                    Err(PayloadError::BeyondLimits(
                        JsonLimitError::NumberOutOfRange { .. }
                    ))
                ),
                "{}",
                &text[..20]
            );
        }
        let at_limit = format!("{{\"a\": {}1{}}}", "[".repeat(63), "]".repeat(63));
        assert_eq!(check_payload(&at_limit), Ok(()));
    }

    #[test]
    fn a_payload_is_a_json_object_with_members() {
        for fine in [r#"{"a": 1}"#, " {\n\"a\": {}} ", r#"{"a": 1, "a": 2}"#] {
            assert_eq!(check_payload(fine), Ok(()), "{fine}");
            assert_eq!(CheckedPayload::check(fine).map(|p| p.as_str()), Ok(fine));
        }
        for empty in ["{}", " { \t\r\n } "] {
            assert_eq!(check_payload(empty), Err(PayloadError::Empty), "{empty}");
        }
        for not_an_object in [
            "[1]",
            "1",
            "\"{}\"",
            "null",
            "{",
            r#"{"a": 1"#,
            r#"{"a" 1}"#,
            "",
        ] {
            assert_eq!(
                check_payload(not_an_object),
                Err(PayloadError::NotAnObject),
                "{not_an_object}"
            );
        }
    }

    #[test]
    fn a_member_of_a_scanned_document_is_checked_for_size_and_shape_only() {
        assert!(CheckedPayload::within_scanned_document(r#"{"a": 1}"#).is_ok());
        assert_eq!(
            CheckedPayload::within_scanned_document("{ }"),
            Err(PayloadError::Empty)
        );
        assert_eq!(
            CheckedPayload::within_scanned_document("[{}]"),
            Err(PayloadError::NotAnObject)
        );
        let large = format!(r#"{{"a": "{}"}}"#, "x".repeat(MAX_PAYLOAD_BYTES));
        assert_eq!(
            CheckedPayload::within_scanned_document(&large),
            Err(PayloadError::TooLarge(large.len()))
        );
    }
}
