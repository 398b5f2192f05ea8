//! `/metrics` (Prometheus text), `/healthz`, `/readyz` for one dispatcher, on the shared
//! hardened server (deadlines for slow clients, a cap on connections).

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use outbox_store::PgPool;
use std::sync::Arc;
use std::time::Duration;

use crate::Metrics;

#[derive(Clone)]
struct AppState {
    pool: PgPool,
    metrics: Arc<Metrics>,
}

/// Serves until the process ends.
pub(crate) async fn serve(listener: tokio::net::TcpListener, pool: PgPool, metrics: Arc<Metrics>) {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "dispatcher metrics listening");
    }
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(AppState { pool, metrics });
    let service = hyper::service::service_fn(
        move |request: hyper::Request<outbox_runtime::http_server::RequestBody>| {
            // `Router` is always ready, so it is called without waiting for readiness.
            tower_service::Service::call(&mut app.clone(), request)
        },
    );
    outbox_runtime::http_server::serve(
        listener,
        outbox_runtime::http_server::ServerLimits::default(),
        service,
        std::future::pending(),
    )
    .await;
}

async fn metrics_text(State(state): State<AppState>) -> impl IntoResponse {
    match outbox_store::dispatch::queue_figures(&state.pool).await {
        Ok(queue) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            state.metrics.render(&queue),
        ),
        Err(err) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            format!("# queue figures unavailable: {err}\n"),
        ),
    }
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let ping = outbox_store::connect::ping(&state.pool);
    match tokio::time::timeout(Duration::from_secs(2), ping).await {
        Ok(Ok(())) => (StatusCode::OK, "ready"),
        _ => (StatusCode::SERVICE_UNAVAILABLE, "database not answering"),
    }
}
