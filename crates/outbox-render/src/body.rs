//! Request bodies for HTTP email APIs: an alert rendered as email (subject, text, HTML, in
//! the destination's locale) and then written into the JSON request an API expects, by a
//! body template. `email-api-resend` ships (Resend's `POST /emails`); an operator may give
//! a template file of their own.
//!
//! A body template is a minijinja template whose every `{{ value }}` is written as JSON
//! (auto-escaping in JSON mode: strings quoted and escaped, lists as arrays, maps as
//! objects), so no subject, payload field or address can break out of the request's
//! shape. Undefined values are errors, and the rendered body must be one JSON object.
//! Its context:
//! - `from` (the sender) and `to` (the recipients, a list);
//! - `subject`, `text`, `html`: the alert rendered by [`Renderer::render`];
//! - `headers`: a map of mail headers to ask for (`X-Alert-Id`, `X-Alert-Revision`);
//! - `alert_id`, `revision`, `message_id` (`<alert-id@sender-domain>`, as an email
//!   destination's Message-ID), `locale`, and `payload` (the alert's payload as JSON).

use std::collections::BTreeMap;

use minijinja::{AutoEscape, Environment, UndefinedBehavior};

use crate::error::RenderError;
use crate::locale::Locale;
use crate::render::{kind_for_alert, Renderer};
use crate::version::Version;

/// The shipped body templates: name and source.
const BUILTIN: [(&str, &str); 1] = [(
    "email-api-resend",
    include_str!("../templates/bodies/email-api-resend.json"),
)];

/// The largest body template file accepted.
pub const MAX_TEMPLATE_BYTES: usize = 256 * 1024;

/// A renewal alert used to try a body template out before it is accepted.
const SAMPLE_PAYLOAD: &str = r#"{"kind": "contract_renewal", "contract": "ACME-7", "vendor": "Acme Tools", "amount": "12000.00", "currency": "EUR", "renewal_date": "2027-01-15", "action_date": "2026-12-16", "days_remaining": 30, "tier": 30}"#;

/// Why a body could not be made.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// No shipped body template has that name.
    #[error("unknown body template `{0}` (shipped: email-api-resend)")]
    UnknownTemplate(String),
    /// The template file is empty or too large.
    #[error("a body template must be 1 byte to 256 KiB of UTF-8 text")]
    Size,
    /// The template does not compile, or names a value the context lacks.
    #[error("{0}")]
    Template(String),
    /// The template rendered something other than one JSON object.
    #[error("the body is not a JSON object: {0}")]
    NotAnObject(String),
    /// The alert could not be rendered as email.
    #[error(transparent)]
    Render(#[from] RenderError),
}

/// A body template: a shipped one by name, or an operator's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyTemplate {
    /// `email-api-resend`, or `file` for an operator's template.
    name: String,
    source: String,
}

