//! Per-tenant templates: `--templates-dir DIR` holds one folder per tenant, named as the
//! tenant is (`DIR/acme/`), with override files as `outboxctl template preview --templates`
//! reads them (`<kind>.<locale>.subject.txt|txt|html`). Everything is read and compiled
//! when the dispatcher starts (a broken file stops it with the file's name and line) and
//! again on SIGHUP (a broken file then keeps the templates already loaded).
//!
//! Which templates made a message is evidence: its template version reads
//! `builtin sha256:…` when the shipped templates made it, `tenant <name> sha256:…` when any
//! of the three came from that tenant's folder (the hash covers the three used).

use outbox_render::overrides::{folder_entries, FolderEntry};
use outbox_render::{Kind, Locale, RenderError, RenderedEmail, Renderer};
use std::collections::BTreeMap;
use std::path::Path;

/// Each tenant's templates; tenants without a folder get the shipped ones.
#[derive(Debug, Default)]
pub struct TenantTemplates {
    by_tenant: BTreeMap<String, Renderer>,
}

impl TenantTemplates {
    /// Reads every tenant folder of `dir` and compiles its files. A file at the top of
    /// `dir` that looks like a template is refused: it belongs in a tenant's folder.
    pub fn load(dir: &Path) -> Result<TenantTemplates, RenderError> {
        let mut by_tenant = BTreeMap::new();
        for entry in folder_entries(dir)? {
            let FolderEntry { path, name, .. } = entry?;
            if path.is_dir() {
                by_tenant.insert(name, Renderer::with_overrides(&path)?);
            } else if name.ends_with(".txt") || name.ends_with(".html") {
                return Err(RenderError::override_at(
                    &path,
                    "a template belongs in its tenant's folder: DIR/<tenant>/<file>",
                ));
            }
        }
        Ok(TenantTemplates { by_tenant })
    }

    /// The tenants that have a folder.
    pub fn tenants(&self) -> impl Iterator<Item = &str> {
        self.by_tenant.keys().map(String::as_str)
    }

    /// Renders `payload_json` for `tenant` with its templates where it has them, and
    /// names which in the version.
    pub fn render(
        &self,
        tenant: &str,
        kind: Kind,
        locale: Locale,
        payload_json: &str,
    ) -> Result<RenderedEmail, RenderError> {
        let own = self
            .by_tenant
            .get(tenant)
            .filter(|renderer| renderer.overrides_any(kind, locale));
        let mut rendered =
            own.unwrap_or(&Renderer::builtin())
                .render(kind, locale, payload_json)?;
        rendered.template_version = match own {
            Some(_) => format!("tenant {tenant} {}", rendered.template_version),
            None => format!("builtin {}", rendered.template_version),
        };
        Ok(rendered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAYLOAD: &str = r#"{"kind":"note","text":"hello"}"#;

    struct Folder(std::path::PathBuf);

    impl Drop for Folder {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn folder() -> Folder {
        let dir = std::env::temp_dir().join(format!("outbox-templates-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("acme")).expect("a folder");
        Folder(dir)
    }

    #[test]
    fn a_tenants_folder_overrides_its_templates_and_says_so() {
        let dir = folder();
        std::fs::write(
            dir.0.join("acme/generic.en.subject.txt"),
            "Acme says {{ kind }}",
        )
        .expect("write");
        let templates = TenantTemplates::load(&dir.0).expect("loads");
        assert_eq!(templates.tenants().collect::<Vec<_>>(), ["acme"]);
        let own = templates
            .render("acme", Kind::Generic, Locale::En, PAYLOAD)
            .expect("renders");
        assert_eq!(own.subject, "Acme says note");
        assert!(own.template_version.starts_with("tenant acme sha256:"));
        // Another locale, and another tenant, get the shipped templates.
        for (tenant, locale) in [("acme", Locale::Es), ("globex", Locale::En)] {
            let shipped = templates
                .render(tenant, Kind::Generic, locale, PAYLOAD)
                .expect("renders");
            assert!(shipped.template_version.starts_with("builtin sha256:"));
        }
    }

    #[test]
    fn a_broken_template_or_a_stray_file_is_refused_with_its_name() {
        let dir = folder();
        std::fs::write(dir.0.join("acme/generic.en.subject.txt"), "{% if %}").expect("write");
        let err = TenantTemplates::load(&dir.0)
            .expect_err("broken")
            .to_string();
        assert!(err.contains("generic.en.subject.txt"), "{err}");
        std::fs::remove_file(dir.0.join("acme/generic.en.subject.txt")).expect("remove");
        std::fs::write(dir.0.join("generic.en.txt"), "hi").expect("write");
        let err = TenantTemplates::load(&dir.0)
            .expect_err("stray")
            .to_string();
        assert!(err.contains("tenant's folder"), "{err}");
    }
}
