//! A checkpoint as text, for keeping outside the database: the form the checkpoint log
//! (`--checkpoint-log`) is written in, and that `outboxctl evidence verify` and `check`
//! read back (`--checkpoints FILE`).
//!
//! Each checkpoint is a signed note in the sense of C2SP's `signed-note` (the envelope Go's
//! `golang.org/x/mod/sumdb/note` and transparency-log witnesses read): a text of lines,
//! a blank line, and one signature line per key, `— NAME BASE64(KEYID4 || SIGNATURE)`.
//! The text is ours, not a C2SP `tlog-checkpoint`: our checkpoints are a chain of trees,
//! one per interval, not one append-only tree, so a consistency proof between two of them
//! does not exist, and a body that looked like a `tlog-checkpoint` would be read as a tree
//! size and an RFC 6962 root that it is not. The text is:
//!
//! ```text
//! alert-outbox checkpoint v1
//! seq 5
//! made_at 1796256000000000
//! size 3
//! root 5458f171...
//! previous b2bc3de5...
//! hash 6c1f2e0a...
//! signed_by 21fe31dfa154a261 BASE64(the checkpoint's own 64-byte signature)
//! ```
//!
//! (`signed_by unsigned` for a checkpoint made without a key). Every field is the stored
//! checkpoint's, `hash` is recomputed from the others when a note is read, and
//! `signed_by` carries the checkpoint's own signature over its bytes, so a note is checked
//! with no database exactly as a stored checkpoint is. The note's signature line is made
//! by the writer's key under the name `alert-outbox/KEYID`, with the signed-note key id
//! `SHA-256(name || 0x0A || 0x01 || public key)[:4]` (type `0x01`, Ed25519); it lets any
//! signed-note verifier check a line with the verifier key [`note_verifier_key`] prints.
//! Note texts hold no control character, and a checkpoint's signed bytes always hold a
//! NUL, so the key's two kinds of signature can never be taken for each other.
//!
//! In a file, each note ends with one blank line; a last note without it was cut short by
//! a crash while being written, and is reported as such ([`ParsedLog::torn_tail`]).

use base64::Engine;
use sha2::{Digest, Sha256};

use crate::evidence::chain::{hex, Checkpoint, Hash};
use crate::evidence::signing::{CheckpointSigner, PublicKey};

/// The first line of every note this module writes.
pub const FIRST_LINE: &str = "alert-outbox checkpoint v1";

/// Most bytes of a checkpoint log read at once (about 3 million checkpoints, five years
/// at one a minute): a bigger file is refused rather than read into memory.
pub const MAX_LOG_BYTES: u64 = 2 << 30;

/// A checkpoint as a note says it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedCheckpoint {
    /// Its fields, from which its hash is computed.
    pub checkpoint: Checkpoint,
    /// The checkpoint's own signature, with the id of the key that made it.
    pub signed_by: Option<(String, Vec<u8>)>,
    /// The note's signature lines: key name and the decoded `KEYID4 || SIGNATURE`.
    pub note_signatures: Vec<(String, Vec<u8>)>,
    /// The note's text, as read (what its signature lines sign).
    pub text: String,
}

impl PublishedCheckpoint {
    /// The checkpoint's hash.
    pub fn hash(&self) -> Hash {
        self.checkpoint.hash()
    }

    /// Whether a key of `trusted` vouches for this checkpoint: its own signature, or the
    /// note's signature line, made by a key the auditor gave. A signature line by a
    /// trusted key that does not verify makes the whole note untrusted (as signed-note
    /// asks).
    pub fn trusted_by(&self, trusted: &[PublicKey]) -> Result<bool, String> {
        let mut vouched = false;
        for (name, bytes) in &self.note_signatures {
            let Some(key) = trusted.iter().find(|k| note_key_name(k.key_id()) == *name) else {
                continue;
            };
            if bytes.len() != 68 || bytes[..4] != note_key_id(key) {
                continue;
            }
            if !key.verifies_note(self.text.as_bytes(), &bytes[4..]) {
                return Err(format!(
                    "checkpoint {}: the note's signature by {name} does not verify",
                    self.checkpoint.seq
                ));
            }
            vouched = true;
        }
        if let Some((key_id, signature)) = &self.signed_by {
            if let Some(key) = trusted.iter().find(|k| k.key_id() == key_id) {
                if !key.verifies(&self.checkpoint, signature) {
                    return Err(format!(
                        "checkpoint {}: its signature by key {key_id} does not verify",
                        self.checkpoint.seq
                    ));
                }
                vouched = true;
            }
        }
        Ok(vouched)
    }
}

