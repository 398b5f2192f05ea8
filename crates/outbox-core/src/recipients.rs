//! Who an email alert may be addressed to. One rule, applied wherever an address enters
//! (a destination's `--to`, a payload's `recipients` through the API or a revision, a
//! contract's owners) and again just before a message is sent, for rows written before
//! the rule existed.
//!
//! An address is `name@domain` as the mail library (lettre) parses it, minus two forms it
//! accepts:
//! - a quoted local part (`"a,b"@x.example`): a mail header built from a list holding one
//!   does not read back as that list, so such an address could receive a message while the
//!   `To` header names others;
//! - a domain that is an IP address (`x@[127.0.0.1]`, `x@127.0.0.1`): an alert has no
//!   business mailing a machine rather than a domain, and a relay delivering to an address
//!   literal goes wherever it says, out of sight of the egress guard.
//!
//! A message goes to at most [`MAX_RECIPIENTS`] addresses (RFC 5321 asks relays to take at
//! least 100), compared without regard to case.

use lettre::Address;
use std::net::IpAddr;

/// Most recipients of one alert: the destination's and the payload's together at send
/// time, and a payload's own at approval.
pub const MAX_RECIPIENTS: usize = 100;

/// Why an address, or a payload's `recipients`, is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecipientError {
    /// Not `name@domain`.
    #[error("recipient `{0}` is not a mail address (name@domain)")]
    NotAnAddress(String),
    /// A quoted local part (`"a,b"@x.example`).
    #[error(
        "recipient `{0}` has a quoted local part, which a `To` header cannot be trusted \
         to show as one address; use a plain name@domain"
    )]
    QuotedLocalPart(String),
    /// The domain is an IP address, bracketed or not.
    #[error(
        "recipient `{0}` is addressed to an IP address, not a domain; alerts are mailed \
         to domains only"
    )]
    AddressLiteral(String),
    /// More than [`MAX_RECIPIENTS`] distinct addresses.
    #[error("{0} recipients; an alert goes to at most {MAX_RECIPIENTS}")]
    TooMany(usize),
    /// A payload's `recipients` that is not a list of strings (or names the key twice).
    #[error("the payload's `recipients` is not a list of mail addresses")]
    NotAList,
}

/// Checks one address by the rule above; returns it as the mail library holds it.
/// Surrounding blanks are ignored.
pub fn recipient(text: &str) -> Result<Address, RecipientError> {
    let trimmed = text.trim();
    // Checked on the text before parsing: whatever the parser makes of a quote, an
    // address holding one is refused.
    let Some((local, domain)) = trimmed.rsplit_once('@') else {
        return Err(RecipientError::NotAnAddress(text.to_owned()));
    };
    if local.contains(['"', '\\']) {
        return Err(RecipientError::QuotedLocalPart(text.to_owned()));
    }
    let bare = domain
        .strip_prefix('[')
        .and_then(|d| d.strip_suffix(']'))
        .unwrap_or(domain);
    if domain.starts_with('[') || bare.parse::<IpAddr>().is_ok() {
        return Err(RecipientError::AddressLiteral(text.to_owned()));
    }
    trimmed
        .parse::<Address>()
        .map_err(|_| RecipientError::NotAnAddress(text.to_owned()))
}

/// `addresses` checked one by one, each kept once (compared without regard to case, the
/// first spelling kept), at most [`MAX_RECIPIENTS`] in all.
pub fn recipients<'a>(
    addresses: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<Address>, RecipientError> {
    let mut all: Vec<Address> = Vec::new();
    for text in addresses {
        let address = recipient(text)?;
        let seen = all
            .iter()
            .any(|known| AsRef::<str>::as_ref(known).eq_ignore_ascii_case(address.as_ref()));
        if !seen {
            all.push(address);
        }
    }
    if all.len() > MAX_RECIPIENTS {
        return Err(RecipientError::TooMany(all.len()));
    }
    Ok(all)
}

