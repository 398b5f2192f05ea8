//! The operator console over a real database: every page and action over HTTP (`http`),
//! and the whole path in a real headless Chromium driven through WebDriver (`browser`),
//! with a real dispatcher and sink producing and delivering the alerts.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

mod arbitrary_input;
mod browser;
mod http;
mod sign_in_load;

use common::add_tenant;
use common::alerts::*;
use common::assert_contains;
use common::destinations::add_destination;
use common::procs::*;
use outbox_testkit::TestDb;
use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;
use tokio::task::JoinHandle;
use uuid::Uuid;

/// The console served in-process on a real socket, over its own database.
#[derive(Debug)]
pub(crate) struct Console {
    pub(crate) db: TestDb,
    pub(crate) base: String,
    pub(crate) http: reqwest::Client,
    server: JoinHandle<()>,
}

/// A signed-in browser, as far as HTTP goes: its cookie and its form token.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub(crate) cookie: String,
    pub(crate) csrf: String,
}

/// A page as the console answered it.
#[derive(Debug)]
pub(crate) struct Page {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: String,
}

impl Page {
    pub(crate) fn location(&self) -> &str {
        self.headers
            .get("location")
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }
}

impl Console {
    pub(crate) async fn start(db: TestDb) -> Self {
        Self::start_with(db, outbox_console::ConsoleConfig::default()).await
    }

    pub(crate) async fn start_with(db: TestDb, config: outbox_console::ConsoleConfig) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let pool = db.pool.clone();
        let server = tokio::spawn(async move {
            outbox_console::serve(
                listener,
                pool,
                outbox_runtime::http_server::ServerLimits::default(),
                config,
                std::future::pending(),
            )
            .await
            .unwrap();
        });
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        Console {
            db,
            base,
            http,
            server,
        }
    }

    /// Creates an account straight in the store; returns its password.
    pub(crate) async fn account(&self, name: &str, role: &str, tenants: Option<&[Uuid]>) -> String {
        let password = outbox_core::password::new_password();
        let hash = outbox_core::password::hash_password(&password).unwrap();
        let role = role.parse().unwrap();
        outbox_store::operator_accounts::create(&self.db.pool, name, role, tenants, &hash)
            .await
            .unwrap();
        password
    }

    /// The pre-session cookie (checked for its attributes) and the token of one showing
    /// of the sign-in form.
    pub(crate) async fn login_form(&self) -> (String, String) {
        let form = self.get(None, "/console/login").await;
        let set_cookie = form.headers["set-cookie"].to_str().unwrap().to_owned();
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console/login"] {
            assert!(set_cookie.contains(attribute), "{set_cookie}");
        }
        let cookie = set_cookie.split(';').next().unwrap().to_owned();
        (cookie, hidden_field(&form.body, "login_token"))
    }

    /// Signs in the way a browser does: shows the form (which sets the pre-session
    /// cookie), then posts it with the form's token and that cookie.
    pub(crate) async fn login(&self, name: &str, password: &str) -> Page {
        let (pre_session, token) = self.login_form().await;
        let request = self
            .http
            .post(format!("{}/console/login", self.base))
            .header("cookie", pre_session)
            .form(&[
                ("name", name),
                ("password", password),
                ("login_token", &token),
            ]);
        page(request.send().await.unwrap()).await
    }

    pub(crate) async fn sign_in(&self, name: &str, password: &str) -> Session {
        let page = self.login(name, password).await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
        let set_cookie = page.headers.get("set-cookie").unwrap().to_str().unwrap();
        let cookie = set_cookie.split(';').next().unwrap().to_owned();
        let mut session = Session {
            cookie,
            csrf: String::new(),
        };
        let overview = self.get(Some(&session), "/console").await;
        assert_eq!(overview.status, StatusCode::OK, "{}", overview.body);
        session.csrf = csrf_of(&overview.body);
        session
    }

    /// An account of `role` (every tenant unless `tenants`), signed in.
    pub(crate) async fn signed_in(
        &self,
        name: &str,
        role: &str,
        tenants: Option<&[Uuid]>,
    ) -> Session {
        let password = self.account(name, role, tenants).await;
        self.sign_in(name, &password).await
    }

    pub(crate) async fn get(&self, session: Option<&Session>, path: &str) -> Page {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(session) = session {
            request = request.header("cookie", &session.cookie);
        }
        page(request.send().await.unwrap()).await
    }

    pub(crate) async fn post(
        &self,
        session: Option<&Session>,
        path: &str,
        form: &[(&str, &str)],
    ) -> Page {
        let mut request = self.http.post(format!("{}{path}", self.base)).form(form);
        if let Some(session) = session {
            request = request.header("cookie", &session.cookie);
        }
        page(request.send().await.unwrap()).await
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn page(response: reqwest::Response) -> Page {
    Page {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap(),
    }
}

/// The form token in a page.
pub(crate) fn csrf_of(body: &str) -> String {
    hidden_field(body, "csrf")
}

/// The value of the form field `name` in a page.
fn hidden_field(body: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = body
        .find(&marker)
        .unwrap_or_else(|| panic!("a form with `{name}`"));
    body[start + marker.len()..]
        .split('"')
        .next()
        .unwrap()
        .to_owned()
}

/// The cookie a response sets, without its attributes (`name=value`).
pub(crate) fn cookie_of(response: &reqwest::Response) -> String {
    let set_cookie = response.headers()["set-cookie"].to_str().unwrap();
    set_cookie.split(';').next().unwrap().to_owned()
}

/// Shows the sign-in form at `base` through `http`: the pre-session cookie it sets and the
/// form's token.
pub(crate) async fn fetch_login_form(http: &reqwest::Client, base: &str) -> (String, String) {
    let form = http
        .get(format!("{base}/console/login"))
        .send()
        .await
        .unwrap();
    let cookie = cookie_of(&form);
    let body = form.text().await.unwrap();
    (cookie, hidden_field(&body, "login_token"))
}

/// `n` alerts held at a plain destination (`on_uncertain` hold, no keys, no lookup) whose
/// answers the sink lost: a real dispatcher made them held. The sink then answers again.
pub(crate) async fn held_alerts(db: &TestDb, tenant: &str, n: usize) -> (Sink, Uuid, Vec<Uuid>) {
    let sink = Sink::start(&["--drop-response-rate", "1"]).await;
    let tenant_row = add_tenant(db, tenant, &[]).await;
    add_destination(db, tenant_row.id, "ops", &sink.hook_url(), |_| {}).await;
    let ids = approve_many(db, tenant_row.id, "ops", n).await;
    drain(db, &format!("w-{tenant}"), &[]).await;
    for id in &ids {
        assert_eq!(state_of(db, *id).await, "held");
    }
    sink.faults(json!({"drop_response_rate": 0.0})).await;
    (sink, tenant_row.id, ids)
}
