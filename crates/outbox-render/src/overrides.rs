//! A tenant's own templates, read from a folder, replacing the shipped ones part by part.
//!
//! The folder holds files named `<kind>.<locale>.<part>`: `<kind>` is `contract_renewal`,
//! `news_article`, `news_event` or `generic`; `<locale>` is `en` or `es`; `<part>` is
//! `subject.txt`, `txt` (plain-text body) or `html` (HTML body). Each file replaces that
//! one template; parts without a file stay as shipped. Other `.txt` and `.html` files are
//! refused (a misspelt name would otherwise be ignored silently); files with other
//! endings and hidden files are not read.

use std::collections::BTreeMap;
use std::fs::DirEntry;
use std::path::{Path, PathBuf};

use crate::engine::environment;
use crate::error::RenderError;
use crate::locale::Locale;
use crate::templates::{Kind, Part};

/// The largest override file read: templates are small, and a folder is not a place to
/// load arbitrary data from.
pub const MAX_OVERRIDE_BYTES: u64 = 256 * 1024;

/// Overriding templates, each already checked to compile.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    sources: BTreeMap<(Kind, Locale, Part), String>,
}

impl Overrides {
    /// Reads and compiles every override file in `dir`.
    pub fn load(dir: &Path) -> Result<Overrides, RenderError> {
        let mut sources = BTreeMap::new();
        for entry in folder_entries(dir)? {
            let FolderEntry { entry, path, name } = entry?;
            if !(name.ends_with(".txt") || name.ends_with(".html")) {
                continue;
            }
            let key = parse_file_name(&name).ok_or_else(|| {
                RenderError::override_at(
                    &path,
                    "not an override name: expected <kind>.<locale>.subject.txt|txt|html \
                     with kind contract_renewal, news_article, news_event or generic \
                     and locale en or es",
                )
            })?;
            let size = entry
                .metadata()
                .map_err(|err| RenderError::override_at(&path, err.to_string()))?
                .len();
            if size > MAX_OVERRIDE_BYTES {
                return Err(RenderError::override_at(
                    &path,
                    format!("{size} bytes; at most {MAX_OVERRIDE_BYTES}"),
                ));
            }
            let source = std::fs::read_to_string(&path)
                .map_err(|err| RenderError::override_at(&path, err.to_string()))?;
            let mut env = environment();
            env.add_template(&name, &source).map_err(|err| {
                RenderError::override_at(&path, format!("does not compile: {err}"))
            })?;
            drop(env);
            sources.insert(key, source);
        }
        Ok(Overrides { sources })
    }

    /// The overriding source of one template, if there is one.
    pub fn get(&self, kind: Kind, locale: Locale, part: Part) -> Option<&str> {
        self.sources.get(&(kind, locale, part)).map(String::as_str)
    }

    /// How many templates are overridden.
    pub fn len(&self) -> usize {
        self.sources.len()
    }

    /// True when nothing is overridden.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }
}

/// An entry of a template folder that is read: named in UTF-8, and not hidden.
#[derive(Debug)]
pub struct FolderEntry {
    /// The entry, for its metadata.
    pub entry: DirEntry,
    /// Its path.
    pub path: PathBuf,
    /// Its name.
    pub name: String,
}

/// The entries of the template folder `dir` that are read, in the folder's order: those
/// named in UTF-8, hidden ones (`.name`) left out. A folder or an entry that cannot be
/// read is an error naming the folder. Tenants' folders (the dispatcher's
/// `--templates-dir`) and a tenant's files ([`Overrides::load`]) are walked alike.
pub fn folder_entries(
    dir: &Path,
) -> Result<impl Iterator<Item = Result<FolderEntry, RenderError>> + '_, RenderError> {
    let entries =
        std::fs::read_dir(dir).map_err(|err| RenderError::override_at(dir, err.to_string()))?;
    Ok(entries.filter_map(move |entry| {
        let entry = match entry {
            Ok(entry) => entry,
            Err(err) => return Some(Err(RenderError::override_at(dir, err.to_string()))),
        };
        let name = entry.file_name().to_str()?.to_owned();
        (!name.starts_with('.')).then(|| {
            Ok(FolderEntry {
                path: entry.path(),
                name,
                entry,
            })
        })
    }))
}

fn parse_file_name(name: &str) -> Option<(Kind, Locale, Part)> {
    let (stem, part) = if let Some(stem) = name.strip_suffix(".subject.txt") {
        (stem, Part::Subject)
    } else if let Some(stem) = name.strip_suffix(".txt") {
        (stem, Part::Text)
    } else {
        (name.strip_suffix(".html")?, Part::Html)
    };
    let (kind, locale) = stem.split_once('.')?;
    let locale = Locale::ALL.into_iter().find(|l| l.as_str() == locale)?;
    Some((kind.parse().ok()?, locale, part))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_name_kind_locale_and_part() {
        assert_eq!(
            parse_file_name("contract_renewal.es.subject.txt"),
            Some((Kind::ContractRenewal, Locale::Es, Part::Subject))
        );
        assert_eq!(
            parse_file_name("generic.en.txt"),
            Some((Kind::Generic, Locale::En, Part::Text))
        );
        assert_eq!(
            parse_file_name("news_event.en.html"),
            Some((Kind::NewsEvent, Locale::En, Part::Html))
        );
        for bad in [
            "renewal.en.txt",
            "generic.fr.txt",
            "generic.txt",
            "generic.en-US.html",
        ] {
            assert_eq!(parse_file_name(bad), None, "{bad}");
        }
    }
}
