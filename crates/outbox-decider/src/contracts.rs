//! The contract renewal monitor: contract files (CSV or JSON) in, renewal alerts out.
//!
//! Identity: subject `contract:<external id>`, occurrence `<renewal date>/<tier>d`, one per
//! destination. The renewal date is part of the occurrence, so next year's renewal (or a
//! changed date) is a new cycle with its own alerts, never blocked by this year's.
//!
//! A contract may name its owners (`recipients`: mail addresses, checked at import by the
//! rule every recipient follows); its renewal alerts carry them in the payload, so every
//! attempt mails the same people.

use jiff::civil::Date;
use jiff::Timestamp;
use outbox_core::identity::check_identity_field;
use outbox_core::renewal;
use outbox_store::alerts::MonitorAlert;
use outbox_store::sources::{self, ContractInput};
use outbox_store::PgPool;
use serde::Serialize;
use serde_json::value::RawValue;
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

use crate::DecideError;

/// A file format for contracts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Comma-separated, with a header line.
    Csv,
    /// An array of objects.
    Json,
}

impl Format {
    /// The format a file name implies (`.csv`, `.json`).
    pub fn from_path(path: &str) -> Option<Format> {
        let lower = path.to_ascii_lowercase();
        if lower.ends_with(".csv") {
            Some(Format::Csv)
        } else if lower.ends_with(".json") {
            Some(Format::Json)
        } else {
            None
        }
    }
}

/// Why a contract file cannot be imported: every bad row, with where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} bad row(s), nothing imported: {}", problems.len(), outbox_core::untrusted::visible(&problems.join("; ")))]
pub struct ImportError {
    /// `line 4: amount "12,5" is not a decimal number`, ...
    pub problems: Vec<String>,
}

/// Longest external id, in bytes (its subject is `contract:<id>`).
pub const MAX_EXTERNAL_ID_BYTES: usize = 200;
/// Most digits of an amount before its decimal point.
pub const MAX_AMOUNT_WHOLE_DIGITS: usize = 30;
/// Most digits of an amount after its decimal point.
pub const MAX_AMOUNT_FRACTION_DIGITS: usize = 18;

/// Most owners one contract names.
pub const MAX_RECIPIENTS: usize = 20;

const COLUMNS: [&str; 9] = [
    "external_id",
    "vendor",
    "amount",
    "currency",
    "renewal_date",
    "notice_days",
    "destinations",
    "tiers",
    "recipients",
];

/// Reads and checks a contract file. `known_destinations` are the tenant's destination
/// names; a row naming another is bad.
pub fn parse(
    text: &str,
    format: Format,
    known_destinations: &[String],
) -> Result<Vec<ContractInput>, ImportError> {
    let rows = match format {
        Format::Csv => csv_rows(text)?,
        Format::Json => json_rows(text)?,
    };
    let mut problems = Vec::new();
    let mut contracts = Vec::new();
    let mut seen = HashSet::new();
    for (location, fields) in rows {
        match check_row(&fields, known_destinations) {
            Ok(contract) => {
                if !seen.insert(contract.external_id.clone()) {
                    problems.push(format!(
                        "{location}: external_id `{}` appears twice in the file",
                        contract.external_id
                    ));
                }
                contracts.push(contract);
            }
            Err(reason) => problems.push(format!("{location}: {reason}")),
        }
    }
    if contracts.is_empty() && problems.is_empty() {
        problems.push("the file has no contracts".to_owned());
    }
    if problems.is_empty() {
        Ok(contracts)
    } else {
        Err(ImportError { problems })
    }
}

type Row = (String, HashMap<String, String>);

