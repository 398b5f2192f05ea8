//! outboxctl's operator commands against a real database, with real dispatcher and sink
//! processes producing the held alerts: listings, replay (single, bulk, dry run, rerun),
//! resolve, revise, destinations on and off, stats. Notes end up in the evidence; refusals
//! change nothing.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::add_tenant;
use common::alerts::{approve_many, evidence, reference_of, state_of, states};
use common::assert_contains;
use common::destinations::{acme_with_ops_at, add_destination};
use common::procs::*;
use common::{outboxctl, outboxctl_ok, revise, CliRun as Run};
use outbox_testkit::TestDb;
use serde_json::{json, Value};

fn refused(run: &Run, needle: &str) {
    assert!(!run.ok, "should have been refused: {}", run.stdout);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(needle),
        "`{needle}` not in {}",
        run.stderr
    );
}

/// Three alerts held at a plain destination whose answers were all lost.
async fn three_held() -> (TestDb, Sink, Vec<uuid::Uuid>) {
    let sink = Sink::start(&["--drop-response-rate", "1"]).await;
    let (db, tenant_id) = acme_with_ops_at(&sink, |_| {}).await;
    let ids = approve_many(&db, tenant_id, "ops", 3).await;
    drain(&db, "w", &[]).await;
    assert_eq!(states(&db).await, [("held".to_owned(), 3)].into());
    sink.faults(json!({"drop_response_rate": 0.0})).await;
    (db, sink, ids)
}

