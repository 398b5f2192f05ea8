//! Property tests of the input checks: generated input, including hostile shapes (deep
//! nesting, huge numbers, control and bidirectional characters), never panics a check,
//! every refusal is a specific error, and what is accepted obeys the rules.
//!
//! The number of cases is proptest's default (256), quick in a debug build; set
//! `PROPTEST_CASES` (e.g. 100000) for a long run.

use outbox_core::identity::{check_identity_field, check_payload, check_reason};
use outbox_core::json_limits::{check_json_limits, MAX_NUMBER_WHOLE_DIGITS};
use outbox_core::untrusted::{is_bidi_control, is_unsafe_on_terminal, visible};
use outbox_core::watchlist_query::Query;
use outbox_core::{
    IdentityError, JsonLimitError, PayloadError, MAX_IDENTITY_FIELD_BYTES, MAX_PAYLOAD_DEPTH,
};
use proptest::prelude::*;
use serde_json::value::RawValue;

/// Characters that matter to the checks, mixed with any character at all.
fn tricky_char() -> impl Strategy<Value = char> {
    prop_oneof![
        3 => any::<char>(),
        3 => proptest::sample::select(vec![
            '{', '}', '[', ']', '"', ':', ',', '\\', '-', '+', '.', 'e', 'E', '0', '1', '9',
            ' ', '\n', '\t', '\u{0}', '\u{1b}', '\u{7}', '\u{7f}', '\u{9b}', '\u{202e}',
            '\u{2066}', '\u{200f}', '\u{061c}', '\u{2028}', 'a', 'é', 'ß', '-', '"',
        ]),
    ]
}

fn tricky_string(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(tricky_char(), 0..max).prop_map(String::from_iter)
}

/// Number spellings around PostgreSQL numeric's limits.
fn number_text() -> impl Strategy<Value = String> {
    (
        any::<bool>(),
        proptest::collection::vec(0u8..10, 1..40),
        proptest::option::of(proptest::collection::vec(0u8..10, 1..40)),
        proptest::option::of(prop_oneof![
            -2_000_000i64..2_000_000,
            -16_500i64..-16_300,
            131_000i64..131_100,
        ]),
    )
        .prop_map(|(negative, whole, fraction, exponent)| {
            let digits = |d: Vec<u8>| d.into_iter().map(|d| char::from(b'0' + d)).collect();
            let mut text: String = if negative { "-".into() } else { String::new() };
            let whole: String = digits(whole);
            // JSON forbids leading zeros; keep the spelling valid.
            let whole = whole.trim_start_matches('0');
            text.push_str(if whole.is_empty() { "0" } else { whole });
            if let Some(fraction) = fraction {
                text.push('.');
                text.push_str(&digits(fraction));
            }
            if let Some(exponent) = exponent {
                text.push_str(&format!("e{exponent}"));
            }
            text
        })
}

/// Nested JSON: arrays and objects around a number or a string.
fn nested_payload() -> impl Strategy<Value = (usize, String)> {
    (1usize..80, number_text(), tricky_string(8), any::<bool>()).prop_map(
        |(depth, number, text, use_number)| {
            let leaf = if use_number {
                number
            } else {
                serde_json::to_string(&text).unwrap_or_default()
            };
            let mut json = leaf;
            for level in 0..depth.saturating_sub(1) {
                json = if level % 2 == 0 {
                    format!("[{json}]")
                } else {
                    format!("{{\"k\": {json}}}")
                };
            }
            (depth, format!("{{\"p\": {json}}}"))
        },
    )
}

