//! The contract tools that are not ours (Schemathesis, openapi-spec-validator, the official
//! MCP Python SDK), from the virtual environment `tests/contract/install.sh` makes:
//! `target/contract-venv`, or `$OUTBOX_CONTRACT_VENV`. A test that needs them fails, never
//! skips, when they are missing.

use std::path::PathBuf;

/// A program of the contract tools' virtual environment.
pub fn contract_tool(name: &str) -> PathBuf {
    let venv = std::env::var_os("OUTBOX_CONTRACT_VENV").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/contract-venv"),
        PathBuf::from,
    );
    let program = venv.join("bin").join(name);
    assert!(
        program.exists(),
        "{} is missing: run `tests/contract/install.sh` (it installs the pinned contract \
         tools from PyPI; `.ci/run` does it) or set OUTBOX_CONTRACT_VENV",
        program.display()
    );
    program
}

/// Runs a contract tool to the end from the project's root and returns its standard
/// output; both its outputs are printed only when it fails.
pub async fn run_contract_tool(name: &str, args: &[&str]) -> String {
    let output = tokio::process::Command::new(contract_tool(name))
        .args(args)
        .env("NO_COLOR", "1")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|err| panic!("run {name}: {err}"));
    assert!(
        output.status.success(),
        "{name} {} failed ({}):\n{}\n{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
