//! Who is signed in, and what they may do.
//!
//! A password is shown once by `outboxctl operator add` and stored only as an argon2id
//! hash. Signing in opens a session: a 256-bit random id in an HttpOnly, SameSite=Strict
//! cookie (Secure when configured), stored as its SHA-256, so a copy of the database signs
//! nobody in. Each session has its own form token; every POST must carry it, compared in
//! constant time. A viewer reads; an operator acts; an account limited to some tenants
//! sees and acts on those only, because its grant goes into every query.
//!
//! The sign-in form is protected too (login CSRF: a page elsewhere must not sign a
//! browser in to an account of the attacker's choosing). Showing the form sets a
//! pre-session cookie (HttpOnly, SameSite=Strict, on `/console/login` only) and puts in
//! the form a token tied to it: an HMAC of the cookie under a key this process draws at
//! start. The cookie's value is random bits with their own HMAC under that key: one this
//! process did not make (chosen by the client, or planted by someone else) is replaced
//! by a fresh one when the form is shown, and never accepted with a sign-in. A sign-in
//! without both, or with a token of another cookie, is refused before any password is
//! checked. The key lives in memory: after a restart, or on another console process, a
//! form shown before is refused and the operator reloads it.
//!
//! Password checks are bounded per process (`crate::password_checks`): a sign-in takes a
//! turn before anything else, and is answered 503 with `Retry-After` when none comes
//! within a short wait.
//!
//! Failed sign-ins are limited per account name and per client address (the console's
//! `sign_in_limits`), counted in the database (`begin_sign_in` in
//! `outbox_store::operator_accounts`) so that the limit holds across restarts and
//! console processes. Past the limit a sign-in is refused with 429 and the same message
//! whether or not the name exists, without checking the password. The address is the TCP
//! peer's (an IPv6 one by its /64): behind a proxy that is the proxy's, which is why its
//! limit is the higher one.
//!
//! Sign-ins and sign-outs are in the audit log by `console:NAME`; failed and refused
//! sign-ins too, counted on one line per name as typed, address and limit window.

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use outbox_runtime::http_server::PeerAddr;
use outbox_store::operator_accounts::{self, Account, Session, SignInTurn};
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use crate::error_page::PageError;
use crate::input::Form;
use crate::Console;

/// The session cookie's name.
pub const COOKIE: &str = "outbox_console";

/// The pre-session cookie's name: set with the sign-in form, only sent back to it.
pub const LOGIN_COOKIE: &str = "outbox_console_login";

/// How long a sign-in form stays usable.
const LOGIN_FORM_LIFETIME_SECS: u64 = 3600;

/// The key sign-in form tokens are made with: drawn once per process.
#[derive(Clone)]
pub(crate) struct LoginKey([u8; 32]);

impl std::fmt::Debug for LoginKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LoginKey(..)")
    }
}

impl LoginKey {
    /// A fresh random key.
    pub(crate) fn new() -> Self {
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        LoginKey(key)
    }

    /// A fresh pre-session cookie value: 256 random bits and their MAC under this key, so
    /// that a value we did not make (one a client or another site chose) is told apart.
    fn new_pre_session(&self) -> String {
        let nonce = random_token();
        let mac = URL_SAFE_NO_PAD.encode(self.pre_session_mac(&nonce).finalize().into_bytes());
        format!("{nonce}.{mac}")
    }

    /// Whether this key made the pre-session cookie value `value` (MAC compared in
    /// constant time).
    fn made(&self, value: &str) -> bool {
        let Some((nonce, mac)) = value.split_once('.') else {
            return false;
        };
        let Ok(mac) = URL_SAFE_NO_PAD.decode(mac) else {
            return false;
        };
        self.pre_session_mac(nonce).verify_slice(&mac).is_ok()
    }

    fn pre_session_mac(&self, nonce: &str) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        mac.update(b"console pre-session\0");
        mac.update(nonce.as_bytes());
        mac
    }

    /// The form token tied to a pre-session cookie.
    fn token(&self, pre_session: &str) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(pre_session).finalize().into_bytes())
    }

    /// Whether `token` is the one tied to `pre_session` (compared in constant time).
    fn verifies(&self, pre_session: &str, token: &str) -> bool {
        let Ok(token) = URL_SAFE_NO_PAD.decode(token) else {
            return false;
        };
        self.mac(pre_session).verify_slice(&token).is_ok()
    }

    fn mac(&self, pre_session: &str) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        mac.update(b"console sign-in form\0");
        mac.update(pre_session.as_bytes());
        mac
    }
}

/// 256 random bits, base64url.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

fn session_hash(session_id: &str) -> Vec<u8> {
    Sha256::digest(session_id.as_bytes()).to_vec()
}

fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    cookie(headers, COOKIE)
}

