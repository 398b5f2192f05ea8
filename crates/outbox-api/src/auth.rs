//! Bearer tokens. Each token belongs to one tenant, and everything a request reads or
//! writes is scoped to that tenant: another tenant's alert is "not found", never
//! "forbidden", so ids do not leak across tenants.
//!
//! Every request looks its token up in the database (no cache), so a revoked or expired
//! token is refused with 401 from the next request on.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use outbox_core::ApiToken;
use uuid::Uuid;

use crate::{AppState, Problem};

/// The authenticated caller.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub tenant_id: Uuid,
    /// How the caller appears in evidence trails (`api-token:<token id>`).
    pub actor: String,
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .ok_or_else(|| Problem::unauthorized("send `Authorization: Bearer <token>`"))?;
        let presented = header
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| {
                Problem::unauthorized("the Authorization header must be `Bearer <token>`")
            })?;
        let token = ApiToken::parse(presented)
            .ok_or_else(|| Problem::unauthorized("the bearer token is not valid"))?;
        let (tenant_id, token_id) = outbox_store::tokens::authenticate(&state.pool, token.hash())
            .await?
            .ok_or_else(|| Problem::unauthorized("the bearer token is not valid"))?;
        Ok(Caller {
            tenant_id,
            actor: format!("api-token:{token_id}"),
        })
    }
}
