//! An alert's identity is `(tenant, subject, occurrence, destination, revision)`: the
//! decision "notify this destination about this occurrence of this subject". Any number of
//! approvals of one identity make one alert. This module checks the caller-supplied parts.

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
}

/// Checks a payload's JSON text: an object with at least one member, at most
/// [`MAX_PAYLOAD_BYTES`]. Members are only counted, not converted, so numbers of any size
/// or precision pass through untouched.
pub fn check_payload(text: &str) -> Result<(), PayloadError> {
    if text.len() > MAX_PAYLOAD_BYTES {
        return Err(PayloadError::TooLarge(text.len()));
    }
    let members: std::collections::HashMap<String, serde::de::IgnoredAny> =
        serde_json::from_str(text).map_err(|_| PayloadError::NotAnObject)?;
    if members.is_empty() {
        return Err(PayloadError::Empty);
    }
    Ok(())
}

/// Checks one identity field: present, not blank, within [`MAX_IDENTITY_FIELD_BYTES`],
/// free of control characters. Identity fields are compared byte for byte, so no
/// trimming or case folding happens here: what the caller sent is the identity.
pub fn check_identity_field(field: &'static str, value: &str) -> Result<(), IdentityError> {
    check_text(field, value, MAX_IDENTITY_FIELD_BYTES)
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
}
