//! Liveness and readiness.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};
use std::time::Duration;

use crate::{AppState, Problem};

/// The process is up and serving.
pub(crate) async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The database answers within two seconds.
pub(crate) async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, Problem> {
    let ping = outbox_store::connect::ping(&state.pool);
    match tokio::time::timeout(Duration::from_secs(2), ping).await {
        Ok(Ok(_)) => Ok(Json(json!({"status": "ready"}))),
        _ => Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not-ready",
            "Not ready",
            "the database did not answer within 2s",
        )),
    }
}
