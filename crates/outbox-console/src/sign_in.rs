//! Signing in and out: the sign-in form and its token, the password check, the failure
//! limits, and the session cookie set or cleared.
//!
//! The sign-in form is protected (login CSRF: a page elsewhere must not sign a browser in
//! to an account of the attacker's choosing). Showing the form sets a pre-session cookie
//! (HttpOnly, SameSite=Strict, on `/console/login` only) and puts in the form a token tied
//! to it: an HMAC of the cookie under a key this process draws at start. The cookie's
//! value is random bits with their own HMAC under that key: one this process did not make
//! (chosen by the client, or planted by someone else) is replaced by a fresh one when the
//! form is shown, and never accepted with a sign-in. A sign-in without both, or with a
//! token of another cookie, is refused before any password is checked. The key lives in
//! memory: after a restart, or on another console process, a form shown before is refused
//! and the operator reloads it.
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

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use outbox_runtime::http_server::PeerAddr;
use outbox_store::operator_accounts::{self, SignInTurn};
use rand::RngCore;
use sha2::Sha256;
use std::net::IpAddr;
use uuid::Uuid;

use crate::auth::{cookie, random_token, session_cookie, session_hash, Signed, COOKIE};
use crate::error_page::PageError;
use crate::input::Form;
use crate::password_checks::Turn;
use crate::Console;

/// The pre-session cookie's name: set with the sign-in form, only sent back to it.
pub const LOGIN_COOKIE: &str = "outbox_console_login";

/// How long a sign-in form stays usable.
const LOGIN_FORM_LIFETIME_SECS: u64 = 3600;

/// What the MAC of a pre-session cookie's random bits is made for.
const PRE_SESSION: &[u8] = b"console pre-session\0";

/// What the MAC of a pre-session cookie, the sign-in form's token, is made for.
const SIGN_IN_FORM: &[u8] = b"console sign-in form\0";

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
        let mac = self.encoded_mac(PRE_SESSION, &nonce);
        format!("{nonce}.{mac}")
    }

    /// Whether this key made the pre-session cookie value `value` (MAC compared in
    /// constant time).
    fn made(&self, value: &str) -> bool {
        let Some((nonce, mac)) = value.split_once('.') else {
            return false;
        };
        self.verifies_mac(PRE_SESSION, nonce, mac)
    }

    /// The form token tied to a pre-session cookie.
    fn token(&self, pre_session: &str) -> String {
        self.encoded_mac(SIGN_IN_FORM, pre_session)
    }

    /// Whether `token` is the one tied to `pre_session` (compared in constant time).
    fn verifies(&self, pre_session: &str, token: &str) -> bool {
        self.verifies_mac(SIGN_IN_FORM, pre_session, token)
    }

    /// The MAC of `text` made for `purpose`, base64url.
    fn encoded_mac(&self, purpose: &[u8], text: &str) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(purpose, text).finalize().into_bytes())
    }

    /// Whether `encoded` (base64url) is the MAC of `text` made for `purpose`, compared in
    /// constant time.
    fn verifies_mac(&self, purpose: &[u8], text: &str, encoded: &str) -> bool {
        let Ok(mac) = URL_SAFE_NO_PAD.decode(encoded) else {
            return false;
        };
        self.mac(purpose, text).verify_slice(&mac).is_ok()
    }

    fn mac(&self, purpose: &[u8], text: &str) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        mac.update(purpose);
        mac.update(text.as_bytes());
        mac
    }
}

/// `GET /console/login`: the form, with a token tied to the pre-session cookie (set here
/// unless the browser has one already).
pub(crate) async fn login_page(
    State(console): State<Console>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    login_form(&console, &headers, None, StatusCode::OK)
}

