//! Rendering: the three templates of a kind and locale, shipped or overridden, render a
//! payload's context into a [`RenderedEmail`].

use std::path::Path;

use crate::context::{context_for, parse_object, payload_kind};
use crate::engine::environment;
pub use crate::error::RenderError;
use crate::locale::Locale;
use crate::overrides::Overrides;
use crate::templates::{builtin, file_name, Kind, Part};
use crate::version::Version;

/// One alert as an email: what a mail client shows, and which templates made it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RenderedEmail {
    /// The subject: one line, no control characters whatever the payload held.
    pub subject: String,
    /// The `text/plain` body.
    pub text: String,
    /// The `text/html` body; every payload value in it is HTML-escaped.
    pub html: String,
    /// `sha256:<hex>` over the three template sources used (names and texts), shipped or
    /// overridden: the same version means the same templates.
    pub template_version: String,
}

/// Renders alerts with the shipped templates, or with a tenant's overrides where it has
/// them.
#[derive(Debug, Clone, Default)]
pub struct Renderer {
    overrides: Overrides,
}

impl Renderer {
    /// The shipped templates only.
    pub fn builtin() -> Renderer {
        Renderer::default()
    }

    /// The shipped templates, replaced part by part by the files in `dir` (see
    /// [`Overrides::load`]). Every override is compiled now: a broken one is an error
    /// here, not when an alert is sent.
    pub fn with_overrides(dir: &Path) -> Result<Renderer, RenderError> {
        Ok(Renderer {
            overrides: Overrides::load(dir)?,
        })
    }

    /// Whether any of the three templates of `kind` in `locale` is overridden.
    pub fn overrides_any(&self, kind: Kind, locale: Locale) -> bool {
        Part::ALL
            .into_iter()
            .any(|part| self.overrides.get(kind, locale, part).is_some())
    }

    fn source(&self, kind: Kind, locale: Locale, part: Part) -> &str {
        self.overrides
            .get(kind, locale, part)
            .unwrap_or_else(|| builtin(kind, locale, part))
    }

    /// Renders `payload_json` (a JSON object) with the templates of `kind` in `locale`.
    pub fn render(
        &self,
        kind: Kind,
        locale: Locale,
        payload_json: &str,
    ) -> Result<RenderedEmail, RenderError> {
        let fields = parse_object(payload_json)?;
        let context = context_for(kind, locale, &fields)?;

        let names = Part::ALL.map(|part| file_name(kind, locale, part));
        let mut env = environment();
        let mut version = Version::default();
        for (part, name) in Part::ALL.into_iter().zip(&names) {
            let source = self.source(kind, locale, part);
            version.add(name);
            version.add(source);
            env.add_template(name, source)
                .map_err(|err| template_error(name, &err))?;
        }
        let render = |name: &str| -> Result<String, RenderError> {
            env.get_template(name)
                .and_then(|template| template.render(&context))
                .map_err(|err| template_error(name, &err))
        };
        Ok(RenderedEmail {
            subject: one_line(&render(&names[0])?),
            text: render(&names[1])?,
            html: render(&names[2])?,
            template_version: version.finish(),
        })
    }
}

/// The template kind for a stored alert: the specific kind when the payload says so and
/// carries what that kind's templates need, else [`Kind::Generic`], which lists whatever
/// the payload holds. A stored alert therefore always has a template that renders it.
pub fn kind_for_alert(payload_json: &str, occurrence: &str) -> Kind {
    let Ok(fields) = parse_object(payload_json) else {
        return Kind::Generic;
    };
    let kind = Kind::for_alert(payload_kind(&fields).as_deref(), occurrence);
    // Formatting checks the fields in every locale alike; English stands for all.
    match context_for(kind, Locale::En, &fields) {
        Ok(_) => kind,
        Err(_) => Kind::Generic,
    }
}

fn template_error(name: &str, err: &minijinja::Error) -> RenderError {
    RenderError::Template {
        name: name.to_owned(),
        detail: err.to_string(),
    }
}

