//! Watchlist queries. A query is a list of terms and `"quoted phrases"`; every one must
//! appear in the article (title or text), and none of the `-excluded` ones (a `-` before
//! a term or a phrase). Matching is case-insensitive and by whole words: `acme` matches
//! "ACME Corp." but not "acmeism"; a phrase matches the same words in a row, whatever the
//! punctuation between them.

/// Why a query is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// A `"` was opened and never closed.
    #[error("unclosed quote in query `{0}`")]
    UnclosedQuote(String),
    /// Nothing to look for (only exclusions, or nothing at all).
    #[error("query `{0}` has no term to look for (exclusions alone match nothing)")]
    NothingToMatch(String),
    /// Longer than 1000 bytes.
    #[error("query is longer than 1000 bytes")]
    TooLong,
}

/// A parsed query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    required: Vec<Vec<String>>,
    excluded: Vec<Vec<String>>,
}

/// The words of a text, lowercased: runs of letters and digits.
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

impl Query {
    /// Parses `acme "price increase" -rumour`.
    pub fn parse(text: &str) -> Result<Query, QueryError> {
        if text.len() > 1000 {
            return Err(QueryError::TooLong);
        }
        let mut required = Vec::new();
        let mut excluded = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            let (negated, body) = match rest.strip_prefix('-') {
                Some(body) => (true, body),
                None => (false, rest),
            };
            let (chunk, after) = if let Some(quoted) = body.strip_prefix('"') {
                let end = quoted
                    .find('"')
                    .ok_or_else(|| QueryError::UnclosedQuote(text.to_owned()))?;
                (&quoted[..end], &quoted[end + 1..])
            } else {
                let end = body.find(char::is_whitespace).unwrap_or(body.len());
                (&body[..end], &body[end..])
            };
            let phrase = words(chunk);
            if !phrase.is_empty() {
                if negated {
                    excluded.push(phrase);
                } else {
                    required.push(phrase);
                }
            }
            rest = after.trim_start();
        }
        if required.is_empty() {
            return Err(QueryError::NothingToMatch(text.to_owned()));
        }
        Ok(Query { required, excluded })
    }

    /// The terms and phrases that must appear, each as its lowercased words.
    pub fn required(&self) -> &[Vec<String>] {
        &self.required
    }

    /// The terms and phrases that must not appear, each as its lowercased words.
    pub fn excluded(&self) -> &[Vec<String>] {
        &self.excluded
    }

    /// The required terms and phrases as they matched, when the article matches.
    pub fn matches(&self, title: &str, text: &str) -> Option<Vec<String>> {
        let mut all = words(title);
        // A phrase never spans from the title into the text.
        all.push(String::new());
        all.extend(words(text));
        let contains = |phrase: &Vec<String>| {
            all.windows(phrase.len())
                .any(|window| window.iter().zip(phrase).all(|(a, b)| a == b))
        };
        if self.excluded.iter().any(contains) {
            return None;
        }
        self.required
            .iter()
            .all(contains)
            .then(|| self.required.iter().map(|p| p.join(" ")).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_terms_and_phrases_must_appear_as_whole_words() {
        let q = Query::parse(r#"Acme "price increase""#).unwrap();
        assert_eq!(
            q.matches("ACME Corp. announces", "a price-increase of 4%"),
            Some(vec!["acme".to_owned(), "price increase".to_owned()])
        );
        assert_eq!(q.matches("Acmeism", "price increase"), None);
        assert_eq!(q.matches("Acme", "increase in price"), None);
    }

    #[test]
    fn exclusions_suppress_a_match() {
        let q = Query::parse("acme -rumour -\"not confirmed\"").unwrap();
        assert!(q.matches("Acme merger", "").is_some());
        assert!(q.matches("Acme merger rumour", "").is_none());
        assert!(q.matches("Acme merger", "This is not confirmed.").is_none());
    }

    #[test]
    fn phrases_do_not_span_title_and_text() {
        let q = Query::parse("\"supply chain\"").unwrap();
        assert!(q.matches("Supply", "chain of events").is_none());
    }

    #[test]
    fn bad_queries_are_refused() {
        assert!(matches!(
            Query::parse("\"open"),
            Err(QueryError::UnclosedQuote(_))
        ));
        assert!(matches!(
            Query::parse("-only"),
            Err(QueryError::NothingToMatch(_))
        ));
        assert!(matches!(
            Query::parse("   "),
            Err(QueryError::NothingToMatch(_))
        ));
    }
}
