//! Hiding credentials in URLs before they are shown: `https://user:pass@host/x` is shown
//! as `https://***@host/x`. Used by every view that prints a destination's URL.

/// `url` with any `userinfo@` part of its authority replaced by `***@`. Text that is not
/// of the `scheme://authority` form is returned unchanged.
pub fn url(url: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::url;

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
    fn urls_without_credentials_are_unchanged() {
        for plain in [
            "https://host/x",
            "https://host/x?mail=a@b.example",
            "https://host/a@b",
            "https://host#frag@x",
            "not a url",
            "",
        ] {
            assert_eq!(url(plain), plain);
        }
    }
}
