//! Which PostgreSQL server a pool talks to, when `DATABASE_URL` names several: libpq's
//! multi-host form, `postgres://user@h1:5432,h2:5433/db?target_session_attrs=read-write`.
//!
//! As in libpq, the hosts are tried in the order given, and a server whose session does not
//! have the wanted attributes (for `read-write`: one in recovery, or read-only) is left for
//! the next host. `prefer-standby` tries every host for a standby first, then any server.
//! A URL with one host and no `target_session_attrs` is what it always was.
//!
//! libpq makes this choice for each connection; a sqlx pool opens its connections with one
//! set of options, so [`ServerList::find`] makes it for a whole pool.

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};
use std::str::FromStr;

pub use crate::server_role::{ServerRole, SessionAttrs};
use crate::StoreError;

/// The servers a `DATABASE_URL` names, in order, and what the session must be.
#[derive(Debug, Clone)]
pub struct ServerList {
    servers: Vec<Server>,
    attrs: SessionAttrs,
}

/// One server of the list: its options (the URL with this host alone) and its `host:port`.
#[derive(Debug, Clone)]
pub struct Server {
    /// How to connect to it.
    pub options: PgConnectOptions,
    /// `host:port` as written, for logs.
    pub label: String,
}

impl ServerList {
    /// Reads a `postgres://` URL with one or more comma-separated `host[:port]` (IPv6 in
    /// brackets) and an optional `target_session_attrs`. Everything else in the URL (user,
    /// password, database, other parameters) applies to every host.
    pub fn parse(url: &str) -> Result<ServerList, StoreError> {
        let bad = |why: &str| StoreError::BadDatabaseUrl(why.to_owned());
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("expected postgres://[user@]host[:port][,host[:port]...]/db"))?;
        if scheme != "postgres" && scheme != "postgresql" {
            return Err(bad(&format!(
                "scheme `{scheme}`: expected postgres:// or postgresql://"
            )));
        }
        // The authority ends at the first '/', '?' or '#'; the user part at its last '@'.
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let (userinfo, hosts) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        let (path, query) = match tail.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (tail, None),
        };
        let mut attrs = SessionAttrs::Any;
        let mut kept = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some(("target_session_attrs", value)) => attrs = value.parse()?,
                _ if !pair.is_empty() => kept.push(pair),
                _ => {}
            }
        }
        let query = if kept.is_empty() {
            String::new()
        } else {
            format!("?{}", kept.join("&"))
        };
        let user = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        // An `@` past the authority, with none in it, is most likely a password holding an
        // unescaped `/`, `?` or `#`, which cut the authority short: what was read as the
        // host list then starts with `user:pass...`. Such hosts are never echoed, in errors
        // or in logs; they are named by their place in the list.
        let may_hold_userinfo = userinfo.is_none() && rest.contains('@');
        let mut servers = Vec::new();
        for (index, host) in hosts.split(',').enumerate() {
            if host.is_empty() {
                return Err(bad("an empty host in the host list"));
            }
            let label = if may_hold_userinfo {
                format!("host {}", index + 1)
            } else {
                host.to_owned()
            };
            let single = format!("{scheme}://{user}{host}{path}{query}");
            let options = PgConnectOptions::from_str(&single).map_err(|err| {
                let cause = crate::error::cause(&err);
                StoreError::BadDatabaseUrl(if may_hold_userinfo {
                    format!(
                        "{label}: {cause} (a `/`, `?` or `#` in the user name or password must \
                         be percent-encoded: %2F, %3F, %23)"
                    )
                } else {
                    format!("host `{host}`: {cause}")
                })
            })?;
            servers.push(Server { options, label });
        }
        Ok(ServerList { servers, attrs })
    }

    /// What the session must be.
    pub fn attrs(&self) -> SessionAttrs {
        self.attrs
    }

    /// The servers, in order.
    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// True when the URL named one host and no session attributes: nothing to choose.
    pub fn is_single(&self) -> bool {
        self.servers.len() == 1 && self.attrs == SessionAttrs::Any
    }

    /// The first server, in order, that accepts a connection and qualifies, with its
    /// index; `prefer-standby` settles for the first server that accepts one when none is
    /// a standby. Errors: the last connection error, or that no server qualified.
    pub async fn find(
        &self,
        prepare: impl Fn(PgConnectOptions) -> PgConnectOptions,
    ) -> Result<(usize, PgConnectOptions), StoreError> {
        let mut last_error = None;
        let mut fallback = None;
        let mut roles = Vec::new();
        for (index, server) in self.servers.iter().enumerate() {
            let options = prepare(server.options.clone());
            let role = async {
                let mut conn = options.connect().await?;
                let role = ServerRole::of(&mut conn).await;
                let _ = conn.close().await;
                role
            }
            .await;
            match role {
                Ok(role) if role.satisfies(self.attrs) => return Ok((index, options)),
                Ok(role) => {
                    if fallback.is_none() {
                        fallback = Some((index, options));
                    }
                    roles.push(format!(
                        "{} is {}",
                        server.label,
                        if role.in_recovery {
                            "a standby"
                        } else if role.read_only {
                            "read-only"
                        } else {
                            "a primary"
                        }
                    ));
                }
                Err(err) => {
                    roles.push(format!(
                        "{} cannot be reached ({})",
                        server.label,
                        crate::error::cause(&err)
                    ));
                    last_error = Some(err);
                }
            }
        }
        if self.attrs == SessionAttrs::PreferStandby {
            if let Some(found) = fallback {
                return Ok(found);
            }
        }
        match last_error {
            // One server, unreachable: the connection error itself, as with any URL.
            Some(err) if self.servers.len() == 1 => Err(StoreError::Database(err)),
            _ => Err(StoreError::NoServerQualifies(format!(
                "no server is {}: {}",
                self.attrs.describe(),
                roles.join(", ")
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &ServerList) -> Vec<(String, u16)> {
        list.servers()
            .iter()
            .map(|s| (s.options.get_host().to_owned(), s.options.get_port()))
            .collect()
    }

    #[test]
    fn several_hosts_share_the_rest_of_the_url() {
        let list = ServerList::parse(
            "postgres://app:secret@10.0.0.1:5441,db2.example:5442,[::1]/outbox?sslmode=disable&target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(list.attrs(), SessionAttrs::ReadWrite);
        // A host without a port gets libpq's default: PGPORT, else 5432.
        let default_port = std::env::var("PGPORT")
            .ok()
            .and_then(|port| port.parse().ok())
            .unwrap_or(5432);
        assert_eq!(
            hosts(&list),
            vec![
                ("10.0.0.1".to_owned(), 5441),
                ("db2.example".to_owned(), 5442),
                ("[::1]".to_owned(), default_port)
            ]
        );
        for server in list.servers() {
            assert_eq!(server.options.get_username(), "app");
            assert_eq!(server.options.get_database(), Some("outbox"));
        }
        assert_eq!(list.servers()[1].label, "db2.example:5442");
        assert!(!list.is_single());
    }

    #[test]
    fn one_host_without_attributes_is_a_plain_url() {
        let list = ServerList::parse("postgres://postgres@127.0.0.1:5432/postgres").unwrap();
        assert!(list.is_single());
        assert_eq!(list.attrs(), SessionAttrs::Any);
        let list =
            ServerList::parse("postgresql://postgres@127.0.0.1/postgres?target_session_attrs=any")
                .unwrap();
        assert!(list.is_single());
    }

    #[test]
    fn a_password_that_cut_the_authority_short_is_never_echoed() {
        for url in [
            "postgres://app:Pa55/w0rd@db.example:5432/outbox",
            "postgres://app:Pa55?w0rd@db.example:5432/outbox",
            "postgres://app:Pa55#w0rd@h1,h2/outbox?target_session_attrs=read-write",
            "postgres://app:Pa55w0rd/x@h1,h2/outbox",
        ] {
            let err = ServerList::parse(url).unwrap_err().to_string();
            for secret in ["Pa55", "w0rd", "app:"] {
                assert!(!err.contains(secret), "{url}: {err}");
            }
            assert!(err.contains("percent-encoded"), "{url}: {err}");
        }
        // A password of digits parses as a port: the host's label must not show it either.
        let list = ServerList::parse("postgres://app:1234/9@db.example/outbox").unwrap();
        assert_eq!(list.servers()[0].label, "host 1");
    }

    #[test]
    fn bad_lists_are_named_once() {
        for (url, expected) in [
            ("postgres://u@h1:5432,,h2/db", "an empty host"),
            ("postgres://u@h1:5432,h2:port/db", "host `h2:port`"),
            (
                "postgres://u@h1,h2/db?target_session_attrs=writable",
                "unknown target_session_attrs `writable`",
            ),
            ("mysql://u@h1/db", "scheme `mysql`"),
            ("h1,h2", "expected postgres://"),
        ] {
            let err = ServerList::parse(url).unwrap_err().to_string();
            assert!(err.contains(expected), "{url}: {err}");
            // The cause is said once, not once per layer.
            let words: Vec<&str> = err.split(": ").collect();
            let mut unique = words.clone();
            unique.dedup();
            assert_eq!(words, unique, "{err}");
        }
    }
}
