//! The test vectors of docs/evidence-format.md, recomputed with the product's own code from
//! the values the page gives and held to the page, so that neither can drift from the
//! other: the chain of one alert (its encoded record and each head), the three-leaf tree
//! with its inclusion proofs, checkpoint 1's bytes, hash and signature under RFC 8032's
//! first test key, and a whole bundle, whose exact bytes are the fixture
//! `tests/fixtures/evidence/bundle-vector.json`. That bundle must pass the offline check
//! under RFC 8032's key and fail it once any one of its bytes changes.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use base64::Engine;
use outbox_core::evidence::chain::{
    genesis, hex, inclusion_proof, link, merkle_root, verify_inclusion, Checkpoint, Hash, Leaf,
};
use outbox_core::evidence::entries::{AlertFacts, AttemptFacts, EntryFacts, EventFacts};
use outbox_core::evidence::signing::{CheckpointSigner, PublicKey};
use outbox_evidence::bundle::{
    self, Bundle, BundleCheckpoint, BundleEntry, Standing, Trusting, FORMAT_V1,
};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The page, as the repository holds it.
fn page() -> String {
    std::fs::read_to_string(repo().join("docs/evidence-format.md")).unwrap()
}

/// The whole-bundle vector's exact bytes.
fn fixture() -> Vec<u8> {
    std::fs::read(repo().join("tests/fixtures/evidence/bundle-vector.json")).unwrap()
}

fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The code spans of the value cell of the page's table row whose first cell is `label`.
fn row(page: &str, label: &str) -> Vec<String> {
    let start = format!("| {label} | ");
    let line = page
        .lines()
        .find(|line| line.starts_with(&start))
        .unwrap_or_else(|| panic!("no row `{label}` on the page"));
    let cell = line[start.len()..].trim_end_matches(" |");
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The one value of `label`'s row.
fn value(page: &str, label: &str) -> String {
    let values = row(page, label);
    assert_eq!(values.len(), 1, "row `{label}`: {values:?}");
    values.into_iter().next().unwrap()
}

/// The fenced block (```lang) that follows the first line holding `marker`, its lines
/// joined without their line breaks.
fn block_after(page: &str, marker: &str, lang: &str) -> Vec<String> {
    let from = page
        .find(marker)
        .unwrap_or_else(|| panic!("`{marker}` is not on the page"));
    let fence = format!("```{lang}\n");
    let open = from + page[from..].find(&fence).unwrap() + fence.len();
    let close = open + page[open..].find("```").unwrap();
    page[open..close].lines().map(str::to_owned).collect()
}

fn hex_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex in lines of 32 bytes, as the page shows byte strings.
fn hex_lines(bytes: &[u8]) -> Vec<String> {
    bytes.chunks(32).map(hex_bytes).collect()
}

/// `json` with every space and line break outside its strings removed.
fn without_layout(json: &str) -> String {
    let (mut out, mut in_string, mut escaped) = (String::new(), false, false);
    for c in json.chars() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if !matches!(c, ' ' | '\n') {
            in_string = c == '"';
            out.push(c);
        }
    }
    out
}