fn csv_rows(text: &str) -> Result<Vec<Row>, ImportError> {
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|err| ImportError {
            problems: vec![format!("line 1: unreadable header: {err}")],
        })?
        .clone();
    let unknown: Vec<&str> = headers.iter().filter(|h| !COLUMNS.contains(h)).collect();
    let missing: Vec<&str> = COLUMNS[..5]
        .iter()
        .copied()
        .filter(|c| !headers.iter().any(|h| h == *c))
        .collect();
    if !unknown.is_empty() || !missing.is_empty() {
        let mut problems = Vec::new();
        if !missing.is_empty() {
            problems.push(format!("line 1: missing column(s) {}", missing.join(", ")));
        }
        if !unknown.is_empty() {
            problems.push(format!("line 1: unknown column(s) {}", unknown.join(", ")));
        }
        return Err(ImportError { problems });
    }
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    for record in reader.records() {
        match record {
            Ok(record) => {
                let line = record.position().map_or(0, |p| p.line());
                let fields = headers
                    .iter()
                    .zip(record.iter())
                    .map(|(h, v)| (h.to_owned(), v.to_owned()))
                    .collect();
                rows.push((format!("line {line}"), fields));
            }
            Err(err) => {
                let line = err.position().map_or(0, |p| p.line());
                problems.push(format!("line {line}: {err}"));
            }
        }
    }
    if problems.is_empty() {
        Ok(rows)
    } else {
        Err(ImportError { problems })
    }
}

fn json_rows(text: &str) -> Result<Vec<Row>, ImportError> {
    // Values are kept as raw JSON so that amounts keep every digit (no trip through f64).
    let items: Vec<std::collections::BTreeMap<String, Box<RawValue>>> = serde_json::from_str(text)
        .map_err(|err| ImportError {
            problems: vec![format!("not a JSON array of objects: {err}")],
        })?;
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    for (index, item) in items.into_iter().enumerate() {
        let location = format!("item {}", index + 1);
        let mut fields = HashMap::new();
        for (key, value) in item {
            if !COLUMNS.contains(&key.as_str()) {
                problems.push(format!("{location}: unknown field `{key}`"));
                continue;
            }
            let raw = value.get().trim();
            let text = match raw.as_bytes().first() {
                Some(b'"') => serde_json::from_str::<String>(raw)
                    .map(|s| s.trim().to_owned())
                    .unwrap_or_default(),
                Some(b'-' | b'0'..=b'9') => raw.to_owned(),
                Some(b'n') => String::new(),
                Some(b'[') => match serde_json::from_str::<Vec<String>>(raw) {
                    Ok(values) => values.join(";"),
                    Err(_) => {
                        problems.push(format!(
                            "{location}: field `{key}` must be an array of strings"
                        ));
                        continue;
                    }
                },
                _ => {
                    problems.push(format!(
                        "{location}: field `{key}` has an unusable value {raw}"
                    ));
                    continue;
                }
            };
            fields.insert(key, text);
        }
        rows.push((location, fields));
    }
    if problems.is_empty() {
        Ok(rows)
    } else {
        Err(ImportError { problems })
    }
}

/// One row's fields checked, in column order; the first problem is the row's.
fn check_row(fields: &HashMap<String, String>, known: &[String]) -> Result<ContractInput, String> {
    let get = |name: &str| fields.get(name).map(String::as_str).unwrap_or("");
    let required = |name: &str| {
        let value = get(name);
        if value.is_empty() {
            Err(format!("{name} is missing"))
        } else {
            Ok(value.to_owned())
        }
    };
    let external_id = checked_external_id(required("external_id")?)?;
    let vendor = checked_vendor(required("vendor")?)?;
    let amount = checked_amount(required("amount")?)?;
    let currency = checked_currency(required("currency")?.to_ascii_uppercase())?;
    let renewal_date = checked_renewal_date(required("renewal_date")?)?;
    let notice_days = notice_days(get("notice_days"))?;
    let destinations = destinations(get("destinations"), known)?;
    let tiers = match get("tiers") {
        "" => None,
        text => Some(renewal::parse_tiers(text).map_err(|e| e.to_string())?),
    };
    let recipients = recipients(get("recipients"))?;
    Ok(ContractInput {
        external_id,
        vendor,
        amount,
        currency,
        renewal_date,
        notice_days,
        tiers,
        destinations,
        recipients: (!recipients.is_empty()).then_some(recipients),
    })
}

