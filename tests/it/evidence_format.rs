//! The whole-bundle vector of docs/evidence-format.md as an auditor meets it: the real
//! `outboxctl evidence check`, with no database to reach, accepts the fixture under RFC
//! 8032's first test key, and refuses it with no key given or once one byte has changed.
//! (The vectors themselves are held to the page by `outbox-evidence`'s
//! `tests/format_vectors.rs`.)

use outbox_testkit::process::Run;

const FIXTURE: &str = "tests/fixtures/evidence/bundle-vector.json";
const RFC_8032_PUBLIC_KEY: &str = "ed25519-pub:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=";

/// `outboxctl evidence check FILE` with `args`, from the repository's root, no database
/// reachable and no auditor's keys from the environment the tests run in.
async fn check(file: &str, args: &[&str]) -> std::process::Output {
    Run::new(env!("CARGO_BIN_EXE_outboxctl"))
        .args(["evidence", "check", file])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .env_remove("OUTBOX_EVIDENCE_PUBLIC_KEYS")
        .output()
        .await
}

#[tokio::test]
async fn outboxctl_checks_the_documented_bundle_under_rfc_8032s_key_and_nothing_less() {
    let accepted = check(FIXTURE, &["--public-key", RFC_8032_PUBLIC_KEY]).await;
    let stdout = String::from_utf8_lossy(&accepted.stdout);
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    let (shown, note) = stdout.split_once('\n').unwrap();
    assert_eq!(
        shown,
        "alert 01890a5d-ac96-774b-bcce-b302099a8057: 2 entries chain correctly; its first 2 \
         are under checkpoint 1 made at 2026-11-30 00:54:20 UTC, signed by key \
         21fe31dfa154a261 (one you trust)"
    );
    // The vector is a v1 bundle, which carries only its newest checkpoint: said so.
    assert!(
        note.starts_with("note: this bundle (alert-outbox evidence bundle v1) carries only")
            && note.lines().count() == 1,
        "{note}"
    );

    let unkeyed = check(FIXTURE, &[]).await;
    assert_eq!(unkeyed.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unkeyed.stderr).contains("no key was given"));

    // One byte of the signature changed: refused under the same key.
    let mut bytes =
        std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE)).unwrap();
    let at = bytes.len() - 100;
    bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
    let dir = std::env::temp_dir().join(format!("bundle-vector-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let changed = dir.join("changed.json");
    std::fs::write(&changed, &bytes).unwrap();
    let refused = check(
        changed.to_str().unwrap(),
        &["--public-key", RFC_8032_PUBLIC_KEY],
    )
    .await;
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("the bundle does not verify"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}
