//! Signing evidence checkpoints ([`crate::evidence::chain::Checkpoint`]) with Ed25519.
//!
//! - A signing key is written `ed25519:` followed by the standard base64 (padded) of its
//!   32-byte seed: the form `OUTBOX_EVIDENCE_SIGNING_KEY` takes.
//! - A public key is written `ed25519-pub:` followed by the base64 of its 32 bytes: what
//!   an auditor keeps, and what stays stored after a rotation so that old checkpoints
//!   still verify.
//! - A key's id is the first eight bytes of SHA-256 over the public key's bytes, in
//!   lowercase hexadecimal: every signature names the key that made it.
//!
//! What is signed is [`Checkpoint::signed_bytes`]; a signature is 64 bytes (RFC 8032).

use base64::Engine;
use ed25519_dalek::Signer;
use sha2::{Digest, Sha256};

use crate::evidence::chain::Checkpoint;

const SECRET_PREFIX: &str = "ed25519:";
const PUBLIC_PREFIX: &str = "ed25519-pub:";

/// Why a key's text was refused. Never includes the text itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not `ed25519:` (or `ed25519-pub:`) followed by base64 of 32 bytes.
    #[error("an evidence signing key is `ed25519:` followed by the base64 of 32 bytes")]
    BadSigningKey,
    /// Not `ed25519-pub:` followed by base64 of 32 bytes of a valid point.
    #[error("an evidence public key is `ed25519-pub:` followed by the base64 of 32 bytes")]
    BadPublicKey,
}

/// The key that signs checkpoints. Its `Debug` shows its id only.
pub struct CheckpointSigner {
    key: ed25519_dalek::SigningKey,
    id: String,
}

impl std::fmt::Debug for CheckpointSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointSigner")
            .field("key_id", &self.id)
            .finish_non_exhaustive()
    }
}

impl CheckpointSigner {
    /// A new random key, and its text to keep (in `OUTBOX_EVIDENCE_SIGNING_KEY`).
    pub fn generate() -> (CheckpointSigner, String) {
        let seed: [u8; 32] = rand::random();
        let text = format!(
            "{SECRET_PREFIX}{}",
            base64::engine::general_purpose::STANDARD.encode(seed)
        );
        (CheckpointSigner::from_seed(seed), text)
    }

    /// The key written as `ed25519:<base64>` (surrounding whitespace ignored).
    pub fn from_text(text: &str) -> Result<CheckpointSigner, KeyError> {
        let seed = decode_32(text.trim(), SECRET_PREFIX).ok_or(KeyError::BadSigningKey)?;
        Ok(CheckpointSigner::from_seed(seed))
    }

    fn from_seed(seed: [u8; 32]) -> CheckpointSigner {
        let key = ed25519_dalek::SigningKey::from_bytes(&seed);
        let id = key_id(key.verifying_key().as_bytes());
        CheckpointSigner { key, id }
    }

    /// The key's id.
    pub fn key_id(&self) -> &str {
        &self.id
    }

    /// Its public half.
    pub fn public_key(&self) -> PublicKey {
        PublicKey {
            key: self.key.verifying_key(),
            id: self.id.clone(),
        }
    }

    /// The signature of `checkpoint`.
    pub fn sign(&self, checkpoint: &Checkpoint) -> [u8; 64] {
        self.key.sign(&checkpoint.signed_bytes()).to_bytes()
    }

    /// The signature of a signed note's text ([`crate::evidence::note`]). A note's text
    /// holds no control character, and a checkpoint's signed bytes always hold a NUL, so
    /// neither signature can stand for the other.
    pub fn sign_note(&self, text: &[u8]) -> [u8; 64] {
        assert!(!text.contains(&0), "a note's text holds no NUL");
        self.key.sign(text).to_bytes()
    }
}

/// A public key that verifies checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    key: ed25519_dalek::VerifyingKey,
    id: String,
}

impl PublicKey {
    /// The key written as `ed25519-pub:<base64>` (surrounding whitespace ignored).
    pub fn from_text(text: &str) -> Result<PublicKey, KeyError> {
        let bytes = decode_32(text.trim(), PUBLIC_PREFIX).ok_or(KeyError::BadPublicKey)?;
        let key =
            ed25519_dalek::VerifyingKey::from_bytes(&bytes).map_err(|_| KeyError::BadPublicKey)?;
        Ok(PublicKey {
            id: key_id(key.as_bytes()),
            key,
        })
    }

