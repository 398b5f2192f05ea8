//! The store's error type.

/// What can go wrong in the store, beyond "the database said no".
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused or could not be reached; not the caller's fault.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Applying migrations failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A name that must be unique is taken (a tenant, or a destination within a tenant).
    #[error("{what} `{name}` already exists")]
    AlreadyExists {
        /// "tenant" or "destination".
        what: &'static str,
        /// The name that is taken.
        name: String,
    },
    /// A referenced tenant does not exist.
    #[error("no tenant `{0}`")]
    UnknownTenant(String),
    /// A referenced destination does not exist for this tenant.
    #[error("no destination named `{0}` for this tenant")]
    UnknownDestination(String),
    /// No alert has this id.
    #[error("no alert {0}")]
    UnknownAlert(uuid::Uuid),
    /// An operator action that the alert's state does not allow; nothing was changed.
    #[error("{0}")]
    Refused(String),
    /// The database holds a name this version does not know (a state, an outcome, a
    /// kind): written by a newer version, or by hand.
    #[error("the database holds an {0}")]
    UnknownValue(#[from] outbox_core::UnknownValue),
    /// Rows that the schema's invariants say cannot exist together.
    #[error("inconsistent data: {0}")]
    Inconsistent(String),
    /// `DATABASE_URL` cannot be read (a malformed host list, an unknown
    /// `target_session_attrs`); the URL itself is not repeated, since it may hold a password.
    #[error("DATABASE_URL: {0}")]
    BadDatabaseUrl(String),
    /// No server of the list is of the kind wanted: each unreachable, or of another kind
    /// (a standby where a primary is wanted); the message names each and why.
    #[error("{0}")]
    NoServerQualifies(String),
    /// A connection could not be opened, said as what to do about it: which server, why,
    /// and the next step. `worth_waiting` when the server could fix it by itself (it is
    /// starting, restarting or failing over).
    #[error("{message}")]
    CannotConnect {
        /// The whole line: the server, the cause, the next step.
        message: String,
        /// Whether waiting (as at start-up) may help.
        worth_waiting: bool,
    },
    /// The database's schema is not the one this build expects (never migrated, or
    /// migrated by an older build); the message says which command fixes it.
    #[error("{0}")]
    SchemaNotCurrent(String),
    /// PostgreSQL cannot store this JSON (for example a `\u0000` escape in a string).
    #[error("the payload cannot be stored: {0}")]
    UnstorablePayload(String),
}

/// An error's innermost cause, which says what went wrong without the layers' prefixes
/// (sqlx's "error with configuration: invalid port number" is "invalid port number").
pub(crate) fn cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut innermost = err;
    while let Some(source) = innermost.source() {
        innermost = source;
    }
    innermost.to_string()
}

/// A failed connection attempt to `server`, explained: the cause in a few words and the
/// next step, once. Errors a person cannot act on differently are returned as they are.
pub(crate) fn explain_connect_error(
    err: sqlx::Error,
    server: &str,
    user: &str,
    database: &str,
) -> StoreError {
    let cause = cause(&err);
    // "Connection refused (os error 111)" reads better as "connection refused".
    let cause = match cause.find(" (os error") {
        Some(end) => cause[..end].to_lowercase(),
        None => cause,
    };
    let code = match &err {
        sqlx::Error::Database(db) => db.code().map(|code| code.into_owned()),
        _ => None,
    };
    let (message, worth_waiting) = match (&err, code.as_deref()) {
        (sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_), _)
        | (_, Some("57P03")) => (
            format!(
                "cannot reach PostgreSQL at {server} ({cause}): start it, or point \
                 DATABASE_URL (--database-url) at a server that runs"
            ),
            true,
        ),
        (_, Some("28P01")) => (
            format!(
                "PostgreSQL at {server} refused the password of user `{user}`: put the right \
                 one in DATABASE_URL (postgres://{user}:PASSWORD@{server}/{database}) or in a \
                 pgpass file (PGPASSFILE)"
            ),
            false,
        ),
        (_, Some("28000")) if cause.contains("does not exist") => (
            format!(
                "PostgreSQL at {server} has no role `{user}`: create it (createuser {user}) or \
                 name another user in DATABASE_URL"
            ),
            false,
        ),
        (_, Some("28000")) => (
            format!(
                "PostgreSQL at {server} does not let `{user}` into `{database}` from here \
                 ({cause}): allow it in pg_hba.conf, or connect as another user"
            ),
            false,
        ),
        (_, Some("3D000")) => (
            format!(
                "PostgreSQL at {server} has no database `{database}`: create it (createdb \
                 {database}) or name another in DATABASE_URL"
            ),
            false,
        ),
        _ => return StoreError::Database(err),
    };
    StoreError::CannotConnect {
        message,
        worth_waiting,
    }
}

