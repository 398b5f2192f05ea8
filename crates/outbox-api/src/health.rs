//! Liveness, readiness and metrics.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use crate::{AppState, Problem};

/// The process is up and serving.
#[utoipa::path(
    get,
    operation_id = "health",
    path = "/healthz",
    tag = "health",
    security(()),
    responses((status = 200, description = "The process runs", body = Object, example = json!({"status": "ok"})))
)]
pub(crate) async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The database answers within two seconds and takes writes.
pub(crate) async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, Problem> {
    let probe = outbox_store::connect::writable(&state.pool);
    match state.database.check(probe).await {
        Ok(()) => Ok(Json(json!({"status": "ready"}))),
        Err(not_ready) => Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not-ready",
            "Not ready",
            not_ready.reason(),
        )),
    }
}

/// Approvals and revisions answered, by result.
#[derive(Debug, Default)]
pub struct ApprovalCounts {
    /// New alerts (approvals and revisions).
    pub created: std::sync::atomic::AtomicU64,
    /// Repeats that found their alert.
    pub existing: std::sync::atomic::AtomicU64,
    /// Same identity, different payload.
    pub conflicts: std::sync::atomic::AtomicU64,
}

impl ApprovalCounts {
    pub(crate) fn count(counter: &std::sync::atomic::AtomicU64) {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Prometheus text: approvals by result, listings running and refused, the outbox's queue
/// figures, and the figures of the process's other parts.
pub(crate) async fn metrics(State(state): State<AppState>) -> axum::response::Response {
    use axum::response::IntoResponse;
    use std::fmt::Write as _;
    use std::sync::atomic::Ordering::Relaxed;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP outbox_approvals_total Approvals and revisions answered, by result."
    );
    let _ = writeln!(out, "# TYPE outbox_approvals_total counter");
    for (result, counter) in [
        ("created", &state.approvals.created),
        ("existing", &state.approvals.existing),
        ("conflict", &state.approvals.conflicts),
    ] {
        let _ = writeln!(
            out,
            "outbox_approvals_total{{result=\"{result}\"}} {}",
            counter.load(Relaxed)
        );
    }
    let _ = state
        .database
        .check(outbox_store::connect::writable(&state.pool))
        .await;
    outbox_runtime::prometheus::Figures::render(&*state.database, &mut out);
    outbox_runtime::telemetry::render_metrics(&mut out);
    outbox_runtime::prometheus::Figures::render(&*state.listings, &mut out);
    for figures in &state.figures {
        figures.render(&mut out);
    }
    match outbox_store::dispatch::queue_figures(&state.pool).await {
        Ok(queue) => {
            outbox_runtime::prometheus::render_queue(
                &mut out,
                &queue.live,
                queue.held,
                queue.oldest_due_age_secs,
            );
            outbox_runtime::prometheus::render_lanes(&mut out, &queue.lane_rows());
            (
                [(
                    axum::http::header::CONTENT_TYPE,
                    "text/plain; version=0.0.4",
                )],
                out,
            )
                .into_response()
        }
        Err(err) => Problem::from(err).into_response(),
    }
}
