//! Standard Webhooks signing secrets: `whsec_` followed by the base64 of 24 to 64 random
//! bytes. The bytes are the HMAC-SHA256 key.

use base64::Engine;

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

#[cfg(test)]
mod tests {
    use super::*;

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
