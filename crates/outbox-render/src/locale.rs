//! The locales email is rendered in, how one is chosen, and the conventions each uses.

use std::fmt;
use std::str::FromStr;

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

    /// The code used in configuration and in override file names: `en`, `es`.
    pub fn code(self) -> &'static str {
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
        f.write_str(self.code())
    }
}

/// The locale an email is rendered in: the destination's if it names one, else the
/// tenant's, else English.
pub fn resolve(destination: Option<Locale>, tenant: Option<Locale>) -> Locale {
    destination.or(tenant).unwrap_or(Locale::En)
}

/// The monetary and calendar conventions of a locale, from the glibc locale data that
/// `pure-rust-locales` compiles in (`en_US`, `es_ES`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Conventions {
    pub decimal_point: &'static str,
    pub thousands_sep: &'static str,
    /// Digits per group from the right; the last size repeats (glibc `mon_grouping`).
    pub grouping: &'static [i64],
    /// The currency symbol goes before the amount.
    pub symbol_precedes: bool,
    /// A space separates the symbol from the amount.
    pub symbol_spaced: bool,
    /// Month names, January first.
    pub months: &'static [&'static str],
}

/// The [`Conventions`] of one locale module of `pure-rust-locales`.
macro_rules! conventions_of {
    ($locale:ident) => {
        Conventions {
            decimal_point: $locale::LC_MONETARY::MON_DECIMAL_POINT,
            thousands_sep: $locale::LC_MONETARY::MON_THOUSANDS_SEP,
            grouping: $locale::LC_MONETARY::MON_GROUPING,
            symbol_precedes: $locale::LC_MONETARY::P_CS_PRECEDES == 1,
            symbol_spaced: $locale::LC_MONETARY::P_SEP_BY_SPACE == 1,
            months: $locale::LC_TIME::MON,
        }
    };
}

impl Locale {
    pub(crate) fn conventions(self) -> Conventions {
        use pure_rust_locales::{en_US, es_ES};
        match self {
            Locale::En => conventions_of!(en_US),
            Locale::Es => conventions_of!(es_ES),
        }
    }
}

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
    fn destination_wins_over_tenant_and_english_is_the_default() {
        assert_eq!(resolve(Some(Locale::Es), Some(Locale::En)), Locale::Es);
        assert_eq!(resolve(None, Some(Locale::Es)), Locale::Es);
        assert_eq!(resolve(None, None), Locale::En);
    }
}