/// The sign-in form with `error`, answered with `status`; the pre-session cookie is
/// (re)set with it.
fn login_form(
    console: &Console,
    headers: &HeaderMap,
    error: Option<&str>,
    status: StatusCode,
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
    let cookie = SetCookie {
        name: LOGIN_COOKIE,
        value: &pre_session,
        path: "/console/login",
        max_age_secs: LOGIN_FORM_LIFETIME_SECS,
        secure: console.config.secure_cookies,
    };
    page.headers_mut()
        .insert(header::SET_COOKIE, cookie.header()?);
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
    check_form_token(&console, &headers, &form.login_token)?;
    // The turn is taken before anything is counted: a sign-in turned away for want of
    // room has not guessed anything.
    let Some(turn) = console.config.password_checks.turn().await else {
        let mut page = login_form(
            &console,
            &headers,
            Some("the console is checking too many sign-ins at once; try again in a few seconds"),
            StatusCode::SERVICE_UNAVAILABLE,
        )?;
        retry_after(&mut page, BUSY_RETRY_AFTER_SECS);
        return Ok(page);
    };
    let attempt = Attempt::new(&console, &form.name, peer);
    if let SignInTurn::Refused {
        retry_after_secs,
        address_limited,
    } = operator_accounts::begin_sign_in(
        &console.pool,
        attempt.counted_name,
        attempt.address,
        console.config.sign_in_limits,
    )
    .await?
    {
        return attempt
            .refused_for_failures(&headers, retry_after_secs, address_limited)
            .await;
    }
    let Some(account_id) = attempt.check_password(turn, form.password).await? else {
        attempt.count_failure(attempt.counted_name).await?;
        return login_form(
            &console,
            &headers,
            Some("unknown name or wrong password"),
            StatusCode::UNAUTHORIZED,
        );
    };
    operator_accounts::sign_in_succeeded(&console.pool, attempt.counted_name).await?;
    attempt.open_session(account_id).await
}

/// Refuses a sign-in without the token of its own pre-session cookie, one this process
/// made.
fn check_form_token(console: &Console, headers: &HeaderMap, token: &str) -> Result<(), PageError> {
    let token_ok = cookie(headers, LOGIN_COOKIE).is_some_and(|pre_session| {
        console.login_key.made(pre_session) && console.login_key.verifies(pre_session, token)
    });
    if !token_ok {
        return Err(PageError::Forbidden(
            "this sign-in form has expired or did not come from this console; reload the sign-in page and try again"
                .into(),
        ));
    }
    Ok(())
}

/// One sign-in, past its form token: who it names and where it comes from.
struct Attempt<'a> {
    console: &'a Console,
    /// The name as typed, trimmed.
    name: &'a str,
    /// The name as the failure limits and the audit log count it: at most
    /// [`MAX_COUNTED_NAME`] characters.
    counted_name: &'a str,
    address: Option<IpAddr>,
}

impl<'a> Attempt<'a> {
    fn new(console: &'a Console, name: &'a str, peer: Option<axum::Extension<PeerAddr>>) -> Self {
        let name = name.trim();
        let counted_name = match name.char_indices().nth(MAX_COUNTED_NAME) {
            Some((cut, _)) => &name[..cut],
            None => name,
        };
        Attempt {
            console,
            name,
            counted_name,
            address: peer.map(|axum::Extension(PeerAddr(addr))| addr.ip()),
        }
    }

    /// The client's address as the audit log writes it.
    fn address_text(&self) -> String {
        self.address.map_or_else(
            || "unknown address".to_owned(),
            operator_accounts::address_key,
        )
    }

    /// Counts a failed or refused sign-in in the audit log, on the line of `name` and the
    /// address.
    async fn count_failure(&self, name: &str) -> Result<(), PageError> {
        outbox_store::audit::record_failed_sign_in(
            &self.console.pool,
            &format!("console:{name}"),
            &self.address_text(),
            self.console.config.sign_in_limits.window,
        )
        .await?;
        Ok(())
    }

    /// The answer to a sign-in past the failure limits: counted (past the address's own
    /// limit the names are no longer told apart, so a flood of made-up names from one
    /// address stays one line), and told when to try again.
    async fn refused_for_failures(
        &self,
        headers: &HeaderMap,
        retry_after_secs: i64,
        address_limited: bool,
    ) -> Result<Response, PageError> {
        self.count_failure(if address_limited {
            ANY_NAME
        } else {
            self.counted_name
        })
        .await?;
        let minutes = (retry_after_secs + 59) / 60;
        let message = format!(
            "too many failed sign-ins for this name or from this address; try again in {minutes} minute{}",
            if minutes == 1 { "" } else { "s" }
        );
        let mut page = login_form(
            self.console,
            headers,
            Some(&message),
            StatusCode::TOO_MANY_REQUESTS,
        )?;
        retry_after(&mut page, retry_after_secs);
        Ok(page)
    }

