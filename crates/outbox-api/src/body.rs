//! Request bodies: JSON only, within a size limit, every field checked, with a precise
//! problem for each way a body can be wrong. Nothing is written before a body passes.

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use outbox_core::identity::{check_identity_field, check_reason};
use outbox_core::{IdentityError, MAX_PAYLOAD_BYTES};
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::Problem;

/// Largest request body: the largest payload plus room for the identity fields around it.
const MAX_BODY_BYTES: usize = MAX_PAYLOAD_BYTES + 8 * 1024;

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
    serde_json::from_slice(&bytes).map_err(|err| {
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

fn too_large(detail: String) -> Problem {
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

/// A revision's reason: present, not blank, within limits.
pub(crate) fn reason(value: &Option<String>) -> Result<&str, Problem> {
    let value = value.as_deref().unwrap_or("");
    check_reason(value).map_err(invalid_field)?;
    Ok(value)
}

/// The payload: a non-empty JSON object of at most [`MAX_PAYLOAD_BYTES`], kept as the
/// exact text the caller sent (numbers keep their precision; PostgreSQL stores it).
pub(crate) fn payload(value: &Option<Box<RawValue>>) -> Result<&str, Problem> {
    let text = value
        .as_deref()
        .map(RawValue::get)
        .ok_or_else(|| invalid_field(IdentityError::Empty { field: "payload" }))?;
    outbox_core::identity::check_payload(text).map_err(|err| match err {
        outbox_core::PayloadError::TooLarge(_) => too_large(err.to_string()),
        outbox_core::PayloadError::NotAnObject => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-field",
            "Invalid field",
            "field `payload` must be a JSON object",
        ),
        outbox_core::PayloadError::Empty => {
            invalid_field(IdentityError::Empty { field: "payload" })
        }
    })?;
    Ok(text)
}

fn invalid_field(err: IdentityError) -> Problem {
    let kind = match err {
        IdentityError::Empty { .. } => "missing-field",
        IdentityError::TooLong { .. } => "field-too-long",
        IdentityError::ControlCharacter { .. } => "invalid-field",
    };
    Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        kind,
        "Invalid field",
        err.to_string(),
    )
}