impl BodyTemplate {
    /// The shipped template called `name`.
    pub fn builtin(name: &str) -> Result<BodyTemplate, BodyError> {
        BUILTIN
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(n, source)| BodyTemplate {
                name: (*n).to_owned(),
                source: (*source).to_owned(),
            })
            .ok_or_else(|| BodyError::UnknownTemplate(name.to_owned()))
    }

    /// An operator's template, compiled now: a syntax error is refused here, with its line.
    pub fn from_file_text(source: &str) -> Result<BodyTemplate, BodyError> {
        if source.is_empty() || source.len() > MAX_TEMPLATE_BYTES {
            return Err(BodyError::Size);
        }
        let template = BodyTemplate {
            name: "file".to_owned(),
            source: source.to_owned(),
        };
        let mut env = environment();
        env.add_template(template.template_name(), &template.source)
            .map_err(|err| template_error(&err))?;
        Ok(template)
    }

    /// As stored: the name (`email-api-resend` or `file`) and, for a file, its text.
    pub fn stored(name: &str, file_text: Option<&str>) -> Result<BodyTemplate, BodyError> {
        match (name, file_text) {
            ("file", Some(text)) => BodyTemplate::from_file_text(text),
            (name, _) => BodyTemplate::builtin(name),
        }
    }

    /// `email-api-resend`, or `file`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The template's text.
    pub fn source(&self) -> &str {
        &self.source
    }

    fn template_name(&self) -> &str {
        if self.name == "file" {
            "body-template-file"
        } else {
            &self.name
        }
    }

    /// Renders a sample renewal alert through this template in `locale`: what a
    /// destination is checked with before it is added, so a template naming a value the
    /// context lacks, or writing something other than a JSON object, is refused then.
    pub fn try_out(
        &self,
        locale: Locale,
        from: &str,
        to: &[String],
    ) -> Result<RenderedBody, BodyError> {
        self.render(
            &Renderer::builtin(),
            &Mail {
                alert_id: "00000000-0000-0000-0000-000000000000",
                revision: 0,
                payload: SAMPLE_PAYLOAD,
                occurrence: "2027-01-15/30d",
                locale,
                from,
                to,
            },
        )
    }

    /// Renders `mail`'s alert as email with `renderer`, then into this request body.
    pub fn render(&self, renderer: &Renderer, mail: &Mail<'_>) -> Result<RenderedBody, BodyError> {
        let kind = kind_for_alert(mail.payload, mail.occurrence);
        let email = renderer.render(kind, mail.locale, mail.payload)?;
        let payload: serde_json::Value = serde_json::from_str(mail.payload)
            .map_err(|err| RenderError::Payload(err.to_string()))?;
        let domain = mail.from.rsplit('@').next().unwrap_or(mail.from);
        let domain = domain.trim_end_matches('>');
        let headers = BTreeMap::from([
            ("X-Alert-Id", mail.alert_id.to_owned()),
            ("X-Alert-Revision", mail.revision.to_string()),
        ]);
        let context = minijinja::context! {
            from => mail.from,
            to => mail.to,
            subject => email.subject,
            text => email.text,
            html => email.html,
            headers => headers,
            alert_id => mail.alert_id,
            revision => mail.revision,
            message_id => format!("<{}@{domain}>", mail.alert_id),
            locale => mail.locale.as_str(),
            payload => payload,
        };
        let mut env = environment();
        env.add_template(self.template_name(), &self.source)
            .map_err(|err| template_error(&err))?;
        let body = env
            .get_template(self.template_name())
            .and_then(|template| template.render(context))
            .map_err(|err| template_error(&err))?;
        serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&body)
            .map_err(|err| BodyError::NotAnObject(err.to_string()))?;
        let mut version = Version::default();
        version.add_version(&email.template_version);
        version.add(&self.name);
        version.add(&self.source);
        Ok(RenderedBody {
            bytes: body.into_bytes(),
            template_version: version.finish(),
        })
    }
}

/// What a body is made from: one alert and the destination's sender, recipients and
/// locale.
#[derive(Debug, Clone)]
pub struct Mail<'a> {
    /// The alert's id.
    pub alert_id: &'a str,
    /// Its revision (0 for the original).
    pub revision: i32,
    /// Its payload's exact JSON text.
    pub payload: &'a str,
    /// Its occurrence (part of choosing the email template kind).
    pub occurrence: &'a str,
    /// The language to render in.
    pub locale: Locale,
    /// The sender.
    pub from: &'a str,
    /// The recipients.
    pub to: &'a [String],
}

/// A request body as rendered once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedBody {
    /// The JSON object's exact bytes.
    pub bytes: Vec<u8>,
    /// `sha256:` over the email templates' version and the body template's name and
    /// text: equal versions mean equal templates.
    pub template_version: String,
}

/// A template error as one line: where (the template's line) and what.
fn template_error(err: &minijinja::Error) -> BodyError {
    let what = match err.detail() {
        Some(detail) => format!("{}: {detail}", err.kind()),
        None => err.kind().to_string(),
    };
    BodyError::Template(match err.line() {
        Some(line) => format!("line {line}: {what}"),
        None => what,
    })
}

