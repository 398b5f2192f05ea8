//! Bearer tokens. Each token belongs to one tenant, and everything a request reads or
//! writes is scoped to that tenant: another tenant's alert is "not found", never
//! "forbidden", so ids do not leak across tenants.
//!
//! A token the database accepted is kept in a [`TokenCache`] for at most
//! [`TOKEN_CACHE_TTL`], so a busy client costs one token lookup a second instead of one a
//! request. That is the bound on revocation: a token revoked (or whose expiry is moved
//! earlier) is refused by every request that starts [`TOKEN_CACHE_TTL`] or more after the
//! change was committed (an answer is timed from before it was asked for), and by any
//! earlier one that finds no answer kept. An expiry
//! that simply arrives is exact, the cache keeps each token's `expires_at`. Unknown,
//! revoked and expired tokens are never kept: each is asked about every time.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use chrono::Utc;
use outbox_core::{ApiToken, TokenHash};
use outbox_store::tokens::Authenticated;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::{AppState, Problem};

/// How long a token the database accepted is believed without asking again: the bound on
/// how long a revoked token may still be accepted.
pub const TOKEN_CACHE_TTL: Duration = Duration::from_secs(1);

/// Most tokens kept at once; past it, entries are dropped (expired ones first), so a
/// flood of valid tokens cannot grow the process.
const MAX_CACHED_TOKENS: usize = 10_000;

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
        Caller::authenticate(state, presented).await
    }
}

impl Caller {
    /// The tenant a presented token acts for: from the cache when the database accepted
    /// it less than [`TOKEN_CACHE_TTL`] ago, else from the database.
    pub(crate) async fn authenticate(state: &AppState, presented: &str) -> Result<Caller, Problem> {
        let token = ApiToken::parse(presented)
            .ok_or_else(|| Problem::unauthorized("the bearer token is not valid"))?;
        let hash = token.hash();
        let found = match state.tokens.get(&hash) {
            Some(found) => found,
            None => {
                // Timed from before the question: an answer read just before a revocation
                // committed is not kept past the bound because it arrived after it.
                let asked = Instant::now();
                let found = outbox_store::tokens::authenticate(&state.pool, hash)
                    .await?
                    .ok_or_else(|| Problem::unauthorized("the bearer token is not valid"))?;
                state.tokens.insert(hash, found, asked);
                found
            }
        };
        Ok(Caller {
            tenant_id: found.tenant_id,
            actor: format!("api-token:{}", found.token_id),
        })
    }
}

/// Tokens the database accepted, by hash, each with when it was asked about.
#[derive(Debug)]
pub(crate) struct TokenCache {
    ttl: Duration,
    entries: Mutex<HashMap<[u8; 32], (Authenticated, Instant)>>,
}

impl TokenCache {
    pub(crate) fn new(ttl: Duration) -> Self {
        TokenCache {
            ttl,
            entries: Mutex::default(),
        }
    }

    /// The answer kept for `hash`, unless it is older than the TTL or the token has
    /// expired since.
    fn get(&self, hash: &TokenHash) -> Option<Authenticated> {
        self.get_at(hash, Instant::now())
    }

    fn get_at(&self, hash: &TokenHash, now: Instant) -> Option<Authenticated> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let (found, asked) = entries.get(&hash.0)?;
        self.fresh(found, *asked, now).then_some(*found)
    }

    /// Keeps the database's answer about `hash`, asked at `asked`.
    fn insert(&self, hash: TokenHash, found: Authenticated, asked: Instant) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if entries.len() >= MAX_CACHED_TOKENS {
            entries.retain(|_, (found, asked)| self.fresh(found, *asked, now));
            if entries.len() >= MAX_CACHED_TOKENS {
                entries.clear();
            }
        }
        entries.insert(hash.0, (found, asked));
    }

    fn fresh(&self, found: &Authenticated, asked: Instant, now: Instant) -> bool {
        now.saturating_duration_since(asked) < self.ttl
            && found.expires_at.is_none_or(|at| at > Utc::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(expires_in: Option<chrono::Duration>) -> Authenticated {
        Authenticated {
            tenant_id: Uuid::now_v7(),
            token_id: Uuid::now_v7(),
            expires_at: expires_in.map(|d| Utc::now() + d),
        }
    }

    #[test]
    fn an_answer_is_kept_only_within_the_ttl_and_never_past_the_tokens_expiry() {
        let cache = TokenCache::new(Duration::from_secs(3600));
        let (lasting, expired) = (TokenHash([1; 32]), TokenHash([2; 32]));
        let found = accepted(None);
        cache.insert(lasting, found, Instant::now());
        cache.insert(
            expired,
            accepted(Some(chrono::Duration::seconds(-1))),
            Instant::now(),
        );
        assert_eq!(cache.get(&lasting), Some(found));
        assert_eq!(
            cache.get(&expired),
            None,
            "expired since it was asked about"
        );
        assert_eq!(cache.get(&TokenHash([3; 32])), None);

        let an_hour_on = Instant::now() + Duration::from_secs(3600);
        assert_eq!(
            cache.get_at(&lasting, an_hour_on),
            None,
            "older than the TTL"
        );

        let off = TokenCache::new(Duration::ZERO);
        off.insert(lasting, found, Instant::now());
        assert_eq!(off.get(&lasting), None);
    }

    #[test]
    fn a_full_cache_makes_room() {
        let cache = TokenCache::new(Duration::from_secs(3600));
        for i in 0..=MAX_CACHED_TOKENS {
            let mut hash = [0; 32];
            hash[..8].copy_from_slice(&(i as u64).to_le_bytes());
            cache.insert(TokenHash(hash), accepted(None), Instant::now());
        }
        let kept = cache
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len();
        assert!(kept <= MAX_CACHED_TOKENS, "{kept}");
        assert!(kept >= 1, "the newest is kept");
    }
}
