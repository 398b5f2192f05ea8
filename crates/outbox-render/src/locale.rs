//! The locales email is rendered in ([`Locale`], outbox-core's: the stored names), how one
//! is chosen, and the conventions each uses.

pub use outbox_core::locale::{Locale, UnknownLocale};

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

/// The conventions `locale` writes amounts and dates with.
pub(crate) fn conventions(locale: Locale) -> Conventions {
    use pure_rust_locales::{en_US, es_ES};
    match locale {
        Locale::En => conventions_of!(en_US),
        Locale::Es => conventions_of!(es_ES),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destination_wins_over_tenant_and_english_is_the_default() {
        assert_eq!(resolve(Some(Locale::Es), Some(Locale::En)), Locale::Es);
        assert_eq!(resolve(None, Some(Locale::Es)), Locale::Es);
        assert_eq!(resolve(None, None), Locale::En);
    }
}
