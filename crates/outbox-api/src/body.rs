//! Request bodies: JSON only, within a size limit, nesting and numbers within what
//! PostgreSQL stores, every field checked, with a precise problem for each way a body can
//! be wrong. Nothing is written before a body passes.

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use outbox_core::identity::{check_identity_field, check_reason};
use outbox_core::json_limits::check_json_limits;
use outbox_core::{
    CheckedPayload, IdentityError, JsonLimitError, PayloadError, MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_DEPTH,
};
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::Problem;

/// Largest request body: the largest payload plus room for the identity fields around it.
pub(crate) const MAX_BODY_BYTES: usize = MAX_PAYLOAD_BYTES + 8 * 1024;

/// Reads a JSON body of type `T`: checks the content type, the size, the syntax and the
/// shape, in that order.
pub(crate) async fn read_json<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
) -> Result<T, Problem> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !(essence.eq_ignore_ascii_case("application/json") || essence.ends_with("+json")) {
        return Err(Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "JSON required",
            "send the body as `Content-Type: application/json`",
        ));
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| too_large(format!("the request body exceeds {MAX_BODY_BYTES} bytes")))?;
    parse_json(&bytes)
}

/// Parses a body that has arrived: nesting and numbers first (so that neither the parser's
/// recursion limit nor PostgreSQL's ever decides the answer), then syntax and shape.
pub(crate) fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    // The body is one level around the payload.
    check_json_limits(bytes, MAX_PAYLOAD_DEPTH + 1).map_err(|err| {
        let err = match err {
            // Say the payload's limit, not the body's.
            JsonLimitError::TooDeep { .. } => JsonLimitError::TooDeep {
                max: MAX_PAYLOAD_DEPTH,
            },
            other => other,
        };
        invalid_payload(PayloadError::BeyondLimits(err))
    })?;
    serde_json::from_slice(bytes).map_err(|err| {
        use serde_json::error::Category;
        match err.classify() {
            Category::Syntax | Category::Eof | Category::Io => Problem::new(
                StatusCode::BAD_REQUEST,
                "malformed-json",
                "Malformed JSON",
                format!("the body is not valid JSON: {err}"),
            ),
            Category::Data => Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-field",
                "Invalid field",
                format!("the body does not have the expected shape: {err}"),
            ),
        }
    })
}

pub(crate) fn too_large(detail: String) -> Problem {
    Problem::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload-too-large",
        "Payload too large",
        detail,
    )
}

/// A required text field: present, not blank, within limits.
pub(crate) fn identity_field<'a>(
    name: &'static str,
    value: &'a Option<String>,
) -> Result<&'a str, Problem> {
    let value = value.as_deref().unwrap_or("");
    check_identity_field(name, value).map_err(invalid_field)?;
    Ok(value)
}

/// An approval's optional ordering key: absent, or a string within the identity fields'
/// rules and 200 bytes (an empty or oversized key, or `null`, is refused, never trimmed or
/// cut).
pub(crate) fn ordering_key(value: &Option<Option<String>>) -> Result<Option<&str>, Problem> {
    let Some(value) = value else {
        return Ok(None);
    };
    let Some(value) = value.as_deref() else {
        return Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-field",
            "Invalid field",
            "field `ordering_key` must be a string when it is given (leave it out for the subject)",
        ));
    };
    outbox_core::check_ordering_key(value).map_err(invalid_field)?;
    Ok(Some(value))
}

/// A revision's reason: present, not blank, within limits.
pub(crate) fn reason(value: &Option<String>) -> Result<&str, Problem> {
    let value = value.as_deref().unwrap_or("");
    check_reason(value).map_err(invalid_field)?;
    Ok(value)
}

/// The payload: a non-empty JSON object of at most [`MAX_PAYLOAD_BYTES`], kept as the
/// exact text the caller sent (numbers keep their precision; PostgreSQL stores it). Its
/// nesting and numbers were checked with the whole body by [`parse_json`], which every
/// body passes before its fields are read, so they are not scanned again.
pub(crate) fn payload(value: &Option<Box<RawValue>>) -> Result<CheckedPayload<'_>, Problem> {
    let text = value
        .as_deref()
        .map(RawValue::get)
        .ok_or_else(|| invalid_field(IdentityError::Empty { field: "payload" }))?;
    CheckedPayload::within_scanned_document(text).map_err(|err| match err {
        PayloadError::TooLarge(_) => too_large(err.to_string()),
        PayloadError::NotAnObject => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-field",
            "Invalid field",
            "field `payload` must be a JSON object",
        ),
        PayloadError::Empty => invalid_field(IdentityError::Empty { field: "payload" }),
        PayloadError::BeyondLimits(_) => invalid_payload(err),
        PayloadError::Recipients(_) => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-recipients",
            "Invalid recipients",
            err.to_string(),
        ),
    })
}

/// A payload PostgreSQL could not store: nested too deeply or a number out of range.
fn invalid_payload(err: PayloadError) -> Problem {
    Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-payload",
        "Payload cannot be stored",
        err.to_string(),
    )
}

