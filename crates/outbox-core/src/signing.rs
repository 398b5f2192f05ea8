//! Standard Webhooks signatures. A secret is `whsec_` followed by the base64 of 24 to 64
//! random bytes (the HMAC-SHA256 key). A request is signed over `{id}.{timestamp}.{body}`,
//! and `webhook-signature` carries `v1,<base64 of the MAC>`, one per secret, separated by
//! spaces, so receivers keep verifying while a secret rotates.

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Why a signing secret is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// Missing the `whsec_` prefix.
    #[error("a signing secret must start with `whsec_`")]
    Prefix,
    /// The rest is not standard base64.
    #[error("a signing secret must be `whsec_` followed by base64")]
    Encoding,
    /// The key is too short or too long.
    #[error("a signing secret's key must be 24 to 64 bytes, this one is {0}")]
    Length(usize),
}

/// Decodes a `whsec_...` secret into its key bytes.
pub fn decode_secret(secret: &str) -> Result<Vec<u8>, SecretError> {
    let encoded = secret.strip_prefix("whsec_").ok_or(SecretError::Prefix)?;
    let key = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| SecretError::Encoding)?;
    if !(24..=64).contains(&key.len()) {
        return Err(SecretError::Length(key.len()));
    }
    Ok(key)
}

/// A fresh `whsec_` secret with a 32-byte random key.
pub fn generate_secret() -> String {
    let mut key = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut key);
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    )
}

/// One `v1,<base64>` signature of a request.
pub fn sign(key: &[u8], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

/// The `webhook-signature` header value: one signature per key, space-separated.
pub fn signature_header(keys: &[Vec<u8>], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    keys.iter()
        .map(|key| sign(key, msg_id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Receiver side: true when any `v1` signature in `header` is valid for any key.
/// The comparison runs in constant time.
pub fn verify(keys: &[Vec<u8>], msg_id: &str, timestamp: i64, body: &[u8], header: &str) -> bool {
    header
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .any(|presented| {
            let Ok(presented) = base64::engine::general_purpose::STANDARD.decode(presented) else {
                return false;
            };
            keys.iter().any(|key| {
                let mut mac =
                    Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts keys of any length");
                mac.update(msg_id.as_bytes());
                mac.update(b".");
                mac.update(timestamp.to_string().as_bytes());
                mac.update(b".");
                mac.update(body);
                mac.verify_slice(&presented).is_ok()
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_verify_with_either_key_while_rotating() {
        let old = decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let new = vec![7u8; 32];
        let header = signature_header(&[old.clone(), new.clone()], "msg_1", 1_700_000_000, b"{}");
        assert_eq!(header.split(' ').count(), 2);
        assert!(verify(
            std::slice::from_ref(&old),
            "msg_1",
            1_700_000_000,
            b"{}",
            &header
        ));
        assert!(verify(
            std::slice::from_ref(&new),
            "msg_1",
            1_700_000_000,
            b"{}",
            &header
        ));
        assert!(!verify(
            &[vec![9u8; 32]],
            "msg_1",
            1_700_000_000,
            b"{}",
            &header
        ));
        assert!(!verify(
            std::slice::from_ref(&old),
            "msg_1",
            1_700_000_001,
            b"{}",
            &header
        ));
        assert!(!verify(&[old], "msg_1", 1_700_000_000, b"{ }", &header));
    }

    #[test]
    fn generated_secrets_decode_and_differ() {
        let a = generate_secret();
        assert_eq!(decode_secret(&a).unwrap().len(), 32);
        assert_ne!(a, generate_secret());
    }

    #[test]
    fn decodes_a_standard_secret() {
        // 24 bytes of key.
        let key = decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(key.len(), 24);
    }

    #[test]
    fn refuses_malformed_secrets() {
        assert_eq!(
            decode_secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            Err(SecretError::Prefix)
        );
        assert_eq!(
            decode_secret("whsec_not base64!"),
            Err(SecretError::Encoding)
        );
        assert_eq!(decode_secret("whsec_c2hvcnQ="), Err(SecretError::Length(5)));
    }
}
