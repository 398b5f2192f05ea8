//! The languages alert email is written in ([`Locale`]): a destination's or a tenant's, as
//! stored (`en`, `es`: `destinations.locale`, `tenants.locale`) and as configured, where a
//! region may follow (`en-US`, `es_ES`). What each one formats and which templates it
//! reads is `outbox-render`'s.

use std::fmt;
use std::str::FromStr;

use crate::state::stored_as_text;

/// A locale that ships with templates and formatting conventions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Locale {
    /// English (United States conventions: `€12,000.00`, `January 15, 2027`).
    En,
    /// Spanish (Spain conventions: `12.000,00 €`, `15 de enero de 2027`).
    Es,
}

/// A locale name that is not one of [`Locale::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown locale `{0}`: supported are en and es")]
pub struct UnknownLocale(pub String);

impl Locale {
    /// Every supported locale.
    pub const ALL: [Locale; 2] = [Locale::En, Locale::Es];

    /// The stored name, also the one in configuration and in override file names: `en`,
    /// `es`.
    pub fn as_str(self) -> &'static str {
        match self {
            Locale::En => "en",
            Locale::Es => "es",
        }
    }

    /// Parses a configured locale. Accepted: `en`, `es`, and the same with a region
    /// (`en-US`, `es_ES`, any case), which selects the language's conventions. Anything
    /// else is refused, so a typo is caught when it is configured, not when mail is sent.
    pub fn parse(text: &str) -> Result<Locale, UnknownLocale> {
        let language = text
            .split(['-', '_'])
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        match language.as_str() {
            "en" => Ok(Locale::En),
            "es" => Ok(Locale::Es),
            _ => Err(UnknownLocale(text.to_owned())),
        }
    }
}

impl FromStr for Locale {
    type Err = UnknownLocale;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Locale::parse(text)
    }
}

impl fmt::Display for Locale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Written as its stored name (`"en"`), as listings showed it when it was text.
impl serde::Serialize for Locale {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

stored_as_text!(Locale);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_languages_with_or_without_region_and_refuses_others() {
        assert_eq!(Locale::parse("en"), Ok(Locale::En));
        assert_eq!(Locale::parse("ES"), Ok(Locale::Es));
        assert_eq!(Locale::parse("es_ES"), Ok(Locale::Es));
        assert_eq!(Locale::parse("en-GB"), Ok(Locale::En));
        for bad in ["", "fr", "english", "e", "-es"] {
            let err = Locale::parse(bad).unwrap_err();
            assert!(err.to_string().contains("unknown locale"), "{err}");
        }
    }

    #[test]
    fn every_locale_reads_back_from_its_stored_name() {
        for locale in Locale::ALL {
            assert_eq!(locale.as_str().parse(), Ok(locale));
            assert_eq!(
                serde_json::to_value(locale).unwrap(),
                serde_json::json!(locale.as_str())
            );
        }
    }
}
