//! The sink's JSON answers: every route and refusal writes its body through
//! [`json_response`].

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};
use serde::Serialize;

/// A JSON response. Serialising the sink's own types cannot fail; should it, the answer is
/// a 500 rather than a panic.
pub(crate) fn json_response(status: StatusCode, value: &impl Serialize) -> Response<Full<Bytes>> {
    let (status, body) = match serde_json::to_vec(value) {
        Ok(body) => (status, body),
        Err(err) => {
            tracing::error!(error = %err, "cannot serialise a response");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                br#"{"error":"internal error"}"#.to_vec(),
            )
        }
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}
