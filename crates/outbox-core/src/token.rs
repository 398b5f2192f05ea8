//! API tokens. A token is `aot_` followed by 43 characters of URL-safe base64 (256 random
//! bits). It is shown once when created; only its SHA-256 is stored, so the database cannot
//! give it back and a copy of the table cannot be used to call the API.

use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::fmt;

const PREFIX: &str = "aot_";

/// A bearer token in plain text. Its `Debug` form is redacted so it cannot leak into logs.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken(String);

/// The SHA-256 of a token: what the database stores and looks tokens up by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenHash(pub [u8; 32]);

impl ApiToken {
    /// A fresh random token.
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        ApiToken(format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
        ))
    }

    /// Wraps a token presented by a caller. Returns `None` when it cannot be one of ours,
    /// so obviously wrong input never reaches the database.
    pub fn parse(presented: &str) -> Option<Self> {
        let body = presented.strip_prefix(PREFIX)?;
        let well_formed = body.len() == 43
            && body
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        well_formed.then(|| ApiToken(presented.to_owned()))
    }

    /// The token's text, to show its owner once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The hash under which the token is stored.
    pub fn hash(&self) -> TokenHash {
        TokenHash(Sha256::digest(self.0.as_bytes()).into())
    }
}

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiToken(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_parse_and_differ() {
        let a = ApiToken::generate();
        let b = ApiToken::generate();
        assert_ne!(a, b);
        assert_eq!(ApiToken::parse(a.expose()), Some(a.clone()));
        assert_eq!(a.hash(), ApiToken::parse(a.expose()).unwrap().hash());
        assert_ne!(a.hash(), b.hash());
    }

    #[test]
    fn malformed_tokens_are_refused() {
        for bad in [
            "",
            "aot_",
            "aot_short",
            "xyz_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ] {
            assert_eq!(ApiToken::parse(bad), None, "{bad}");
        }
        let with_space = format!("aot_{}", " ".repeat(43));
        assert_eq!(ApiToken::parse(&with_space), None);
    }

    #[test]
    fn debug_never_shows_the_token() {
        let token = ApiToken::generate();
        assert!(!format!("{token:?}").contains(&token.expose()[4..]));
    }
}
