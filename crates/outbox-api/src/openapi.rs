//! The API's OpenAPI 3.1 document, generated from the handlers' own annotations and the
//! types they read and answer with, so it changes when they do: `GET /v1/openapi.json`
//! serves it (no token needed) and `docs/openapi.json` holds a copy that a test keeps
//! equal to it (`OUTBOX_WRITE_OPENAPI=1 cargo test -p outbox-api openapi` rewrites it).
//!
//! Every error is `application/problem+json` ([`ProblemDocument`]); each operation lists
//! the `type`s it can answer with, the same names as `docs/approval-api.md`.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::problem::ProblemDocument;
use crate::{alerts, health, listings};

/// The document's structure; [`document`] is what is served.
#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "Alert outbox approval API",
        description = "Agents approve alerts here; the outbox delivers each approved alert \
            once per identity, with evidence. An alert's identity is (tenant, subject, \
            occurrence, destination): approving it again returns the same alert, and a \
            changed payload is refused with `409 identity-conflict`: a correction is a \
            revision, with a reason. Every request carries a tenant's bearer token \
            (`outboxctl token create --tenant T`) and sees only that tenant's alerts and \
            destinations.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(
        alerts::approve,
        listings::list_alerts,
        alerts::show,
        alerts::revise,
        listings::list_destinations,
        health::healthz,
        serve,
    ),
    components(schemas(ProblemDocument)),
    modifiers(&BearerToken),
    security(("bearer" = [])),
    tags(
        (name = "alerts", description = "Approving, reading, listing and revising alerts"),
        (name = "destinations", description = "Where the tenant's alerts can go"),
        (name = "health", description = "Whether the process runs"),
    )
)]
pub struct ApiDoc;

/// The document as JSON, as served and as committed in `docs/openapi.json`.
pub fn document() -> String {
    let mut document = ApiDoc::openapi();
    document.info.version = env!("CARGO_PKG_VERSION").to_owned();
    let mut document = serde_json::to_value(document).expect("the OpenAPI document serialises");
    add_follow_up_links(&mut document);
    serde_json::to_string_pretty(&document).expect("the OpenAPI document serialises")
}

/// This document.
#[utoipa::path(
    get,
    operation_id = "openapi_document",
    path = "/v1/openapi.json",
    tag = "health",
    security(()),
    responses((status = 200, description = "The OpenAPI document", body = Object))
)]
pub(crate) async fn serve() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], document()).into_response()
}

/// The tenant's bearer token, the scheme every `/v1` operation needs.
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A tenant's token from `outboxctl token create --tenant T`.",
                    ))
                    .build(),
            ),
        );
    }
}

/// Links from an approval's or a revision's answer to what an agent does next with the
/// alert (read it, revise it), so that a client (and a stateful fuzzer) can follow them.
/// Added to the JSON rather than through utoipa's `Link`, which spells `operationId` as
/// `operation_id` (refused by openapi-spec-validator).
fn add_follow_up_links(document: &mut Value) {
    let links = json!({
        "get_alert": {
            "operationId": "get_alert",
            "parameters": {"id": "$response.body#/id"},
            "description": "Read the alert",
        },
        "revise_alert": {
            "operationId": "revise_alert",
            "parameters": {"id": "$response.body#/id"},
            "description": "Correct the alert's payload",
        },
    });
    for path in ["/v1/alerts", "/v1/alerts/{id}/revisions"] {
        for status in ["200", "201"] {
            if let Some(response) = document
                .pointer_mut(&format!(
                    "/paths/{}/post/responses/{status}",
                    path.replace('~', "~0").replace('/', "~1")
                ))
                .and_then(Value::as_object_mut)
            {
                response.insert("links".to_owned(), links.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed copy is what the code generates; set `OUTBOX_WRITE_OPENAPI=1` to
    /// write it after a change to the API.
    #[test]
    fn the_committed_openapi_document_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json");
        let generated = document() + "\n";
        if std::env::var_os("OUTBOX_WRITE_OPENAPI").is_some() {
            std::fs::write(path, &generated).expect("write docs/openapi.json");
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/openapi.json differs from what the code generates: run \
             `OUTBOX_WRITE_OPENAPI=1 cargo test -p outbox-api openapi` and commit it"
        );
    }

    #[test]
    fn every_route_of_the_api_is_in_the_document() {
        let document: serde_json::Value = serde_json::from_str(&document()).unwrap();
        assert_eq!(document["openapi"], "3.1.0");
        let paths = document["paths"].as_object().unwrap();
        for (path, method) in [
            ("/v1/alerts", "post"),
            ("/v1/alerts", "get"),
            ("/v1/alerts/{id}", "get"),
            ("/v1/alerts/{id}/revisions", "post"),
            ("/v1/destinations", "get"),
            ("/healthz", "get"),
            ("/v1/openapi.json", "get"),
        ] {
            assert!(
                paths.get(path).and_then(|p| p.get(method)).is_some(),
                "{method} {path} is missing"
            );
        }
    }
}