/// The id becomes the alert's subject (`contract:<id>`): the API's identity rules apply,
/// so an import cannot create a subject the API would refuse.
fn checked_external_id(external_id: String) -> Result<String, String> {
    check_identity_field("external_id", &external_id).map_err(|err| err.to_string())?;
    if external_id.len() > MAX_EXTERNAL_ID_BYTES {
        return Err(format!(
            "external_id is longer than {MAX_EXTERNAL_ID_BYTES} bytes"
        ));
    }
    Ok(external_id)
}

/// A vendor's name: at most 500 bytes, no control characters.
fn checked_vendor(vendor: String) -> Result<String, String> {
    if vendor.len() > 500 {
        return Err("vendor is longer than 500 bytes".to_owned());
    }
    if vendor.chars().any(char::is_control) {
        return Err("vendor contains a control character".to_owned());
    }
    Ok(vendor)
}

/// An amount as written: digits, optionally a point and more digits, kept as text so no
/// digit is lost; at most [`MAX_AMOUNT_WHOLE_DIGITS`] and [`MAX_AMOUNT_FRACTION_DIGITS`].
fn checked_amount(amount: String) -> Result<String, String> {
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    let decimal = amount
        .split_once('.')
        .map_or(digits(&amount), |(whole, fraction)| {
            digits(whole) && digits(fraction)
        });
    if !decimal {
        return Err(format!(
            "amount `{amount}` is not a decimal number such as 12000.50"
        ));
    }
    let (whole, fraction) = amount.split_once('.').unwrap_or((&amount, ""));
    if whole.len() > MAX_AMOUNT_WHOLE_DIGITS || fraction.len() > MAX_AMOUNT_FRACTION_DIGITS {
        return Err(format!(
            "amount has {} digit(s) before the decimal point and {} after; at most \
             {MAX_AMOUNT_WHOLE_DIGITS} and {MAX_AMOUNT_FRACTION_DIGITS} are accepted",
            whole.len(),
            fraction.len()
        ));
    }
    Ok(amount)
}

/// A currency code: three letters (upper-cased by the caller).
fn checked_currency(currency: String) -> Result<String, String> {
    if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(format!(
            "currency `{currency}` is not a three-letter code such as EUR"
        ));
    }
    Ok(currency)
}

/// A renewal date as `YYYY-MM-DD`, in the years 1900 to 9999.
fn checked_renewal_date(renewal_date: String) -> Result<String, String> {
    let year_ok = renewal_date
        .parse::<Date>()
        .is_ok_and(|d| (1900..=9999).contains(&d.year()));
    if renewal_date.len() != 10 || !year_ok {
        return Err(format!(
            "renewal_date `{renewal_date}` is not a date such as 2027-03-31"
        ));
    }
    Ok(renewal_date)
}

/// The notice period in days, 0 to 3660; none given is 0.
fn notice_days(text: &str) -> Result<u32, String> {
    match text {
        "" => Ok(0),
        text => text
            .parse::<u32>()
            .ok()
            .filter(|d| *d <= 3660)
            .ok_or_else(|| {
                format!("notice_days `{text}` is not a whole number of days (0 to 3660)")
            }),
    }
}

/// The destinations a contract names (`;`-separated), each one of the tenant's (`known`);
/// `None` when it names none, for every enabled one.
fn destinations(text: &str, known: &[String]) -> Result<Option<Vec<String>>, String> {
    let names: Vec<String> = text
        .split(';')
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .collect();
    if let Some(unknown) = names.iter().find(|n| !known.contains(n)) {
        return Err(format!(
            "destination `{unknown}` does not exist for this tenant"
        ));
    }
    Ok((!names.is_empty()).then_some(names))
}

