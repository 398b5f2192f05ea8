//! The templates that ship in the binary, and the kinds of alert they are for.

use std::fmt;
use std::str::FromStr;

use crate::locale::Locale;

/// Which template renders an alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A contract renewal reminder (payload `kind` = `contract_renewal`).
    ContractRenewal,
    /// One news article that matched a watchlist (payload `kind` = `news`).
    NewsArticle,
    /// A news event: articles grouped under one alert (payload `kind` = `news`,
    /// occurrence `event:...`).
    NewsEvent,
    /// Any other payload, e.g. one approved through the API: every field listed.
    Generic,
}

/// A template kind name that is not one of [`Kind::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown template kind `{0}`: supported are contract_renewal, news_article, news_event and generic")]
pub struct UnknownKind(pub String);

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 4] = [
        Kind::ContractRenewal,
        Kind::NewsArticle,
        Kind::NewsEvent,
        Kind::Generic,
    ];

    /// The name used on the command line and in override file names.
    pub fn name(self) -> &'static str {
        match self {
            Kind::ContractRenewal => "contract_renewal",
            Kind::NewsArticle => "news_article",
            Kind::NewsEvent => "news_event",
            Kind::Generic => "generic",
        }
    }

    /// The kind for a stored alert: from its payload's `kind` field and, for news, its
    /// occurrence (`event:...` for a grouped event, `article:...` for one article).
    /// Anything else is [`Kind::Generic`].
    pub fn for_alert(payload_kind: Option<&str>, occurrence: &str) -> Kind {
        match payload_kind {
            Some("contract_renewal") => Kind::ContractRenewal,
            Some("news") if occurrence.starts_with("event:") => Kind::NewsEvent,
            Some("news") => Kind::NewsArticle,
            _ => Kind::Generic,
        }
    }
}

impl FromStr for Kind {
    type Err = UnknownKind;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Kind::ALL
            .into_iter()
            .find(|kind| kind.name() == text)
            .ok_or_else(|| UnknownKind(text.to_owned()))
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The three parts of an email, each its own template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Part {
    /// The `Subject:` line (plain text, made one line after rendering).
    Subject,
    /// The `text/plain` body.
    Text,
    /// The `text/html` body (HTML escaping on).
    Html,
}

impl Part {
    /// Every part.
    pub const ALL: [Part; 3] = [Part::Subject, Part::Text, Part::Html];

    /// The file name ending of this part: `subject.txt`, `txt`, `html`.
    pub fn suffix(self) -> &'static str {
        match self {
            Part::Subject => "subject.txt",
            Part::Text => "txt",
            Part::Html => "html",
        }
    }
}

/// The template's name, as an override file is named: `<kind>.<locale>.<suffix>`.
pub fn file_name(kind: Kind, locale: Locale, part: Part) -> String {
    format!("{}.{}.{}", kind.name(), locale.as_str(), part.suffix())
}

macro_rules! builtin_table {
    ($($kind:ident $locale:ident $part:ident $file:literal),* $(,)?) => {
        /// The shipped template for one kind, locale and part.
        pub fn builtin(kind: Kind, locale: Locale, part: Part) -> &'static str {
            match (kind, locale, part) {
                $((Kind::$kind, Locale::$locale, Part::$part) =>
                    include_str!(concat!("../templates/", $file)),)*
            }
        }
    };
}

builtin_table! {
    ContractRenewal En Subject "contract_renewal.en.subject.txt",
    ContractRenewal En Text "contract_renewal.en.txt",
    ContractRenewal En Html "contract_renewal.en.html",
    ContractRenewal Es Subject "contract_renewal.es.subject.txt",
    ContractRenewal Es Text "contract_renewal.es.txt",
    ContractRenewal Es Html "contract_renewal.es.html",
    NewsArticle En Subject "news_article.en.subject.txt",
    NewsArticle En Text "news_article.en.txt",
    NewsArticle En Html "news_article.en.html",
    NewsArticle Es Subject "news_article.es.subject.txt",
    NewsArticle Es Text "news_article.es.txt",
    NewsArticle Es Html "news_article.es.html",
    NewsEvent En Subject "news_event.en.subject.txt",
    NewsEvent En Text "news_event.en.txt",
    NewsEvent En Html "news_event.en.html",
    NewsEvent Es Subject "news_event.es.subject.txt",
    NewsEvent Es Text "news_event.es.txt",
    NewsEvent Es Html "news_event.es.html",
    Generic En Subject "generic.en.subject.txt",
    Generic En Text "generic.en.txt",
    Generic En Html "generic.en.html",
    Generic Es Subject "generic.es.subject.txt",
    Generic Es Text "generic.es.txt",
    Generic Es Html "generic.es.html",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_by_name_and_alerts_map_to_kinds() {
        for kind in Kind::ALL {
            assert_eq!(kind.name().parse::<Kind>(), Ok(kind));
        }
        assert!("renewal".parse::<Kind>().is_err());
        assert_eq!(
            Kind::for_alert(Some("contract_renewal"), "2027-01-15/30d"),
            Kind::ContractRenewal
        );
        assert_eq!(Kind::for_alert(Some("news"), "event:42"), Kind::NewsEvent);
        assert_eq!(
            Kind::for_alert(Some("news"), "article:u1"),
            Kind::NewsArticle
        );
        assert_eq!(Kind::for_alert(Some("invoice"), "x"), Kind::Generic);
        assert_eq!(Kind::for_alert(None, "x"), Kind::Generic);
    }
}
