//! Operator account passwords: a new one is 256 random bits (shown once, never stored),
//! and what is stored is its argon2id hash in PHC string form, with a random salt.
//! Checking a password against its hash is the console's (it bounds how many run at once).

use argon2::password_hash::{PasswordHasher, SaltString};
use argon2::Argon2;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;

/// A new random password for an account: 256 random bits, base64url.
pub fn new_password() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The argon2id hash of `password`, in PHC string form, with a random salt.
pub fn hash_password(password: &str) -> Result<String, String> {
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|err| err.to_string())?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_password_is_hashed_with_a_fresh_salt() {
        let password = new_password();
        assert_eq!(password.len(), 43);
        let (one, two) = (
            hash_password(&password).expect("hash"),
            hash_password(&password).expect("hash"),
        );
        assert!(one.starts_with("$argon2id$"), "{one}");
        assert_ne!(one, two);
        assert!(!one.contains(&password));
    }
}