/// The addresses a payload names in `recipients` (absent or `null`: none), each checked,
/// repeated ones kept once, at most [`MAX_RECIPIENTS`]. `payload` is JSON text; text that
/// is not JSON names nobody here (the payload's own check refuses it).
pub fn payload_recipients(payload: &str) -> Result<Vec<Address>, RecipientError> {
    // Only a payload whose text holds the key, or an escape that could spell it, can name
    // anyone: the common payload is not parsed a second time.
    if !payload.contains("recipients") && !payload.contains('\\') {
        return Ok(Vec::new());
    }
    #[derive(serde::Deserialize)]
    struct Named {
        // Duplicate keys are a parse error here: PostgreSQL keeps the last of them, so a
        // check that read the first would check the wrong list.
        recipients: Option<Vec<String>>,
    }
    let named: Named = match serde_json::from_str(payload) {
        Ok(named) => named,
        Err(err) if err.is_data() => return Err(RecipientError::NotAList),
        Err(_) => return Ok(Vec::new()),
    };
    recipients(named.recipients.iter().flatten().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_addresses_are_accepted_as_written() {
        for text in [
            "cfo@acme.example",
            "first.last+tag@mail.acme.example",
            "  spaced@acme.example ",
            "o'brien@acme.example",
        ] {
            let address = recipient(text).unwrap();
            assert_eq!(AsRef::<str>::as_ref(&address), text.trim());
        }
    }

    #[test]
    fn quoted_local_parts_are_refused() {
        for text in [
            r#""a,b"@attacker.example"#,
            r#""spy"@attacker.example"#,
            r#""a\"b"@attacker.example"#,
            r#"a\@b@attacker.example"#,
        ] {
            assert_eq!(
                recipient(text),
                Err(RecipientError::QuotedLocalPart(text.to_owned())),
                "{text}"
            );
        }
    }

    #[test]
    fn ip_address_domains_are_refused_bracketed_or_not() {
        for text in [
            "x@[127.0.0.1]",
            "x@[IPv6:::1]",
            "x@[::1]",
            "x@127.0.0.1",
            "x@10.0.0.1",
            "x@::1",
        ] {
            assert_eq!(
                recipient(text),
                Err(RecipientError::AddressLiteral(text.to_owned())),
                "{text}"
            );
        }
    }

    #[test]
    fn what_is_not_an_address_is_refused() {
        for text in [
            "",
            "cfo",
            "cfo at acme",
            "@acme.example",
            "a b@acme.example",
        ] {
            assert!(
                matches!(recipient(text), Err(RecipientError::NotAnAddress(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn repeated_addresses_are_kept_once_and_the_count_is_capped() {
        let kept = recipients(["cfo@acme.example", "CFO@acme.example", "b@acme.example"]);
        let kept: Vec<String> = kept.unwrap().iter().map(ToString::to_string).collect();
        assert_eq!(kept, ["cfo@acme.example", "b@acme.example"]);

        let many: Vec<String> = (0..=MAX_RECIPIENTS)
            .map(|i| format!("o{i}@x.example"))
            .collect();
        assert_eq!(
            recipients(many.iter().map(String::as_str)),
            Err(RecipientError::TooMany(MAX_RECIPIENTS + 1))
        );
        assert!(recipients(many[..MAX_RECIPIENTS].iter().map(String::as_str)).is_ok());
    }

    #[test]
    fn a_payloads_recipients_are_checked_however_the_key_is_spelled() {
        assert_eq!(payload_recipients(r#"{"a": 1}"#), Ok(vec![]));
        assert_eq!(payload_recipients(r#"{"recipients": null}"#), Ok(vec![]));
        let named = payload_recipients(r#"{"recipients": ["a@x.example", "A@x.example"]}"#);
        assert_eq!(named.unwrap().len(), 1);
        for hidden in [
            r#"{"recipients": ["legit@acme.example", "\"a,b\"@attacker.example"]}"#,
            r#"{"recip\u0069ents": ["x@[127.0.0.1]"]}"#,
        ] {
            assert!(payload_recipients(hidden).is_err(), "{hidden}");
        }
        for not_a_list in [
            r#"{"recipients": "a@x.example"}"#,
            r#"{"recipients": [1]}"#,
            r#"{"recipients": [], "recipients": ["a@x.example"]}"#,
        ] {
            assert_eq!(
                payload_recipients(not_a_list),
                Err(RecipientError::NotAList),
                "{not_a_list}"
            );
        }
        let many: Vec<String> = (0..=MAX_RECIPIENTS)
            .map(|i| format!("\"o{i}@x.example\""))
            .collect();
        let payload = format!(r#"{{"recipients": [{}]}}"#, many.join(","));
        assert_eq!(
            payload_recipients(&payload),
            Err(RecipientError::TooMany(MAX_RECIPIENTS + 1))
        );
    }
}
