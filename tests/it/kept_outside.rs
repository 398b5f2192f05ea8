//! What an auditor keeps outside the database, end to end: the checkpoint log a `decider
//! serve` appends every checkpoint to, and earlier bundles. `outboxctl evidence verify`
//! and `check` hold the database and bundles to them, and so see what the database,
//! agreeing with itself, no longer shows: a checkpoint signed twice under one number; a
//! chain rewritten before any checkpoint covered it.

use crate::common;
use common::alerts::approve_many;
use common::decider::DeciderServe;
use common::procs::*;
use common::{CliRun, Outboxctl};
use outbox_core::evidence::note::parse_log;
use outbox_core::evidence::signing::CheckpointSigner;
use outbox_testkit::TestDb;

/// The log's notes as (number, hash), read from the file.
fn published(path: &std::path::Path) -> Vec<(u64, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    parse_log(&text)
        .unwrap()
        .checkpoints
        .iter()
        .map(|n| {
            (
                n.checkpoint.seq,
                outbox_core::evidence::chain::hex(&n.hash()),
            )
        })
        .collect()
}

/// `evidence export` of `alert`, written to `path`.
async fn export_to(db: &TestDb, secret: &str, alert: uuid::Uuid, path: &std::path::Path) {
    let exported = evidence(db, secret, &["export", "--alert", &alert.to_string()]).await;
    assert!(exported.ok, "{}", exported.stderr);
    std::fs::write(path, &exported.stdout).unwrap();
}

/// `evidence check` of the bundle at `path` under `public`, with `more` flags.
async fn check(db: &TestDb, path: &std::path::Path, public: &str, more: &[&str]) -> CliRun {
    let bundle = path.to_str().unwrap();
    evidence(
        db,
        "",
        &[&["check", bundle, "--public-key", public], more].concat(),
    )
    .await
}