/// The owners of a contract: mail addresses separated by `;` or blanks, each by the rule
/// every recipient follows (`name@domain`, no display name, no quoted local part, no IP
/// address; [`outbox_core::recipients`]), repeated ones (compared without regard to case)
/// kept once.
fn recipients(text: &str) -> Result<Vec<String>, String> {
    let mut addresses: Vec<String> = Vec::new();
    for word in text.split(|c: char| c == ';' || c.is_whitespace()) {
        if word.is_empty() {
            continue;
        }
        let address = outbox_core::recipients::recipient(word)
            .map_err(|err| err.to_string())?
            .to_string();
        if !addresses.iter().any(|a| a.eq_ignore_ascii_case(&address)) {
            addresses.push(address);
        }
    }
    if addresses.len() > MAX_RECIPIENTS {
        return Err(format!(
            "{} recipients; a contract names at most {MAX_RECIPIENTS}",
            addresses.len()
        ));
    }
    Ok(addresses)
}

/// Imports a checked file for a tenant in one statement: all rows or none.
pub async fn import(
    pool: &PgPool,
    tenant_id: Uuid,
    text: &str,
    format: Format,
) -> Result<(u64, u64), DecideError> {
    let known: Vec<String> = sources::destination_index(pool, tenant_id)
        .await?
        .into_iter()
        .map(|(name, ..)| name)
        .collect();
    let contracts = parse(text, format, &known)?;
    Ok(sources::upsert_contracts(pool, tenant_id, &contracts).await?)
}

#[derive(Serialize)]
struct RenewalPayload<'a> {
    kind: &'static str,
    contract: &'a str,
    vendor: &'a str,
    amount: &'a RawValue,
    currency: &'a str,
    renewal_date: String,
    action_date: String,
    days_remaining: i64,
    tier: u32,
    /// The contract's owners; absent when it names none, so such a payload is as before.
    #[serde(skip_serializing_if = "names_nobody")]
    recipients: &'a [String],
}

fn names_nobody(recipients: &&[String]) -> bool {
    recipients.is_empty()
}

