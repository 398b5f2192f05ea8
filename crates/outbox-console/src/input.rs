//! The console's query strings and forms, read through one gate: [`Query`] and [`Form`]
//! are axum's, except that a NUL character in any name or value is refused as bad input
//! (400) before a handler sees it. PostgreSQL's text cannot hold NUL; let through, it
//! would fail the handler's first query with a database error (500, and an ERROR line),
//! and on the sign-in form before the failure limit counts the attempt. A malformed query
//! or form is a 400 page too, in the console's own words rather than the framework's.

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error_page::PageError;

/// Largest form body read (the console's forms are a note and a filter at most).
const FORM_LIMIT: usize = 64 * 1024;

/// Whether URL-encoded `text` decodes to a NUL anywhere. `%00` is the only way to write
/// one (a raw NUL is not valid in a URL or a form body, and is refused the same).
fn holds_nul(text: &[u8]) -> bool {
    text.contains(&0) || text.windows(3).any(|w| w == b"%00")
}

fn refuse_nul(text: &[u8], what: &str) -> Result<(), PageError> {
    if holds_nul(text) {
        return Err(PageError::BadRequest(format!(
            "the {what} holds a NUL character (%00), which no field accepts"
        )));
    }
    Ok(())
}

/// The query string as `T`; a NUL or a malformed query is a 400.
#[derive(Debug)]
pub(crate) struct Query<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, PageError> {
        refuse_nul(parts.uri.query().unwrap_or("").as_bytes(), "query string")?;
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| Query(value))
            .map_err(|err| PageError::BadRequest(err.body_text()))
    }
}

/// A URL-encoded form as `T`; a NUL, a malformed form or one over 64 KiB is a 400.
#[derive(Debug)]
pub(crate) struct Form<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Form<T> {
    type Rejection = PageError;

    async fn from_request(request: Request, state: &S) -> Result<Self, PageError> {
        let (parts, body) = request.into_parts();
        let bytes = axum::body::to_bytes(body, FORM_LIMIT).await.map_err(|_| {
            PageError::BadRequest(format!("the form is larger than {FORM_LIMIT} bytes"))
        })?;
        refuse_nul(&bytes, "form")?;
        let request = Request::from_parts(parts, Body::from(bytes));
        axum::Form::<T>::from_request(request, state)
            .await
            .map(|axum::Form(value)| Form(value))
            .map_err(|err| PageError::BadRequest(err.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_encoded_or_raw_nul_is_a_nul() {
        assert!(holds_nul(b"name=a%00b"));
        assert!(holds_nul(b"%00"));
        assert!(holds_nul(b"a=\0"));
        assert!(
            !holds_nul(b"name=a%2500b"),
            "an encoded percent sign, then 00"
        );
        assert!(!holds_nul(b"name=a%20b&x=100"));
        assert!(!holds_nul(b""));
    }
}
