//! The decider's approval API, served by `decider serve`, and its operations endpoints.
//!
//! Layout:
//! - [`router`] / [`serve`] / [`serve_with`] / [`serve_with_settings`]: the routes and the
//!   servers (graceful shutdown, deadlines for slow clients and a cap on connections from
//!   `outbox_runtime::http_server`, the browser origins `/mcp` serves: [`ApiSettings`]).
//! - `alerts`: `POST /v1/alerts`, `GET /v1/alerts/{id}`, `POST /v1/alerts/{id}/revisions`:
//!   each a thin handler over one operation (`approve_alert`, `alert`, `revise_alert`).
//! - `listings`: `GET /v1/destinations` and `GET /v1/alerts` (filtered, keyset-paged,
//!   each filter served by an index, under a statement timeout); `listing_turns`: the
//!   bound on listings running at once, per tenant and over the process ([`ListingLimits`]),
//!   so that listings cannot take the connections approvals need.
//! - [`openapi`]: the OpenAPI 3.1 document, generated from the handlers' annotations,
//!   served at `GET /v1/openapi.json` without a token.
//! - `auth`: the bearer-token extractor; a token acts for exactly one tenant. Tokens the
//!   database accepted are kept for at most [`TOKEN_CACHE_TTL`], the bound on revocation.
//! - `body`: reads request bodies within the size limit and checks their fields.
//! - `problem`: every error is `application/problem+json` with a specific `type`, and
//!   its schema in the OpenAPI document.
//! - `trace`: the W3C trace context a request came with, the request's server span and
//!   an approval's producer span, and the context an approval stores with its alert.
//! - [`mcp`]: the same operations as an MCP server for agents: at `/mcp` (Streamable
//!   HTTP, stateless, the same bearer tokens and limits) and over stdio
//!   ([`mcp::serve_stdio`], run by `outboxctl mcp`).
//! - `health`: `GET /healthz` (the process runs), and on the separate operations listener
//!   only, `GET /readyz` (the database answers) and `GET /metrics` (Prometheus: approvals
//!   by result, and the outbox's queue figures, which span every tenant).
//!
//! Handlers hold no business rules: validation is in `outbox-core`, writes and reads in
//! `outbox-store`, so monitors and operators approve through exactly the same path.
//!
//! An approval costs one round trip to the database when its token is cached: one
//! statement writes the alert, its outbox row and its evidence line, wakes the
//! dispatchers on its commit when it is the first of a burst, and returns what the `201`
//! answer shows. The payload's limits are scanned once, with the rest of the body.

mod alerts;
mod auth;
mod body;
mod health;
mod listing_turns;
mod listings;
pub mod mcp;
pub mod openapi;
mod problem;
mod trace;

use axum::routing::{any, get, post};
use axum::Router;
use hyper::service::service_fn;
use outbox_runtime::http_server::{self, RequestBody, ServerLimits};
use outbox_runtime::prometheus::Figures;
use outbox_runtime::shutdown::Shutdown;
use outbox_store::PgPool;
use std::future::Future;
use tokio::net::TcpListener;

pub use auth::TOKEN_CACHE_TTL;
pub use health::ApprovalCounts;
pub use listing_turns::ListingLimits;
pub use problem::{Problem, ProblemDocument};

/// Shared state of the handlers.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The database.
    pub pool: PgPool,
    /// Wakes dispatchers when an approval or revision created work.
    pub wake_ups: outbox_store::wake_ups::WakeUpNotifier,
    /// Writes approvals, those that arrive together in one transaction.
    pub approval_groups: outbox_store::alerts::ApprovalGroups,
    /// Approvals answered, by result, for `/metrics`.
    pub approvals: std::sync::Arc<health::ApprovalCounts>,
    /// Tokens the database accepted, kept for at most [`TOKEN_CACHE_TTL`].
    tokens: std::sync::Arc<auth::TokenCache>,
    /// Turns for alert listings, per tenant and over the process.
    listings: std::sync::Arc<listing_turns::ListingTurns>,
    /// Other parts of the process whose figures `/metrics` shows too (the console's).
    figures: Vec<std::sync::Arc<dyn Figures>>,
    /// Whether the database took writes at the last readiness check or scrape.
    database: std::sync::Arc<outbox_runtime::prometheus::DatabaseWritable>,
    /// The browser origins `/mcp` serves.
    mcp_allowed_origins: std::sync::Arc<mcp::AllowedOrigins>,
}

impl AppState {
    /// The state for `pool`, listings bounded by [`ListingLimits::for_pool`].
    fn new(pool: PgPool) -> Self {
        let listings = ListingLimits::for_pool(pool.options().get_max_connections());
        Self::with_listings(pool, listings)
    }

    fn with_listings(pool: PgPool, listings: ListingLimits) -> Self {
        AppState {
            wake_ups: outbox_store::wake_ups::WakeUpNotifier::new(pool.clone()),
            approval_groups: outbox_store::alerts::ApprovalGroups::new(pool.clone()),
            approvals: std::sync::Arc::default(),
            tokens: std::sync::Arc::new(auth::TokenCache::new(TOKEN_CACHE_TTL)),
            listings: std::sync::Arc::new(listing_turns::ListingTurns::new(listings)),
            figures: Vec::new(),
            database: std::sync::Arc::default(),
            mcp_allowed_origins: std::sync::Arc::default(),
            pool,
        }
    }
}

/// All routes of the approval API. `/metrics` and `/readyz` are not among them: they tell
/// figures across tenants, so they are served on the operations listener only.
pub fn router(pool: PgPool) -> Router {
    api_router(AppState::new(pool))
}