/// The value of the cookie called `wanted`, if the request carries it.
fn cookie<'a>(headers: &'a HeaderMap, wanted: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == wanted)
        .map(|(_, value)| value)
        .filter(|value| !value.is_empty())
}

/// True unless the request says it comes from another site. Browsers mark every request
/// with `Sec-Fetch-Site` (`same-origin` for our own forms) and send `Origin` on a POST,
/// except that `Referrer-Policy: no-referrer` makes them send `Origin: null`. A request
/// with neither (a script, curl) is left to the form token.
pub(crate) fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        if !matches!(site.to_str(), Ok("same-origin" | "none")) {
            return false;
        }
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let (Ok(origin), Some(Ok(host))) = (
        origin.to_str(),
        headers.get(header::HOST).map(HeaderValue::to_str),
    ) else {
        return false;
    };
    if origin == "null" {
        return true;
    }
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    origin_host == Some(host)
}

/// A signed-in account, extracted from the session cookie. Pages that need one redirect
/// to the sign-in page without it.
#[derive(Debug, Clone)]
pub struct Signed {
    session: Session,
}

impl Signed {
    /// The account.
    pub fn account(&self) -> &Account {
        &self.session.account
    }

    /// The account's name.
    pub fn name(&self) -> &str {
        &self.session.account.name
    }

    /// Who acts, as the evidence and the audit log record it: `console:NAME`, never to be
    /// taken for `outboxctl --actor NAME` (recorded as `cli:NAME`).
    pub fn actor(&self) -> String {
        format!("console:{}", self.name())
    }

    /// The tenants it may see (`None`: every tenant).
    pub fn scope(&self) -> Option<&[Uuid]> {
        self.session.account.tenant_ids.as_deref()
    }

    /// Whether the account may see `tenant_id`.
    pub fn sees_tenant(&self, tenant_id: Uuid) -> bool {
        self.scope()
            .is_none_or(|tenants| tenants.contains(&tenant_id))
    }

    /// Whether the account may see the tenant called `tenant`.
    pub fn sees_tenant_named(&self, tenant: &str) -> bool {
        self.scope().is_none()
            || self
                .session
                .account
                .tenant_names
                .iter()
                .any(|name| name == tenant)
    }

    /// Whether the account may act (an operator), not only read.
    pub fn can_act(&self) -> bool {
        self.session.account.role == "operator"
    }

    /// The session's form token.
    pub fn csrf(&self) -> &str {
        &self.session.csrf_token
    }

    /// Whether a form carries this session's token (compared in constant time).
    fn token_matches(&self, form_token: &str) -> bool {
        bool::from(
            self.session
                .csrf_token
                .as_bytes()
                .ct_eq(form_token.as_bytes()),
        )
    }

    /// Checks a form's token and that the account may act: what every action does first.
    pub fn authorize_action(&self, form_token: &str) -> Result<(), PageError> {
        if !self.token_matches(form_token) {
            return Err(PageError::Forbidden(
                "the form's token does not match this session; reload the page and try again"
                    .into(),
            ));
        }
        self.require_operator()
    }

    /// Refuses a viewer: what a page that leads to an action checks.
    pub fn require_operator(&self) -> Result<(), PageError> {
        if self.can_act() {
            Ok(())
        } else {
            Err(PageError::Forbidden(format!(
                "{} is a viewer: viewers can read but not act",
                self.name()
            )))
        }
    }
}

impl FromRequestParts<Console> for Signed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, Response> {
        let Some(cookie) = session_cookie(&parts.headers) else {
            return Err(Redirect::to("/console/login").into_response());
        };
        match operator_accounts::session(&console.pool, &session_hash(cookie)).await {
            Ok(Some(session)) => Ok(Signed { session }),
            Ok(None) => Err(Redirect::to("/console/login").into_response()),
            Err(err) => Err(PageError::from(err).into_response()),
        }
    }
}

/// `GET /console/login`: the form, with a token tied to the pre-session cookie (set here
/// unless the browser has one already).
pub(crate) async fn login_page(
    State(console): State<Console>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    login_form(&console, &headers, None, axum::http::StatusCode::OK)
}

/// The sign-in form with `error`, answered with `status`; the pre-session cookie is
/// (re)set with it.
fn login_form(
    console: &Console,
    headers: &HeaderMap,
    error: Option<&str>,
    status: axum::http::StatusCode,
) -> Result<Response, PageError> {
    // A value this process did not make is replaced: a client (or a page elsewhere that
    // planted it) does not get to choose the pre-session its form is tied to.
    let pre_session = cookie(headers, LOGIN_COOKIE)
        .filter(|value| console.login_key.made(value))
        .map(str::to_owned)
        .unwrap_or_else(|| console.login_key.new_pre_session());
    let mut page = console.views.render_public(
        "login.html",
        minijinja::context! {
            error => error,
            login_token => console.login_key.token(&pre_session),
        },
    )?;
    *page.status_mut() = status;
    let secure = if console.config.secure_cookies {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{LOGIN_COOKIE}={pre_session}; Path=/console/login; HttpOnly; SameSite=Strict; Max-Age={LOGIN_FORM_LIFETIME_SECS}{secure}"
    );
    page.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).map_err(|err| PageError::Internal(err.to_string()))?,
    );
    Ok(page)
}

