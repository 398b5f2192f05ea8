//! Every way an approval request can be wrong gets its own status and problem type, and
//! writes nothing.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::{counts, renewal, Api};
use reqwest::StatusCode;
use serde_json::json;

/// A refusal: its status and problem type.
type Refusal = (StatusCode, &'static str);

const MALFORMED_JSON: Refusal = (StatusCode::BAD_REQUEST, "malformed-json");
const INVALID_FIELD: Refusal = (StatusCode::UNPROCESSABLE_ENTITY, "invalid-field");
const INVALID_PAYLOAD: Refusal = (StatusCode::UNPROCESSABLE_ENTITY, "invalid-payload");
const PAYLOAD_TOO_LARGE: Refusal = (StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large");
const UNAUTHORIZED: Refusal = (StatusCode::UNAUTHORIZED, "unauthorized");

/// Posts `body` as an approval with `token`; it must be refused as `refusal` says, and
/// write nothing.
async fn assert_refused(api: &Api, token: &str, body: String, (status, kind): Refusal) {
    let (got, problem) = api.post_raw("/v1/alerts", token, body).await;
    assert_eq!(got, status, "{problem}");
    assert_eq!(problem["type"], format!("/problems/{kind}"), "{problem}");
    assert_eq!(counts(&api.db).await, (0, 0, 0), "nothing may be written");
}

#[tokio::test]
async fn malformed_json_is_400() {
    let api = Api::start().await;
    let token = api.acme.token.clone();
    for body in ["{", "not json", r#"{"destination": "ops",}"#, ""] {
        assert_refused(&api, &token, body.into(), MALFORMED_JSON).await;
    }
}

#[tokio::test]
async fn missing_or_empty_fields_are_named() {
    let api = Api::start().await;
    let token = api.acme.token.clone();
    for field in ["destination", "subject", "occurrence", "payload"] {
        let mut body = renewal(1);
        body.as_object_mut().unwrap().remove(field);
        let (status, problem) = api.approve(&token, &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(problem["type"], "/problems/missing-field");
        assert!(
            problem["detail"].as_str().unwrap().contains(field),
            "{problem}"
        );

        body[field] = if field == "payload" {
            json!({})
        } else {
            json!("  ")
        };
        let (status, problem) = api.approve(&token, &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert_eq!(problem["type"], "/problems/missing-field");
        assert!(
            problem["detail"].as_str().unwrap().contains(field),
            "{problem}"
        );
    }
    assert_eq!(counts(&api.db).await, (0, 0, 0));
}

#[tokio::test]
async fn wrongly_typed_or_unknown_fields_are_422() {
    let api = Api::start().await;
    let token = api.acme.token.clone();
    let mut numeric_subject = renewal(1);
    numeric_subject["subject"] = json!(42);
    assert_refused(&api, &token, numeric_subject.to_string(), INVALID_FIELD).await;
    let mut array_payload = renewal(1);
    array_payload["payload"] = json!([1, 2]);
    assert_refused(&api, &token, array_payload.to_string(), INVALID_FIELD).await;
    let mut typo = renewal(1);
    typo["ocurrence"] = json!("x");
    assert_refused(&api, &token, typo.to_string(), INVALID_FIELD).await;
    assert_refused(&api, &token, "[]".into(), INVALID_FIELD).await;
}

#[tokio::test]
async fn unknown_destination_is_422() {
    let api = Api::start().await;
    let mut body = renewal(1);
    body["destination"] = json!("nowhere");
    let (status, problem) = api.approve(&api.acme.token, &body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem["type"], "/problems/unknown-destination");
    assert!(problem["detail"].as_str().unwrap().contains("nowhere"));
    assert_eq!(counts(&api.db).await, (0, 0, 0));
}

#[tokio::test]
async fn payload_over_256_kib_is_413() {
    let api = Api::start().await;
    let token = api.acme.token.clone();
    // Just over the payload limit, inside the body limit: refused by the payload check.
    let mut body = renewal(1);
    body["payload"] = json!({"text": "x".repeat(256 * 1024)});
    assert_refused(&api, &token, body.to_string(), PAYLOAD_TOO_LARGE).await;
    // Far over: refused while reading the body.
    body["payload"] = json!({"text": "x".repeat(2 * 1024 * 1024)});
    assert_refused(&api, &token, body.to_string(), PAYLOAD_TOO_LARGE).await;
    // Just under the limit is fine.
    body["payload"] = json!({"text": "x".repeat(255 * 1024)});
    let (status, _) = api.approve(&token, &body).await;
    assert_eq!(status, StatusCode::CREATED);
}

#[tokio::test]
async fn identity_fields_over_512_bytes_are_422() {
    let api = Api::start().await;
    let token = api.acme.token.clone();
    for field in ["subject", "occurrence", "destination"] {
        let mut body = renewal(1);
        body[field] = json!("é".repeat(257)); // 514 bytes, 257 characters
        let (status, problem) = api.approve(&token, &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(problem["type"], "/problems/field-too-long");
        assert!(problem["detail"].as_str().unwrap().contains(field));
    }
    assert_eq!(counts(&api.db).await, (0, 0, 0));
}

#[tokio::test]
async fn a_payload_postgres_cannot_store_is_422() {
    let api = Api::start().await;
    let body = r#"{"destination":"ops","subject":"s","occurrence":"o","payload":{"text":"nul \u0000 here"}}"#;
    assert_refused(&api, &api.acme.token.clone(), body.into(), INVALID_PAYLOAD).await;
}

#[tokio::test]
async fn missing_or_invalid_tokens_are_401() {
    let api = Api::start().await;
    let body = renewal(1).to_string();
    let forged = format!("aot_{}", "A".repeat(43));
    for token in [forged.as_str(), "not-a-token", ""] {
        assert_refused(&api, token, body.clone(), UNAUTHORIZED).await;
    }
    let response = api
        .http
        .post(format!("{}/v1/alerts", api.base))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    let (status, problem) = common::read(response).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(problem["type"], "/problems/unauthorized");
    assert_eq!(counts(&api.db).await, (0, 0, 0));
}

#[tokio::test]
async fn a_body_that_is_not_json_is_415() {
    let api = Api::start().await;
    let response = api
        .http
        .post(format!("{}/v1/alerts", api.base))
        .bearer_auth(&api.acme.token)
        .header("content-type", "text/plain")
        .body(renewal(1).to_string())
        .send()
        .await
        .unwrap();
    let (status, problem) = common::read(response).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(problem["type"], "/problems/unsupported-media-type");
    assert_eq!(counts(&api.db).await, (0, 0, 0));
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_problem_json() {
    let api = Api::start().await;
    let (status, problem) = api.get("/v2/nothing", &api.acme.token).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(problem["type"], "/problems/no-such-route");
    let response = api
        .http
        .delete(format!("{}/v1/alerts", api.base))
        .bearer_auth(&api.acme.token)
        .send()
        .await
        .unwrap();
    let (status, problem) = common::read(response).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(problem["type"], "/problems/method-not-allowed");
}

#[tokio::test]
async fn health_on_the_api_and_no_operations_figures() {
    let api = Api::start().await;
    let healthz = api
        .http
        .get(format!("{}/healthz", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(healthz.status(), StatusCode::OK);
    // Readiness and metrics are on the operators' listener (`--metrics-listen`) only.
    for path in ["/readyz", "/metrics"] {
        let (status, problem) = api.get(path, &api.acme.token).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(problem["type"], "/problems/no-such-route", "{path}");
    }
}
