//! Pages as HTML: the embedded templates (autoescape on for every `.html` template), the
//! filters that show untrusted text, the sparkline and the stylesheet. Error pages are
//! `crate::error_page`'s.

use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use minijinja::{Environment, Value};

use crate::auth::Signed;
use crate::error_page::PageError;

const TEMPLATES: &[(&str, &str)] = &[
    ("base.html", include_str!("../templates/base.html")),
    ("login.html", include_str!("../templates/login.html")),
    ("error.html", include_str!("../templates/error.html")),
    ("overview.html", include_str!("../templates/overview.html")),
    ("outbox.html", include_str!("../templates/outbox.html")),
    ("alert.html", include_str!("../templates/alert.html")),
    ("confirm.html", include_str!("../templates/confirm.html")),
    (
        "destinations.html",
        include_str!("../templates/destinations.html"),
    ),
    ("audit.html", include_str!("../templates/audit.html")),
    ("bulk.html", include_str!("../templates/bulk.html")),
    (
        "bulk_progress.html",
        include_str!("../templates/bulk_progress.html"),
    ),
];

const STYLESHEET: &str = include_str!("../static/console.css");

/// The template environment.
#[derive(Debug)]
pub(crate) struct Views {
    env: Environment<'static>,
}

impl Views {
    pub(crate) fn new() -> Self {
        let mut env = Environment::new();
        // `.html` names are HTML-escaped by minijinja's default rule; stated here so that
        // a change of default cannot turn it off unnoticed.
        env.set_auto_escape_callback(|name| {
            if name.ends_with(".html") {
                minijinja::AutoEscape::Html
            } else {
                minijinja::AutoEscape::None
            }
        });
        env.set_undefined_behavior(minijinja::UndefinedBehavior::SemiStrict);
        env.add_filter("visible", visible);
        env.add_filter("when", when);
        env.add_filter("age", age);
        for (name, source) in TEMPLATES {
            if let Err(err) = env.add_template(name, source) {
                // The templates are compiled in; a broken one is a build defect that the
                // tests catch on the first page.
                tracing::error!(template = name, error = %err, "console template does not parse");
            }
        }
        Views { env }
    }

    /// A page for a signed-in account: the template gets `me` and `csrf` besides `ctx`.
    pub(crate) fn render(
        &self,
        signed: &Signed,
        name: &str,
        ctx: Value,
    ) -> Result<Response, PageError> {
        let me = minijinja::context! {
            name => signed.name(),
            role => signed.account().role.as_str(),
            tenant_names => signed.account().tenant_names.clone(),
            can_act => signed.can_act(),
        };
        let ctx = minijinja::context! { me => me, csrf => signed.csrf(), ..ctx };
        self.render_public(name, ctx)
    }

    /// A page without an account (sign-in, errors before sign-in).
    pub(crate) fn render_public(&self, name: &str, ctx: Value) -> Result<Response, PageError> {
        let ctx = minijinja::context! { ..ctx, ..minijinja::context! { me => Value::from(()), csrf => "" } };
        let html = self
            .env
            .get_template(name)
            .and_then(|template| template.render(ctx))
            .map_err(|err| PageError::Internal(format!("rendering {name}: {err:#}")))?;
        Ok(Html(html).into_response())
    }
}

/// Untrusted text with its control and bidirectional characters shown as escapes (the
/// HTML escaping itself is autoescape's).
fn visible(value: String) -> String {
    outbox_core::untrusted::visible(&value).into_owned()
}

/// An RFC 3339 time as `YYYY-MM-DD HH:MM:SS UTC`.
fn when(value: Value) -> String {
    let text = value.to_string();
    chrono::DateTime::parse_from_rfc3339(&text)
        .map(|at| {
            at.with_timezone(&chrono::Utc)
                .format("%Y-%m-%d %H:%M:%S UTC")
                .to_string()
        })
        .unwrap_or(text)
}

/// Seconds as a short age: `45s`, `12m 5s`, `3h 2m`, `2d 4h`.
fn age(value: Value) -> String {
    let secs = f64::try_from(value).unwrap_or(0.0).max(0.0) as u64;
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m {}s", secs / 60, secs % 60),
        3600..86400 => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d {}h", secs / 86400, secs % 86400 / 3600),
    }
}

/// A small SVG chart of attempts (grey bars) and accepted (green bars) per bucket. Only
/// numbers go into it, so it is marked safe for the template.
pub(crate) fn sparkline(attempts: &[i64], accepted: &[i64]) -> Value {
    let (width, height, bar) = (120, 24, 10);
    let peak = attempts.iter().copied().max().unwrap_or(0).max(1);
    let mut svg = format!(
        "<svg class=\"spark\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" \
         role=\"img\" aria-label=\"attempts per five minutes over the last hour\">"
    );
    for (i, (total, ok)) in attempts.iter().zip(accepted).enumerate() {
        let x = i * bar;
        let h_total = total * height / peak;
        let h_ok = ok * height / peak;
        svg.push_str(&format!(
            "<rect x=\"{x}\" y=\"{}\" width=\"{}\" height=\"{h_total}\" fill=\"#c9ccd1\"/>\
             <rect x=\"{x}\" y=\"{}\" width=\"{}\" height=\"{h_ok}\" fill=\"#2e7d32\"/>",
            height - h_total,
            bar - 2,
            height - h_ok,
            bar - 2,
        ));
    }
    svg.push_str("</svg>");
    Value::from_safe_string(svg)
}

/// `GET /console/static/console.css`.
pub(crate) async fn stylesheet() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        STYLESHEET,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_short() {
        assert_eq!(age(Value::from(45.2)), "45s");
        assert_eq!(age(Value::from(725)), "12m 5s");
        assert_eq!(age(Value::from(3600 * 3 + 120)), "3h 2m");
        assert_eq!(age(Value::from(86400 * 2 + 3600 * 4)), "2d 4h");
    }

    #[test]
    fn every_template_parses() {
        let views = Views::new();
        for (name, _) in TEMPLATES {
            assert!(
                views.env.get_template(name).is_ok(),
                "{name} does not parse"
            );
        }
    }

    #[test]
    fn the_sparkline_scales_to_the_busiest_bucket() {
        let svg = sparkline(&[0, 4, 2], &[0, 2, 2]).to_string();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("height=\"24\" fill=\"#c9ccd1\""));
        assert!(svg.contains("height=\"12\" fill=\"#2e7d32\""));
    }
}