/// The sign-in form.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct LoginForm {
    name: String,
    password: String,
    #[serde(default)]
    login_token: String,
}

/// What the audit log records as the name of sign-ins refused because their address had
/// its limit (not a valid account name, so no account's line is taken for it).
const ANY_NAME: &str = "(any name)";

/// How long a sign-in turned away for want of a password check is told to wait.
const BUSY_RETRY_AFTER_SECS: u64 = 2;

/// Longest account name counted as typed (a valid one is at most 64 bytes).
const MAX_COUNTED_NAME: usize = 200;

/// `POST /console/login`: checks the form's token, then the failure limits, then the
/// password; opens a session and sets its cookie.
pub(crate) async fn login(
    State(console): State<Console>,
    headers: HeaderMap,
    peer: Option<axum::Extension<PeerAddr>>,
    Form(form): Form<LoginForm>,
) -> Result<Response, PageError> {
    let token_ok = cookie(&headers, LOGIN_COOKIE).is_some_and(|pre_session| {
        console.login_key.made(pre_session)
            && console.login_key.verifies(pre_session, &form.login_token)
    });
    if !token_ok {
        return Err(PageError::Forbidden(
            "this sign-in form has expired or did not come from this console; reload the sign-in page and try again"
                .into(),
        ));
    }
    // The turn is taken before anything is counted: a sign-in turned away for want of
    // room has not guessed anything.
    let Some(turn) = console.config.password_checks.turn().await else {
        let mut page = login_form(
            &console,
            &headers,
            Some("the console is checking too many sign-ins at once; try again in a few seconds"),
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
        )?;
        page.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(BUSY_RETRY_AFTER_SECS),
        );
        return Ok(page);
    };
    let name = form.name.trim();
    let counted_name = match name.char_indices().nth(MAX_COUNTED_NAME) {
        Some((cut, _)) => &name[..cut],
        None => name,
    };
    let address = peer.map(|axum::Extension(PeerAddr(addr))| addr.ip());
    // Each failed or refused sign-in goes into the audit log's count for its name and
    // address. Past the address's own limit the names are no longer told apart: a flood
    // of made-up names from one address stays one line.
    let (pool, window) = (&console.pool, console.config.sign_in_limits.window);
    let failed = |name: &str| {
        let operator = format!("console:{name}");
        async move {
            outbox_store::audit::record_failed_sign_in(
                pool,
                &operator,
                &address.map_or_else(
                    || "unknown address".to_owned(),
                    operator_accounts::address_key,
                ),
                window,
            )
            .await
        }
    };
    if let SignInTurn::Refused {
        retry_after_secs,
        address_limited,
    } = operator_accounts::begin_sign_in(
        &console.pool,
        counted_name,
        address,
        console.config.sign_in_limits,
    )
    .await?
    {
        failed(if address_limited {
            ANY_NAME
        } else {
            counted_name
        })
        .await?;
        let minutes = (retry_after_secs + 59) / 60;
        let message = format!(
            "too many failed sign-ins for this name or from this address; try again in {minutes} minute{}",
            if minutes == 1 { "" } else { "s" }
        );
        let mut page = login_form(
            &console,
            &headers,
            Some(&message),
            axum::http::StatusCode::TOO_MANY_REQUESTS,
        )?;
        page.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
        return Ok(page);
    }
    let stored = operator_accounts::password_hash(&console.pool, name).await?;
    // An unknown name costs the same hashing as a wrong password, so timing does not tell
    // which names exist.
    let (account_id, hash) = match stored {
        Some((id, hash)) => (Some(id), hash),
        None => (None, DUMMY_HASH.to_owned()),
    };
    let matches = turn.check(form.password, hash).await;
    let Some(account_id) = account_id.filter(|_| matches) else {
        failed(counted_name).await?;
        return login_form(
            &console,
            &headers,
            Some("unknown name or wrong password"),
            axum::http::StatusCode::UNAUTHORIZED,
        );
    };
    operator_accounts::sign_in_succeeded(&console.pool, counted_name).await?;
    let session_id = random_token();
    operator_accounts::open_session(
        &console.pool,
        &session_hash(&session_id),
        account_id,
        &random_token(),
        console.config.session_lifetime,
    )
    .await?;
    let tenants = operator_accounts::tenant_ids(&console.pool, account_id).await?;
    outbox_store::audit::record_audit(
        &console.pool,
        &format!("console:{name}"),
        tenants.as_deref(),
        "signed in",
        &address.map_or_else(
            || "unknown address".to_owned(),
            operator_accounts::address_key,
        ),
        "",
    )
    .await?;
    let secure = if console.config.secure_cookies {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{COOKIE}={session_id}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        console.config.session_lifetime.as_secs()
    );
    let mut response = Redirect::to("/console").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).map_err(|err| PageError::Internal(err.to_string()))?,
    );
    // The pre-session has done its work.
    response.headers_mut().append(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "outbox_console_login=; Path=/console/login; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
    Ok(response)
}

