//! What a payload may hold beyond being JSON: how deeply it nests and how large its
//! numbers are. Payloads are stored as PostgreSQL JSONB, which parses recursively (deep
//! nesting ends in "stack depth limit exceeded") and keeps every number as `numeric`
//! (`1e999999` or a 200,000-digit integer end in "value overflows numeric format"). Both
//! are checked here, on the text, before anything parses it: the scan keeps no stack and
//! allocates nothing, so no input can exhaust it.

/// Deepest nesting of arrays and objects in a payload; the payload object itself is
/// level 1.
pub const MAX_PAYLOAD_DEPTH: usize = 64;
/// Most digits a number may have before its decimal point once its exponent is applied:
/// PostgreSQL `numeric`'s limit.
pub const MAX_NUMBER_WHOLE_DIGITS: i64 = 131_072;
/// Most digits a number may have after its decimal point once its exponent is applied
/// (trailing zeros count): PostgreSQL `numeric`'s limit.
pub const MAX_NUMBER_FRACTION_DIGITS: i64 = 16_383;
/// Largest exponent magnitude (`1e1000000`), whatever the digits.
pub const MAX_NUMBER_EXPONENT: i64 = 1_000_000;

/// Why JSON text is beyond the limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonLimitError {
    /// Arrays and objects nest deeper than allowed.
    #[error("arrays and objects nest deeper than {max} levels")]
    TooDeep {
        /// The limit that was passed.
        max: usize,
    },
    /// A number PostgreSQL's `numeric` cannot hold.
    #[error(
        "the number `{number}` is out of range: {why} (a number may have at most \
         {MAX_NUMBER_WHOLE_DIGITS} digits before the decimal point and \
         {MAX_NUMBER_FRACTION_DIGITS} after it, exponent applied)"
    )]
    NumberOutOfRange {
        /// The start of the number as written.
        number: String,
        /// Which limit it passes.
        why: &'static str,
    },
}

/// Checks `json` for nesting deeper than `max_depth` and for numbers out of range. Text
/// that is not JSON passes unless it trips a limit: the JSON parser that runs after this
/// refuses it with its own reason.
pub fn check_json_limits(json: &[u8], max_depth: usize) -> Result<(), JsonLimitError> {
    let mut depth = 0usize;
    let mut at = 0usize;
    while at < json.len() {
        match json[at] {
            b'"' => at = end_of_string(json, at + 1),
            b'[' | b'{' => {
                depth += 1;
                if depth > max_depth {
                    return Err(JsonLimitError::TooDeep { max: max_depth });
                }
                at += 1;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                at += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = at;
                while at < json.len()
                    && matches!(json[at], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    at += 1;
                }
                check_number(&json[start..at])?;
            }
            _ => at += 1,
        }
    }
    Ok(())
}

/// The index just past the string whose contents start at `at`.
fn end_of_string(json: &[u8], mut at: usize) -> usize {
    while at < json.len() {
        match json[at] {
            b'\\' => at += 2,
            b'"' => return at + 1,
            _ => at += 1,
        }
    }
    json.len()
}

/// Checks one number token against PostgreSQL `numeric`'s limits. A token that is not a
/// JSON number is left to the parser.
fn check_number(token: &[u8]) -> Result<(), JsonLimitError> {
    let digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
    let unsigned = token.strip_prefix(b"-").unwrap_or(token);
    let (mantissa, exponent) = match unsigned.iter().position(|b| matches!(b, b'e' | b'E')) {
        Some(e) => (&unsigned[..e], Some(&unsigned[e + 1..])),
        None => (unsigned, None),
    };
    let (whole, fraction) = match mantissa.iter().position(|b| *b == b'.') {
        Some(dot) => (&mantissa[..dot], &mantissa[dot + 1..]),
        None => (mantissa, &b""[..]),
    };
    let has_dot = whole.len() != mantissa.len();
    if whole.is_empty() || !digits(whole) || !digits(fraction) || (has_dot && fraction.is_empty()) {
        return Ok(());
    }
    let out_of_range = |why| JsonLimitError::NumberOutOfRange {
        number: excerpt(token),
        why,
    };
    let exponent: i64 = match exponent {
        None => 0,
        Some(text) => {
            let (negative, magnitude) = match text.first() {
                Some(b'-') => (true, &text[1..]),
                Some(b'+') => (false, &text[1..]),
                _ => (false, text),
            };
            if magnitude.is_empty() || !digits(magnitude) {
                return Ok(());
            }
            let significant = match magnitude.iter().position(|b| *b != b'0') {
                Some(first) => &magnitude[first..],
                None => &b""[..],
            };
            // Seven digits already pass the limit; longer ones would overflow an i64.
            if significant.len() > 7 {
                return Err(out_of_range("its exponent is too large"));
            }
            let value = significant
                .iter()
                .fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
            if negative {
                -value
            } else {
                value
            }
        }
    };
    if exponent.abs() > MAX_NUMBER_EXPONENT {
        return Err(out_of_range("its exponent is too large"));
    }
    let fraction_digits = len_i64(fraction) - exponent;
    if fraction_digits > MAX_NUMBER_FRACTION_DIGITS {
        return Err(out_of_range("too many digits after the decimal point"));
    }
    // Zero has no digits before the point, however it is written.
    let first_nonzero = whole
        .iter()
        .chain(fraction)
        .position(|b| *b != b'0')
        .map(len_from);
    if let Some(first) = first_nonzero {
        let whole_digits = len_i64(whole) - first + exponent;
        if whole_digits > MAX_NUMBER_WHOLE_DIGITS {
            return Err(out_of_range("too many digits before the decimal point"));
        }
    }
    Ok(())
}

