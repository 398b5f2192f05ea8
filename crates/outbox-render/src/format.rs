//! Amounts and dates written the way a reader of the locale expects.
//!
//! Amounts arrive as exact decimal text (`"12000.00"`, or the JSON number `12000.00` as
//! written) and are formatted digit by digit: no binary floating point anywhere, so
//! `0.10` stays `0.10` and a large amount keeps every digit. Nothing is rounded: an
//! amount with more decimals than the currency uses shows them all; fewer are padded
//! with zeros to two.

use crate::locale::{conventions, Locale};

/// Why a value could not be formatted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Not a plain decimal number (digits, an optional sign and decimal point).
    #[error("amount `{0}` is not a plain decimal number such as 12000.00")]
    Amount(String),
    /// Not a calendar date in `YYYY-MM-DD` form.
    #[error("date `{0}` is not a calendar date such as 2027-01-15")]
    Date(String),
}

/// The symbol of the currencies shown with one; others are shown by their ISO code.
fn symbol(currency: &str) -> Option<&'static str> {
    match currency {
        "EUR" => Some("€"),
        "USD" => Some("$"),
        "GBP" => Some("£"),
        _ => None,
    }
}

/// `amount` (exact decimal text) in `currency` (ISO 4217 code) for `locale`:
/// `€12,000.00` / `12.000,00 €`; `USD`, `GBP` likewise with `$`, `£`; any other code
/// written out with a space (`CHF 12,000.00`, `12.000,00 CHF`).
pub fn amount(amount: &str, currency: &str, locale: Locale) -> Result<String, FormatError> {
    let bad = || FormatError::Amount(amount.to_owned());
    let (negative, digits) = match amount.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, amount),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
        || (digits.contains('.') && fraction.is_empty())
    {
        return Err(bad());
    }
    let conventions = conventions(locale);
    let mut number = group(whole, conventions.thousands_sep, conventions.grouping);
    number.push_str(conventions.decimal_point);
    number.push_str(fraction);
    for _ in fraction.len()..2 {
        number.push('0');
    }
    let currency = currency.trim();
    let (mark, precedes, spaced) = match symbol(currency) {
        Some(sign) => (sign, conventions.symbol_precedes, conventions.symbol_spaced),
        // An ISO code reads as a word: always set apart by a space.
        None => (currency, conventions.symbol_precedes, true),
    };
    let space = if spaced { " " } else { "" };
    let sign = if negative { "-" } else { "" };
    Ok(if precedes {
        format!("{sign}{mark}{space}{number}")
    } else {
        format!("{sign}{number}{space}{mark}")
    })
}

/// Inserts `separator` into a run of digits, grouping from the right by the sizes in
/// `grouping` (the last size repeats; a size of zero or less stops grouping).
fn group(digits: &str, separator: &str, grouping: &[i64]) -> String {
    let mut groups: Vec<&str> = Vec::new();
    let mut rest = digits;
    let mut sizes = grouping.iter().copied();
    let mut size = sizes.next().unwrap_or(0);
    while size > 0 && rest.len() > size as usize {
        let cut = rest.len() - size as usize;
        groups.push(&rest[cut..]);
        rest = &rest[..cut];
        size = sizes.next().unwrap_or(size);
    }
    groups.push(rest);
    groups.reverse();
    groups.join(separator)
}

/// `date` (`YYYY-MM-DD`) written out for `locale`: `January 15, 2027` /
/// `15 de enero de 2027`.
pub fn long_date(date: &str, locale: Locale) -> Result<String, FormatError> {
    let parsed: jiff::civil::Date = date
        .trim()
        .parse()
        .map_err(|_| FormatError::Date(date.to_owned()))?;
    let month = conventions(locale).months[usize::from(parsed.month().unsigned_abs()) - 1];
    let (day, year) = (parsed.day(), parsed.year());
    Ok(match locale {
        Locale::En => format!("{month} {day}, {year}"),
        Locale::Es => format!("{day} de {month} de {year}"),
    })
}

/// The calendar date of a timestamp (`2027-01-15T08:30:00Z`, any offset) or of a plain
/// date, written out as in [`long_date`]: the calendar date in UTC (the news monitor
/// stores publication times in UTC).
pub fn long_date_of_timestamp(text: &str, locale: Locale) -> Result<String, FormatError> {
    if let Ok(at) = text.trim().parse::<jiff::Timestamp>() {
        let date = at.to_zoned(jiff::tz::TimeZone::UTC).date();
        return long_date(&date.to_string(), locale);
    }
    long_date(text, locale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_in_english_and_spanish() {
        assert_eq!(amount("12000.00", "EUR", Locale::En).unwrap(), "€12,000.00");
        assert_eq!(
            amount("12000.00", "EUR", Locale::Es).unwrap(),
            "12.000,00 €"
        );
        assert_eq!(
            amount("1234567.5", "USD", Locale::En).unwrap(),
            "$1,234,567.50"
        );
        assert_eq!(
            amount("1234567.5", "USD", Locale::Es).unwrap(),
            "1.234.567,50 $"
        );
        assert_eq!(amount("999", "GBP", Locale::En).unwrap(), "£999.00");
        assert_eq!(amount("0.10", "GBP", Locale::Es).unwrap(), "0,10 £");
        assert_eq!(amount("-45.00", "EUR", Locale::En).unwrap(), "-€45.00");
    }

    #[test]
    fn other_currencies_fall_back_to_their_code() {
        assert_eq!(amount("12000", "CHF", Locale::En).unwrap(), "CHF 12,000.00");
        assert_eq!(amount("12000", "CHF", Locale::Es).unwrap(), "12.000,00 CHF");
    }

    #[test]
    fn amounts_keep_every_digit_without_floating_point() {
        // 2^53 + 1 is the first integer an f64 cannot hold.
        assert_eq!(
            amount("9007199254740993.017", "EUR", Locale::En).unwrap(),
            "€9,007,199,254,740,993.017"
        );
    }

    #[test]
    fn malformed_amounts_are_refused() {
        for bad in [
            "",
            "12,000.00",
            "1e4",
            "12.",
            ".5",
            "abc",
            "--1",
            "1 000",
            "NaN",
        ] {
            assert!(amount(bad, "EUR", Locale::En).is_err(), "{bad}");
        }
    }

    #[test]
    fn dates_in_english_and_spanish() {
        assert_eq!(
            long_date("2027-01-15", Locale::En).unwrap(),
            "January 15, 2027"
        );
        assert_eq!(
            long_date("2027-01-15", Locale::Es).unwrap(),
            "15 de enero de 2027"
        );
        assert_eq!(
            long_date_of_timestamp("2026-11-03T23:30:00Z", Locale::Es).unwrap(),
            "3 de noviembre de 2026"
        );
        assert!(long_date("2027-02-30", Locale::En).is_err());
        assert!(long_date("15/01/2027", Locale::En).is_err());
    }
}
