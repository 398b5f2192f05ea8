//! RFC 9457 problem details: every error the API returns is one of these, with a `type`
//! naming the exact problem (documented in docs/approval-api.md) and a `detail` saying what to do.
//! [`ProblemDocument`] is its shape as the OpenAPI document states it, which every
//! operation's error answers name; the answers several operations give alike
//! ([`Unauthorized`], [`Unavailable`], and those of a JSON body) are written once, at the
//! end, and named in each operation's `responses(...)` among its own, in status order.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use outbox_store::StoreError;
use serde_json::{json, Map, Value};

/// An error answer.
#[derive(Debug)]
pub struct Problem {
    status: StatusCode,
    kind: &'static str,
    title: &'static str,
    detail: String,
    extra: Map<String, Value>,
}

impl Problem {
    /// A problem of type `/problems/{kind}`.
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        Problem {
            status,
            kind,
            title,
            detail: detail.into(),
            extra: Map::new(),
        }
    }

    /// Adds an extension member (e.g. the id of the conflicting alert).
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }

    /// The status code.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The problem's type, without the `/problems/` prefix.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// What went wrong and what to do, in a sentence.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The problem as its JSON document (`type`, `title`, `status`, `detail` and the
    /// extension members), as an HTTP answer carries it.
    pub fn document(&self) -> Value {
        let mut body = json!({
            "type": format!("/problems/{}", self.kind),
            "title": self.title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        if let Value::Object(members) = &mut body {
            members.extend(self.extra.clone());
        }
        body
    }

    pub(crate) fn unauthorized(detail: &str) -> Self {
        Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Missing or invalid bearer token",
            detail,
        )
    }

    pub(crate) fn alert_not_found(id: &str) -> Self {
        Problem::new(
            StatusCode::NOT_FOUND,
            "alert-not-found",
            "No such alert",
            format!("no alert `{id}` is visible to this token"),
        )
    }

    pub(crate) fn internal() -> Self {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            "the request could not be completed; nothing was written unless the response says so. It is safe to retry",
        )
    }
}

impl From<StoreError> for Problem {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::UnknownDestination(name) => Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "unknown-destination",
                "Unknown destination",
                format!("this tenant has no destination named `{name}`"),
            ),
            StoreError::UnstorablePayload(reason) => Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-payload",
                "Payload cannot be stored",
                format!("the payload was refused by the database: {reason}"),
            ),
            busy if busy.is_busy() => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "Database busy",
                "no database connection became free in time; nothing was written. Retry later",
            ),
            away if away.is_unavailable() => {
                tracing::debug!(error = %away, "database unavailable");
                Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "Database unavailable",
                    "the database could not be reached or is failing over; the request may \
                     or may not have been written. Retry later with the same identity: it \
                     never creates a second alert",
                )
            }
            other => {
                // The cause goes to the log, never to the caller.
                tracing::error!(error = %other, "request failed");
                Problem::internal()
            }
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.document())).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if matches!(
            self.status,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
        ) {
            // Failovers take seconds, and listings ahead of a refused one milliseconds: a
            // client that waits a second loses little.
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

pub(crate) async fn no_route(uri: axum::http::Uri) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "no-such-route",
        "No such route",
        format!("nothing is served at `{}`", uri.path()),
    )
}

pub(crate) async fn method_not_allowed(
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        "Method not allowed",
        format!("`{}` does not accept {method}", uri.path()),
    )
}

/// An RFC 9457 problem, the body of every error answer.
#[derive(Debug, utoipa::ToSchema)]
#[schema(
    example = json!({
        "type": "/problems/identity-conflict",
        "title": "Alert exists with a different payload",
        "status": 409,
        "detail": "alert 0193… already has this identity (tenant, subject, occurrence, \
                   destination) with a different payload; it was not changed. A correction \
                   must be a revision: POST /v1/alerts/0193…/revisions with the payload and a reason",
        "existing_alert_id": "0193b2f0-7c41-7b2a-9d41-5c7f0e1a2b3c",
        "latest_alert_id": "0193b2f0-7c41-7b2a-9d41-5c7f0e1a2b3c"
    })
)]
pub struct ProblemDocument {
    /// `/problems/<name>`: what went wrong, one name per way a request can fail.
    #[schema(rename = "type", example = "/problems/identity-conflict")]
    pub kind: String,
    /// The problem's name in words.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong and what to do about it.
    pub detail: String,
}

/// Declares answers several operations give alike: each an RFC 9457 problem, named by its
/// status and its `type`. None is ever built: they exist for the OpenAPI document.
macro_rules! shared_answers {
    ($($(#[doc = $doc:tt])* $name:ident = $status:tt $kind:tt;)*) => {$(
        $(#[doc = $doc])*
        #[derive(Debug, utoipa::IntoResponses)]
        #[response(status = $status, description = $kind, content_type = "application/problem+json")]
        #[allow(dead_code)] // named only in the OpenAPI document
        pub(crate) struct $name(ProblemDocument);
    )*};
}

shared_answers! {
    /// The body of an operation that reads JSON is not JSON.
    MalformedJson = 400 "`malformed-json`";
    /// Every operation that needs a token.
    Unauthorized = 401 "`unauthorized`";
    /// A body past the size limit.
    PayloadTooLarge = 413 "`payload-too-large`";
    /// A body that is not `application/json`.
    UnsupportedMediaType = 415 "`unsupported-media-type`";
    /// For an operation that writes nothing (one that writes says how to retry it).
    Unavailable = 503 "`unavailable`";
}
