//! Signing secrets at rest: sealed with XChaCha20-Poly1305 under a key the operator keeps
//! outside the database (`OUTBOX_SECRET_KEYS`).
//!
//! Keys are named, so they can be rotated: `k2:<base64 of 32 bytes>,k1:<base64>` means
//! `k2` seals everything new and both open what is stored. A sealed secret says which key
//! and algorithm made it: `enc:v1:<key id>:<base64 of nonce and ciphertext>`, where `v1`
//! is XChaCha20-Poly1305 with a random 24-byte nonce. The associated data is the owning
//! destination's id, so a sealed secret copied onto another destination does not open.
//!
//! A stored value that does not start with `enc:` is a plain-text secret (written while no
//! key was configured) and is used as it is; `outboxctl secrets rewrap` seals those.

use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use std::fmt;
use uuid::Uuid;

/// What marks a sealed value.
const SEALED_PREFIX: &str = "enc:";
/// The version tag of the only algorithm so far.
const V1: &str = "v1";
const NONCE_BYTES: usize = 24;
const KEY_BYTES: usize = 32;
/// Domain separation: the associated data names what is sealed, then the destination.
const CONTEXT: &[u8] = b"alert-outbox signing secret\0";

/// Why `OUTBOX_SECRET_KEYS` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeySpecError {
    /// An entry is not `id:base64`.
    #[error("each key must be `id:base64-of-32-bytes` (entry {0})")]
    Shape(usize),
    /// A key id with characters other than letters, digits, `-` and `_`, or too long.
    #[error("key id `{0}` must be 1 to 32 letters, digits, `-` or `_`")]
    Id(String),
    /// The same id twice.
    #[error("key id `{0}` is given twice")]
    Duplicate(String),
    /// Not 32 bytes of standard base64.
    #[error("key `{0}` must be the standard base64 of exactly 32 bytes")]
    Key(String),
}

/// Why a stored secret cannot be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Sealed, but no key is configured at all.
    #[error(
        "the secret is encrypted with key `{0}` but no key is configured (OUTBOX_SECRET_KEYS)"
    )]
    NoKeys(String),
    /// Sealed with a key that is not configured.
    #[error(
        "the secret is encrypted with key `{0}`, which is not configured (OUTBOX_SECRET_KEYS)"
    )]
    UnknownKey(String),
    /// Not of the `enc:v1:<id>:<base64>` form, or an unknown version.
    #[error("the stored secret is not in a known encrypted format")]
    Malformed,
    /// Authentication failed: wrong key material, tampered, or moved to another destination.
    #[error("the secret does not decrypt with key `{0}` (wrong key, altered, or copied from another destination)")]
    Rejected(String),
}

/// The configured keys; the first seals. May be empty (no encryption at rest).
#[derive(Clone, Default)]
pub struct SealingKeys {
    keys: Vec<(String, XChaCha20Poly1305)>,
}

