//! The template engine's settings for email templates, the same for shipped and
//! overriding ones: strict about undefined values, HTML-escaping in `.html` templates.

use minijinja::{AutoEscape, Environment, UndefinedBehavior};

/// The engine's settings, the same for shipped and overriding templates.
pub(crate) fn environment<'source>() -> Environment<'source> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // `{% if %}` lines leave no blank line or indentation behind.
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_auto_escape_callback(|name| {
        if name.ends_with(".html") {
            AutoEscape::Html
        } else {
            AutoEscape::None
        }
    });
    env
}