async fn evidence(db: &TestDb, secret: &str, args: &[&str]) -> CliRun {
    Outboxctl::on(db)
        .args(&[&["evidence"], args].concat())
        .env("OUTBOX_EVIDENCE_SIGNING_KEY", secret)
        .run()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_signed_twice_under_one_number_is_shown_by_the_log_kept_outside() {
    let db = TestDb::new().await;
    let tenant = common::add_tenant(&db, "acme", &["ops"]).await;
    let first = approve_many(&db, tenant.id, "ops", 2).await[0];
    let (signer, secret) = CheckpointSigner::generate();
    let public = signer.public_key().to_text();
    let dir = std::env::temp_dir().join(format!(
        "outbox-checkpoint-log-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir(&dir).unwrap();
    let log = dir.join("checkpoints.notes");
    let log_arg = log.to_str().unwrap();
    let bundle_path = dir.join("first.json");

    let decider = DeciderServe::on(&db.url)
        .with_metrics()
        .env("OUTBOX_EVIDENCE_SIGNING_KEY", &secret)
        .flags(&[
            "--checkpoint-interval",
            "200ms",
            "--checkpoint-log",
            log_arg,
        ])
        .start()
        .await;
    // The approvals are under a checkpoint, and the log has it.
    let made = wait_for_db(&db, "SELECT count(*) FROM evidence_checkpoints", |n| n >= 1).await;
    let started = std::time::Instant::now();
    while published(&log).len() < usize::try_from(made).unwrap() {
        assert!(started.elapsed() < DEADLINE, "the log stayed behind");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let verified = evidence(
        &db,
        &secret,
        &[
            "verify",
            "--all",
            "--public-key",
            &public,
            "--checkpoints",
            log_arg,
        ],
    )
    .await;
    assert!(verified.ok, "{}{}", verified.stdout, verified.stderr);
    export_to(&db, &secret, first, &bundle_path).await;
    let checked = check(&db, &bundle_path, &public, &["--checkpoints", log_arg]).await;
    assert!(checked.ok, "{}", checked.stderr);
    assert!(
        checked.stdout.contains("is in the checkpoint log"),
        "{}",
        checked.stdout
    );

    // The newest checkpoint deleted, the tip rewritten to the one before.
    let deleted = common::evidence::roll_back_newest_checkpoint(&db).await;
    let original = published(&log)
        .into_iter()
        .find(|(seq, _)| i64::try_from(*seq).unwrap() == deleted)
        .expect("the deleted checkpoint was published");

    // The running decider's log finds the database behind what it published, and stops.
    let stopped = |decider: &common::decider::Decider| {
        decider
            .log_lines()
            .into_iter()
            .any(|line| line.contains("ERROR") && line.contains("evidence checkpoint log stopped"))
    };
    let started = std::time::Instant::now();
    while !stopped(&decider) {
        assert!(started.elapsed() < DEADLINE, "the log did not stop");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    wait_for_series(
        &reqwest::Client::new(),
        decider.metrics(),
        "outbox_evidence_checkpoint_log_disagreements_total",
        |n| n >= 1.0,
    )
    .await;

    // A process that just started (it remembers nothing, keeps no log) signs the number
    // again over a new approval: the database agrees with itself.
    let late = common::alerts::approve_one(
        &db,
        tenant.id,
        "ops",
        "contract:LATE",
        "2027-01-31/30d",
        r#"{"late": true}"#,
    )
    .await;
    let remade = evidence(&db, &secret, &["checkpoint"]).await;
    assert!(remade.ok, "{}", remade.stderr);
    let again: i64 = sqlx::query_scalar("SELECT count(*) FROM evidence_checkpoints WHERE seq = $1")
        .bind(deleted)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(again, 1, "the test needs checkpoint {deleted} made again");

    // The log kept the original, once.
    let notes = published(&log);
    assert_eq!(
        notes.iter().filter(|(seq, _)| *seq == original.0).count(),
        1,
        "{notes:?}"
    );
    assert!(notes.contains(&original));
    // `verify` with the log names the checkpoint; without it, the database passes.
    let plain = evidence(&db, &secret, &["verify", "--all", "--public-key", &public]).await;
    assert!(plain.ok, "{}{}", plain.stdout, plain.stderr);
    let held = evidence(
        &db,
        &secret,
        &[
            "verify",
            "--all",
            "--public-key",
            &public,
            "--checkpoints",
            log_arg,
        ],
    )
    .await;
    assert!(!held.ok);
    assert!(
        held.stdout.contains(&format!(
            "mismatch: checkpoint {deleted}: the checkpoint log has hash {}",
            original.1
        )),
        "{}",
        held.stdout
    );
    // A bundle under the second checkpoint of that number is refused with the log.
    export_to(&db, &secret, late, &bundle_path).await;
    let checked = check(&db, &bundle_path, &public, &["--checkpoints", log_arg]).await;
    assert!(!checked.ok, "{}", checked.stdout);
    assert!(
        checked
            .stderr
            .contains("another checkpoint of that number was published"),
        "{}",
        checked.stderr
    );
    drop(decider);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_rewritten_before_its_first_checkpoint_is_shown_by_an_earlier_bundle() {
    let db = TestDb::new().await;
    let tenant = common::add_tenant(&db, "acme", &["ops"]).await;
    let alert = approve_many(&db, tenant.id, "ops", 1).await[0];
    let (signer, secret) = CheckpointSigner::generate();
    let public = signer.public_key().to_text();
    let dir = std::env::temp_dir().join(format!(
        "outbox-earlier-bundle-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir(&dir).unwrap();
    // The auditor exports the alert's bundle at once, before any checkpoint covers it.
    let earlier = dir.join("earlier.json");
    export_to(&db, &secret, alert, &earlier).await;
    let earlier_arg = earlier.to_str().unwrap();

    // Before the first checkpoint, the approval line is reworded and the chain rehashed
    // with the product's own functions; then a genuine checkpoint signs the new history.
    let mut tx = db.pool.begin().await.unwrap();
    for sql in [
        "SET LOCAL session_replication_role = replica".to_owned(),
        format!(
            "UPDATE alert_events SET line = 'approved by the CFO' \
             WHERE alert_id = '{alert}' AND from_state IS NULL"
        ),
        crate::evidence::rehash_chain(alert),
    ] {
        sqlx::query(&sql).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
    let made = evidence(&db, &secret, &["checkpoint"]).await;
    assert!(made.ok, "{}", made.stderr);

    // The database agrees with itself and with its signed checkpoint.
    let plain = evidence(&db, &secret, &["verify", "--all", "--public-key", &public]).await;
    assert!(plain.ok, "{}{}", plain.stdout, plain.stderr);
    // The earlier bundle does not.
    let held = evidence(
        &db,
        &secret,
        &[
            "verify",
            "--all",
            "--public-key",
            &public,
            "--earlier",
            earlier_arg,
        ],
    )
    .await;
    assert!(!held.ok, "{}", held.stdout);
    assert!(
        held.stdout
            .contains(&format!("mismatch: alert {alert} (earlier bundle"))
            && held
                .stdout
                .contains("the history was rewritten after it was exported"),
        "{}",
        held.stdout
    );
    let later = dir.join("later.json");
    export_to(&db, &secret, alert, &later).await;
    let alone = check(&db, &later, &public, &[]).await;
    assert!(alone.ok, "{}", alone.stderr);
    let against = check(&db, &later, &public, &["--earlier", earlier_arg]).await;
    assert!(!against.ok, "{}", against.stdout);
    assert!(
        against.stderr.contains("entry 1 gives head"),
        "{}",
        against.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}
