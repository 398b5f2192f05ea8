//! The decider's approval API, served by `decider serve`.
//!
//! Layout:
//! - [`router`] / [`serve`]: the routes and the server (graceful shutdown).
//! - `alerts`: `POST /v1/alerts`, `GET /v1/alerts/{id}`, `POST /v1/alerts/{id}/revisions`.
//! - `auth`: the bearer-token extractor; a token acts for exactly one tenant.
//! - `body`: reads request bodies within the size limit and checks their fields.
//! - `problem`: every error is `application/problem+json` with a specific `type`.
//! - `health`: `GET /healthz` (the process runs), `GET /readyz` (the database answers),
//!   `GET /metrics` (Prometheus: approvals by result, and the outbox's queue figures).
//!
//! Handlers hold no business rules: validation is in `outbox-core`, writes and reads in
//! `outbox-store`, so monitors and operators approve through exactly the same path.

mod alerts;
mod auth;
mod body;
mod health;
mod problem;

use axum::routing::{get, post};
use axum::Router;
use outbox_store::PgPool;
use std::future::Future;
use tokio::net::TcpListener;

pub use health::ApprovalCounts;
pub use problem::Problem;

/// Shared state of the handlers.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The database.
    pub pool: PgPool,
    /// Wakes dispatchers when an approval or revision created work.
    pub wake_ups: outbox_store::dispatch::WakeUpNotifier,
    /// Approvals answered, by result, for `/metrics`.
    pub approvals: std::sync::Arc<health::ApprovalCounts>,
}

/// All routes of the approval API.
pub fn router(pool: PgPool) -> Router {
    Router::new()
        .route("/v1/alerts", post(alerts::approve))
        .route("/v1/alerts/{id}", get(alerts::show))
        .route("/v1/alerts/{id}/revisions", post(alerts::revise))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .fallback(problem::no_route)
        .method_not_allowed_fallback(problem::method_not_allowed)
        // Bodies are read by `body::read_json`, which enforces its own limit with a
        // problem+json answer; the framework's default limit would answer first, in plain text.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn(log_request))
        .with_state(AppState {
            wake_ups: outbox_store::dispatch::WakeUpNotifier::new(pool.clone()),
            approvals: std::sync::Arc::default(),
            pool,
        })
}

/// Serves the API on `listener` until `shutdown` resolves, then finishes open requests.
pub async fn serve(
    listener: TcpListener,
    pool: PgPool,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "approval API listening");
    axum::serve(listener, router(pool))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Logs method, route template, status and latency of every request (at debug level:
/// `RUST_LOG=outbox_api=debug`). Never headers or bodies: they carry tokens and payloads.
async fn log_request(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "<unmatched>".to_owned(), |p| p.as_str().to_owned());
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    tracing::debug!(
        %method,
        route,
        status = response.status().as_u16(),
        elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
        "request"
    );
    response
}