/// The signed-note key name of a checkpoint key: `alert-outbox/KEYID`.
pub fn note_key_name(key_id: &str) -> String {
    format!("alert-outbox/{key_id}")
}

/// The signed-note key id of `key` (type `0x01`, Ed25519).
pub fn note_key_id(key: &PublicKey) -> [u8; 4] {
    let mut hasher = Sha256::new();
    hasher.update(note_key_name(key.key_id()).as_bytes());
    hasher.update([0x0a, 0x01]);
    hasher.update(key.as_bytes());
    let digest = hasher.finalize();
    [digest[0], digest[1], digest[2], digest[3]]
}

/// The verifier key a signed-note library takes for `key`:
/// `NAME+KEYID(8 hex digits)+BASE64(0x01 || public key)`.
pub fn note_verifier_key(key: &PublicKey) -> String {
    let mut typed = vec![0x01];
    typed.extend_from_slice(key.as_bytes());
    format!(
        "{}+{}+{}",
        note_key_name(key.key_id()),
        note_key_id(key)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>(),
        base64::engine::general_purpose::STANDARD.encode(typed)
    )
}

/// `checkpoint` as a note: its text, then its signature line when `writer` is given,
/// ending with the blank line that closes it in a log.
pub fn write_note(
    checkpoint: &Checkpoint,
    signed_by: Option<(&str, &[u8])>,
    writer: Option<&CheckpointSigner>,
) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    let signed_by = match signed_by {
        Some((key_id, signature)) => format!("{key_id} {}", b64.encode(signature)),
        None => "unsigned".to_owned(),
    };
    let text = format!(
        "{FIRST_LINE}\nseq {}\nmade_at {}\nsize {}\nroot {}\nprevious {}\nhash {}\nsigned_by {signed_by}\n",
        checkpoint.seq,
        checkpoint.made_at_micros,
        checkpoint.size,
        hex(&checkpoint.root),
        hex(&checkpoint.previous),
        hex(&checkpoint.hash()),
    );
    let mut note = text.clone();
    note.push('\n');
    if let Some(writer) = writer {
        let public = writer.public_key();
        let mut signature = note_key_id(&public).to_vec();
        signature.extend_from_slice(&writer.sign_note(text.as_bytes()));
        note.push_str(&format!(
            "\u{2014} {} {}\n",
            note_key_name(writer.key_id()),
            b64.encode(signature)
        ));
    }
    note.push('\n');
    note
}

/// What a checkpoint log holds.
#[derive(Debug, Default)]
pub struct ParsedLog {
    /// Its notes, in the order written.
    pub checkpoints: Vec<PublishedCheckpoint>,
    /// A last note cut short (no closing blank line): the bytes from its start.
    pub torn_tail: Option<usize>,
}

/// Reads a checkpoint log. Every note must be whole and well formed, but the last, which a
/// crash may have cut short ([`ParsedLog::torn_tail`]). Errors name the line.
pub fn parse_log(text: &str) -> Result<ParsedLog, String> {
    let mut parsed = ParsedLog::default();
    let mut at = 0usize;
    while at < text.len() {
        match next_note(&text[at..]) {
            Some((note_text, signature_lines, len)) => {
                let line_no = text[..at].matches('\n').count() + 1;
                let published = parse_note(note_text, signature_lines)
                    .map_err(|why| format!("the note at line {line_no}: {why}"))?;
                parsed.checkpoints.push(published);
                at += len;
            }
            None => {
                parsed.torn_tail = Some(at);
                break;
            }
        }
    }
    Ok(parsed)
}

