//! The templates' context: a payload's fields as template values, and what each kind adds
//! (formatted amounts and dates, links, the generic list of fields) after checking the
//! fields it needs.

use std::collections::BTreeMap;

use minijinja::Value;
use serde_json::value::RawValue;

use crate::error::RenderError;
use crate::format;
use crate::locale::Locale;
use crate::templates::Kind;

/// A payload's top-level fields, each as its exact JSON text.
pub(crate) type Fields = BTreeMap<String, Box<RawValue>>;

/// The payload's top-level fields, each kept as its exact JSON text (numbers are never
/// converted to floating point).
pub(crate) fn parse_object(payload_json: &str) -> Result<Fields, RenderError> {
    serde_json::from_str(payload_json).map_err(|err| RenderError::Payload(err.to_string()))
}

/// The payload's `kind`, when it is a string.
pub(crate) fn payload_kind(fields: &Fields) -> Option<String> {
    fields
        .get("kind")
        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
}

/// The JSON text as a template value: strings, booleans and null as themselves, integers
/// that fit as integers (so templates can compare them), other numbers as their exact
/// text, arrays and objects element by element.
fn to_value(raw: &RawValue) -> Value {
    let text = raw.get().trim();
    match text.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<String>(text)
            .map(Value::from)
            .unwrap_or_else(|_| Value::from(text)),
        Some(b'[') => match serde_json::from_str::<Vec<Box<RawValue>>>(text) {
            Ok(items) => Value::from(items.iter().map(|item| to_value(item)).collect::<Vec<_>>()),
            Err(_) => Value::from(text),
        },
        Some(b'{') => match serde_json::from_str::<Fields>(text) {
            Ok(fields) => Value::from(
                fields
                    .iter()
                    .map(|(name, item)| (name.clone(), to_value(item)))
                    .collect::<BTreeMap<_, _>>(),
            ),
            Err(_) => Value::from(text),
        },
        _ => match text {
            "true" => Value::from(true),
            "false" => Value::from(false),
            "null" => Value::from(()),
            number => number
                .parse::<i64>()
                .map(Value::from)
                .unwrap_or_else(|_| Value::from(number)),
        },
    }
}

/// How the generic template shows a value: a string as its text, a number as written,
/// `true`/`false`/`null`, and arrays or objects as compact JSON.
fn display_text(raw: &RawValue) -> String {
    let text = raw.get().trim();
    if text.starts_with('"') {
        if let Ok(string) = serde_json::from_str::<String>(text) {
            return string;
        }
    }
    if text.starts_with('[') || text.starts_with('{') {
        return compact_json(text);
    }
    text.to_owned()
}

/// Valid JSON text without the whitespace between tokens (strings are kept as they are,
/// numbers as written).
fn compact_json(text: &str) -> String {
    let mut compact = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else if c.is_ascii_whitespace() {
            continue;
        }
        compact.push(c);
    }
    compact
}

fn required<'f>(fields: &'f Fields, field: &'static str) -> Result<&'f RawValue, RenderError> {
    fields
        .get(field)
        .map(|raw| &**raw)
        .ok_or(RenderError::Field {
            field,
            reason: "is missing".to_owned(),
        })
}

/// A field's exact text: a JSON string's contents, or a number as written.
fn exact_text(fields: &Fields, field: &'static str) -> Result<String, RenderError> {
    let raw = required(fields, field)?.get().trim();
    if raw.starts_with('"') {
        return serde_json::from_str::<String>(raw).map_err(|err| RenderError::Field {
            field,
            reason: err.to_string(),
        });
    }
    if raw.starts_with(['-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9']) {
        return Ok(raw.to_owned());
    }
    Err(RenderError::Field {
        field,
        reason: format!("must be a string or a number, not {raw}"),
    })
}

fn integer(fields: &Fields, field: &'static str) -> Result<i64, RenderError> {
    let raw = required(fields, field)?.get().trim();
    raw.parse::<i64>().map_err(|_| RenderError::Field {
        field,
        reason: format!("must be a whole number, not {raw}"),
    })
}

fn formatted(
    field: &'static str,
    result: Result<String, format::FormatError>,
) -> Result<Value, RenderError> {
    result.map(Value::from).map_err(|err| RenderError::Field {
        field,
        reason: format!("cannot be formatted: {err}"),
    })
}

/// The templates' context for `kind`. Every payload field is present as itself; the
/// specific kinds also replace some with their formatted form (documented per template
/// kind in the crate's opening documentation) and check the fields they need.
pub(crate) fn context_for(
    kind: Kind,
    locale: Locale,
    fields: &Fields,
) -> Result<Value, RenderError> {
    let mut context: Context = fields
        .iter()
        .map(|(name, raw)| (name.clone(), to_value(raw)))
        .collect();
    match kind {
        Kind::ContractRenewal => add_renewal(&mut context, locale, fields)?,
        Kind::NewsArticle | Kind::NewsEvent => add_news(&mut context, locale, fields)?,
        Kind::Generic => add_generic(&mut context, fields),
    }
    Ok(Value::from(context))
}

/// The context's values by name.
type Context = BTreeMap<String, Value>;

/// A renewal's formatted amount and dates, its integers, and the fields it needs.
fn add_renewal(context: &mut Context, locale: Locale, fields: &Fields) -> Result<(), RenderError> {
    for field in ["contract", "vendor"] {
        required(fields, field)?;
    }
    let amount = exact_text(fields, "amount")?;
    let currency = exact_text(fields, "currency")?;
    let formatted_amount = formatted("amount", format::amount(&amount, &currency, locale))?;
    set(context, "amount", formatted_amount);
    set(context, "amount_value", Value::from(amount));
    for field in ["renewal_date", "action_date"] {
        let date = exact_text(fields, field)?;
        set(
            context,
            field,
            formatted(field, format::long_date(&date, locale))?,
        );
        set(context, &format!("{field}_iso"), Value::from(date));
    }
    let days_remaining = integer(fields, "days_remaining")?;
    set(context, "days_remaining", Value::from(days_remaining));
    set(context, "tier", Value::from(integer(fields, "tier")?));
    Ok(())
}

/// A news alert's link (web addresses only), written-out date and site, and the fields
/// it needs.
fn add_news(context: &mut Context, locale: Locale, fields: &Fields) -> Result<(), RenderError> {
    for field in ["watchlist", "article", "title", "snippet", "matched_terms"] {
        required(fields, field)?;
    }
    let url = exact_text(fields, "url")?;
    let web = url
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
        || url
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("http://"));
    // Only a web address becomes a link in HTML: never `javascript:` or `data:`.
    let link = if web {
        Value::from(url)
    } else {
        Value::from(())
    };
    set(context, "link", link);
    let published = exact_text(fields, "published")?;
    let published_date = format::long_date_of_timestamp(&published, locale).unwrap_or(published);
    set(context, "published_date", Value::from(published_date));
    if !fields.contains_key("site") {
        set(context, "site", Value::from(()));
    }
    Ok(())
}

/// The generic template's `kind` and its list of every field, sorted by name.
fn add_generic(context: &mut Context, fields: &Fields) {
    let kind = payload_kind(fields).map_or(Value::from(()), Value::from);
    set(context, "kind", kind);
    let listed: Vec<Value> = fields
        .iter()
        .map(|(name, raw)| {
            Value::from(BTreeMap::from([
                ("name", Value::from(name.as_str())),
                ("value", Value::from(display_text(raw))),
            ]))
        })
        .collect();
    set(context, "fields", Value::from(listed));
}

fn set(context: &mut Context, name: &str, value: Value) {
    context.insert(name.to_owned(), value);
}