impl SealingKeys {
    /// Reads `id:base64,id:base64`; the empty string means no keys.
    pub fn parse(spec: &str) -> Result<Self, KeySpecError> {
        let mut keys: Vec<(String, XChaCha20Poly1305)> = Vec::new();
        for (index, entry) in spec
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .enumerate()
        {
            let (id, encoded) = entry
                .split_once(':')
                .ok_or(KeySpecError::Shape(index + 1))?;
            let id_ok = (1..=32).contains(&id.len())
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !id_ok {
                return Err(KeySpecError::Id(id.to_owned()));
            }
            if keys.iter().any(|(known, _)| known == id) {
                return Err(KeySpecError::Duplicate(id.to_owned()));
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()
                .filter(|b| b.len() == KEY_BYTES)
                .ok_or_else(|| KeySpecError::Key(id.to_owned()))?;
            let cipher = XChaCha20Poly1305::new_from_slice(&bytes)
                .map_err(|_| KeySpecError::Key(id.to_owned()))?;
            keys.push((id.to_owned(), cipher));
        }
        Ok(SealingKeys { keys })
    }

    /// True when no key is configured: secrets are then stored as given.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The id of the key that seals, if any.
    pub fn current_id(&self) -> Option<&str> {
        self.keys.first().map(|(id, _)| id.as_str())
    }

    /// Seals `secret` for `destination` with the current key; `None` without keys.
    pub fn seal(&self, destination: Uuid, secret: &str) -> Option<String> {
        let (id, cipher) = self.keys.first()?;
        let mut nonce = [0u8; NONCE_BYTES];
        rand::rng().fill_bytes(&mut nonce);
        let aad = associated_data(destination);
        let ciphertext = cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: secret.as_bytes(),
                    aad: &aad,
                },
            )
            .expect("encrypting a short secret in memory cannot fail");
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&ciphertext);
        Some(format!(
            "{SEALED_PREFIX}{V1}:{id}:{}",
            base64::engine::general_purpose::STANDARD.encode(sealed)
        ))
    }

    /// The plain secret of a stored value: sealed values are opened, plain ones returned.
    pub fn open(&self, destination: Uuid, stored: &str) -> Result<String, OpenError> {
        let Some(rest) = stored.strip_prefix(SEALED_PREFIX) else {
            return Ok(stored.to_owned());
        };
        let (version, rest) = rest.split_once(':').ok_or(OpenError::Malformed)?;
        let (id, encoded) = rest.split_once(':').ok_or(OpenError::Malformed)?;
        if version != V1 {
            return Err(OpenError::Malformed);
        }
        if self.keys.is_empty() {
            return Err(OpenError::NoKeys(id.to_owned()));
        }
        let (_, cipher) = self
            .keys
            .iter()
            .find(|(known, _)| known == id)
            .ok_or_else(|| OpenError::UnknownKey(id.to_owned()))?;
        let sealed = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|_| OpenError::Malformed)?;
        if sealed.len() <= NONCE_BYTES {
            return Err(OpenError::Malformed);
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_BYTES);
        let aad = associated_data(destination);
        let plain = cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| OpenError::Rejected(id.to_owned()))?;
        String::from_utf8(plain).map_err(|_| OpenError::Malformed)
    }

    /// True when `stored` is already sealed with the current key (nothing to rewrap).
    pub fn is_current(&self, stored: &str) -> bool {
        self.current_id().is_some_and(|id| {
            stored
                .strip_prefix(SEALED_PREFIX)
                .and_then(|rest| rest.strip_prefix(V1))
                .and_then(|rest| rest.strip_prefix(':'))
                .and_then(|rest| rest.split_once(':'))
                .is_some_and(|(stored_id, _)| stored_id == id)
        })
    }
}

/// True when a stored value is sealed (rather than a plain-text secret).
pub fn is_sealed(stored: &str) -> bool {
    stored.starts_with(SEALED_PREFIX)
}

fn associated_data(destination: Uuid) -> Vec<u8> {
    let mut aad = CONTEXT.to_vec();
    aad.extend_from_slice(destination.as_bytes());
    aad
}