fn len_i64(bytes: &[u8]) -> i64 {
    len_from(bytes.len())
}

fn len_from(n: usize) -> i64 {
    // The text is at most a request body long, far below i64::MAX.
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The start of a number for an error message: a 200,000-digit number is not echoed.
fn excerpt(token: &[u8]) -> String {
    const SHOWN: usize = 24;
    let text = String::from_utf8_lossy(&token[..token.len().min(SHOWN)]);
    if token.len() > SHOWN {
        format!("{text}… ({} characters)", token.len())
    } else {
        text.into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn number(text: &str) -> Result<(), JsonLimitError> {
        check_json_limits(format!("{{\"n\": {text}}}").as_bytes(), MAX_PAYLOAD_DEPTH)
    }

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn nesting_is_limited_without_recursion() {
        assert_eq!(check_json_limits(nested(64).as_bytes(), 64), Ok(()));
        assert_eq!(
            check_json_limits(nested(65).as_bytes(), 64),
            Err(JsonLimitError::TooDeep { max: 64 })
        );
        // 100,000 levels: refused at once, no stack used.
        assert!(check_json_limits(nested(100_000).as_bytes(), 64).is_err());
        // Brackets inside strings do not count, escaped quotes do not end a string.
        let text = format!("{{\"a\": \"\\\"{}\"}}", "[".repeat(200));
        assert_eq!(check_json_limits(text.as_bytes(), 2), Ok(()));
    }

    /// The edges below were measured against PostgreSQL 15's JSONB input.
    #[test]
    fn numbers_outside_postgresql_numeric_are_refused() {
        for ok in [
            "0",
            "-12.50",
            "1e131071",
            "10e131070",
            "0.01e131073",
            "-1e131071",
            "1e-16383",
            "0.1e-16382",
            "0e-16383",
            "0.0e-16382",
            "123.456e-16380",
            "0e999999",
            "0.00000e16383",
            "1E+5",
        ] {
            assert_eq!(number(ok), Ok(()), "{ok}");
        }
        for bad in [
            "1e131072",
            "0.01e131074",
            "1e-16384",
            "0e-20000",
            "1.0000000000000000000000e-16383",
            "1e999999",
            "0e99999999999",
            "1e-99999999999",
            "1e0000000000000000000000000000000999999",
        ] {
            assert!(
                matches!(number(bad), Err(JsonLimitError::NumberOutOfRange { .. })),
                "{bad}"
            );
        }
        let long = "9".repeat(131_072);
        assert_eq!(number(&long), Ok(()));
        let too_long = "9".repeat(200_000);
        let err = number(&too_long).unwrap_err();
        assert!(err.to_string().contains("(200000 characters)"), "{err}");
        assert!(
            err.to_string().len() < 300,
            "the number is not echoed whole"
        );
    }

    #[test]
    fn text_that_is_not_json_is_left_to_the_parser() {
        for text in [
            "-",
            "1.",
            ".5",
            "1e",
            "1e+",
            "--1",
            "01.2.3",
            "\"unclosed",
            "}}]]",
        ] {
            assert_eq!(check_json_limits(text.as_bytes(), 4), Ok(()), "{text}");
        }
    }
}
