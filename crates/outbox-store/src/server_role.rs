//! What a PostgreSQL server's session is (a standby, read-only) and what a pool asks of it
//! (libpq's `target_session_attrs`): the one judgement that choosing a server of a list and
//! following the writable one both make.

use sqlx::PgConnection;
use std::str::FromStr;

use crate::StoreError;

/// What the session must be for a server to be chosen: libpq's `target_session_attrs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionAttrs {
    /// Any server that accepts the connection (the default).
    Any,
    /// A server that takes writes: not in recovery, `default_transaction_read_only` off.
    ReadWrite,
    /// A server that refuses writes (a standby, or one set read-only).
    ReadOnly,
    /// A server not in recovery.
    Primary,
    /// A server in recovery.
    Standby,
    /// A standby if any host has one, else any server.
    PreferStandby,
}

impl FromStr for SessionAttrs {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<Self, StoreError> {
        Ok(match text {
            "any" => SessionAttrs::Any,
            "read-write" => SessionAttrs::ReadWrite,
            "read-only" => SessionAttrs::ReadOnly,
            "primary" => SessionAttrs::Primary,
            "standby" => SessionAttrs::Standby,
            "prefer-standby" => SessionAttrs::PreferStandby,
            other => {
                return Err(StoreError::BadDatabaseUrl(format!(
                    "unknown target_session_attrs `{other}` (expected any, read-write, \
                     read-only, primary, standby or prefer-standby)"
                )))
            }
        })
    }
}

impl SessionAttrs {
    /// What a server must be for a pool whose processes write (every binary but a reader).
    pub fn writes(self) -> bool {
        matches!(self, SessionAttrs::ReadWrite | SessionAttrs::Primary)
    }

    /// What a qualifying server is, for messages (`no server is read-write: ...`).
    pub(crate) fn describe(self) -> &'static str {
        match self {
            SessionAttrs::Any => "reachable",
            SessionAttrs::ReadWrite => "read-write",
            SessionAttrs::ReadOnly => "read-only",
            SessionAttrs::Primary => "a primary",
            SessionAttrs::Standby | SessionAttrs::PreferStandby => "a standby",
        }
    }
}

/// What a server said about its session, enough to judge [`SessionAttrs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerRole {
    /// `pg_is_in_recovery()`: a standby.
    pub in_recovery: bool,
    /// `transaction_read_only` of a new session.
    pub read_only: bool,
}

impl ServerRole {
    /// Reads the role of the server `conn` is connected to.
    pub async fn of(conn: &mut PgConnection) -> Result<ServerRole, sqlx::Error> {
        let (in_recovery, read_only): (bool, String) =
            sqlx::query_as("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')")
                .fetch_one(conn)
                .await?;
        Ok(ServerRole {
            in_recovery,
            read_only: read_only == "on",
        })
    }

    /// Whether this server qualifies for `attrs` (for `prefer-standby`: as a standby).
    pub fn satisfies(self, attrs: SessionAttrs) -> bool {
        match attrs {
            SessionAttrs::Any => true,
            SessionAttrs::ReadWrite => !self.in_recovery && !self.read_only,
            SessionAttrs::ReadOnly => self.in_recovery || self.read_only,
            SessionAttrs::Primary => !self.in_recovery,
            SessionAttrs::Standby | SessionAttrs::PreferStandby => self.in_recovery,
        }
    }

    /// Whether a pool wanting `attrs` may stay on this server: it qualifies, or the pool
    /// prefers a standby and settles for whatever server it found.
    pub(crate) fn keeps(self, attrs: SessionAttrs) -> bool {
        self.satisfies(attrs) || attrs == SessionAttrs::PreferStandby
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_qualify_as_libpq_says() {
        let primary = ServerRole {
            in_recovery: false,
            read_only: false,
        };
        let read_only_primary = ServerRole {
            in_recovery: false,
            read_only: true,
        };
        let standby = ServerRole {
            in_recovery: true,
            read_only: true,
        };
        use SessionAttrs::*;
        assert!(primary.satisfies(ReadWrite) && primary.satisfies(Primary));
        assert!(!read_only_primary.satisfies(ReadWrite) && read_only_primary.satisfies(Primary));
        assert!(read_only_primary.satisfies(ReadOnly));
        assert!(!standby.satisfies(ReadWrite) && !standby.satisfies(Primary));
        assert!(standby.satisfies(Standby) && standby.satisfies(PreferStandby));
        assert!(standby.satisfies(Any) && primary.satisfies(Any));
        assert!(!primary.satisfies(Standby));
    }
}