impl fmt::Debug for SealingKeys {
    /// Shows the key ids only, never key material.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealingKeys")
            .field(
                "ids",
                &self
                    .keys
                    .iter()
                    .map(|(id, _)| id.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn key(byte: u8) -> String {
        base64::engine::general_purpose::STANDARD.encode([byte; 32])
    }

    #[test]
    fn seals_and_opens_and_never_stores_the_plain_text() {
        let keys = SealingKeys::parse(&format!("k1:{}", key(1))).unwrap();
        let destination = Uuid::now_v7();
        let sealed = keys.seal(destination, SECRET).unwrap();
        assert!(sealed.starts_with("enc:v1:k1:"), "{sealed}");
        assert!(!sealed.contains("MfKQ9r8"));
        assert_ne!(
            sealed,
            keys.seal(destination, SECRET).unwrap(),
            "fresh nonce"
        );
        assert_eq!(keys.open(destination, &sealed).unwrap(), SECRET);
        assert!(keys.is_current(&sealed));
    }

    #[test]
    fn a_sealed_secret_does_not_open_for_another_destination() {
        let keys = SealingKeys::parse(&format!("k1:{}", key(1))).unwrap();
        let sealed = keys.seal(Uuid::now_v7(), SECRET).unwrap();
        assert_eq!(
            keys.open(Uuid::now_v7(), &sealed),
            Err(OpenError::Rejected("k1".into()))
        );
    }

    #[test]
    fn rotation_keeps_old_keys_opening_and_seals_with_the_first() {
        let old = SealingKeys::parse(&format!("k1:{}", key(1))).unwrap();
        let destination = Uuid::now_v7();
        let sealed_old = old.seal(destination, SECRET).unwrap();
        let rotated = SealingKeys::parse(&format!("k2:{},k1:{}", key(2), key(1))).unwrap();
        assert_eq!(rotated.current_id(), Some("k2"));
        assert!(!rotated.is_current(&sealed_old));
        assert_eq!(rotated.open(destination, &sealed_old).unwrap(), SECRET);
        let resealed = rotated.seal(destination, SECRET).unwrap();
        assert!(resealed.starts_with("enc:v1:k2:"));
        // Once k1 is dropped, what k1 sealed no longer opens; what k2 sealed does.
        let only_new = SealingKeys::parse(&format!("k2:{}", key(2))).unwrap();
        assert_eq!(
            only_new.open(destination, &sealed_old),
            Err(OpenError::UnknownKey("k1".into()))
        );
        assert_eq!(only_new.open(destination, &resealed).unwrap(), SECRET);
    }

    #[test]
    fn wrong_key_material_under_the_same_id_is_rejected() {
        let destination = Uuid::now_v7();
        let sealed = SealingKeys::parse(&format!("k1:{}", key(1)))
            .unwrap()
            .seal(destination, SECRET)
            .unwrap();
        let impostor = SealingKeys::parse(&format!("k1:{}", key(9))).unwrap();
        assert_eq!(
            impostor.open(destination, &sealed),
            Err(OpenError::Rejected("k1".into()))
        );
    }

    #[test]
    fn tampered_or_malformed_values_are_refused() {
        let keys = SealingKeys::parse(&format!("k1:{}", key(1))).unwrap();
        let destination = Uuid::now_v7();
        let sealed = keys.seal(destination, SECRET).unwrap();
        let mut tampered = sealed.clone();
        let last = tampered.pop().unwrap();
        tampered.push(if last == 'A' { 'B' } else { 'A' });
        assert!(keys.open(destination, &tampered).is_err());
        for bad in [
            "enc:",
            "enc:v1:k1",
            "enc:v2:k1:AAAA",
            "enc:v1:k1:!!!",
            "enc:v1:k1:AAAA",
        ] {
            assert_eq!(
                keys.open(destination, bad),
                Err(OpenError::Malformed),
                "{bad}"
            );
        }
        assert_eq!(
            SealingKeys::default().open(destination, &sealed),
            Err(OpenError::NoKeys("k1".into()))
        );
    }

    #[test]
    fn plain_text_secrets_pass_through() {
        assert_eq!(
            SealingKeys::default().open(Uuid::now_v7(), SECRET).unwrap(),
            SECRET
        );
        assert!(SealingKeys::default()
            .seal(Uuid::now_v7(), SECRET)
            .is_none());
    }

    #[test]
    fn key_specs_are_checked() {
        assert!(SealingKeys::parse("").unwrap().is_empty());
        let refused = |spec: &str| SealingKeys::parse(spec).err();
        assert_eq!(refused("nocolon"), Some(KeySpecError::Shape(1)));
        assert_eq!(
            refused(&format!("bad id:{}", key(1))),
            Some(KeySpecError::Id("bad id".into()))
        );
        assert_eq!(refused("k1:c2hvcnQ="), Some(KeySpecError::Key("k1".into())));
        assert_eq!(
            refused(&format!("k1:{},k1:{}", key(1), key(2))),
            Some(KeySpecError::Duplicate("k1".into()))
        );
    }

    #[test]
    fn debug_shows_ids_not_keys() {
        let keys = SealingKeys::parse(&format!("k1:{}", key(1))).unwrap();
        let shown = format!("{keys:?}");
        assert!(shown.contains("k1"));
        assert!(!shown.contains(&key(1)));
    }
}