async fn counts(db: &TestDb) -> (i64, i64, i64) {
    (
        db.count("outbox").await,
        db.count("alert_events").await,
        db.count("alerts").await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_alerts_are_listed_replayed_with_a_note_and_delivered_with_their_key() {
    let (db, sink, ids) = three_held().await;

    let list = outboxctl_ok(&db, &["outbox", "list", "--status", "held"]).await;
    assert_eq!(list.stdout.lines().count(), 4);
    assert_contains(&list.stdout, "held for reconciliation");
    let json = outboxctl(
        &db,
        &[
            "outbox",
            "list",
            "--status",
            "held",
            "--tenant",
            "acme",
            "--destination",
            "ops",
            "--since",
            "1h",
            "--json",
        ],
    )
    .await;
    let rows: Vec<Value> = json
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 3);
    let none = outboxctl(
        &db,
        &[
            "outbox",
            "list",
            "--status",
            "held",
            "--destination",
            "other",
            "--json",
        ],
    )
    .await;
    assert!(none.stdout.is_empty());

    let before = counts(&db).await;
    refused(
        &outboxctl(&db, &["replay", &ids[0].to_string()]).await,
        "--note is required",
    );
    refused(
        &outboxctl(&db, &["replay", "not-an-id", "--note", "x"]).await,
        "not an alert id",
    );
    let unknown = uuid::Uuid::now_v7().to_string();
    refused(
        &outboxctl(&db, &["replay", &unknown, "--note", "x"]).await,
        "no alert",
    );
    let dry = outboxctl(
        &db,
        &["replay", "--status", "held", "--note", "x", "--dry-run"],
    )
    .await;
    assert!(dry.ok);
    assert_eq!(dry.stdout.trim(), "3");
    assert_eq!(
        counts(&db).await,
        before,
        "refusals and dry runs change nothing"
    );

    // An interrupted bulk replay: one alert was replayed before the interruption; the
    // rerun replays the other two, not that one again.
    outboxctl_ok(
        &db,
        &[
            "replay",
            &ids[0].to_string(),
            "--note",
            "vendor says not received",
        ],
    )
    .await;
    let rest = outboxctl_ok(
        &db,
        &[
            "replay",
            "--status",
            "held",
            "--note",
            "vendor says not received",
        ],
    )
    .await;
    assert_eq!(rest.stdout.trim(), "2");
    assert_eq!(states(&db).await, [("pending".to_owned(), 3)].into());
    let lines = evidence(&db, ids[0]).await;
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with("replayed by cli:alice (was held): vendor says not received"),
        "{lines:?}"
    );
    let replays: i64 =
        sqlx::query_scalar("SELECT count(*) FROM alert_events WHERE actor = 'operator:cli:alice'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(replays, 3, "each alert replayed exactly once");
    let flagged: bool = sqlx::query_scalar("SELECT bool_and(possible_duplicate) FROM alerts")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        flagged,
        "a held attempt may have arrived: replayed alerts are possible duplicates"
    );

    drain(&db, "w2", &[]).await;
    assert_eq!(states(&db).await, [("accepted".to_owned(), 3)].into());
    for id in &ids {
        let records = sink.records(&id.to_string()).await;
        assert_eq!(records.len(), 2, "the same key twice");
        assert_eq!(records[0]["payload_sha256"], records[1]["payload_sha256"]);
    }
    let attempts: Vec<i32> = sqlx::query_scalar(
        "SELECT attempt FROM delivery_attempts WHERE alert_id = $1 AND kind = 'send' ORDER BY id",
    )
    .bind(ids[0])
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(attempts, vec![1, 2], "attempt numbers go on after a replay");

    refused(
        &outboxctl(&db, &["replay", &ids[0].to_string(), "--note", "again"]).await,
        "was accepted by the destination",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolving_records_what_the_operator_found() {
    let (db, _sink, ids) = three_held().await;
    let [a, b, c] = [ids[0].to_string(), ids[1].to_string(), ids[2].to_string()];

    refused(
        &outboxctl(&db, &["resolve", &a, "--accepted", "--reference", "INV-1"]).await,
        "--note is required",
    );
    let missing_finding = outboxctl(&db, &["resolve", &a, "--note", "x"]).await;
    assert!(!missing_finding.ok);

    let accepted = outboxctl_ok(
        &db,
        &[
            "resolve",
            &a,
            "--accepted",
            "--reference",
            "INV-1",
            "--note",
            "seen in the vendor portal",
        ],
    )
    .await;
    assert_eq!(accepted.stdout.trim(), "accepted");
    let reference = reference_of(&db, ids[0]).await;
    assert_eq!(reference.as_deref(), Some("INV-1"));
    assert!(evidence(&db, ids[0]).await.last().unwrap().contains("resolved by cli:alice: delivery confirmed at the destination (reference INV-1): seen in the vendor portal"));

    let again = outboxctl(
        &db,
        &[
            "resolve",
            &b,
            "--not-delivered",
            "--note",
            "not in the portal",
        ],
    )
    .await;
    assert_eq!(again.stdout.trim(), "pending");
    let gone = outboxctl(
        &db,
        &["resolve", &c, "--abandon", "--note", "contract cancelled"],
    )
    .await;
    assert_eq!(gone.stdout.trim(), "failed");
    assert!(evidence(&db, ids[2])
        .await
        .last()
        .unwrap()
        .contains("abandoned by cli:alice: contract cancelled"));

    let before = counts(&db).await;
    refused(
        &outboxctl(&db, &["resolve", &b, "--abandon", "--note", "x"]).await,
        "is pending; only uncertain or held alerts can be resolved",
    );
    refused(
        &outboxctl(&db, &["resolve", &a, "--abandon", "--note", "x"]).await,
        "is accepted",
    );
    assert_eq!(counts(&db).await, before);

    // A failed alert can be replayed, unless a revision corrected it since.
    let revised = revise(&db, &c, r#"{"alert": 2, "text": "corrected"}"#).await;
    refused(
        &outboxctl(&db, &["replay", &c, "--note", "again"]).await,
        "corrected by a later revision",
    );
    let replay = outboxctl(&db, &["replay", revised.stdout.trim(), "--note", "x"]).await;
    refused(
        &replay,
        "is pending; only held or failed alerts can be replayed",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revise_disable_enable_and_stats() {
    let sink = Sink::start(&[]).await;
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &[]).await;
    add_destination(&db, tenant.id, "ops", &sink.hook_url(), |_| {}).await;

    outboxctl_ok(&db, &["destination", "disable", "ops", "--tenant", "acme"]).await;
    refused(
        &outboxctl(&db, &["destination", "disable", "nope", "--tenant", "acme"]).await,
        "no destination named `nope`",
    );
    let ids = approve_many(&db, tenant.id, "ops", 2).await;
    drain(&db, "w", &[]).await;
    assert_eq!(
        states(&db).await,
        [("pending".to_owned(), 2)].into(),
        "a disabled destination's alerts wait"
    );
    assert_eq!(sink.stats().await["requests"], 0);

    let dir = std::env::temp_dir().join(format!("revise-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("payload.json");
    std::fs::write(&good, r#"{"alert": 0, "text": "renewal due, corrected"}"#).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "[1, 2]").unwrap();
    let before = counts(&db).await;
    refused(
        &outboxctl(
            &db,
            &[
                "revise",
                &ids[0].to_string(),
                "--payload",
                bad.to_str().unwrap(),
                "--reason",
                "fix",
            ],
        )
        .await,
        "must be a JSON object",
    );
    assert_eq!(counts(&db).await, before);
    let revised = outboxctl_ok(
        &db,
        &[
            "revise",
            &ids[0].to_string(),
            "--payload",
            good.to_str().unwrap(),
            "--reason",
            "text was wrong",
        ],
    )
    .await;
    let revision: uuid::Uuid = revised.stdout.trim().parse().unwrap();
    assert_eq!(state_of(&db, ids[0]).await, "superseded");
    assert_eq!(state_of(&db, revision).await, "pending");

    let on = outboxctl(&db, &["destination", "enable", "ops", "--tenant", "acme"]).await;
    assert!(on.ok);
    drain(&db, "w", &[]).await;
    assert_eq!(
        sink.stats().await["distinct_keys"],
        2,
        "the revision and the other alert"
    );

    let stats = outboxctl_ok(&db, &["stats", "--json"]).await;
    let stats: Value = serde_json::from_str(&stats.stdout).unwrap();
    assert_eq!(stats["attempts_last_hour"], 2);
    assert_eq!(stats["accepted_last_hour"], 2);
    assert_eq!(stats["held"], 0);
    let by_state = stats["by_state"].as_array().unwrap();
    let count = |state: &str| {
        by_state
            .iter()
            .find(|r| r["state"] == state)
            .map(|r| r["count"].as_i64().unwrap())
    };
    assert_eq!(count("accepted"), Some(2));
    assert_eq!(count("superseded"), Some(1));
    let table = outboxctl(&db, &["stats"]).await;
    assert!(table.stdout.starts_with("TENANT"), "{}", table.stdout);
    assert_contains(
        &table.stdout,
        "last hour              2 attempt(s), 2 accepted (100.0%)",
    );
}

/// `outboxctl replay A B` is all or nothing: when B is refused for any reason the store
/// knows (here: a later revision corrected it), A is not replayed either. The refusal is
/// the store's own rule, so the CLI cannot pass an alert the store then refuses half way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_replay_refused_for_one_alert_replays_none() {
    let (db, _sink, ids) = three_held().await;
    let [a, b] = [ids[0].to_string(), ids[1].to_string()];
    revise(&db, &b, r#"{"alert": 1, "text": "corrected"}"#).await;
    let before = counts(&db).await;

    for dry_run in [true, false] {
        let mut args = vec!["replay", a.as_str(), b.as_str(), "--note", "again"];
        if dry_run {
            args.push("--dry-run");
        }
        refused(
            &outboxctl(&db, &args).await,
            "has been corrected by a later revision",
        );
        assert_eq!(state_of(&db, ids[0]).await, "held", "A was not replayed");
        assert_eq!(state_of(&db, ids[1]).await, "held");
        assert_eq!(counts(&db).await, before, "a refused replay writes nothing");
    }

    // Named the other way round, the refusal comes first and the answer is the same.
    refused(
        &outboxctl(&db, &["replay", &b, &a, "--note", "again"]).await,
        "has been corrected by a later revision",
    );
    assert_eq!(counts(&db).await, before);
}

/// A held alert that a later revision corrected may not be resolved "not delivered": that
/// would send the outdated payload again, after its correction. Recording what happened
/// (accepted, or abandoned) stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrected_alert_is_never_resolved_not_delivered() {
    let (db, _sink, ids) = three_held().await;
    let original = ids[0].to_string();
    revise(&db, &original, r#"{"alert": 0, "text": "corrected"}"#).await;
    let before = counts(&db).await;

    refused(
        &outboxctl(
            &db,
            &[
                "resolve",
                &original,
                "--not-delivered",
                "--note",
                "not in the portal",
            ],
        )
        .await,
        "has been corrected by a later revision",
    );
    assert_eq!(state_of(&db, ids[0]).await, "held");
    assert_eq!(
        counts(&db).await,
        before,
        "a refused resolve writes nothing"
    );

    outboxctl_ok(
        &db,
        &[
            "resolve",
            &original,
            "--abandon",
            "--note",
            "the revision replaces it",
        ],
    )
    .await;
    assert_eq!(state_of(&db, ids[0]).await, "failed");
}
