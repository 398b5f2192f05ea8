//! No product binary links the benchmark. `bench` is the `outbox-bench` crate's own binary,
//! and that crate holds the benchmark's own statements (among them `DROP SCHEMA public
//! CASCADE`): a product crate that depended on it would put them in `decider`,
//! `dispatcher`, `outboxctl` and `sink`, since Cargo unifies what it builds together. So
//! this reads the dependency tree of the package that holds those binaries.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

#[test]
fn no_product_binary_depends_on_the_benchmark() {
    // The cargo running this test; it only reads the manifests and the lock file.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = std::process::Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--locked",
            "--package",
            "alert-outbox",
            "--edges",
            "normal,build",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "cargo tree: {stderr}");
    let tree = String::from_utf8(output.stdout).unwrap();
    let has = |name: &str| {
        tree.lines()
            .any(|line| line.starts_with(&format!("{name} ")))
    };
    // The tree is the product's: the store is in it.
    assert!(has("outbox-store"), "{tree}");
    assert!(
        !has("outbox-bench"),
        "a product binary depends on the benchmark:\n{tree}"
    );
}
