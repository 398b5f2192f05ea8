//! Hiding credentials in URLs before they are shown. Used by every view that prints a
//! destination's URL or lookup URL:
//! - the `userinfo@` of the authority: `https://user:pass@host/x` is shown as
//!   `https://***@host/x`;
//! - the value of every query parameter whose name, percent-decoded and compared without
//!   regard to case, contains one of [`CREDENTIAL_WORDS`] (`api_key`, `X-Auth`,
//!   `access_token`, `sig`, ...): `?api_key=QUERYSECRET&page=2` is shown as
//!   `?api_key=***&page=2`. The lookup URL's `{key}` placeholder stays visible: it is where
//!   the notification id goes, not a secret.
//!
//! A secret elsewhere in a URL (a path segment, a parameter with an innocent name) cannot
//! be told from the rest and is shown.

/// Words that make a query parameter's name a credential's, wherever they appear in it.
pub const CREDENTIAL_WORDS: &[&str] = &["key", "token", "secret", "password", "sig", "auth"];

/// `url` with its userinfo and its credential query values replaced by `***` (see the
/// module's rules). Text that is not of the `scheme://authority` form is returned unchanged.
pub fn url(url: &str) -> String {
    if !url.contains("://") {
        return url.to_owned();
    }
    query(&userinfo(url))
}

/// A database URL with its password, if it has one, shown as `***` and the rest as given
/// (`postgres://app:***@db:5432/outbox`): the user and the server stay readable, so the line
/// still says where to look. Credential query values (`?password=...`) are hidden as in
/// [`url`]. Only the authority's last `@` ends the userinfo, as in every parser of these URLs.
pub fn database_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let authority_start = scheme_end + 3;
    let rest = &url[authority_start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let masked = match rest[..authority_len].rfind('@') {
        Some(at) => match rest[..at].split_once(':') {
            Some((user, _password)) => format!(
                "{}{user}:***{}",
                &url[..authority_start],
                &url[authority_start + at..]
            ),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    };
    query(&masked)
}

/// `url` with any `userinfo@` part of its authority replaced by `***@`.
fn userinfo(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let authority_start = scheme_end + 3;
    let rest = &url[authority_start..];
    // The authority ends at the first `/`, `?` or `#`; a `@` after that is part of the
    // path or query, not credentials.
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_len].rfind('@') {
        Some(at) => format!(
            "{}***{}",
            &url[..authority_start],
            &url[authority_start + at..]
        ),
        None => url.to_owned(),
    }
}

/// `url` with the values of its credential query parameters replaced by `***`.
fn query(url: &str) -> String {
    // The query runs from the first `?` to the fragment; a `?` in the fragment is not one.
    let fragment = url.find('#').unwrap_or(url.len());
    let Some(start) = url[..fragment].find('?') else {
        return url.to_owned();
    };
    let pairs: Vec<String> = url[start + 1..fragment]
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, value))
                if !value.is_empty() && value != "{key}" && names_a_credential(name) =>
            {
                format!("{name}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{}?{}{}", &url[..start], pairs.join("&"), &url[fragment..])
}

/// Whether a query parameter's name contains a credential word, once percent-decoded
/// (`api%5Fkey` is `api_key`) and compared without regard to case.
fn names_a_credential(name: &str) -> bool {
    let mut decoded = Vec::with_capacity(name.len());
    let bytes = name.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[at], bytes.get(at + 1), bytes.get(at + 2)) {
            (b'%', Some(&hi), Some(&lo)) if hex(hi).is_some() && hex(lo).is_some() => {
                let value = hex(hi).unwrap_or(0) * 16 + hex(lo).unwrap_or(0);
                decoded.push(u8::try_from(value).unwrap_or(0));
                at += 3;
            }
            (b'+', ..) => {
                decoded.push(b' ');
                at += 1;
            }
            (b, ..) => {
                decoded.push(b);
                at += 1;
            }
        }
    }
    let name = String::from_utf8_lossy(&decoded).to_lowercase();
    CREDENTIAL_WORDS.iter().any(|word| name.contains(word))
}

#[cfg(test)]
mod tests {
    use super::{database_url, url};

    #[test]
    fn a_database_urls_password_is_hidden_and_its_user_and_server_kept() {
        assert_eq!(
            database_url("postgres://app:S3cret@db.example:5432/outbox"),
            "postgres://app:***@db.example:5432/outbox"
        );
        // The last `@` of the authority ends the userinfo: a password may hold one.
        assert_eq!(
            database_url("postgres://app:p@ss@h1:5432,h2/outbox?sslmode=require"),
            "postgres://app:***@h1:5432,h2/outbox?sslmode=require"
        );
        assert_eq!(
            database_url("postgres://app@h/outbox?password=S3cret&application_name=x"),
            "postgres://app@h/outbox?password=***&application_name=x"
        );
        for unchanged in [
            "postgres://postgres@127.0.0.1:5432/postgres",
            "postgres://postgres@%2Ftmp%2Fprivate-postgres-ab%2F:5432/postgres",
            "not a url",
        ] {
            assert_eq!(database_url(unchanged), unchanged);
        }
    }

    #[test]
    fn credentials_are_hidden() {
        assert_eq!(url("https://u:p@host/x"), "https://***@host/x");
        assert_eq!(url("http://user@host:8080"), "http://***@host:8080");
        assert_eq!(
            url("https://a:b@c@host/x?y=@z#@w"),
            "https://***@host/x?y=@z#@w"
        );
        assert_eq!(
            url("http://u:p@127.0.0.1:1/requests/{key}"),
            "http://***@127.0.0.1:1/requests/{key}"
        );
    }

    #[test]
    fn credential_query_values_are_hidden() {
        assert_eq!(
            url("https://api.example/v1?api_key=QUERYSECRET&token=abc"),
            "https://api.example/v1?api_key=***&token=***"
        );
        assert_eq!(
            url("https://u:p@host/x?page=2&X-Auth=s3&Signature=abc&sig=d#top?token=t"),
            "https://***@host/x?page=2&X-Auth=***&Signature=***&sig=***#top?token=t"
        );
        assert_eq!(
            url("https://host/x?SECRET=a&client_Password=b&access%5Ftoken=c&api+key=d"),
            "https://host/x?SECRET=***&client_Password=***&access%5Ftoken=***&api+key=***"
        );
        // The lookup URL's placeholder, and empty values, hide nothing.
        assert_eq!(
            url("https://host/lookup?key={key}&token="),
            "https://host/lookup?key={key}&token="
        );
    }

    #[test]
    fn urls_without_credentials_are_unchanged() {
        for plain in [
            "https://host/x",
            "https://host/x?mail=a@b.example",
            "https://host/a@b",
            "https://host#frag@x",
            "https://host/x?page=2&id=7&q=a%20b&flag",
            "https://host/x#frag?token=abc",
            "not a url?token=abc",
            "",
        ] {
            assert_eq!(url(plain), plain);
        }
    }
}