/// Strict, with every value written as JSON.
fn environment<'source>() -> Environment<'source> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_auto_escape_callback(|_| AutoEscape::Json);
    env
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

    use super::*;

    fn mail<'a>(payload: &'a str, to: &'a [String], locale: Locale) -> Mail<'a> {
        Mail {
            alert_id: "0194f0a0-0000-7000-8000-000000000001",
            revision: 0,
            payload,
            occurrence: "2027-01-15/30d",
            locale,
            from: "alerts@acme.example",
            to,
        }
    }

    /// The shipped Resend body for `payload` sent to `to` in `locale`, and its JSON.
    fn resend_body(payload: &str, to: &str, locale: Locale) -> (RenderedBody, serde_json::Value) {
        let to = vec![to.to_owned()];
        let body = BodyTemplate::builtin("email-api-resend")
            .unwrap()
            .render(&Renderer::builtin(), &mail(payload, &to, locale))
            .unwrap();
        let json = serde_json::from_slice(&body.bytes).unwrap();
        (body, json)
    }

    #[test]
    fn the_resend_body_carries_the_rendered_email_in_the_locale() {
        let (body, json) = resend_body(SAMPLE_PAYLOAD, "cfo@acme.example", Locale::Es);
        assert_eq!(json["from"], "alerts@acme.example");
        assert_eq!(json["to"], serde_json::json!(["cfo@acme.example"]));
        assert!(json["subject"]
            .as_str()
            .unwrap()
            .starts_with("Renovación: el contrato ACME-7"));
        assert!(json["text"].as_str().unwrap().contains("quedan 30 días"));
        assert!(json["html"].as_str().unwrap().contains("<"));
        assert_eq!(
            json["headers"]["X-Alert-Id"],
            "0194f0a0-0000-7000-8000-000000000001"
        );
        assert!(body.template_version.starts_with("sha256:"));
    }

    #[test]
    fn no_value_can_break_out_of_the_json() {
        let hostile = r#"{"kind": "note", "text": "\", \"to\": [\"evil@x\"], \"x\": \"</script>"}"#;
        let (_, json) = resend_body(hostile, "ops@acme.example", Locale::En);
        assert_eq!(json["to"], serde_json::json!(["ops@acme.example"]));
        assert!(json["text"]
            .as_str()
            .unwrap()
            .contains("\"to\": [\"evil@x\"]"));
    }

    #[test]
    fn a_file_template_is_compiled_and_tried_before_it_is_accepted() {
        let to = vec!["ops@acme.example".to_owned()];
        let broken = BodyTemplate::from_file_text("{\"subject\": {{ subject }\n}").unwrap_err();
        assert!(broken.to_string().contains("line"), "{broken}");
        let undefined = BodyTemplate::from_file_text("{\"s\": {{ sender }}}").unwrap();
        let err = undefined
            .try_out(Locale::En, "a@b.example", &to)
            .unwrap_err();
        assert!(err.to_string().contains("undefined"), "{err}");
        let not_json = BodyTemplate::from_file_text("subject={{ subject }}").unwrap();
        let err = not_json
            .try_out(Locale::En, "a@b.example", &to)
            .unwrap_err();
        assert!(matches!(err, BodyError::NotAnObject(_)), "{err}");
        let good = BodyTemplate::from_file_text(
            "{\"sender\": {{ from }}, \"rcpt\": {{ to[0] }}, \"vendor\": {{ payload.vendor }}}",
        )
        .unwrap();
        let body = good.try_out(Locale::En, "a@b.example", &to).unwrap();
        assert_eq!(
            String::from_utf8(body.bytes).unwrap(),
            r#"{"sender": "a@b.example", "rcpt": "ops@acme.example", "vendor": "Acme Tools"}"#
        );
        assert!(BodyTemplate::from_file_text("").is_err());
        assert!(matches!(
            BodyTemplate::builtin("email-api-mailgun"),
            Err(BodyError::UnknownTemplate(_))
        ));
    }
}
