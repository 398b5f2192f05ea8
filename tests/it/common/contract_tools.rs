//! The contract tools that are not ours, at the versions `tests/contract/` pins and
//! `tests/contract/install.sh` installs: the Python ones (Schemathesis,
//! openapi-spec-validator, openapi-python-client, the official MCP SDK) in
//! `target/contract-venv` or `$OUTBOX_CONTRACT_VENV`, and the TypeScript client's
//! (openapi-typescript, openapi-fetch, tsc) in `target/contract-node` or
//! `$OUTBOX_CONTRACT_NODE`. A test that needs them fails, never skips, when they are
//! missing.

use std::path::{Path, PathBuf};

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

/// Where the TypeScript client's tools are installed (its `node_modules` is inside).
pub fn node_tools() -> PathBuf {
    let tools = std::env::var_os("OUTBOX_CONTRACT_NODE").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/contract-node"),
        PathBuf::from,
    );
    assert!(
        tools.join("node_modules/.bin/tsc").exists(),
        "{} has no tools: run `tests/contract/install.sh` (it installs the pinned TypeScript \
         client tools from the npm registry; `.ci/run` does it) or set OUTBOX_CONTRACT_NODE",
        tools.display()
    );
    tools
}

/// Runs a contract tool to the end from the project's root and returns its standard
/// output; both its outputs are printed only when it fails.
pub async fn run_contract_tool(name: &str, args: &[&str]) -> String {
    let mut command = tokio::process::Command::new(contract_tool(name));
    command.current_dir(env!("CARGO_MANIFEST_DIR"));
    run_to_the_end(name, command, args).await
}

/// Runs one of the TypeScript client's tools in `project`, as [`run_contract_tool`].
pub async fn run_node_tool(project: &Path, name: &str, args: &[&str]) -> String {
    let mut command =
        tokio::process::Command::new(node_tools().join("node_modules/.bin").join(name));
    command.current_dir(project);
    run_to_the_end(name, command, args).await
}

async fn run_to_the_end(name: &str, mut command: tokio::process::Command, args: &[&str]) -> String {
    let output = command
        .args(args)
        .env("NO_COLOR", "1")
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
