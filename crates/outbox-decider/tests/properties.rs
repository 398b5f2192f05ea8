//! Property tests of the monitors' parsers: generated article pages and contract files,
//! including hostile ones, never panic; every refusal names its post or row; what is
//! accepted obeys the identity rules and the size caps.
//!
//! The number of cases is proptest's default (256); set `PROPTEST_CASES` for a long run.

use outbox_core::identity::check_identity_field;
use outbox_decider::contracts::{self, Format};
use outbox_decider::news::{self, MAX_ARTICLE_FIELD_BYTES, MAX_ARTICLE_TEXT_BYTES};
use proptest::prelude::*;

fn tricky_char() -> impl Strategy<Value = char> {
    prop_oneof![
        2 => any::<char>(),
        5 => proptest::sample::select(vec![
            '{', '}', '[', ']', '"', ':', ',', '\\', '-', '.', '0', '1', '2', '7', ' ', '\n',
            '\r', ';', 'a', 'C', 'E', 'U', 'R', '\u{1b}', '\u{7}', '\u{202e}', '\u{0}', '\u{9b}',
        ]),
    ]
}

fn tricky_string(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(tricky_char(), 0..max).prop_map(String::from_iter)
}

/// A string field that is usually well-formed and sometimes hostile.
fn field(good: &'static str) -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        3 => Just(serde_json::Value::String(good.to_owned())),
        2 => tricky_string(12).prop_map(serde_json::Value::String),
        1 => Just(serde_json::Value::Null),
        1 => Just(serde_json::json!(42)),
        1 => Just(serde_json::json!(["x"])),
    ]
}

fn page() -> impl Strategy<Value = String> {
    let post = (
        field("3f1a"),
        field("https://news.example/a"),
        field("Acme raises prices"),
        field("2027-01-01T10:00:00+01:00"),
        field("body text"),
        field("english"),
        field("news.example"),
    )
        .prop_map(|(uuid, url, title, published, text, language, site)| {
            serde_json::json!({"uuid": uuid, "url": url, "title": title,
                               "published": published, "text": text, "language": language,
                               "thread": {"site": site, "uuid": "t1"}})
        });
    prop_oneof![
        4 => proptest::collection::vec(post, 0..4)
            .prop_map(|posts| serde_json::json!({"posts": posts, "next": "/n?ts=1"}).to_string()),
        1 => tricky_string(64),
    ]
}

fn contract_cell() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => Just(String::new()),
        2 => tricky_string(10),
        1 => Just("\"quoted, with \"\" and\nnewline\"".to_owned()),
    ]
}

fn contract_file() -> impl Strategy<Value = (String, Format)> {
    let row = (
        prop_oneof![
            Just("C-1".to_owned()),
            Just("C-2".to_owned()),
            contract_cell()
        ],
        prop_oneof![Just("Acme".to_owned()), contract_cell()],
        prop_oneof![
            Just("12.50".to_owned()),
            Just("9".repeat(40)),
            contract_cell()
        ],
        prop_oneof![Just("eur".to_owned()), contract_cell()],
        prop_oneof![Just("2027-01-31".to_owned()), contract_cell()],
        prop_oneof![
            Just("ops".to_owned()),
            Just("ops;hr".to_owned()),
            contract_cell()
        ],
    )
        .prop_map(|(id, vendor, amount, currency, date, destinations)| {
            format!("{id},{vendor},{amount},{currency},{date},{destinations}")
        });
    prop_oneof![
        3 => proptest::collection::vec(row, 0..4).prop_map(|rows| {
            let mut text = "external_id,vendor,amount,currency,renewal_date,destinations\n".to_owned();
            for row in rows {
                text.push_str(&row);
                text.push('\n');
            }
            (text, Format::Csv)
        }),
        1 => tricky_string(64).prop_map(|t| (t, Format::Csv)),
        1 => tricky_string(64).prop_map(|t| (t, Format::Json)),
        1 => (contract_cell(), contract_cell()).prop_map(|(id, amount)| (
            serde_json::json!([{"external_id": id, "vendor": "A", "amount": amount,
                                "currency": "EUR", "renewal_date": "2027-01-31"}]).to_string(),
            Format::Json,
        )),
    ]
}

proptest! {
    #[test]
    fn accepted_articles_obey_the_rules(text in page()) {
        match news::parse_page(&text) {
            Ok((articles, ..)) => {
                for article in articles {
                    prop_assert!(check_identity_field("uuid", &article.uuid).is_ok());
                    prop_assert!(article.text.len() <= MAX_ARTICLE_TEXT_BYTES);
                    prop_assert!(article.title.len() <= MAX_ARTICLE_FIELD_BYTES);
                    prop_assert!(article.published.parse::<jiff::Timestamp>().is_ok());
                }
            }
            Err(err) => {
                prop_assert!(!err.problems.is_empty());
                let one_safe_line = !err.to_string().contains(['\n', '\u{1b}', '\u{202e}']);
                prop_assert!(one_safe_line, "{}", err);
            }
        }
    }

    #[test]
    fn accepted_contracts_obey_the_identity_rules((text, format) in contract_file()) {
        let known = vec!["ops".to_owned()];
        match contracts::parse(&text, format, &known) {
            Ok(rows) => {
                prop_assert!(!rows.is_empty());
                for row in rows {
                    let subject = format!("contract:{}", row.external_id);
                    prop_assert!(check_identity_field("subject", &subject).is_ok());
                    prop_assert!(row.amount.len() <= 49);
                    prop_assert_eq!(row.currency.len(), 3);
                }
            }
            Err(err) => {
                prop_assert!(!err.problems.is_empty());
                // One line, however hostile the file.
                let one_safe_line = !err.to_string().contains(['\n', '\r', '\u{1b}', '\u{202e}']);
                prop_assert!(one_safe_line, "{}", err);
            }
        }
    }
}