/// The note at the start of `rest`: its text (up to the blank line after it), its
/// signature lines, and its length with the blank line that closes it; `None` when it is
/// not whole.
fn next_note(rest: &str) -> Option<(&str, &str, usize)> {
    let text_end = rest.find("\n\n")? + 1;
    let signatures_start = text_end + 1;
    let mut at = signatures_start;
    loop {
        if rest[at..].starts_with('\n') {
            return Some((&rest[..text_end], &rest[signatures_start..at], at + 1));
        }
        at += rest[at..].find('\n')? + 1;
    }
}

/// One note: its text (ending in a newline) and its signature lines.
fn parse_note(text: &str, signature_lines: &str) -> Result<PublishedCheckpoint, String> {
    if text
        .chars()
        .any(|c| c.is_control() && c != '\n' || c == '\u{2028}' || c == '\u{2029}')
    {
        return Err("holds a control character".to_owned());
    }
    let mut lines = text.lines();
    if lines.next() != Some(FIRST_LINE) {
        return Err(format!("does not start with `{FIRST_LINE}`"));
    }
    let mut field = |name: &str| -> Result<&str, String> {
        let line = lines
            .next()
            .ok_or_else(|| format!("ends before `{name}`"))?;
        line.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(' '))
            .ok_or_else(|| format!("`{name}` expected, found `{}`", clip(line)))
    };
    let number = |text: &str, name: &str| -> Result<u64, String> {
        if text.len() > 1 && text.starts_with('0') {
            return Err(format!("`{name}` has a leading zero"));
        }
        text.parse()
            .map_err(|_| format!("`{name}` is not a number: `{}`", clip(text)))
    };
    let seq = number(field("seq")?, "seq")?;
    let made_at = field("made_at")?;
    let made_at_micros: i64 = made_at
        .parse()
        .map_err(|_| format!("`made_at` is not a number: `{}`", clip(made_at)))?;
    let size = number(field("size")?, "size")?;
    let root = hash_field(field("root")?, "root")?;
    let previous = hash_field(field("previous")?, "previous")?;
    let stated_hash = hash_field(field("hash")?, "hash")?;
    let signed_by = match field("signed_by")? {
        "unsigned" => None,
        other => {
            let (key_id, signature) = other
                .split_once(' ')
                .ok_or_else(|| "`signed_by` is a key id and a signature".to_owned())?;
            let signature = base64::engine::general_purpose::STANDARD
                .decode(signature)
                .map_err(|_| "`signed_by`'s signature is not base64".to_owned())?;
            Some((key_id.to_owned(), signature))
        }
    };
    if let Some(extra) = lines.next() {
        return Err(format!("an unexpected line `{}`", clip(extra)));
    }
    let checkpoint = Checkpoint {
        seq,
        made_at_micros,
        size,
        root,
        previous,
    };
    if checkpoint.hash() != stated_hash {
        return Err(format!(
            "checkpoint {seq}'s fields give hash {}, the note says {}",
            hex(&checkpoint.hash()),
            hex(&stated_hash)
        ));
    }
    let mut note_signatures = Vec::new();
    for line in signature_lines.lines() {
        let (name, signature) = line
            .strip_prefix("\u{2014} ")
            .and_then(|rest| rest.split_once(' '))
            .ok_or_else(|| format!("a malformed signature line `{}`", clip(line)))?;
        let signature = base64::engine::general_purpose::STANDARD
            .decode(signature)
            .map_err(|_| format!("the signature by {} is not base64", clip(name)))?;
        note_signatures.push((name.to_owned(), signature));
    }
    Ok(PublishedCheckpoint {
        checkpoint,
        signed_by,
        note_signatures,
        text: text.to_owned(),
    })
}

fn hash_field(text: &str, name: &str) -> Result<Hash, String> {
    let hash = crate::evidence::entries::hex32::parse(text)
        .ok_or_else(|| format!("`{name}` is not 64 lower-case hex digits"))?;
    if hex(&hash) != text {
        return Err(format!("`{name}` is not 64 lower-case hex digits"));
    }
    Ok(hash)
}