/// The depth of a parsed value: 1 for a scalar inside nothing.
fn depth(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        serde_json::Value::Object(members) => 1 + members.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

proptest! {
    #[test]
    fn accepted_identities_hold_no_control_or_bidi_character(value in tricky_string(40)) {
        match check_identity_field("subject", &value) {
            Ok(()) => {
                prop_assert!(!value.chars().any(|c| c.is_control() || is_bidi_control(c)));
                prop_assert!(!value.trim().is_empty());
                prop_assert!(value.len() <= MAX_IDENTITY_FIELD_BYTES);
            }
            Err(IdentityError::Empty { .. }) => prop_assert!(value.trim().is_empty()),
            Err(IdentityError::ControlCharacter { .. }) => {
                prop_assert!(value.chars().any(char::is_control));
            }
            Err(IdentityError::BidiControl { code, .. }) => {
                prop_assert!(char::from_u32(code).is_some_and(is_bidi_control));
            }
            Err(IdentityError::TooLong { .. }) => prop_assert!(value.len() > MAX_IDENTITY_FIELD_BYTES),
        }
        // A reason never panics either.
        let _ = check_reason(&value);
    }

    #[test]
    fn payload_checks_never_panic_and_accept_only_storable_objects(text in tricky_string(60)) {
        match check_payload(&text) {
            Ok(()) => {
                let raw = serde_json::from_str::<Box<RawValue>>(&text)
                    .map_err(|e| TestCaseError::fail(format!("accepted but not JSON: {e}")))?;
                let is_object = raw.get().starts_with('{');
                prop_assert!(is_object);
                // Numbers beyond f64 do not convert to a Value; those that do are checked.
                if let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) {
                    prop_assert!(value.as_object().is_some_and(|m| !m.is_empty()));
                    prop_assert!(depth(&value) <= MAX_PAYLOAD_DEPTH);
                }
            }
            Err(PayloadError::NotAnObject | PayloadError::Empty | PayloadError::BeyondLimits(_)) => {}
            // Only a payload that can spell the key can name recipients.
            Err(PayloadError::Recipients(_)) => {
                prop_assert!(text.contains("recipients") || text.contains('\\'));
            }
            Err(PayloadError::TooLarge(_)) => prop_assert!(false, "short text called too large"),
        }
    }

    #[test]
    fn nesting_and_numbers_are_judged_before_parsing((levels, text) in nested_payload()) {
        match check_payload(&text) {
            Ok(()) => {
                // `levels` counts the payload object itself.
                prop_assert!(levels <= MAX_PAYLOAD_DEPTH, "{levels} levels accepted");
                serde_json::from_str::<Box<RawValue>>(&text)
                    .map_err(|e| TestCaseError::fail(format!("accepted but not JSON: {e}")))?;
            }
            Err(PayloadError::BeyondLimits(JsonLimitError::TooDeep { .. })) => {
                prop_assert!(levels > MAX_PAYLOAD_DEPTH, "{levels} levels refused");
            }
            Err(PayloadError::BeyondLimits(JsonLimitError::NumberOutOfRange { .. })) => {}
            Err(other) => prop_assert!(false, "unexpected refusal {other:?} of {text}"),
        }
    }

    #[test]
    fn whole_digits_are_counted_as_postgresql_does(digits in 1i64..200, exponent in 130_900i64..131_100) {
        // 1 followed by `digits - 1` zeros, times 10^exponent, has digits + exponent whole digits.
        let number = format!("{{\"n\": 1{}e{exponent}}}", "0".repeat((digits - 1) as usize));
        let verdict = check_json_limits(number.as_bytes(), 4);
        prop_assert_eq!(verdict.is_ok(), digits + exponent <= MAX_NUMBER_WHOLE_DIGITS);
    }

    #[test]
    fn shown_text_is_one_safe_line(text in tricky_string(60)) {
        let shown = visible(&text);
        prop_assert!(!shown.chars().any(is_unsafe_on_terminal));
        if !text.chars().any(is_unsafe_on_terminal) {
            prop_assert_eq!(shown.as_ref(), text.as_str());
        }
    }

    #[test]
    fn parsed_queries_have_non_empty_terms(text in tricky_string(80)) {
        if let Ok(query) = Query::parse(&text) {
            prop_assert!(!query.required().is_empty());
            for phrase in query.required().iter().chain(query.excluded()) {
                prop_assert!(!phrase.is_empty());
                prop_assert!(phrase.iter().all(|w| !w.is_empty()));
            }
            // Without exclusions, a query finds its own text.
            let found = query.matches(&text, "");
            if query.excluded().is_empty() {
                prop_assert!(found.is_some(), "{text:?} does not match itself");
            }
            // Matching never panics, whatever the article says.
            let _ = query.matches("", &text.to_uppercase());
        }
    }
}

/// Header-like text: hex digits, separators and the characters a smuggler would try.
fn header_text() -> impl Strategy<Value = String> {
    prop_oneof![
        tricky_string(80),
        "[0-9a-fA-F=,@ \t\r\n-]{0,80}",
        "0[0-9a-f]-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}",
    ]
}

proptest! {
    /// A `traceparent` either is refused or reads back, printed, as itself; what is
    /// printed is always a version-00 header of printable ASCII.
    #[test]
    fn a_traceparent_is_refused_or_prints_back_the_same(header in header_text()) {
        use outbox_core::trace_context::TraceParent;
        if let Some(parent) = TraceParent::parse(&header) {
            let printed = parent.to_string();
            prop_assert_eq!(printed.len(), 55);
            prop_assert!(printed.bytes().all(|b| b.is_ascii_graphic()));
            prop_assert_eq!(TraceParent::parse(&printed), Some(parent));
        }
    }

    /// A `tracestate` kept is printable ASCII within its limits, and reads back as itself.
    #[test]
    fn a_tracestate_kept_is_within_its_limits(values in proptest::collection::vec(header_text(), 1..4)) {
        use outbox_core::trace_context::{TraceState, MAX_TRACESTATE_LEN, MAX_TRACESTATE_MEMBERS};
        if let Some(state) = TraceState::parse(values.iter().map(String::as_str)) {
            let text = state.as_str();
            prop_assert!(text.len() <= MAX_TRACESTATE_LEN);
            prop_assert!(text.split(',').count() <= MAX_TRACESTATE_MEMBERS);
            prop_assert!(text.bytes().all(|b| (0x20..=0x7e).contains(&b)));
            prop_assert_eq!(TraceState::parse([text]), Some(state.clone()));
        }
    }
}
