//! The operator console: server-rendered pages where operators find what is stuck, read
//! why, and act, with the same rules as `outboxctl` (every read and action goes through
//! `outbox-store`'s functions; nothing here decides what an alert may become).
//!
//! Layout:
//! - [`serve`] / [`router`]: the routes under `/console`, served by
//!   `outbox_runtime::http_server` (the same slow-client deadlines as the API), with
//!   security headers on every answer (`security_headers`).
//! - `auth`: sign-in sessions (256-bit random ids, stored as SHA-256, HttpOnly
//!   SameSite=Strict cookie, Secure on request), the `Signed` extractor that carries the
//!   account's role and tenant grant into every handler, and the `Authorized` one that
//!   checks an action's form token (per session, in constant time) and role first.
//! - `sign_in`: signing in with an operator's password (its argon2id hash is made by
//!   `outbox_core::password`, which `outboxctl` also uses), the sign-in form's own token
//!   (tied to a pre-session cookie), failed sign-ins limited per name and per address, and
//!   signing out.
//! - `password_checks`: the bound on argon2 checks running at once (each takes 19 MiB),
//!   with the memory they hash in kept per permit, and its figures for `/metrics`.
//! - `input`: the query and form extractors every handler reads through; a NUL character
//!   (which PostgreSQL's text cannot hold) is refused there as bad input.
//! - `pages`: the pages that read: overview, outbox list (keyset-paged filters in the
//!   URL), an alert's whole story, destinations, audit log.
//! - `actions`: replay, resolve (each with a note and a confirm page), destinations on and
//!   off, bulk replays (dry-run count, start, stop, resume).
//! - `bulk`: the background worker of bulk replays: batches, a lease, a cursor; a stopped
//!   or crashed run resumes where it was.
//! - `view`: the templates (`templates/`, embedded; autoescape on), filters that show
//!   untrusted text safely, the SVG sparkline.
//! - `error_page`: why a page or an action failed (`PageError`, what every handler answers
//!   with on failure), as a plain page written by hand.
//!
//! Untrusted text (payloads, subjects, destinations' answers) is escaped by the template
//! engine and shown through `outbox_core::untrusted::visible`, and pages carry a CSP
//! without inline script, so a vendor called `<script>...` is only text.

mod actions;
mod auth;
mod bulk;
mod error_page;
mod input;
mod pages;
pub mod password_checks;
mod sign_in;
mod view;

use axum::http::{header, HeaderValue, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use hyper::service::service_fn;
use outbox_runtime::http_server::{self, RequestBody, ServerLimits};
use outbox_runtime::shutdown::Shutdown;
use outbox_store::PgPool;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

pub use password_checks::PasswordChecks;

/// How the console behaves.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// Mark the session cookie `Secure` (the console is reached over TLS, through a
    /// proxy that terminates it).
    pub secure_cookies: bool,
    /// How long a sign-in lasts.
    pub session_lifetime: Duration,
    /// Alerts per bulk replay batch.
    pub bulk_batch: i64,
    /// How many failed sign-ins are allowed per account name and per client address.
    pub sign_in_limits: outbox_store::operator_accounts::SignInLimits,
    /// The bound on password checks running at once (shared with `/metrics`, which shows
    /// its figures).
    pub password_checks: Arc<PasswordChecks>,
    /// A trace viewer's address with `{trace_id}` (checked by
    /// [`parse_trace_url_template`]): an alert's page links its trace there.
    pub trace_url_template: Option<String>,
}

/// Checks `--trace-url-template`: an `http` or `https` address holding `{trace_id}`
/// (the trace id, 32 hex digits, is put there as it is: it needs no escaping).
pub fn parse_trace_url_template(text: &str) -> Result<String, String> {
    let lower = text.to_ascii_lowercase();
    if !(lower.starts_with("https://") || lower.starts_with("http://")) {
        return Err("must be an http:// or https:// address".to_owned());
    }
    if !text.contains("{trace_id}") {
        return Err("must hold `{trace_id}` where the trace id goes".to_owned());
    }
    if text
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || c == '"' || c == '<' || c == '>')
    {
        return Err(
            "must not hold spaces, quotes, angle brackets or control characters".to_owned(),
        );
    }
    Ok(text.to_owned())
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            secure_cookies: false,
            session_lifetime: Duration::from_secs(8 * 3600),
            bulk_batch: 100,
            // Five tries per name in 15 minutes; more per address, which several
            // operators may share (a NAT, a proxy).
            sign_in_limits: outbox_store::operator_accounts::SignInLimits {
                window: Duration::from_secs(15 * 60),
                per_name: 5,
                per_address: 20,
            },
            password_checks: PasswordChecks::per_core(),
            trace_url_template: None,
        }
    }
}