/// A fixed argon2id hash (of a random password nobody kept, at the cost of
/// `outbox_core::password::hash_password`) to verify against when the name is unknown:
/// written out, so that no check outside the bound computes it.
const DUMMY_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$vjIJAKSHiflJgAXNcZ+TUw$ZoMUyQ4fRcchHmhbX679C/3Wns0Px7eXxRvde7lT0W8";

/// The sign-out form.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct TokenForm {
    csrf: String,
}

/// `POST /console/logout`: ends the session (viewers too) and clears the cookie.
pub(crate) async fn logout(
    State(console): State<Console>,
    signed: Signed,
    headers: HeaderMap,
    Form(form): Form<TokenForm>,
) -> Result<Response, PageError> {
    if !signed.token_matches(&form.csrf) {
        return Err(PageError::Forbidden(
            "the form's token does not match this session".into(),
        ));
    }
    if let Some(cookie) = session_cookie(&headers) {
        operator_accounts::close_session(&console.pool, &session_hash(cookie)).await?;
    }
    outbox_store::audit::record_audit(
        &console.pool,
        &signed.actor(),
        signed.scope(),
        "signed out",
        "",
        "",
    )
    .await?;
    let mut response = Redirect::to("/console/login").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "outbox_console=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::password::{hash_password, new_password};

    #[test]
    fn a_password_verifies_against_its_hash_and_nothing_else() {
        let password = new_password();
        let hash = hash_password(&password).expect("hash");
        assert!(hash.starts_with("$argon2id$"));
        assert!(!hash.contains(&password));
        let mut memory = Vec::new();
        let mut matches = |password: &str, hash: &str| {
            crate::password_checks::matches_in(&mut memory, password, hash)
        };
        assert!(matches(&password, &hash));
        assert!(!matches("wrong", &hash));
        assert!(!matches(&password, "not a hash"));
    }

    #[test]
    fn the_unknown_names_hash_costs_what_an_accounts_does() {
        let dummy = argon2::PasswordHash::new(DUMMY_HASH).expect("a PHC string");
        let real_hash = hash_password("x").expect("hash");
        let real = argon2::PasswordHash::new(&real_hash).expect("a PHC string");
        assert_eq!(dummy.algorithm, real.algorithm);
        assert_eq!(dummy.version, real.version);
        assert_eq!(dummy.params, real.params);
        assert_eq!(dummy.hash.map(|h| h.len()), real.hash.map(|h| h.len()));
    }

    #[test]
    fn passwords_and_session_ids_carry_256_random_bits() {
        let a = random_token();
        assert_eq!(URL_SAFE_NO_PAD.decode(&a).expect("base64").len(), 32);
        assert_ne!(a, random_token());
    }

    #[test]
    fn a_sign_in_token_verifies_only_with_its_own_cookie_and_key() {
        let key = LoginKey::new();
        let token = key.token("cookie-a");
        assert!(key.verifies("cookie-a", &token));
        assert!(!key.verifies("cookie-b", &token));
        assert!(!key.verifies("cookie-a", "not base64!"));
        assert!(!key.verifies("cookie-a", ""));
        assert!(!LoginKey::new().verifies("cookie-a", &token));
    }

    #[test]
    fn a_pre_session_is_recognised_only_by_the_key_that_made_it() {
        let key = LoginKey::new();
        let value = key.new_pre_session();
        assert!(key.made(&value));
        assert_ne!(value, key.new_pre_session());
        assert!(!LoginKey::new().made(&value));
        let (nonce, _) = value.split_once('.').expect("nonce.mac");
        assert!(!key.made(nonce));
        assert!(!key.made(&format!("{nonce}.AAAA")));
        assert!(!key.made("chosen-by-the-client"));
        assert!(!key.made(""));
    }

    #[test]
    fn a_post_from_another_origin_is_told_apart() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8081"));
        assert!(same_origin(&headers));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8081"),
        );
        assert!(same_origin(&headers));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(!same_origin(&headers));
        headers.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(
            same_origin(&headers),
            "no-referrer makes our own forms send Origin: null"
        );
        headers.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert!(same_origin(&headers));
        headers.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(!same_origin(&headers));
    }
}
