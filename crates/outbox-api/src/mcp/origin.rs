//! Which browser pages may call `/mcp`: the `Origin` check the MCP specification asks of
//! every Streamable HTTP server against DNS rebinding.
//!
//! The rule, from the transport's security warning
//! (<https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#security-warning>):
//! servers must validate the `Origin` header of every incoming connection, and answer
//! `403 Forbidden` when it is present and invalid. A browser sends `Origin` with every
//! cross-origin request and every POST; agents, SDKs and `curl` send none, so a request
//! without it is served as before. A request whose `Origin` is not one the operator listed
//! (`decider serve --mcp-allowed-origins`) is refused before its token is even read.
//!
//! An origin equal to the request's own `Host` is not let through on that ground: that is
//! exactly what a rebinding page looks like (its name now points at this server, so its
//! requests are same-origin to the browser). A page served under the decider's own name
//! that should call `/mcp` is listed like any other.

use axum::http::{header, HeaderMap, StatusCode};

use crate::Problem;

/// An origin as browsers serialise it (RFC 6454): scheme, host and port, compared with
/// scheme and host in lowercase and the scheme's default port made explicit.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

impl Origin {
    /// `scheme://host[:port]` and nothing more (no path, no user, no query), or `None`.
    fn parse(text: &str) -> Option<Origin> {
        let (scheme, authority) = text.split_once("://")?;
        let scheme_is_valid = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if !scheme_is_valid || authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
            return None;
        }
        let authority: axum::http::uri::Authority = authority.parse().ok()?;
        let scheme = scheme.to_ascii_lowercase();
        let port = authority.port_u16().or(match scheme.as_str() {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        });
        Some(Origin {
            host: authority.host().to_ascii_lowercase(),
            scheme,
            port,
        })
    }
}

/// The browser origins allowed to call `/mcp`; by default none, so that every request
/// carrying `Origin` is refused.
#[derive(Debug, Clone, Default)]
pub struct AllowedOrigins(Vec<Origin>);

impl AllowedOrigins {
    /// Reads a comma-separated list of origins (`https://agents.example.com,
    /// http://localhost:6274`), as a browser sends them; an empty text allows none. The
    /// error names the entry that is not an origin.
    pub fn parse(list: &str) -> Result<AllowedOrigins, String> {
        let mut origins = Vec::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let origin = Origin::parse(entry).ok_or_else(|| {
                format!(
                    "`{}` is not an origin: write it as a browser sends it, \
                     scheme://host[:port] (e.g. https://agents.example.com)",
                    outbox_core::untrusted::visible(entry)
                )
            })?;
            origins.push(origin);
        }
        Ok(AllowedOrigins(origins))
    }

    /// The refusal for a request with these headers, or `None` when it may go on: it
    /// carries no `Origin` (not a browser), or one allowed origin.
    pub(crate) fn refusal(&self, headers: &HeaderMap) -> Option<Problem> {
        let mut values = headers.get_all(header::ORIGIN).iter();
        let first = values.next()?;
        let allowed = values.next().is_none()
            && first
                .to_str()
                .ok()
                .and_then(Origin::parse)
                .is_some_and(|origin| self.0.contains(&origin));
        if allowed {
            return None;
        }
        // The value is the caller's: it goes to the debug log (shown as text there), never
        // into the answer.
        tracing::debug!(origin = ?first, "refused a request to /mcp from an origin not allowed");
        Some(Problem::new(
            StatusCode::FORBIDDEN,
            "origin-not-allowed",
            "Origin not allowed",
            "`/mcp` serves browser pages only from the origins its operator allows \
             (`decider serve --mcp-allowed-origins`), against DNS rebinding; this request's \
             `Origin` is not one of them. Clients that are not browsers send no `Origin`",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(origins: &[&[u8]]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for origin in origins {
            let value = HeaderValue::from_bytes(origin).unwrap_or(HeaderValue::from_static(""));
            headers.append(header::ORIGIN, value);
        }
        headers
    }

    fn refused(allowed: &AllowedOrigins, origins: &[&[u8]]) -> bool {
        allowed.refusal(&headers(origins)).is_some()
    }

    #[test]
    fn only_listed_origins_pass_and_requests_without_one_are_served() {
        let allowed = AllowedOrigins::parse(" https://Agents.Example.com , http://localhost:6274,")
            .unwrap_or_default();
        assert!(!refused(&allowed, &[]));
        for ok in [
            &b"https://agents.example.com"[..],
            b"HTTPS://AGENTS.EXAMPLE.COM:443",
            b"http://localhost:6274",
        ] {
            assert!(!refused(&allowed, &[ok]), "{ok:?}");
        }
        for not_ok in [
            &b"https://evil.example"[..],
            b"http://agents.example.com",
            b"https://agents.example.com:8443",
            b"http://localhost:6275",
            b"http://localhost",
            b"null",
            b"https://agents.example.com/path",
            b"https://user@agents.example.com",
            b"",
            b"\xff",
        ] {
            assert!(refused(&allowed, &[not_ok]), "{not_ok:?}");
        }
        // Two origins are no origin at all.
        assert!(refused(
            &allowed,
            &[b"https://agents.example.com", b"https://evil.example"]
        ));
    }

    #[test]
    fn by_default_every_request_with_an_origin_is_refused() {
        let none = AllowedOrigins::parse("").unwrap_or_default();
        assert!(!refused(&none, &[]));
        assert!(refused(&none, &[b"http://127.0.0.1:8080"]));
        let problem = none.refusal(&headers(&[b"https://evil.example"]));
        let document = problem.map(|p| p.document()).unwrap_or_default();
        assert_eq!(document["status"], 403);
        assert_eq!(document["type"], "/problems/origin-not-allowed");
        assert!(!document.to_string().contains("evil"), "{document}");
    }

    #[test]
    fn an_entry_that_is_no_origin_is_named() {
        for bad in [
            "agents.example.com",
            "https://a.example/mcp",
            "*",
            "https://",
        ] {
            let err = AllowedOrigins::parse(&format!("https://ok.example,{bad}"))
                .err()
                .unwrap_or_default();
            assert!(err.contains(&format!("`{bad}` is not an origin")), "{err}");
        }
    }
}