    /// The key as text (`ed25519-pub:<base64>`).
    pub fn to_text(&self) -> String {
        format!(
            "{PUBLIC_PREFIX}{}",
            base64::engine::general_purpose::STANDARD.encode(self.key.as_bytes())
        )
    }

    /// The key's id.
    pub fn key_id(&self) -> &str {
        &self.id
    }

    /// The key's 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        self.key.as_bytes()
    }

    /// Whether `signature` is this key's signature of a note's `text` (strict).
    pub fn verifies_note(&self, text: &[u8], signature: &[u8]) -> bool {
        let Ok(signature) = ed25519_dalek::Signature::from_slice(signature) else {
            return false;
        };
        self.key.verify_strict(text, &signature).is_ok()
    }

    /// Whether `signature` is this key's signature of `checkpoint` (strict verification:
    /// no malleable or small-order forms).
    pub fn verifies(&self, checkpoint: &Checkpoint, signature: &[u8]) -> bool {
        let Ok(signature) = ed25519_dalek::Signature::from_slice(signature) else {
            return false;
        };
        self.key
            .verify_strict(&checkpoint.signed_bytes(), &signature)
            .is_ok()
    }
}

/// The first eight bytes of SHA-256 over a public key's bytes, in hexadecimal.
fn key_id(public: &[u8; 32]) -> String {
    crate::evidence::chain::hex(&Sha256::digest(public).into())[..16].to_owned()
}

/// The 32 bytes after `prefix` in `text`, base64 (standard, padded).
fn decode_32(text: &str, prefix: &str) -> Option<[u8; 32]> {
    let encoded = text.strip_prefix(prefix)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    bytes.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::chain::Checkpoint;

    fn checkpoint() -> Checkpoint {
        Checkpoint {
            seq: 7,
            made_at_micros: 1_796_256_000_000_000,
            size: 12,
            root: [3; 32],
            previous: [4; 32],
        }
    }

    #[test]
    fn a_signature_verifies_with_its_key_only_and_for_its_checkpoint_only() {
        let (signer, text) = CheckpointSigner::generate();
        let again = CheckpointSigner::from_text(&format!(" {text}\n")).unwrap();
        assert_eq!(again.key_id(), signer.key_id());
        let signature = signer.sign(&checkpoint());
        let public = PublicKey::from_text(&signer.public_key().to_text()).unwrap();
        assert_eq!(public.key_id(), signer.key_id());
        assert!(public.verifies(&checkpoint(), &signature));
        // Another checkpoint, another key, a changed byte: no.
        assert!(!public.verifies(
            &Checkpoint {
                size: 13,
                ..checkpoint()
            },
            &signature
        ));
        let (other, _) = CheckpointSigner::generate();
        assert!(!other.public_key().verifies(&checkpoint(), &signature));
        let mut flipped = signature;
        flipped[10] ^= 1;
        assert!(!public.verifies(&checkpoint(), &flipped));
        assert!(!public.verifies(&checkpoint(), &signature[..63]));
    }

    /// RFC 8032's first test vector (section 7.1): the key derived from its seed and
    /// the id computed from it, so that keys made elsewhere read the same.
    #[test]
    fn a_known_seed_gives_the_rfc_8032_public_key() {
        let seed = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
        let seed: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&seed[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let text = format!(
            "ed25519:{}",
            base64::engine::general_purpose::STANDARD.encode(&seed)
        );
        let signer = CheckpointSigner::from_text(&text).unwrap();
        let public = signer.public_key().to_text();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(public.strip_prefix("ed25519-pub:").unwrap())
            .unwrap();
        assert_eq!(
            crate::evidence::chain::hex(&bytes.try_into().unwrap()),
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
        );
    }

    #[test]
    fn bad_key_text_is_refused_without_echoing_it() {
        for text in [
            "",
            "ed25519:",
            "ed25519:not base64!",
            "ed25519:AAAA",
            "x25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        ] {
            let err = CheckpointSigner::from_text(text).unwrap_err();
            assert_eq!(err, KeyError::BadSigningKey);
            if text.len() > 8 {
                assert!(!err.to_string().contains(&text[8..]), "{err}");
            }
        }
        assert_eq!(
            PublicKey::from_text("ed25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
                .unwrap_err(),
            KeyError::BadPublicKey
        );
        let (signer, text) = CheckpointSigner::generate();
        assert!(!format!("{signer:?}").contains(text.strip_prefix("ed25519:").unwrap()));
    }
}
