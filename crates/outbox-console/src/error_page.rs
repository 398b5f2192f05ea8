//! Why a page could not be shown or an action not taken ([`PageError`]), as a plain error
//! page: it must render even when the templates do not, so it is written here by hand,
//! with the message shown as untrusted text.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use outbox_store::StoreError;

/// Unknown paths.
pub(crate) async fn not_found() -> Response {
    PageError::NotFound("no such page".into()).into_response()
}

/// A POST whose `Origin` is another site's.
pub(crate) fn refused_cross_origin() -> Response {
    PageError::Forbidden("a form from another site cannot act here".into()).into_response()
}

/// Why a page could not be shown or an action not taken.
#[derive(Debug)]
pub(crate) enum PageError {
    /// No such alert, destination or page (also: outside the account's tenants).
    NotFound(String),
    /// Not allowed: a viewer acting, a missing or wrong form token.
    Forbidden(String),
    /// The request is malformed (a filter, a missing note); nothing was changed.
    BadRequest(String),
    /// The store refused the action in the alert's state; nothing was changed.
    Refused(String),
    /// The database failed; logged.
    Internal(String),
}

impl From<StoreError> for PageError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Refused(why) => PageError::Refused(why),
            StoreError::UnknownAlert(_) => PageError::NotFound("no such alert".into()),
            other => PageError::Internal(other.to_string()),
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let (status, title, message) = match self {
            PageError::NotFound(m) => (StatusCode::NOT_FOUND, "Not found", m),
            PageError::Forbidden(m) => (StatusCode::FORBIDDEN, "Not allowed", m),
            PageError::BadRequest(m) => (StatusCode::BAD_REQUEST, "Cannot do that", m),
            PageError::Refused(m) => (StatusCode::CONFLICT, "Refused", m),
            PageError::Internal(m) => {
                tracing::error!(error = %m, "console page failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Something failed",
                    "the console could not read or write the database; see its log".to_owned(),
                )
            }
        };
        // The error page is plain on purpose: it must render even when templates do not.
        let body = format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\
             <link rel=\"stylesheet\" href=\"/console/static/console.css\"></head><body><main>\
             <h1>{title}</h1><p class=\"error\">{}</p><p><a href=\"/console\">Overview</a></p>\
             </main></body></html>",
            escape_html(&outbox_core::untrusted::visible(&message))
        );
        (status, Html(body)).into_response()
    }
}

fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_message_is_escaped() {
        let response = PageError::Refused("<script>alert(1)</script>".into()).into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(
            escape_html("<a href=\"x\">'"),
            "&lt;a href=&quot;x&quot;&gt;&#x27;"
        );
    }
}
