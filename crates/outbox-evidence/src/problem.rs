//! A finding: something that does not match, with its place and what was expected
//! against what is stored. Every check reports in it, so it sits below them all.

use std::fmt;

/// Something that does not match.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// Where: `alert …, entry 3 (delivery_attempts row 42)`, `checkpoint 7`.
    pub place: String,
    /// What: expected against stored.
    pub what: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.place, self.what)
    }
}

pub(crate) fn problem(place: impl Into<String>, what: impl Into<String>) -> Problem {
    Problem {
        place: place.into(),
        what: what.into(),
    }
}
