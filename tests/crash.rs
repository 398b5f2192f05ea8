//! A decider killed in the middle of an approval leaves all of it or nothing: never an
//! alert without its outbox row or evidence line, never an outbox row without its alert,
//! and the client's retry makes no second alert. Real process, real SIGKILL.
//!
//! An approval is one statement, so PostgreSQL commits all of it or none of it; what a
//! crash can still do is leave the client without an answer after the commit. The
//! decider is built with the `failpoints` feature; `FAILPOINTS` pauses it right after the
//! approval's statement returned, before it answers.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

#[path = "it/common/mod.rs"]
mod common;

use common::procs::{spawn_listening, Process};
use common::{add_tenant, counts, renewal};
use outbox_testkit::TestDb;
use reqwest::StatusCode;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(30);

/// Starts `decider serve` on an ephemeral port and returns it with its address, read from
/// its own "listening" log line.
async fn start_decider(db: &TestDb, failpoints: Option<&str>) -> (Process, String) {
    let mut envs = vec![("DATABASE_URL", db.url.as_str())];
    if let Some(failpoints) = failpoints {
        envs.push(("FAILPOINTS", failpoints));
    }
    spawn_listening(
        env!("CARGO_BIN_EXE_decider"),
        &["serve", "--listen", "127.0.0.1:0"],
        &envs,
        "approval API listening",
    )
    .await
}

/// Polls `sql` (a count) on the test database until it equals `want`, or fails.
async fn wait_for_count(db: &TestDb, sql: &str, want: i64) {
    let started = Instant::now();
    loop {
        let got: i64 = sqlx::query_scalar(sql)
            .bind(&db.name)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        if got == want {
            return;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "`{sql}` stayed at {got}, wanted {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn approve(http: &reqwest::Client, base: &str, token: &str) -> reqwest::Result<StatusCode> {
    http.post(format!("{base}/v1/alerts"))
        .bearer_auth(token)
        .json(&renewal(17))
        .send()
        .await
        .map(|r| r.status())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decider_killed_before_answering_leaves_the_whole_approval_and_the_retry_finds_it() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let http = reqwest::Client::new();

    let (mut decider, base) = start_decider(&db, Some("approve-after-write=pause")).await;
    let request = {
        let (http, base, token) = (http.clone(), base.clone(), acme.token.clone());
        tokio::spawn(async move { approve(&http, &base, &token).await })
    };

    // The approval is committed; the decider is paused before answering.
    wait_for_count(
        &db,
        "SELECT count(*) FROM alerts WHERE current_database() = $1",
        1,
    )
    .await;
    decider.kill().await.expect("SIGKILL the decider");

    // The client saw the connection die, not an answer.
    assert!(request.await.unwrap().is_err());
    assert_eq!(
        counts(&db).await,
        (1, 1, 1),
        "the alert, its outbox row and its evidence line, together"
    );
    let written: String = sqlx::query_scalar("SELECT id::text FROM alerts")
        .fetch_one(&db.pool)
        .await
        .unwrap();

    // The client's retry is recognised as the same approval: 200, the same alert.
    let (_decider, base) = start_decider(&db, None).await;
    let retried = http
        .post(format!("{base}/v1/alerts"))
        .bearer_auth(&acme.token)
        .json(&renewal(17))
        .send()
        .await
        .unwrap();
    assert_eq!(retried.status(), StatusCode::OK);
    let retried: serde_json::Value = retried.json().await.unwrap();
    assert_eq!(retried["id"], written.as_str());
    assert_eq!(counts(&db).await, (1, 1, 1));
    let orphans: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM alerts a WHERE NOT EXISTS (SELECT 1 FROM outbox o WHERE o.alert_id = a.id)) \
              + (SELECT count(*) FROM outbox o WHERE NOT EXISTS (SELECT 1 FROM alerts a WHERE a.id = o.alert_id))",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(orphans, 0);
}
