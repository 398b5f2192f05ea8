//! `/metrics` (Prometheus text), `/healthz`, `/readyz` for one dispatcher, on the shared
//! hardened server (deadlines for slow clients, a cap on connections).

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use outbox_runtime::prometheus::Figures;
use outbox_store::PgPool;
use std::sync::Arc;

use crate::Metrics;

#[derive(Clone)]
struct AppState {
    pool: PgPool,
    metrics: Arc<Metrics>,
    database: Arc<outbox_runtime::prometheus::DatabaseWritable>,
    /// The figures of the process's other parts (its evidence checkpoints).
    figures: Vec<Arc<dyn Figures>>,
}

/// Serves until the process ends.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    pool: PgPool,
    metrics: Arc<Metrics>,
    figures: Vec<Arc<dyn Figures>>,
) {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "dispatcher metrics listening");
    }
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(AppState {
            pool,
            metrics,
            database: Arc::default(),
            figures,
        });
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
    let writable = state
        .database
        .check(outbox_store::connect::writable(&state.pool))
        .await;
    let queue = match writable {
        Ok(()) => outbox_store::dispatch::queue_figures(&state.pool)
            .await
            .ok(),
        Err(_) => None,
    };
    let mut out = match &queue {
        Some(queue) => state.metrics.render(queue),
        None => "# queue figures unavailable: the database is not writable\n".to_owned(),
    };
    state.database.render(&mut out);
    outbox_runtime::telemetry::render_metrics(&mut out);
    for figures in &state.figures {
        figures.render(&mut out);
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        out,
    )
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let probe = outbox_store::connect::writable(&state.pool);
    match state.database.check(probe).await {
        Ok(()) => (StatusCode::OK, "ready"),
        Err(not_ready) => (StatusCode::SERVICE_UNAVAILABLE, not_ready.reason()),
    }
}
