//! [`RenderError`]: why an alert could not be rendered, or an override file not used.

use std::path::Path;

/// Why an alert could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The payload is not a JSON object.
    #[error("payload is not a JSON object: {0}")]
    Payload(String),
    /// A field the kind's template needs is missing or has the wrong form.
    #[error("payload field `{field}` {reason}")]
    Field {
        /// The field's name.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A template failed: a syntax error, or a value it names is undefined (templates
    /// are strict: a missing value is an error, never an empty string).
    #[error("template {name}: {detail}")]
    Template {
        /// The template's name, `<kind>.<locale>.<part>`.
        name: String,
        /// The template engine's explanation, with the line.
        detail: String,
    },
    /// An override file could not be used.
    #[error("override {path}: {reason}")]
    Override {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

impl RenderError {
    /// The override file or folder at `path` could not be used, for `reason`.
    pub fn override_at(path: &Path, reason: impl Into<String>) -> RenderError {
        RenderError::Override {
            path: path.display().to_string(),
            reason: reason.into(),
        }
    }
}