/// Shared state of the handlers.
#[derive(Debug, Clone)]
pub struct Console {
    pool: PgPool,
    config: Arc<ConsoleConfig>,
    views: Arc<view::Views>,
    /// Wakes the bulk replay worker when a replay is started or resumed.
    bulk_wake: Arc<tokio::sync::Notify>,
    /// Makes the sign-in form's tokens (drawn at start).
    login_key: sign_in::LoginKey,
}

impl Console {
    /// The console's state over `pool`.
    pub fn new(pool: PgPool, config: ConsoleConfig) -> Self {
        Console {
            pool,
            config: Arc::new(config),
            views: Arc::new(view::Views::new()),
            bulk_wake: Arc::default(),
            login_key: sign_in::LoginKey::new(),
        }
    }
}

/// Every route of the console.
pub fn router(console: Console) -> Router {
    Router::new()
        .route("/console", get(pages::overview))
        .route("/console/", get(pages::overview))
        .route(
            "/console/login",
            get(sign_in::login_page).post(sign_in::login),
        )
        .route("/console/logout", post(sign_in::logout))
        .route("/console/outbox", get(pages::outbox))
        .route("/console/alerts/{id}", get(pages::alert))
        .route(
            "/console/alerts/{id}/replay",
            get(actions::confirm_replay).post(actions::replay),
        )
        .route(
            "/console/alerts/{id}/resolve",
            get(actions::confirm_resolve).post(actions::resolve),
        )
        .route("/console/destinations", get(pages::destinations))
        .route(
            "/console/destinations/{id}/enabled",
            post(actions::set_destination_enabled),
        )
        .route("/console/audit", get(pages::audit))
        .route(
            "/console/bulk-replay",
            get(actions::bulk_dry_run).post(actions::start_bulk_replay),
        )
        .route("/console/bulk-replay/{id}", get(pages::bulk_progress))
        .route(
            "/console/bulk-replay/{id}/running",
            post(actions::set_bulk_running),
        )
        .route("/console/static/console.css", get(view::stylesheet))
        .fallback(error_page::not_found)
        .layer(middleware::from_fn(security_headers))
        .with_state(console)
}

/// The headers every console answer carries: no script but our own (there is none),
/// no framing, no MIME sniffing, no referrer leaving with alert ids, no caching of pages
/// that show alerts. A POST from another origin is refused before any handler sees it
/// (the form token is the main defence; this is a second one).
async fn security_headers(request: Request<axum::body::Body>, next: Next) -> Response {
    if request.method() == axum::http::Method::POST && !auth::same_origin(request.headers()) {
        return error_page::refused_cross_origin();
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'none'; object-src 'none'; base-uri 'none'; \
             form-action 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Serves the console on `listener` within `limits` until `shutdown` resolves, and runs
/// the bulk replay worker meanwhile.
pub async fn serve(
    listener: TcpListener,
    pool: PgPool,
    limits: ServerLimits,
    config: ConsoleConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let console = Console::new(pool, config);
    tracing::info!(addr = %listener.local_addr()?, "console listening");
    let stopped = Shutdown::on(shutdown);
    let worker = tokio::spawn(bulk::run(console.clone(), stopped.clone()));
    let app = router(console);
    let service = service_fn(move |request: hyper::Request<RequestBody>| {
        // `Router` is always ready, so it is called without waiting for readiness.
        tower_service::Service::call(&mut app.clone(), request)
    });
    http_server::serve(listener, limits, service, stopped.until_set()).await;
    let _ = worker.await;
    Ok(())
}