#[test]
fn the_pages_bundle_is_the_fixture_and_what_the_product_builds() {
    let page = page();
    let shown = block_after(&page, "### A whole bundle", "json").join("\n");
    let mut bytes = without_layout(&shown).into_bytes();
    bytes.push(b'\n');
    let fixture = fixture();
    assert!(
        bytes == fixture,
        "the page's bundle is not the fixture's bytes"
    );
    let built = bundle::to_canonical(&bundle_vector());
    assert!(
        built == fixture,
        "the product builds another bundle than the fixture; if that is meant, the fixture \
         and the page become:\n{}",
        String::from_utf8_lossy(&built)
    );
    let digest: Hash = Sha256::digest(&fixture).into();
    let said = format!(
        "`tests/fixtures/evidence/bundle-vector.json`: {} bytes, SHA-256 `{}`",
        thousands(fixture.len()),
        hex(&digest)
    );
    let prose = page.replace('\n', " ");
    assert!(prose.contains(&said), "the page should say: {said}");
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The chain's vectors, recomputed from the alert and entries the page's bundle shows.
#[test]
fn the_chain_vectors_are_recomputed_from_the_pages_alert_and_entries() {
    let page = page();
    let bundle: Bundle = serde_json::from_slice(&fixture()).unwrap();
    assert_eq!(bundle.alert, the_alert());
    let encoded = bundle.alert.record().encode().unwrap();
    assert_eq!(
        block_after(&page, "`encode(alert)`, 308 bytes", "text"),
        hex_lines(&encoded)
    );
    assert_eq!(encoded.len(), 308);
    let head_0 = genesis(&bundle.alert.record()).unwrap();
    assert_eq!(value(&page, "`head_0`"), hex(&head_0));
    let labels = [
        "`head_1`, after the approval line",
        "`head_2`, after the attempt",
    ];
    let mut head = head_0;
    for (e, label) in bundle.entries.iter().zip(labels) {
        head = link(&head, &e.entry.record()).unwrap();
        assert_eq!(value(&page, label), hex(&head));
        assert_eq!(e.head, head);
    }
    assert_eq!(bundle.entries.len(), labels.len());
    assert_eq!(
        bundle
            .entries
            .iter()
            .map(|e| e.entry.clone())
            .collect::<Vec<_>>(),
        [approval(), attempt()]
    );
}

#[test]
fn the_tree_and_its_inclusion_proofs_are_the_pages() {
    let page = page();
    let leaves = tree_leaf_hashes();
    for (i, leaf) in leaves.iter().enumerate() {
        assert_eq!(value(&page, &format!("leaf {i}")), hex(leaf));
    }
    let root = merkle_root(&leaves);
    assert_eq!(value(&page, "root"), hex(&root));
    for index in [1, 2] {
        let path = inclusion_proof(&leaves, index).unwrap();
        assert_eq!(
            row(&page, &format!("inclusion proof of leaf {index}")),
            path.iter().map(hex).collect::<Vec<_>>()
        );
        assert!(verify_inclusion(
            &leaves[index],
            index as u64,
            3,
            &path,
            &root
        ));
    }
}

#[test]
fn checkpoint_1_its_bytes_hash_and_signature_are_the_pages() {
    let page = page();
    let checkpoint = checkpoint_1();
    assert!(page.replace('\n', " ").contains("made at 1796256000000000"));
    let bytes = checkpoint.signed_bytes();
    assert_eq!(bytes.len(), 115);
    assert_eq!(
        block_after(&page, "Its 115 bytes", "text"),
        hex_lines(&bytes)
    );
    assert_eq!(value(&page, "its hash"), hex(&checkpoint.hash()));
    assert_eq!(
        value(&page, "the key: RFC 8032's first test seed"),
        RFC_8032_SEED
    );
    let signer = rfc_signer();
    let public = value(&page, "its public key");
    assert_eq!(public, signer.public_key().to_text());
    assert_eq!(value(&page, "its key id"), signer.key_id());
    let signature = signer.sign(&checkpoint);
    assert_eq!(
        value(&page, "its signature of checkpoint 1"),
        hex_bytes(&signature)
    );
    let key = PublicKey::from_text(&public).unwrap();
    assert!(key.verifies(&checkpoint, &signature));
}

/// Accepting everything short of a broken bundle: no key given, the bundle's own trusted,
/// no checkpoint needed.
fn accepting_less() -> Trusting {
    Trusting {
        keys: vec![],
        allow_unanchored: true,
        trust_embedded_key: true,
    }
}

#[test]
fn the_bundle_vector_checks_under_rfc_8032s_key_and_fails_after_any_byte_changes() {
    let bytes = fixture();
    let rfc = Trusting {
        keys: vec![PublicKey::from_text(RFC_8032_PUBLIC_KEY).unwrap()],
        ..Trusting::default()
    };
    let proven = bundle::check(&bytes, &rfc).unwrap();
    assert_eq!(proven.entries, 2);
    let Standing::Trusted(under) = proven.standing else {
        panic!("{proven:?}")
    };
    assert_eq!((under.seq, under.entries), (1, 2));
    // No key given, or another key: refused.
    assert!(bundle::check(&bytes, &Trusting::default()).is_err());
    let (other, _) = CheckpointSigner::generate();
    let others = Trusting {
        keys: vec![other.public_key()],
        ..Trusting::default()
    };
    assert!(bundle::check(&bytes, &others).is_err());
    for at in 0..bytes.len() {
        for replacement in [b' ', b'0', b'a', b'"', b'\n', bytes[at] ^ 1] {
            if replacement == bytes[at] {
                continue;
            }
            let mut changed = bytes.clone();
            changed[at] = replacement;
            for trusting in [&rfc, &accepting_less()] {
                assert!(
                    bundle::check(&changed, trusting).is_err(),
                    "byte {at} changed to {replacement:?} still checks"
                );
            }
        }
    }
}

const RFC_8032_PUBLIC_KEY: &str = "ed25519-pub:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=";

fn uuid(text: &str) -> Uuid {
    Uuid::parse_str(text).unwrap()
}

/// RFC 8032's first test key (section 7.1, TEST 1).
fn rfc_signer() -> CheckpointSigner {
    let seed: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&RFC_8032_SEED[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let text = format!(
        "ed25519:{}",
        base64::engine::general_purpose::STANDARD.encode(seed)
    );
    CheckpointSigner::from_text(&text).unwrap()
}

const RFC_8032_SEED: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";

/// The page's alert.
fn the_alert() -> AlertFacts {
    AlertFacts {
        id: uuid("01890a5d-ac96-774b-bcce-b302099a8057"),
        tenant: uuid("7d444840-9dc0-11d1-b245-5ffdce74fad2"),
        subject: "contract:ACME-2024-001".into(),
        occurrence: "renewal-2027-01-31:notice-30d".into(),
        destination: uuid("9b2d6a8e-3f0c-4d6e-8f7a-1c2b3d4e5f60"),
        revision: 0,
        payload_sha256: [0x11; 32],
        reason: None,
        created_at_micros: 1_796_000_000_123_456,
        created_by: "monitor:contracts".into(),
    }
}

/// Its first entry: the approval line.
fn approval() -> EntryFacts {
    EntryFacts::Event(EventFacts {
        at_micros: 1_796_000_000_223_456,
        from_state: None,
        to_state: "pending".into(),
        attempt: None,
        actor: "monitor:contracts".into(),
        line: "approved: renewal in 30 days".into(),
    })
}

/// Its second: the attempt the destination accepted.
fn attempt() -> EntryFacts {
    EntryFacts::Attempt(AttemptFacts {
        attempt: 1,
        attempt_kind: outbox_core::AttemptKind::Send,
        worker: "dispatcher-a".into(),
        fencing_token: 42,
        started_at_micros: 1_796_000_001_000_000,
        finished_at_micros: 1_796_000_001_250_000,
        idempotency_key: "01890a5d-ac96-774b-bcce-b302099a8057".into(),
        payload_sha256: [0x11; 32],
        outcome: "accepted".into(),
        http_status: Some(200),
        destination_reference: Some("msg_1".into()),
        error_class: None,
        response_excerpt: None,
        to_state: Some("accepted".into()),
        line: Some("attempt 1 accepted (HTTP 200)".into()),
    })
}

/// The page's tree: leaf `i` (0, 1, 2) is alert `i` with `i` entries and head 32 × `i`.
fn tree_leaf_hashes() -> Vec<Hash> {
    (0..3u8)
        .map(|i| {
            Leaf {
                alert_id: Uuid::from_u128(i.into()),
                entries: i.into(),
                head: [i; 32],
            }
            .hash()
        })
        .collect()
}

/// Checkpoint 1 over the page's tree.
fn checkpoint_1() -> Checkpoint {
    Checkpoint {
        seq: 1,
        made_at_micros: 1_796_256_000_000_000,
        size: 3,
        root: merkle_root(&tree_leaf_hashes()),
        previous: [0; 32],
    }
}

/// The page's whole bundle: the alert with its two entries, accepted, under checkpoint 1
/// of its own trail (three leaves, its own the middle one), signed with RFC 8032's key.
fn bundle_vector() -> Bundle {
    let alert = the_alert();
    let mut head = genesis(&alert.record()).unwrap();
    let entries: Vec<BundleEntry> = [approval(), attempt()]
        .into_iter()
        .map(|entry| {
            head = link(&head, &entry.record()).unwrap();
            BundleEntry { entry, head }
        })
        .collect();
    let leaves = [
        Leaf {
            alert_id: uuid("01890a5d-1111-7111-8111-111111111111"),
            entries: 3,
            head: [0xaa; 32],
        },
        Leaf {
            alert_id: alert.id,
            entries: 2,
            head,
        },
        Leaf {
            alert_id: uuid("01890a5e-2222-7222-8222-222222222222"),
            entries: 1,
            head: [0xbb; 32],
        },
    ];
    let hashes: Vec<Hash> = leaves.iter().map(Leaf::hash).collect();
    let checkpoint = Checkpoint {
        seq: 1,
        made_at_micros: 1_796_000_060_000_000,
        size: 3,
        root: merkle_root(&hashes),
        previous: [0; 32],
    };
    let signer = rfc_signer();
    Bundle {
        format: FORMAT_V1.into(),
        alert,
        entries,
        state: Some("accepted".into()),
        checkpoint: Some(BundleCheckpoint {
            seq: checkpoint.seq,
            made_at_micros: checkpoint.made_at_micros,
            size: checkpoint.size,
            root: checkpoint.root,
            previous: checkpoint.previous,
            entries: 2,
            leaf_index: 1,
            inclusion_proof: inclusion_proof(&hashes, 1)
                .unwrap()
                .iter()
                .map(hex)
                .collect(),
            key_id: Some(signer.key_id().to_owned()),
            signature: Some(hex_bytes(&signer.sign(&checkpoint))),
            public_key: Some(signer.public_key().to_text()),
            preceding: None,
        }),
        earlier_checkpoints: None,
    }
}
