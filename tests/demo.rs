//! `outboxctl demo` end to end: the real binaries on the sample data, with faults; it must
//! exit 0 (its invariants held) and show its final table.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

#[tokio::test]
async fn the_demo_runs_and_its_invariants_hold() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_outboxctl"))
        .args([
            "demo",
            "--drop",
            "--examples",
            concat!(env!("CARGO_MANIFEST_DIR"), "/examples"),
        ])
        .env("DATABASE_URL", outbox_testkit::server_url())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("invariants hold"), "{stdout}");
    assert!(stdout.contains("effective duplicates   0"), "{stdout}");
    // The demo's sink is on loopback: a demo that forgot to open it in the egress guard
    // would fail every alert and still settle them all.
    assert!(
        stdout.contains("failed                                              0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("still in flight                                     0"),
        "{stdout}"
    );
    assert!(
        stderr.contains("one per identity, whichever run decided it"),
        "{stderr}"
    );
}
