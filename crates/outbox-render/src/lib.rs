//! Alerts rendered into email a person can read: a subject, a plain-text body and an HTML
//! body, from the stored payload, in English or Spanish. Pure logic: the only I/O is
//! reading a tenant's override templates from a folder.
//!
//! Layout:
//! - [`locale`]: [`Locale`] (`en`, `es`) and [`Locale::parse`] for configuration (unknown
//!   locales are refused), both outbox-core's; [`resolve`] (destination, else tenant,
//!   else English) and each locale's conventions.
//! - [`format`]: amounts (`€12,000.00`, `12.000,00 €`) from exact decimal text, never
//!   through floating point, and dates (`January 15, 2027`, `15 de enero de 2027`), with
//!   the `en_US` and `es_ES` conventions of the glibc locale data (`pure-rust-locales`).
//! - [`templates`]: the template [`Kind`]s and the shipped templates, embedded in the
//!   binary from `templates/<kind>.<locale>.<part>`.
//! - [`overrides`]: a tenant's templates from files, compiled when loaded, and the walk
//!   over a template folder ([`overrides::folder_entries`]) that the dispatcher's folder
//!   of tenants takes too.
//! - [`render`]: [`Renderer::render`] → [`RenderedEmail`] with its `template_version`;
//!   [`kind_for_alert`] picks the template kind for a stored alert.
//! - `context`: the payload's fields as template values, and what each kind adds to them.
//! - `engine`: the template engine's settings, shared by shipped and overriding templates.
//! - `error`: [`RenderError`].
//! - `version`: the `sha256:` template versions of emails and request bodies.
//! - [`body`]: request bodies for HTTP email APIs ([`BodyTemplate`]: `email-api-resend`
//!   shipped from `templates/bodies/`, or an operator's file), the rendered email written
//!   into JSON.
//!
//! Templates use minijinja with strict undefined values (a value a template names but the
//! context lacks is an error, never an empty string) and HTML escaping for `.html`
//! templates. The subject is made one line after rendering, so no payload can add a
//! header. The context of each kind:
//! - every kind: each payload field under its own name (strings, integers, booleans,
//!   null, lists and maps; numbers that are not integers as their exact text);
//! - `contract_renewal`: `amount` formatted with `currency` (exact text in
//!   `amount_value`), `renewal_date` and `action_date` written out (`*_iso` keep the
//!   `YYYY-MM-DD` form), `days_remaining` and `tier` as integers; `contract` and `vendor`
//!   required;
//! - `news_article`, `news_event`: `published_date` written out, `link` (the `url` when it
//!   is an `http(s)` address, else null), `site` (null when absent); `watchlist`,
//!   `article`, `title`, `url`, `published`, `snippet`, `matched_terms` required;
//! - `generic`: `kind` (the payload's `kind` when it is a string, else null) and `fields`,
//!   the payload's fields sorted by name, each `{name, value}` with the value as text
//!   (strings as they are, numbers as written, lists and maps as compact JSON).

pub mod body;
mod context;
mod engine;
mod error;
pub mod format;
pub mod locale;
pub mod overrides;
pub mod render;
pub mod templates;
mod version;

pub use body::{BodyError, BodyTemplate, Mail, RenderedBody};
pub use error::RenderError;
pub use locale::{resolve, Locale, UnknownLocale};
pub use overrides::Overrides;
pub use render::{kind_for_alert, RenderedEmail, Renderer};
pub use templates::{Kind, Part, UnknownKind};