/// `text` as one header-safe line: every control character (CR and LF included), line
/// separator and bidirectional control becomes a space, and runs of spaces collapse.
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| {
            if outbox_core::untrusted::is_unsafe_on_terminal(c) {
                ' '
            } else {
                c
            }
        })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

    use super::*;

    /// A renewal payload as the contract monitor writes it (the amount a JSON number).
    const RENEWAL: &str = r#"{"kind": "contract_renewal", "contract": "ACME-7", "vendor": "Acme Tools", "amount": 12000.00, "currency": "EUR", "renewal_date": "2027-01-15", "action_date": "2026-12-16", "days_remaining": 30, "tier": 30}"#;

    /// A news payload as the news monitor writes it.
    const NEWS: &str = r#"{"kind": "news", "watchlist": "suppliers", "article": "A-17", "title": "Acme Tools recalls drills", "url": "https://news.example/a-17", "site": "news.example", "published": "2026-11-03T08:30:00Z", "matched_terms": ["acme", "recall"], "snippet": "Acme Tools announced a recall of its cordless drills."}"#;

    fn render(kind: Kind, locale: Locale, payload: &str) -> RenderedEmail {
        Renderer::builtin().render(kind, locale, payload).unwrap()
    }

    fn with_field(payload: &str, field: &str, value: serde_json::Value) -> String {
        let mut object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(payload).unwrap();
        object.insert(field.to_owned(), value);
        serde_json::to_string(&object).unwrap()
    }

    fn without_field(payload: &str, field: &str) -> String {
        let mut object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(payload).unwrap();
        object.remove(field);
        serde_json::to_string(&object).unwrap()
    }

    /// Fails showing `text` when `needle` is not in it.
    fn assert_contains(text: &str, needle: &str) {
        assert!(text.contains(needle), "`{needle}` not in: {text}");
    }

    fn assert_all_parts_contain(email: &RenderedEmail, needle: &str) {
        for (part, text) in [
            ("subject", &email.subject),
            ("text", &email.text),
            ("html", &email.html),
        ] {
            assert!(text.contains(needle), "`{needle}` not in {part}: {text}");
        }
    }

    #[test]
    fn renewal_in_english() {
        let email = render(Kind::ContractRenewal, Locale::En, RENEWAL);
        assert_all_parts_contain(&email, "Acme Tools");
        assert_all_parts_contain(&email, "ACME-7");
        assert_eq!(
            email.subject,
            "Renewal: Acme Tools contract ACME-7 renews January 15, 2027, act by December 16, 2026"
        );
        assert_contains(&email.text, "renews on January 15, 2027 for €12,000.00.");
        assert_contains(&email.text, "act by December 16, 2026: 30 days left.");
        assert!(email.text.contains("This is the 30-day reminder."));
        assert_contains(&email.html, "<strong>€12,000.00</strong>");
        assert!(email
            .html
            .starts_with("<!DOCTYPE html>\n<html lang=\"en\">"));
        assert!(email.template_version.starts_with("sha256:"));
        assert_eq!(email.template_version.len(), "sha256:".len() + 64);
    }

    #[test]
    fn renewal_in_spanish() {
        let email = render(Kind::ContractRenewal, Locale::Es, RENEWAL);
        assert_all_parts_contain(&email, "Acme Tools");
        assert_all_parts_contain(&email, "15 de enero de 2027");
        assert_eq!(
            email.subject,
            "Renovación: el contrato ACME-7 de Acme Tools se renueva el 15 de enero de 2027, \
             actúe antes del 16 de diciembre de 2026"
        );
        assert_contains(
            &email.text,
            "se renueva el 15 de enero de 2027 por 12.000,00 €.",
        );
        assert_contains(&email.text, "quedan 30 días.");
        assert_contains(&email.html, "<strong>12.000,00 €</strong>");
        assert!(email.html.contains("<html lang=\"es\">"));
    }

    #[test]
    fn renewal_with_one_day_left_speaks_in_the_singular() {
        let payload = with_field(RENEWAL, "days_remaining", 1.into());
        assert!(render(Kind::ContractRenewal, Locale::En, &payload)
            .text
            .contains("1 day left."));
        assert!(render(Kind::ContractRenewal, Locale::Es, &payload)
            .text
            .contains("queda 1 día."));
    }

    #[test]
    fn renewal_amount_given_as_a_string_and_in_other_currencies() {
        let payload = with_field(RENEWAL, "amount", "1234567.5".into());
        let payload = with_field(&payload, "currency", "USD".into());
        assert!(render(Kind::ContractRenewal, Locale::En, &payload)
            .text
            .contains("$1,234,567.50"));
        assert!(render(Kind::ContractRenewal, Locale::Es, &payload)
            .text
            .contains("1.234.567,50 $"));
        let payload = with_field(RENEWAL, "currency", "SEK".into());
        assert!(render(Kind::ContractRenewal, Locale::En, &payload)
            .text
            .contains("SEK 12,000.00"));
    }

    #[test]
    fn news_article_in_both_locales() {
        let en = render(Kind::NewsArticle, Locale::En, NEWS);
        assert_eq!(en.subject, "News on suppliers: Acme Tools recalls drills");
        assert_contains(&en.text, "news.example, November 3, 2026");
        assert!(en.text.contains("Matched terms: acme, recall"));
        // minijinja escapes `/` too; the browser reads the same address.
        assert!(en.html.contains("<a href=\"https:&#x2f;&#x2f;news.example&#x2f;a-17\">Acme Tools recalls drills</a>"), "{}", en.html);
        let es = render(Kind::NewsArticle, Locale::Es, NEWS);
        assert_eq!(
            es.subject,
            "Noticia en suppliers: Acme Tools recalls drills"
        );
        assert_contains(&es.text, "news.example, 3 de noviembre de 2026");
        assert!(es.text.contains("Términos encontrados: acme, recall"));
        assert!(!en.text.contains("grouped"));
    }

    #[test]
    fn news_event_in_both_locales() {
        let en = render(Kind::NewsEvent, Locale::En, NEWS);
        assert_eq!(en.subject, "Event on suppliers: Acme Tools recalls drills");
        assert_contains(&en.text, "grouped into this one alert");
        let es = render(Kind::NewsEvent, Locale::Es, NEWS);
        assert_eq!(es.subject, "Evento en suppliers: Acme Tools recalls drills");
        assert_contains(&es.text, "se agrupan en este único aviso");
        assert!(es.html.contains("3 de noviembre de 2026"));
    }

    #[test]
    fn news_without_a_site_and_with_a_script_address_gets_no_link() {
        let payload = without_field(NEWS, "site");
        let payload = with_field(&payload, "url", "javascript:alert(1)".into());
        let email = render(Kind::NewsArticle, Locale::En, &payload);
        assert!(!email.html.contains("href"), "{}", email.html);
        assert_contains(&email.text, "\nNovember 3, 2026\n");
    }

    #[test]
    fn generic_lists_every_field_exactly() {
        let payload = r#"{"kind": "invoice_overdue", "invoice": "INV-9", "total": 9007199254740993.10, "lines": [1, {"a": "b c"}], "paid": false, "note": null}"#;
        let en = render(Kind::Generic, Locale::En, payload);
        assert_eq!(en.subject, "Alert: invoice_overdue");
        assert_contains(&en.text, "invoice: INV-9\n");
        assert_contains(&en.text, "total: 9007199254740993.10\n");
        assert_contains(&en.text, "lines: [1,{\"a\":\"b c\"}]\n");
        assert!(en.text.contains("paid: false\n"));
        assert!(en.text.contains("note: null"));
        // Sorted by name.
        let order: Vec<usize> = ["invoice:", "kind:", "lines:", "note:", "paid:", "total:"]
            .iter()
            .map(|name| en.text.find(name).unwrap())
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{}", en.text);
        assert_contains(&en.html, "<th align=\"left\">invoice</th><td>INV-9</td>");
        let es = render(Kind::Generic, Locale::Es, payload);
        assert_eq!(es.subject, "Aviso: invoice_overdue");
        assert!(es
            .text
            .starts_with("Un aviso de tipo «invoice_overdue» con estos datos:"));
        let untyped = render(Kind::Generic, Locale::En, r#"{"x": 1}"#);
        assert_eq!(untyped.subject, "Alert");
    }

    #[test]
    fn html_shows_markup_from_the_payload_as_text() {
        let attack = "<script>alert(1)</script>";
        let payload = with_field(RENEWAL, "vendor", attack.into());
        let email = render(Kind::ContractRenewal, Locale::En, &payload);
        assert!(!email.html.contains("<script>"), "{}", email.html);
        assert!(
            email
                .html
                .contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"),
            "{}",
            email.html
        );
        // The plain-text parts carry it as the text it is.
        assert!(email.text.contains(attack));
        let quote = with_field(
            NEWS,
            "url",
            "https://x.example/\"><script>alert(1)</script>".into(),
        );
        let email = render(Kind::NewsArticle, Locale::En, &quote);
        assert!(!email.html.contains("<script>"), "{}", email.html);
        // The quote cannot close the attribute.
        assert!(
            email
                .html
                .contains("x.example&#x2f;&quot;&gt;&lt;script&gt;"),
            "{}",
            email.html
        );
        let generic = render(
            Kind::Generic,
            Locale::En,
            &format!(r#"{{"{attack}": "{attack}"}}"#).replace("</", "<\\/"),
        );
        assert!(!generic.html.contains("<script>"), "{}", generic.html);
    }

    #[test]
    fn subject_stays_one_line_whatever_the_payload() {
        for injected in [
            "Acme\r\nBcc: everyone@example.com",
            "Acme\nBcc: everyone@example.com",
            "Acme\rBcc: x",
            "Acme\u{2028}Bcc: x",
            "Acme\u{85}Bcc: x",
            "Acme\u{202e}Bcc: x",
            "Acme\tBcc:\u{0}x",
        ] {
            for kind in [Kind::ContractRenewal, Kind::Generic] {
                let payload = with_field(RENEWAL, "vendor", injected.into());
                let payload = with_field(&payload, "kind", injected.into());
                let kind_payload = if kind == Kind::Generic {
                    payload
                } else {
                    with_field(&payload, "kind", "contract_renewal".into())
                };
                for locale in Locale::ALL {
                    let email = render(kind, locale, &kind_payload);
                    assert!(
                        !email
                            .subject
                            .chars()
                            .any(|c| c.is_control()
                                || outbox_core::untrusted::is_unsafe_on_terminal(c)),
                        "{:?}",
                        email.subject
                    );
                    assert!(email.subject.contains("Bcc:"), "{:?}", email.subject);
                }
            }
        }
        assert_eq!(one_line("  a \r\n\r\n b\t "), "a b");
    }

    /// Why `payload` does not render as `kind` in `locale`.
    fn render_error(kind: Kind, locale: Locale, payload: &str) -> String {
        Renderer::builtin()
            .render(kind, locale, payload)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn missing_or_malformed_fields_are_errors_naming_the_field() {
        for field in [
            "vendor",
            "amount",
            "currency",
            "renewal_date",
            "days_remaining",
            "tier",
        ] {
            let err = render_error(
                Kind::ContractRenewal,
                Locale::En,
                &without_field(RENEWAL, field),
            );
            assert_contains(&err, &format!("`{field}` is missing"));
        }
        let bad_amount = with_field(RENEWAL, "amount", "12,000".into());
        let err = render_error(Kind::ContractRenewal, Locale::Es, &bad_amount);
        assert_contains(&err, "`amount` cannot be formatted");
        let bad_date = with_field(RENEWAL, "renewal_date", "soon".into());
        let err = render_error(Kind::ContractRenewal, Locale::En, &bad_date);
        assert_contains(&err, "`renewal_date` cannot be formatted");
        let err = render_error(Kind::Generic, Locale::En, "[1]");
        assert_contains(&err, "not a JSON object");
    }

    #[test]
    fn a_stored_alert_falls_back_to_generic_when_its_kind_cannot_render() {
        assert_eq!(
            kind_for_alert(RENEWAL, "2027-01-15/30d"),
            Kind::ContractRenewal
        );
        assert_eq!(kind_for_alert(NEWS, "event:7"), Kind::NewsEvent);
        assert_eq!(kind_for_alert(NEWS, "article:A-17"), Kind::NewsArticle);
        // Approved through the API with only some of the renewal fields.
        let partial = without_field(RENEWAL, "renewal_date");
        assert_eq!(kind_for_alert(&partial, "2027-01-15/30d"), Kind::Generic);
        assert_eq!(kind_for_alert(r#"{"kind": "x"}"#, "o"), Kind::Generic);
    }

    /// A folder of its own under the system's temporary directory, removed on drop.
    struct Folder(std::path::PathBuf);

    impl Folder {
        fn new(name: &str, files: &[(&str, &str)]) -> Folder {
            let dir =
                std::env::temp_dir().join(format!("outbox-render-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            for (file, text) in files {
                std::fs::write(dir.join(file), text).unwrap();
            }
            Folder(dir)
        }
    }

    impl Drop for Folder {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A renderer with these override files, and their folder (removed when dropped).
    fn overriding(name: &str, files: &[(&str, &str)]) -> (Folder, Renderer) {
        let folder = Folder::new(name, files);
        let renderer = Renderer::with_overrides(&folder.0).unwrap();
        (folder, renderer)
    }

    #[test]
    fn overrides_replace_only_their_part_and_change_the_version() {
        let (_folder, renderer) = overriding(
            "replace",
            &[
                (
                    "contract_renewal.es.subject.txt",
                    "Aviso para {{ vendor }}: {{ amount }}",
                ),
                ("README.md", "not a template, not read"),
            ],
        );
        let overridden = renderer
            .render(Kind::ContractRenewal, Locale::Es, RENEWAL)
            .unwrap();
        let shipped = render(Kind::ContractRenewal, Locale::Es, RENEWAL);
        assert_eq!(overridden.subject, "Aviso para Acme Tools: 12.000,00 €");
        assert_eq!(overridden.text, shipped.text);
        assert_eq!(overridden.html, shipped.html);
        assert_ne!(overridden.template_version, shipped.template_version);
        // Other locales keep the shipped templates, and their version.
        let english = renderer
            .render(Kind::ContractRenewal, Locale::En, RENEWAL)
            .unwrap();
        assert_eq!(english, render(Kind::ContractRenewal, Locale::En, RENEWAL));
    }

    #[test]
    fn an_override_html_template_escapes_too() {
        let (_folder, renderer) = overriding(
            "escape",
            &[("generic.en.html", "<p>{{ fields[0].value }}</p>")],
        );
        let email = renderer
            .render(
                Kind::Generic,
                Locale::En,
                r#"{"a": "<img src=x onerror=alert(1)>"}"#,
            )
            .unwrap();
        assert_eq!(email.html, "<p>&lt;img src=x onerror=alert(1)&gt;</p>");
    }

    #[test]
    fn an_override_that_does_not_compile_is_refused_when_loaded() {
        let folder = Folder::new(
            "broken",
            &[("generic.en.txt", "{% for x in fields %}never closed")],
        );
        let err = Renderer::with_overrides(&folder.0).unwrap_err().to_string();
        assert!(err.contains("generic.en.txt"), "{err}");
        assert!(err.contains("does not compile"), "{err}");
    }

    #[test]
    fn a_misnamed_override_is_refused() {
        let folder = Folder::new("misnamed", &[("contract_renewal.fr.txt", "x")]);
        let err = Renderer::with_overrides(&folder.0).unwrap_err().to_string();
        assert!(
            err.contains("contract_renewal.fr.txt") && err.contains("not an override name"),
            "{err}"
        );
        let missing =
            Renderer::with_overrides(Path::new("/nonexistent/outbox-templates")).unwrap_err();
        assert!(
            missing
                .to_string()
                .contains("/nonexistent/outbox-templates"),
            "{missing}"
        );
    }

    #[test]
    fn a_value_a_template_names_but_the_payload_lacks_is_an_error_not_empty() {
        let (_folder, renderer) = overriding(
            "strict",
            &[("contract_renewal.en.txt", "Owner: {{ owner }}.")],
        );
        let err = renderer
            .render(Kind::ContractRenewal, Locale::En, RENEWAL)
            .unwrap_err();
        let err = err.to_string();
        assert!(err.contains("template contract_renewal.en.txt"), "{err}");
        assert!(err.contains("undefined"), "{err}");
        // Nested lookups are strict too.
        let (_folder, renderer) = overriding(
            "strict-nested",
            &[("generic.es.subject.txt", "{{ fields[0].nombre }}")],
        );
        assert!(renderer
            .render(Kind::Generic, Locale::Es, r#"{"a": 1}"#)
            .is_err());
        // With the field present, it renders.
        let payload = with_field(RENEWAL, "owner", "Ana".into());
        let (_folder, renderer) = overriding(
            "strict-ok",
            &[("contract_renewal.en.txt", "Owner: {{ owner }}.")],
        );
        assert_eq!(
            renderer
                .render(Kind::ContractRenewal, Locale::En, &payload)
                .unwrap()
                .text,
            "Owner: Ana."
        );
    }
}