/// At most 80 characters of untrusted text, for an error.
fn clip(text: &str) -> String {
    crate::untrusted::visible(&text.chars().take(80).collect::<String>()).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn checkpoint(seq: u64, previous: Hash) -> Checkpoint {
        Checkpoint {
            seq,
            made_at_micros: 1_796_256_000_000_000 + seq as i64,
            size: 3,
            root: [seq as u8; 32],
            previous,
        }
    }

    fn rfc8032_signer() -> CheckpointSigner {
        CheckpointSigner::from_text("ed25519:nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=").unwrap()
    }

    #[test]
    fn a_note_reads_back_as_written_and_its_signatures_verify() {
        let signer = rfc8032_signer();
        let first = checkpoint(1, [0; 32]);
        let second = checkpoint(2, first.hash());
        let sig = signer.sign(&second);
        let log = write_note(&first, None, None)
            + &write_note(&second, Some((signer.key_id(), &sig)), Some(&signer));
        let parsed = parse_log(&log).unwrap();
        assert!(parsed.torn_tail.is_none());
        assert_eq!(parsed.checkpoints.len(), 2);
        assert_eq!(parsed.checkpoints[0].checkpoint, first);
        assert_eq!(parsed.checkpoints[1].checkpoint, second);
        let trusted = [signer.public_key()];
        assert_eq!(parsed.checkpoints[0].trusted_by(&trusted), Ok(false));
        assert_eq!(parsed.checkpoints[1].trusted_by(&trusted), Ok(true));
        // Another key vouches for nothing.
        let (other, _) = CheckpointSigner::generate();
        assert_eq!(
            parsed.checkpoints[1].trusted_by(&[other.public_key()]),
            Ok(false)
        );
    }

    #[test]
    fn a_changed_field_or_signature_is_refused() {
        let signer = rfc8032_signer();
        let cp = checkpoint(7, [9; 32]);
        let sig = signer.sign(&cp);
        let note = write_note(&cp, Some((signer.key_id(), &sig)), Some(&signer));
        // A field changed: the stated hash no longer agrees.
        let changed = note.replace("size 3", "size 4");
        assert!(parse_log(&changed).unwrap_err().contains("give hash"));
        // The hash changed with it: the checkpoint's own signature no longer verifies.
        let rehashed = {
            let mut forged = cp;
            forged.size = 4;
            note.replace("size 3", "size 4")
                .replace(&hex(&cp.hash()), &hex(&forged.hash()))
        };
        let parsed = parse_log(&rehashed).unwrap();
        assert!(parsed.checkpoints[0]
            .trusted_by(&[signer.public_key()])
            .is_err());
    }

    #[test]
    fn a_note_cut_short_by_a_crash_is_a_torn_tail() {
        let signer = rfc8032_signer();
        let first = write_note(&checkpoint(1, [0; 32]), None, Some(&signer));
        let second = write_note(&checkpoint(2, [1; 32]), None, Some(&signer));
        for cut in (1..second.len()).filter(|&cut| second.is_char_boundary(cut)) {
            let log = format!("{first}{}", &second[..cut]);
            let parsed = parse_log(&log).unwrap();
            assert_eq!(parsed.checkpoints.len(), 1, "cut at {cut}");
            assert_eq!(parsed.torn_tail, Some(first.len()), "cut at {cut}");
        }
    }

    #[test]
    fn the_verifier_key_follows_the_signed_note_form() {
        let key = rfc8032_signer().public_key();
        let verifier = note_verifier_key(&key);
        // The base64 may hold `+` itself: the name and the id hold none.
        let parts: Vec<&str> = verifier.splitn(3, '+').collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0], "alert-outbox/21fe31dfa154a261");
        assert_eq!(parts[1].len(), 8);
        let typed = base64::engine::general_purpose::STANDARD
            .decode(parts[2])
            .unwrap();
        assert_eq!(typed[0], 0x01);
        assert_eq!(&typed[1..], key.as_bytes());
    }
}