fn invalid_field(err: IdentityError) -> Problem {
    let kind = match err {
        IdentityError::Empty { .. } => "missing-field",
        IdentityError::TooLong { .. } => "field-too-long",
        IdentityError::ControlCharacter { .. } | IdentityError::BidiControl { .. } => {
            "invalid-field"
        }
    };
    Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        kind,
        "Invalid field",
        err.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::untrusted::is_bidi_control;
    use proptest::prelude::*;

    /// The approval body's shape, as `POST /v1/alerts` reads it.
    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Approval {
        destination: Option<String>,
        subject: Option<String>,
        occurrence: Option<String>,
        payload: Option<Box<RawValue>>,
    }

    /// Runs a body through everything the API checks before the database sees it.
    fn check_approval(body: &[u8]) -> Result<(String, String, String, String), Problem> {
        let approval: Approval = parse_json(body)?;
        Ok((
            identity_field("destination", &approval.destination)?.to_owned(),
            identity_field("subject", &approval.subject)?.to_owned(),
            identity_field("occurrence", &approval.occurrence)?.to_owned(),
            payload(&approval.payload)?.as_str().to_owned(),
        ))
    }

    fn nested_arrays(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    fn approval_with_payload(payload: &str) -> Vec<u8> {
        format!(
            r#"{{"destination": "ops", "subject": "s", "occurrence": "o", "payload": {payload}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn hostile_payloads_get_invalid_payload_not_a_parse_error() {
        let cases = [
            format!(r#"{{"a": {}}}"#, nested_arrays(100_000)),
            // Deeper than ours, shallower than the parser's own limit of 128.
            format!(r#"{{"a": {}}}"#, nested_arrays(100)),
            r#"{"a": 1e999999}"#.to_owned(),
            format!(r#"{{"a": {}}}"#, "7".repeat(200_000)),
        ];
        for payload in &cases {
            let problem = check_approval(&approval_with_payload(payload)).unwrap_err();
            assert_eq!(
                problem.status(),
                StatusCode::UNPROCESSABLE_ENTITY,
                "{}",
                &payload[..20]
            );
            assert_eq!(problem.kind(), "invalid-payload");
        }
        let fine = format!(r#"{{"a": {}}}"#, nested_arrays(62));
        assert!(check_approval(&approval_with_payload(&fine)).is_ok());
    }

    #[test]
    fn hidden_recipients_get_invalid_recipients() {
        for payload in [
            r#"{"recipients": ["legit@acme.example", "\"a,b\"@attacker.example"]}"#,
            r#"{"recipients": ["x@[127.0.0.1]"]}"#,
        ] {
            let problem = check_approval(&approval_with_payload(payload)).unwrap_err();
            assert_eq!(problem.status(), StatusCode::UNPROCESSABLE_ENTITY);
            assert_eq!(problem.kind(), "invalid-recipients", "{payload}");
        }
    }

    #[test]
    fn bidi_overrides_in_identities_are_invalid_fields() {
        let body = br#"{"destination": "ops", "subject": "invoice-\u202efdp.exe", "occurrence": "o", "payload": {"a": 1}}"#;
        let problem = check_approval(body).unwrap_err();
        assert_eq!(problem.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(problem.kind(), "invalid-field");
    }

    fn body_char() -> impl Strategy<Value = char> {
        prop_oneof![
            2 => any::<char>(),
            5 => proptest::sample::select(vec![
                '{', '}', '[', ']', '"', ':', ',', '\\', '-', '.', 'e', '0', '1', '9', ' ',
                'u', 'a', '\u{1b}', '\u{202e}', '\u{0}',
            ]),
        ]
    }

    fn field_text() -> impl Strategy<Value = String> {
        proptest::collection::vec(body_char(), 0..12).prop_map(String::from_iter)
    }

    /// Bodies that are mostly approvals, with hostile members.
    fn approval_body() -> impl Strategy<Value = Vec<u8>> {
        let field = prop_oneof![
            field_text().prop_map(|t| serde_json::to_string(&t).unwrap_or_default()),
            field_text(),
            Just("null".to_owned()),
            Just("7".to_owned()),
        ];
        let payload = prop_oneof![
            field_text(),
            (0usize..140, field_text()).prop_map(|(levels, leaf)| format!(
                "{}{leaf}{}",
                "[".repeat(levels),
                "]".repeat(levels)
            )),
            (0usize..70, "[0-9]{1,3}e[0-9]{1,7}").prop_map(|(levels, number)| format!(
                "{}{{\"n\": {number}}}{}",
                "[".repeat(levels),
                "]".repeat(levels)
            )),
            field_text().prop_map(|t| format!(
                "{{\"t\": {}}}",
                serde_json::to_string(&t).unwrap_or_default()
            )),
        ];
        (field.clone(), field.clone(), field, payload, field_text()).prop_map(
            |(destination, subject, occurrence, payload, junk)| {
                format!(
                    r#"{{"destination": {destination}, "subject": {subject}, "occurrence": {occurrence}, "payload": {payload}{junk}}}"#
                )
                .into_bytes()
            },
        )
    }

    proptest! {
        #[test]
        fn approval_bodies_are_accepted_by_the_rules_or_refused_specifically(
            body in prop_oneof![approval_body(), proptest::collection::vec(any::<u8>(), 0..64)]
        ) {
            match check_approval(&body) {
                Ok((destination, subject, occurrence, payload)) => {
                    for field in [&destination, &subject, &occurrence] {
                        prop_assert!(!field.chars().any(|c| c.is_control() || is_bidi_control(c)));
                        prop_assert!(!field.trim().is_empty());
                    }
                    let value: serde_json::Value = serde_json::from_str(&payload)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert!(value.as_object().is_some_and(|m| !m.is_empty()));
                }
                Err(problem) => {
                    let expected = match problem.status().as_u16() {
                        400 => ["malformed-json"].as_slice(),
                        413 => ["payload-too-large"].as_slice(),
                        422 => ["missing-field", "field-too-long", "invalid-field", "invalid-payload", "invalid-recipients"].as_slice(),
                        other => return Err(TestCaseError::fail(format!("status {other}"))),
                    };
                    prop_assert!(expected.contains(&problem.kind()), "{} for {}", problem.kind(), problem.status());
                }
            }
        }
    }
}
