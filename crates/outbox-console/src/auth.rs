//! Who is signed in, and what they may do.
//!
//! A password is shown once by `outboxctl operator add` and stored only as an argon2id
//! hash; signing in (module `sign_in`) opens a session: a 256-bit random id in an HttpOnly,
//! SameSite=Strict cookie (Secure when configured), stored as its SHA-256, so a copy of the
//! database signs nobody in. Each session has its own form token; every POST must carry
//! it, compared in constant time ([`Authorized`] checks it for every action). A viewer
//! reads; an operator acts; an account limited to some tenants sees and acts on those
//! only, because its grant goes into every query.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use outbox_core::OperatorRole;
use outbox_store::operator_accounts::{self, Account, Session};
use rand::RngCore;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use crate::error_page::PageError;
use crate::input::Form;
use crate::Console;

/// The session cookie's name.
pub const COOKIE: &str = "outbox_console";

/// 256 random bits, base64url.
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// What the database keeps of a session id: its SHA-256.
pub(crate) fn session_hash(session_id: &str) -> Vec<u8> {
    Sha256::digest(session_id.as_bytes()).to_vec()
}

/// The session id the request carries, if any.
pub(crate) fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    cookie(headers, COOKIE)
}

/// The value of the cookie called `wanted`, if the request carries it.
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, wanted: &str) -> Option<&'a str> {
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
        self.session.account.role == OperatorRole::Operator
    }

    /// The session's form token.
    pub fn csrf(&self) -> &str {
        &self.session.csrf_token
    }

    /// Whether a form carries this session's token (compared in constant time).
    pub(crate) fn token_matches(&self, form_token: &str) -> bool {
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

/// An action's form `F`, from a signed-in operator, carrying the session's form token:
/// what every action handler takes, so that none acts before [`Signed::authorize_action`].
/// A request without a session is sent to the sign-in page, as for [`Signed`].
#[derive(Debug)]
pub(crate) struct Authorized<F> {
    pub(crate) signed: Signed,
    pub(crate) form: F,
}

/// An action's form as the browser posts it: the session's token beside the fields.
#[derive(Debug, serde::Deserialize)]
struct WithToken<F> {
    #[serde(default)]
    csrf: String,
    #[serde(flatten)]
    fields: F,
}

impl<F: DeserializeOwned> FromRequest<Console> for Authorized<F> {
    type Rejection = Response;

    async fn from_request(request: Request, console: &Console) -> Result<Self, Response> {
        let (mut parts, body) = request.into_parts();
        let signed = Signed::from_request_parts(&mut parts, console).await?;
        let request = Request::from_parts(parts, body);
        let Form(form) = Form::<WithToken<F>>::from_request(request, console)
            .await
            .map_err(IntoResponse::into_response)?;
        signed
            .authorize_action(&form.csrf)
            .map_err(IntoResponse::into_response)?;
        Ok(Authorized {
            signed,
            form: form.fields,
        })
    }
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
    fn passwords_and_session_ids_carry_256_random_bits() {
        let a = random_token();
        assert_eq!(URL_SAFE_NO_PAD.decode(&a).expect("base64").len(), 32);
        assert_ne!(a, random_token());
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
