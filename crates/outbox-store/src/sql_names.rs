//! The lifecycle's typed names written into SQL text, for the few predicates the planner
//! must see as constants (and for the benchmark's own statements, which are built from
//! these and from the store's predicates rather than spelling a name).
//!
//! Queries bind the names as values (the enums encode as `text`). A predicate that selects
//! a partial index (`outbox_due_idx` is `WHERE status IN ('pending', 'uncertain')`) or a
//! constant shared by statically built statements cannot be a parameter: a generic plan
//! cannot prove a parameter matches the index's predicate. There the name is written as a
//! literal, from the enum, here, so a renamed state still changes every statement at once.

use outbox_core::{
    AlertState, AttemptKind, AttemptOutcome, DestinationKind, LiveStatus, OnHeadFailed, Ordering,
    Outcome,
};
use std::sync::LazyLock;

/// A typed name that can be written into SQL as a quoted literal.
pub trait SqlName: Copy {
    /// The stored name.
    fn name(self) -> &'static str;

    /// The name as a SQL string literal (`'pending'`). The names are lowercase words joined
    /// by underscores or hyphens (the core's tests hold them to that), so nothing needs escaping.
    fn sql(self) -> String {
        format!("'{}'", self.name())
    }
}

macro_rules! sql_names {
    ($($name:ty),+) => {
        $(impl SqlName for $name {
            fn name(self) -> &'static str {
                self.as_str()
            }
        })+
    };
}

sql_names!(
    AlertState,
    LiveStatus,
    Outcome,
    AttemptKind,
    AttemptOutcome,
    DestinationKind,
    Ordering,
    OnHeadFailed
);

/// A piece of SQL text that writes typed names into it, built once on first use: written
/// into a statement as a `&str` constant is (`format!("... {STATE_JOINS} ...")`), since
/// a constant cannot call [`SqlName::sql`].
pub(crate) struct SqlText(LazyLock<String>);

impl SqlText {
    /// The text `build` returns, built on first use.
    pub(crate) const fn new(build: fn() -> String) -> Self {
        SqlText(LazyLock::new(build))
    }
}

impl std::ops::Deref for SqlText {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SqlText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

/// Several names as the inside of a SQL `IN (...)` list: `'pending', 'uncertain'`.
pub fn sql_list<T: SqlName>(names: &[T]) -> String {
    names
        .iter()
        .map(|name| name.sql())
        .collect::<Vec<_>>()
        .join(", ")
}
