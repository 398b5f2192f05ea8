//! The approval API checked by tools that are not ours: the OpenAPI document it serves by
//! `openapi-spec-validator`, and a running `decider serve` by Schemathesis, which reads
//! the document and sends what it allows and what it does not (every operation, generated
//! bodies, parameters and headers, and the links from an approval to reading and revising
//! it), then checks every answer against the document: no 5xx, the documented status,
//! content type, headers and body, invalid input refused, valid input taken, the token
//! needed, and no answer slower than [`MAX_RESPONSE_SECONDS`]. And clients generated
//! from the document by their generators' own tools (openapi-python-client;
//! openapi-typescript with openapi-fetch) run the example agent loops of
//! `docs/examples/` against it.
//!
//! The tools come from PyPI and the npm registry at the versions `tests/contract/` pins,
//! installed by `tests/contract/install.sh` into `target/contract-venv` and
//! `target/contract-node` (`.ci/run` runs it); `OUTBOX_CONTRACT_VENV` and
//! `OUTBOX_CONTRACT_NODE` name other places. A test fails, never skips, when they are
//! missing.

use crate::common::contract_tools::{contract_tool, node_tools, run_contract_tool, run_node_tool};
use crate::common::decider::DeciderServe;
use crate::common::{add_tenant, renewal};
use outbox_testkit::TestDb;
use std::path::PathBuf;

/// The slowest answer the fuzzer accepts. The API answers in milliseconds; the bound is
/// the database pool's wait for a connection (10 s) halved, so a request that waited for
/// one is reported.
const MAX_RESPONSE_SECONDS: &str = "5";

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
    run_contract_tool("openapi-spec-validator", &[file.to_str().unwrap()]).await;
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
    run_contract_tool(
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_client_generated_from_the_document_runs_the_example_agent_loop() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let decider = DeciderServe::on(&db.url).start().await;
    let scratch = Scratch::new();
    let client = scratch.0.join("client");
    run_contract_tool(
        "openapi-python-client",
        &[
            "generate",
            "--path",
            "docs/openapi.json",
            "--output-path",
            client.to_str().unwrap(),
        ],
    )
    .await;
    let example = format!("{}/docs/examples/agent_loop.py", env!("CARGO_MANIFEST_DIR"));
    let run = |flags: &'static [&'static str]| {
        let mut command = tokio::process::Command::new(contract_tool("python"));
        command
            .arg(&example)
            .args([decider.api.as_str(), acme.token.as_str()])
            .args(flags)
            .env("PYTHONPATH", &client);
        agent_run(command)
    };
    let after_a_lost_answer = run(&["--lose-first-answer"]).await;
    let rerun = run(&[]).await;
    assert_one_alert_however_often_asked(&db, &after_a_lost_answer, &rerun).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typescript_client_generated_from_the_document_runs_the_example_agent_loop() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let decider = DeciderServe::on(&db.url).start().await;
    // A project of its own: the example, the types generated from the document, and the
    // installed tools' node_modules beside them.
    let scratch = Scratch::new();
    let project = &scratch.0;
    std::fs::write(project.join("package.json"), r#"{"type": "module"}"#).unwrap();
    std::os::unix::fs::symlink(
        node_tools().join("node_modules"),
        project.join("node_modules"),
    )
    .unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/agent_loop.ts"),
        project.join("agent_loop.ts"),
    )
    .unwrap();
    let types = project.join("outbox-api.d.ts");
    run_node_tool(
        project,
        "openapi-typescript",
        &[
            concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json"),
            "-o",
            types.to_str().unwrap(),
        ],
    )
    .await;
    run_node_tool(
        project,
        "tsc",
        &[
            "--strict",
            "--module",
            "nodenext",
            "--target",
            "es2022",
            "agent_loop.ts",
        ],
    )
    .await;
    let run = |flags: &'static [&'static str]| {
        let mut command = tokio::process::Command::new("node");
        command
            .arg("agent_loop.js")
            .args([decider.api.as_str(), acme.token.as_str()])
            .args(flags)
            .current_dir(project);
        agent_run(command)
    };
    let after_a_lost_answer = run(&["--lose-first-answer"]).await;
    let rerun = run(&[]).await;
    assert_one_alert_however_often_asked(&db, &after_a_lost_answer, &rerun).await;
}

/// Runs an example agent to the end; returns the line it printed.
async fn agent_run(mut command: tokio::process::Command) -> serde_json::Value {
    let output = command.output().await.unwrap();
    assert!(
        output.status.success(),
        "the example agent failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&output.stdout)))
}

/// The first run lost its answer: its retry found the alert the lost request made. The
/// rerun named the same alert. The database holds that one alert.
async fn assert_one_alert_however_often_asked(
    db: &TestDb,
    after_a_lost_answer: &serde_json::Value,
    rerun: &serde_json::Value,
) {
    assert_eq!(
        after_a_lost_answer["created"], false,
        "{after_a_lost_answer}"
    );
    assert_eq!(after_a_lost_answer["state"], "pending");
    assert_eq!(rerun["id"], after_a_lost_answer["id"]);
    assert_eq!(rerun["created"], false);
    let alerts: Vec<(String, String)> =
        sqlx::query_as("SELECT id::text, subject FROM alerts ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        alerts,
        vec![(
            rerun["id"].as_str().unwrap().to_owned(),
            "contract:ACME-7".to_owned()
        )],
        "one alert, however often the agent asked"
    );
}