fn api_router(state: AppState) -> Router {
    let mcp = mcp::http::service(&state);
    Router::new()
        .route(
            "/mcp",
            any(
                move |axum::extract::State(state): axum::extract::State<AppState>,
                      request: axum::extract::Request| {
                    mcp::http::serve(mcp.clone(), state, request)
                },
            ),
        )
        .route(
            "/v1/alerts",
            post(alerts::approve).get(listings::list_alerts),
        )
        .route("/v1/destinations", get(listings::list_destinations))
        .route("/v1/openapi.json", get(openapi::serve))
        .route("/v1/alerts/{id}", get(alerts::show))
        .route("/v1/alerts/{id}/revisions", post(alerts::revise))
        .route("/healthz", get(health::healthz))
        .fallback(problem::no_route)
        .method_not_allowed_fallback(problem::method_not_allowed)
        // Bodies are read by `body::read_json`, which enforces its own limit with a
        // problem+json answer; the framework's default limit would answer first, in plain text.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn(trace_request))
        .with_state(state)
}

/// `/metrics`, `/readyz` and `/healthz`, for the operators' network only.
fn operations_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(health::metrics))
        .route("/readyz", get(health::readyz))
        .route("/healthz", get(health::healthz))
        .fallback(problem::no_route)
        .method_not_allowed_fallback(problem::method_not_allowed)
        .with_state(state)
}

/// Serves the API on `listener` with the default limits until `shutdown` resolves, then
/// finishes open requests.
pub async fn serve(
    listener: TcpListener,
    pool: PgPool,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(
        Listeners {
            api: listener,
            operations: None,
        },
        pool,
        ServerLimits::default(),
        shutdown,
    )
    .await
}

/// Where the decider listens.
#[derive(Debug)]
pub struct Listeners {
    /// The approval API, for tenants.
    pub api: TcpListener,
    /// `/metrics`, `/readyz`, `/healthz`, for operators; not served when `None`.
    pub operations: Option<TcpListener>,
}

/// Serves the API (and the operations endpoints, when given a listener) within `limits`
/// until `shutdown` resolves, then finishes open requests on both. Listings are bounded
/// by [`ListingLimits::for_pool`].
pub async fn serve_with(
    listeners: Listeners,
    pool: PgPool,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let settings = ApiSettings {
        limits,
        ..ApiSettings::default()
    };
    serve_with_settings(listeners, pool, settings, shutdown).await
}

/// How the API is served beyond its routes.
#[derive(Debug, Default)]
pub struct ApiSettings {
    /// How long clients may take and how many may connect, on both listeners.
    pub limits: ServerLimits,
    /// How many listings run at once, and for how long; `None`:
    /// [`ListingLimits::for_pool`] of the pool's size.
    pub listings: Option<ListingLimits>,
    /// Figures of other parts of the same process that `/metrics` shows too (the
    /// console's password checks, when `decider serve` runs it).
    pub figures: Vec<std::sync::Arc<dyn Figures>>,
    /// The browser origins `/mcp` serves (`decider serve --mcp-allowed-origins`).
    pub mcp_allowed_origins: mcp::AllowedOrigins,
}

/// [`serve_with`], with all of [`ApiSettings`].
pub async fn serve_with_settings(
    listeners: Listeners,
    pool: PgPool,
    settings: ApiSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let ApiSettings {
        limits,
        listings,
        figures,
        mcp_allowed_origins,
    } = settings;
    let listings =
        listings.unwrap_or_else(|| ListingLimits::for_pool(pool.options().get_max_connections()));
    let state = AppState {
        figures,
        mcp_allowed_origins: std::sync::Arc::new(mcp_allowed_origins),
        ..AppState::with_listings(pool, listings)
    };
    // One shutdown for both servers.
    let stopped = Shutdown::on(shutdown);
    let operations = match listeners.operations {
        Some(listener) => {
            // Logged before the API's line, which tests and scripts wait for.
            tracing::info!(addr = %listener.local_addr()?, "decider metrics listening");
            Some(serve_router(
                listener,
                limits,
                operations_router(state.clone()),
                stopped.clone().until_set(),
            ))
        }
        None => None,
    };
    tracing::info!(addr = %listeners.api.local_addr()?, "approval API listening");
    let api = serve_router(
        listeners.api,
        limits,
        api_router(state),
        stopped.until_set(),
    );
    let operations = async move {
        if let Some(operations) = operations {
            operations.await;
        }
    };
    tokio::join!(api, operations);
    Ok(())
}

async fn serve_router(
    listener: TcpListener,
    limits: ServerLimits,
    router: Router,
    shutdown: impl Future<Output = ()> + Send,
) {
    let service = service_fn(move |request: hyper::Request<RequestBody>| {
        // `Router` is always ready, so it is called without waiting for readiness.
        tower_service::Service::call(&mut router.clone(), request)
    });
    http_server::serve(listener, limits, service, shutdown).await;
}

/// Reads the request's trace context (for the handlers, in its extensions), runs it in its
/// server span (when spans are exported), and logs method, route template, status and
/// latency (at debug level: `RUST_LOG=outbox_api=debug`). Never headers or bodies: they
/// carry tokens and payloads.
async fn trace_request(
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use tracing::Instrument;
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "<unmatched>".to_owned(), |p| p.as_str().to_owned());
    let incoming = trace::IncomingTrace::from_headers(request.headers());
    let span = trace::request_span(&method, &route, request.uri().path(), &incoming);
    request.extensions_mut().insert(incoming);
    let started = std::time::Instant::now();
    let response = next.run(request).instrument(span.clone()).await;
    trace::record_status(&span, response.status().as_u16());
    tracing::debug!(
        %method,
        route,
        status = response.status().as_u16(),
        elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
        "request"
    );
    response
}