impl StoreError {
    /// Checks a payload before it is stored, by the same rules as the API's (size,
    /// nesting, numbers PostgreSQL can hold), whichever path it came by.
    pub(crate) fn check_payload(text: &str) -> Result<outbox_core::CheckedPayload<'_>, StoreError> {
        outbox_core::CheckedPayload::check(text)
            .map_err(|err| StoreError::UnstorablePayload(err.to_string()))
    }

    /// Maps a database error on a JSON parameter to [`StoreError::UnstorablePayload`]
    /// when PostgreSQL rejected the JSON text itself (class 22: data exception).
    pub(crate) fn from_payload_error(err: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &err {
            // 22003: a number out of `numeric`'s range; 54001: nesting past the parser's
            // stack. Both are refused before a payload is sent; this is the backstop.
            if matches!(
                db.code().as_deref(),
                Some("22P02" | "22P05" | "22025" | "22003" | "54001")
            ) {
                return StoreError::UnstorablePayload(db.message().to_owned());
            }
        }
        StoreError::Database(err)
    }

    /// True when no pooled connection became free in time: the database is overloaded
    /// or unreachable, and nothing was sent to it.
    pub fn is_busy(&self) -> bool {
        matches!(self, StoreError::Database(sqlx::Error::PoolTimedOut))
    }

    /// True when the database is away for now rather than refusing: busy, its connection
    /// lost, restarting, shutting down, or turned read-only under us (a failover in
    /// progress). Retrying later may succeed; a write in flight may or may not have been
    /// committed.
    pub fn is_unavailable(&self) -> bool {
        if let StoreError::CannotConnect { worth_waiting, .. } = self {
            return *worth_waiting;
        }
        let StoreError::Database(err) = self else {
            return false;
        };
        match err {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            // A connection closed during its start-up handshake: a proxy (HAProxy in front
            // of Patroni) that accepted it with no server behind, or a server that died
            // between accepting and answering. sqlx reads the early end as a malformed
            // answer to its SSLRequest.
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(db) => db.code().is_some_and(|code| {
                // 08: connection exception; 25006: read_only_sql_transaction (a standby,
                // or a primary being demoted); 57P01-57P03: admin or crash shutdown,
                // cannot connect now.
                code.starts_with("08") || matches!(&*code, "25006" | "57P01" | "57P02" | "57P03")
            }),
            _ => false,
        }
    }

    /// For each of the callers that shared a statement which failed with this
    /// unavailability ([`is_unavailable`](Self::is_unavailable)): an error that says the
    /// same (busy stays busy; anything else reads as a lost connection, with this one's
    /// message), since one error value cannot be handed to several.
    pub(crate) fn unavailable_again(&self) -> StoreError {
        let again = match self {
            StoreError::Database(sqlx::Error::PoolTimedOut) => sqlx::Error::PoolTimedOut,
            other => sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                other.to_string(),
            )),
        };
        StoreError::Database(again)
    }

    /// True when PostgreSQL stopped the statement (`57014`): it ran past the
    /// `statement_timeout` its transaction set, as a listing's does
    /// ([`crate::alert_listings::alerts_page_within`]), or was cancelled.
    pub fn is_statement_timeout(&self) -> bool {
        matches!(self, StoreError::Database(sqlx::Error::Database(db))
            if db.code().as_deref() == Some("57014"))
    }

    /// True when the database error is a unique-constraint violation.
    pub(crate) fn is_unique_violation(err: &sqlx::Error) -> bool {
        matches!(err, sqlx::Error::Database(db) if db.is_unique_violation())
    }
}
