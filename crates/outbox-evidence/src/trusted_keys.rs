//! The public keys an auditor trusts, read the same way by every command that checks a
//! signature (`evidence verify`, `evidence check`): those given with `--public-key`, else
//! those in [`PUBLIC_KEYS_VARIABLE`]. Either may name several keys, comma-separated (a
//! rotated key and its successor).

use outbox_core::evidence::signing::PublicKey;

/// The environment variable naming the keys an auditor trusts when no `--public-key` is
/// given.
pub const PUBLIC_KEYS_VARIABLE: &str = "OUTBOX_EVIDENCE_PUBLIC_KEYS";

/// The keys the auditor trusts: `given` (the `--public-key` flags) when there are any,
/// else [`PUBLIC_KEYS_VARIABLE`]; empty when neither names a key. A text that is not a
/// public key is refused, naming where it came from.
pub fn auditor_keys(given: &[String]) -> Result<Vec<PublicKey>, String> {
    parse(given, std::env::var(PUBLIC_KEYS_VARIABLE).ok().as_deref())
}

fn parse(given: &[String], variable: Option<&str>) -> Result<Vec<PublicKey>, String> {
    let (texts, source): (Vec<&str>, &str) = if given.is_empty() {
        (variable.into_iter().collect(), PUBLIC_KEYS_VARIABLE)
    } else {
        (given.iter().map(String::as_str).collect(), "--public-key")
    };
    texts
        .iter()
        .flat_map(|text| text.split(','))
        .map(str::trim)
        .filter(|key| !key.is_empty())
        .map(|key| PublicKey::from_text(key).map_err(|err| format!("{source}: {err}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::evidence::signing::CheckpointSigner;

    #[test]
    fn flags_win_over_the_variable_and_both_take_comma_separated_keys() {
        let keys: Vec<String> = (0..3)
            .map(|_| CheckpointSigner::generate().0.public_key().to_text())
            .collect();
        let ids = |found: Vec<PublicKey>| -> Vec<String> {
            found.iter().map(|k| k.key_id().to_owned()).collect()
        };
        let id = |text: &str| PublicKey::from_text(text).unwrap().key_id().to_owned();
        let variable = format!("{}, {}", keys[0], keys[1]);
        assert_eq!(
            ids(parse(&[], Some(&variable)).unwrap()),
            vec![id(&keys[0]), id(&keys[1])]
        );
        assert_eq!(
            ids(parse(&[keys[2].clone()], Some(&variable)).unwrap()),
            vec![id(&keys[2])]
        );
        assert_eq!(
            ids(parse(&[format!("{},{}", keys[1], keys[2])], None).unwrap()),
            vec![id(&keys[1]), id(&keys[2])]
        );
        assert!(parse(&[], None).unwrap().is_empty());
        assert!(parse(&[], Some(" ")).unwrap().is_empty());
    }

    #[test]
    fn a_bad_key_names_where_it_came_from() {
        let err = parse(&[], Some("ed25519-pub:nope")).unwrap_err();
        assert!(err.starts_with(PUBLIC_KEYS_VARIABLE), "{err}");
        let err = parse(&["ed25519-pub:nope".to_owned()], None).unwrap_err();
        assert!(err.starts_with("--public-key"), "{err}");
    }
}