/// Evaluates every contract at `now` and approves the renewal alerts that are due.
/// Returns how many alerts were created.
pub(crate) async fn evaluate(
    pool: &PgPool,
    now: Timestamp,
    actor: &str,
    run: &crate::MonitorRun,
) -> Result<u64, DecideError> {
    let today_utc = now.to_zoned(jiff::tz::TimeZone::UTC).date().to_string();
    let contracts = sources::contracts_to_evaluate(pool, &today_utc).await?;
    let mut due: HashMap<Uuid, Vec<MonitorAlert>> = HashMap::new();
    let mut destinations: HashMap<Uuid, Vec<(String, Uuid, bool)>> = HashMap::new();
    for contract in &contracts {
        let Ok(zone) = renewal::time_zone(&contract.time_zone) else {
            tracing::error!(tenant = %contract.tenant_id, zone = %contract.time_zone, "unknown time zone; contracts skipped");
            continue;
        };
        let Ok(renewal_date) = contract.renewal_date.parse::<Date>() else {
            continue;
        };
        let tiers: Vec<u32> = contract.tiers.iter().map(|t| t.unsigned_abs()).collect();
        let action = renewal::action_date(renewal_date, contract.notice_days.unsigned_abs());
        let days = renewal::days_until(renewal::today(now, &zone), action);
        let Some(tier) = renewal::due_tier(days, &tiers) else {
            continue;
        };
        if let std::collections::hash_map::Entry::Vacant(slot) =
            destinations.entry(contract.tenant_id)
        {
            slot.insert(sources::destination_index(pool, contract.tenant_id).await?);
        }
        let index = &destinations[&contract.tenant_id];
        let targets: Vec<Uuid> = match &contract.destinations {
            // Named destinations get the alert even while disabled: it waits, pending.
            Some(names) => index
                .iter()
                .filter(|(name, ..)| names.contains(name))
                .map(|(_, id, _)| *id)
                .collect(),
            None => index
                .iter()
                .filter(|(.., on)| *on)
                .map(|(_, id, _)| *id)
                .collect(),
        };
        let amount = RawValue::from_string(contract.amount.clone()).map_err(|err| {
            DecideError::Source(format!("amount of {}: {err}", contract.external_id))
        })?;
        let payload = serde_json::to_string(&RenewalPayload {
            kind: "contract_renewal",
            contract: &contract.external_id,
            vendor: &contract.vendor,
            amount: &amount,
            currency: &contract.currency,
            renewal_date: renewal_date.to_string(),
            action_date: action.to_string(),
            days_remaining: days,
            tier,
            recipients: contract.recipients.as_deref().unwrap_or_default(),
        })
        .map_err(|err| DecideError::Source(err.to_string()))?;
        for destination_id in targets {
            due.entry(contract.tenant_id)
                .or_default()
                .push(MonitorAlert {
                    destination_id,
                    subject: format!("contract:{}", contract.external_id),
                    occurrence: format!("{renewal_date}/{tier}d"),
                    payload_json: payload.clone(),
                });
        }
    }
    crate::approve_in_batches(pool, due, actor, run).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Vec<String> {
        vec!["ops".to_owned(), "finance".to_owned()]
    }

    #[test]
    fn csv_rows_become_contracts_with_defaults() {
        let csv =
            "external_id,vendor,amount,currency,renewal_date\nC-1,Acme,10.50,eur,2027-01-31\n";
        let contracts = parse(csv, Format::Csv, &known()).unwrap();
        assert_eq!(
            contracts,
            vec![ContractInput {
                external_id: "C-1".into(),
                vendor: "Acme".into(),
                amount: "10.50".into(),
                currency: "EUR".into(),
                renewal_date: "2027-01-31".into(),
                notice_days: 0,
                tiers: None,
                destinations: None,
                recipients: None,
            }]
        );
    }

    #[test]
    fn owners_are_addresses_separated_by_semicolons_or_blanks() {
        let csv = "external_id,vendor,amount,currency,renewal_date,recipients\n\
                   C-1,Acme,10,EUR,2027-01-31,cfo@acme.example; Legal@Acme.example  legal@acme.example\n\
                   C-2,Acme,10,EUR,2027-01-31,\n";
        let contracts = parse(csv, Format::Csv, &known()).unwrap();
        assert_eq!(
            contracts[0].recipients,
            Some(vec![
                "cfo@acme.example".to_owned(),
                "Legal@Acme.example".to_owned()
            ])
        );
        assert_eq!(contracts[1].recipients, None);

        let json = r#"[{"external_id": "J-1", "vendor": "A", "amount": 5, "currency": "EUR", "renewal_date": "2027-01-31", "recipients": ["cfo@acme.example"]}]"#;
        let contracts = parse(json, Format::Json, &known()).unwrap();
        assert_eq!(
            contracts[0].recipients,
            Some(vec!["cfo@acme.example".to_owned()])
        );

        let bad = "external_id,vendor,amount,currency,renewal_date,recipients\n\
                   C-1,Acme,10,EUR,2027-01-31,cfo@acme.example\n\
                   C-2,Acme,10,EUR,2027-01-31,cfo at acme\n";
        let err = parse(bad, Format::Csv, &known()).unwrap_err();
        assert_eq!(err.problems.len(), 1, "{err}");
        assert!(
            err.problems[0].starts_with("line 3: recipient `cfo`"),
            "{err}"
        );

        let many: Vec<String> = (0..=MAX_RECIPIENTS)
            .map(|i| format!("o{i}@x.example"))
            .collect();
        assert!(recipients(&many.join(";")).is_err());
    }

    #[test]
    fn every_bad_row_is_named_by_line() {
        let csv = "external_id,vendor,amount,currency,renewal_date,notice_days\n\
                   C-1,Acme,-3,EUR,2027-01-31,0\n\
                   C-2,,3,EUR,2027-01-31,0\n\
                   C-3,Acme,3,EURO,2027-01-31,x\n\
                   C-1,Acme,3,EUR,2027-01-31,0\n";
        let err = parse(csv, Format::Csv, &known()).unwrap_err();
        assert_eq!(err.problems.len(), 3, "{err}");
        assert!(err.problems[0].starts_with("line 2: amount `-3`"), "{err}");
        assert!(
            err.problems[1].starts_with("line 3: vendor is missing"),
            "{err}"
        );
        assert!(
            err.problems[2].starts_with("line 4: currency `EURO`"),
            "{err}"
        );
    }

    #[test]
    fn duplicates_and_unknown_columns_are_refused() {
        let dup = "external_id,vendor,amount,currency,renewal_date\nC-1,A,1,EUR,2027-01-31\nC-1,B,1,EUR,2027-01-31\n";
        assert!(parse(dup, Format::Csv, &known())
            .unwrap_err()
            .to_string()
            .contains("appears twice"));
        let extra = "external_id,vendor,amount,currency,renewal_date,colour\n";
        assert!(parse(extra, Format::Csv, &known())
            .unwrap_err()
            .to_string()
            .contains("unknown column(s) colour"));
        let missing = "external_id,vendor,amount\n";
        assert!(parse(missing, Format::Csv, &known())
            .unwrap_err()
            .to_string()
            .contains("missing column(s) currency, renewal_date"));
    }

    #[test]
    fn external_ids_follow_the_identity_rules() {
        // A quoted CSV field may hold an escape sequence or a line break.
        let csv = "external_id,vendor,amount,currency,renewal_date\n\
                   \"C-\u{1b}]0;pwned\u{7}\",Acme,1,EUR,2027-01-31\n\
                   \"C-2\nforged line\",Acme,1,EUR,2027-01-31\n\
                   C-\u{202e}3,Acme,1,EUR,2027-01-31\n\
                   C-4,Acme,1,EUR,2027-01-31\n";
        let err = parse(csv, Format::Csv, &known()).unwrap_err();
        assert_eq!(err.problems.len(), 3, "{err}");
        assert!(err.problems[0].contains("control character"), "{err}");
        assert!(err.problems[1].contains("control character"), "{err}");
        assert!(err.problems[2].contains("bidirectional"), "{err}");
        // The reason is one line and does not echo the hostile text.
        let reason = err.to_string();
        assert!(
            !reason.contains(['\n', '\u{1b}', '\u{7}', '\u{202e}']),
            "{reason}"
        );
    }

    #[test]
    fn amounts_are_bounded() {
        let csv = format!(
            "external_id,vendor,amount,currency,renewal_date\nC-1,Acme,{},EUR,2027-01-31\n",
            "9".repeat(200_000)
        );
        let err = parse(&csv, Format::Csv, &known()).unwrap_err();
        assert!(
            err.to_string().contains("200000 digit(s)"),
            "{}",
            &err.to_string()[..100]
        );
        assert!(err.to_string().len() < 300);
    }

    #[test]
    fn json_items_are_named_by_position() {
        let precise = r#"[{"external_id": "P", "vendor": "A", "amount": 1234567890.123456789, "currency": "EUR", "renewal_date": "2027-01-31"}]"#;
        assert_eq!(
            parse(precise, Format::Json, &known()).unwrap()[0].amount,
            "1234567890.123456789"
        );
        let json = r#"[{"external_id": "J-1", "vendor": "A", "amount": 5, "currency": "EUR", "renewal_date": "2027-01-31", "destinations": ["ops"]},
                       {"external_id": "J-2", "vendor": "B", "amount": 5, "currency": "EUR", "renewal_date": "2027-01-31", "destinations": ["hr"]}]"#;
        let err = parse(json, Format::Json, &known()).unwrap_err();
        assert_eq!(
            err.problems,
            vec!["item 2: destination `hr` does not exist for this tenant".to_owned()]
        );
        assert_eq!(Format::from_path("a/B.CSV"), Some(Format::Csv));
        assert_eq!(Format::from_path("x.txt"), None);
    }
}