    /// The account whose password `password` is, if the name is an account's and the
    /// password its own.
    async fn check_password(
        &self,
        turn: Turn,
        password: String,
    ) -> Result<Option<Uuid>, PageError> {
        let stored = operator_accounts::password_hash(&self.console.pool, self.name).await?;
        // An unknown name costs the same hashing as a wrong password, so timing does not tell
        // which names exist.
        let (account_id, hash) = match stored {
            Some((id, hash)) => (Some(id), hash),
            None => (None, DUMMY_HASH.to_owned()),
        };
        let matches = turn.check(password, hash).await;
        Ok(account_id.filter(|_| matches))
    }

    /// Opens a session for `account_id`, records the sign-in, and answers with its cookie
    /// (the pre-session cookie cleared).
    async fn open_session(&self, account_id: Uuid) -> Result<Response, PageError> {
        let console = self.console;
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
            &format!("console:{}", self.name),
            tenants.as_deref(),
            "signed in",
            &self.address_text(),
            "",
        )
        .await?;
        let session = SetCookie {
            name: COOKIE,
            value: &session_id,
            path: "/console",
            max_age_secs: console.config.session_lifetime.as_secs(),
            secure: console.config.secure_cookies,
        };
        let mut response = Redirect::to("/console").into_response();
        response
            .headers_mut()
            .insert(header::SET_COOKIE, session.header()?);
        // The pre-session has done its work.
        response.headers_mut().append(
            header::SET_COOKIE,
            SetCookie::cleared(LOGIN_COOKIE, "/console/login").header()?,
        );
        Ok(response)
    }
}

/// Tells the client to wait `secs` before trying again.
fn retry_after(page: &mut Response, secs: impl Into<HeaderValue>) {
    page.headers_mut().insert(header::RETRY_AFTER, secs.into());
}

/// A fixed argon2id hash (of a random password nobody kept, at the cost of
/// `outbox_core::password::hash_password`) to verify against when the name is unknown:
/// written out, so that no check outside the bound computes it.
const DUMMY_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$vjIJAKSHiflJgAXNcZ+TUw$ZoMUyQ4fRcchHmhbX679C/3Wns0Px7eXxRvde7lT0W8";

/// A cookie the console sets: HttpOnly and SameSite=Strict always, Secure when configured.
struct SetCookie<'a> {
    name: &'a str,
    value: &'a str,
    path: &'a str,
    max_age_secs: u64,
    secure: bool,
}

impl<'a> SetCookie<'a> {
    /// The cookie `name` on `path` removed from the browser.
    fn cleared(name: &'a str, path: &'a str) -> Self {
        SetCookie {
            name,
            value: "",
            path,
            max_age_secs: 0,
            secure: false,
        }
    }

    /// The `Set-Cookie` header's value.
    fn header(&self) -> Result<HeaderValue, PageError> {
        let secure = if self.secure { "; Secure" } else { "" };
        let cookie = format!(
            "{}={}; Path={}; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
            self.name, self.value, self.path, self.max_age_secs
        );
        HeaderValue::from_str(&cookie).map_err(|err| PageError::Internal(err.to_string()))
    }
}

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
        SetCookie::cleared(COOKIE, "/console").header()?,
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::password::hash_password;

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
    fn cookies_are_written_with_their_attributes() {
        let cookie = SetCookie {
            name: COOKIE,
            value: "abc",
            path: "/console",
            max_age_secs: 60,
            secure: true,
        };
        assert_eq!(
            cookie.header().expect("a header value"),
            "outbox_console=abc; Path=/console; HttpOnly; SameSite=Strict; Max-Age=60; Secure"
        );
        assert_eq!(
            SetCookie::cleared(LOGIN_COOKIE, "/console/login")
                .header()
                .expect("a header value"),
            "outbox_console_login=; Path=/console/login; HttpOnly; SameSite=Strict; Max-Age=0"
        );
    }
}
