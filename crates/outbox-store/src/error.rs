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
    /// PostgreSQL cannot store this JSON (for example a `\u0000` escape in a string).
    #[error("the payload cannot be stored: {0}")]
    UnstorablePayload(String),
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
    /// or unreachable, and retrying later may succeed.
    pub fn is_busy(&self) -> bool {
        matches!(self, StoreError::Database(sqlx::Error::PoolTimedOut))
    }

    /// True when the database error is a unique-constraint violation.
    pub(crate) fn is_unique_violation(err: &sqlx::Error) -> bool {
        matches!(err, sqlx::Error::Database(db) if db.is_unique_violation())
    }
}
