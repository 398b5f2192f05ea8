//! The approval API checked by tools that are not ours: the OpenAPI document it serves by
//! `openapi-spec-validator`, and a running `decider serve` by Schemathesis, which reads
//! the document and sends what it allows and what it does not (every operation, generated
//! bodies, parameters and headers, and the links from an approval to reading and revising
//! it), then checks every answer against the document: no 5xx, the documented status,
//! content type, headers and body, invalid input refused, valid input taken, the token
//! needed, and no answer slower than [`MAX_RESPONSE_SECONDS`].
//!
//! The tools come from PyPI at the versions `tests/contract/requirements.txt` pins,
//! installed by `tests/contract/install.sh` into `target/contract-venv` (`.ci/run` runs
//! it); `OUTBOX_CONTRACT_VENV` names another place. A test fails, never skips, when they
//! are missing.

use crate::common::contract_tools::run_contract_tool;
use crate::common::decider::DeciderServe;
use crate::common::{add_tenant, renewal};
use outbox_testkit::TestDb;
use std::path::PathBuf;

/// The slowest answer the fuzzer accepts. The API answers in milliseconds; the bound is
/// the database pool's wait for a connection (10 s) halved, so a request that waited for
/// one is reported.
const MAX_RESPONSE_SECONDS: &str = "5";

/// Runs a contract tool to the end; its output is printed only when it fails.
async fn run_tool(name: &str, args: &[&str]) {
    run_contract_tool(name, args).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_openapi_document_is_valid_openapi() {
    let db = TestDb::new().await;
    let decider = DeciderServe::on(&db.url).start().await;
    let document = reqwest::get(format!("{}/v1/openapi.json", decider.api))
        .await
        .unwrap();
    assert_eq!(document.status(), 200, "served without a token");
    let served = document.text().await.unwrap();
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json")).unwrap();
    assert_eq!(
        served.trim_end(),
        committed.trim_end(),
        "the served document is the committed one"
    );
    let scratch = Scratch::new();
    let file = scratch.0.join("openapi.json");
    std::fs::write(&file, served).unwrap();
    run_tool("openapi-spec-validator", &[file.to_str().unwrap()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_against_a_running_decider() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let decider = DeciderServe::on(&db.url).start().await;
    // One alert to begin from, so that reads and revisions meet an existing one too.
    let http = reqwest::Client::new();
    let seeded = http
        .post(format!("{}/v1/alerts", decider.api))
        .bearer_auth(&acme.token)
        .json(&renewal(1))
        .send()
        .await
        .unwrap();
    assert_eq!(seeded.status(), 201);

    let schema = format!("{}/v1/openapi.json", decider.api);
    let authorization = format!("Authorization: Bearer {}", acme.token);
    let scratch = Scratch::new();
    let report = scratch.0.join("schemathesis");
    run_tool(
        "schemathesis",
        &[
            "--config-file",
            "tests/contract/schemathesis.toml",
            "run",
            &schema,
            "--header",
            &authorization,
            "--checks",
            "all",
            "--max-response-time",
            MAX_RESPONSE_SECONDS,
            "--report-dir",
            report.to_str().unwrap(),
        ],
    )
    .await;
}

/// A directory of the test's own, removed afterwards.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!("outbox-contract-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
