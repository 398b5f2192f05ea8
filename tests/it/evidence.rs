//! The tamper-evident trail end to end: alerts delivered by a real dispatcher to a real
//! sink (with refusals, retries, lost answers, an operator's replay), checkpoints signed by
//! `outboxctl evidence checkpoint`, then `evidence verify`, `export` and `check`. Each kind
//! of tampering is done with plain SQL, as a database administrator would, and `verify`
//! must exit non-zero and name the place; the untampered trail must pass.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::alerts::{approve_many, states};
use common::decider::DeciderServe;
use common::destinations::acme_with_ops_at;
use common::procs::*;
use common::{outboxctl, outboxctl_ok, CliRun, Outboxctl};
use outbox_core::evidence::chain::{genesis, link, merkle_root, Checkpoint, Leaf};
use outbox_core::evidence::entries::EntryFacts;
use outbox_core::evidence::signing::CheckpointSigner;
use outbox_evidence::bundle::{Bundle, BundleCheckpoint};
use outbox_testkit::TestDb;
use serde_json::json;
use uuid::Uuid;

/// A delivered trail with two signed checkpoints and entries after them.
struct Trail {
    db: TestDb,
    _sink: Sink,
    /// Accepted after at least one refusal (several attempts).
    retried: Uuid,
    /// Held: its answer was lost.
    held: Uuid,
    /// Held, then replayed by an operator and accepted.
    replayed: Uuid,
    /// Approved after the last checkpoint.
    late: Uuid,
    secret: String,
    public: String,
    /// `N:HASH` of the second checkpoint, as its maker printed it.
    second_checkpoint: String,
}

impl Trail {
    async fn build() -> Trail {
        let sink = Sink::start(&[]).await;
        let (db, tenant) = acme_with_ops_at(&sink, |_| {}).await;
        // Every first attempt refused, so each accepted alert has a refusal before it.
        sink.faults(json!({"fail_rate": 1.0})).await;
        let first = approve_many(&db, tenant, "ops", 4).await;
        let mut dispatcher = spawn_dispatcher(&dispatcher_args(&db, "w", &[]), None);
        wait_for_db(
            &db,
            "SELECT count(DISTINCT alert_id) FROM delivery_attempts",
            |n| n == 4,
        )
        .await;
        sink.faults(json!({"fail_rate": 0.0})).await;
        wait_for_db(
            &db,
            "SELECT count(*) FROM alert_states WHERE state = 'accepted'",
            |n| n == 4,
        )
        .await;
        // Gone before the next alerts are approved: a dispatcher still dying could claim
        // one and leave it sending under a lease nobody renews. Its database sessions too:
        // a claim it sent before the kill still runs, and commits, on the server.
        dispatcher.kill().await.unwrap();
        wait_for_db(
            &db,
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name = 'dispatcher'",
            |sessions| sessions == 0,
        )
        .await;
        // Two alerts whose answers are lost: held.
        sink.faults(json!({"drop_response_rate": 1.0})).await;
        let held = approve_one_more(&db, tenant, "held-1").await;
        let replayed = approve_one_more(&db, tenant, "held-2").await;
        drain(&db, "w", &[]).await;
        assert_eq!(states(&db).await.get("held"), Some(&2));
        sink.faults(json!({"drop_response_rate": 0.0})).await;

        let keygen = outboxctl_ok(&db, &["evidence", "keygen", "--stdout"]).await;
        let secret = keygen.stdout.trim().to_owned();
        let public = keygen
            .stderr
            .split_whitespace()
            .find(|w| w.starts_with("ed25519-pub:"))
            .unwrap()
            .to_owned();
        checkpoint(&db, &secret).await;
        outboxctl_ok(
            &db,
            &[
                "replay",
                &replayed.to_string(),
                "--note",
                "checked with the vendor",
            ],
        )
        .await;
        drain(&db, "w", &[]).await;
        let second_checkpoint = checkpoint(&db, &secret).await;
        let late = approve_one_more(&db, tenant, "late").await;
        Trail {
            db,
            _sink: sink,
            retried: first[0],
            held,
            replayed,
            late,
            secret,
            public,
            second_checkpoint,
        }
    }

    async fn verify(&self, args: &[&str]) -> CliRun {
        let mut all = vec!["evidence", "verify"];
        all.extend_from_slice(args);
        outboxctl(&self.db, &all).await
    }

    /// `verify --all` and `verify --alert ALERT` both fail naming `place`.
    async fn both_verifies_name(&self, alert: Uuid, place: &str) {
        fails_naming(&self.verify(&["--all"]).await, place);
        fails_naming(&self.verify(&["--alert", &alert.to_string()]).await, place);
    }

    async fn verify_pinned(&self, args: &[&str]) -> CliRun {
        let mut all = vec!["evidence", "verify", "--public-key", &self.public];
        all.extend_from_slice(args);
        outboxctl(&self.db, &all).await
    }

    /// Runs statements as a database administrator with the product's triggers off
    /// (`session_replication_role = replica`), in one transaction.
    async fn tamper(&self, statements: &[&str]) {
        let mut tx = self.db.pool.begin().await.unwrap();
        sqlx::query("SET LOCAL session_replication_role = replica")
            .execute(&mut *tx)
            .await
            .unwrap();
        for sql in statements {
            sqlx::query(sql).execute(&mut *tx).await.unwrap();
        }
        tx.commit().await.unwrap();
    }
}

async fn approve_one_more(db: &TestDb, tenant: Uuid, subject: &str) -> Uuid {
    common::alerts::approve_one(db, tenant, "ops", subject, "2027-01-31/30d", "{\"n\": 1}").await
}

/// Makes a signed checkpoint; returns its `N:HASH` as printed.
async fn checkpoint(db: &TestDb, secret: &str) -> String {
    let run = Outboxctl::on(db)
        .args(&["evidence", "checkpoint"])
        .env("OUTBOX_EVIDENCE_SIGNING_KEY", secret)
        .run()
        .await;
    assert!(run.ok, "{}", run.stderr);
    assert!(run.stdout.contains(", signed"), "{}", run.stdout);
    // "checkpoint N over M chain heads, hash H, signed"
    let words: Vec<&str> = run.stdout.split_whitespace().collect();
    format!("{}:{}", words[1], words[7].trim_end_matches(','))
}

/// `verify` failed, with a one-line reason, and its output names `place`.
fn fails_naming(run: &CliRun, place: &str) {
    assert!(!run.ok, "verify passed a tampered trail:\n{}", run.stdout);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stdout.contains(place) && run.stdout.contains("mismatch:"),
        "`{place}` not named in:\n{}",
        run.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untampered_trail_verifies_and_its_bundle_checks_offline() {
    let trail = Trail::build().await;
    let all = trail.verify_pinned(&["--all"]).await;
    assert!(all.ok, "{}\n{}", all.stdout, all.stderr);
    assert!(all.stdout.contains("verified 7 alerts"), "{}", all.stdout);
    assert!(all.stdout.contains("and 2 checkpoints"), "{}", all.stdout);
    // Each alert counted once, though `replayed` is under both checkpoints.
    let since = trail.verify_pinned(&["--since", "1h"]).await;
    assert!(since.ok, "{}\n{}", since.stdout, since.stderr);
    assert!(
        since.stdout.contains("verified 7 alerts"),
        "{}",
        since.stdout
    );
    let one = trail
        .verify_pinned(&["--alert", &trail.replayed.to_string()])
        .await;
    assert!(one.ok, "{}\n{}", one.stdout, one.stderr);
    assert!(
        one.stdout.contains("evidence verified up to checkpoint 2"),
        "{}",
        one.stdout
    );
    let late = trail.verify(&["--alert", &trail.late.to_string()]).await;
    assert!(late.ok, "{}", late.stderr);
    assert!(
        late.stdout.contains("no checkpoint covers them yet"),
        "{}",
        late.stdout
    );

    // The bundle checks with no database, and not after a byte of it changes.
    let export = outboxctl_ok(
        &trail.db,
        &["evidence", "export", "--alert", &trail.retried.to_string()],
    )
    .await;
    let dir = tempfile_dir();
    let file = dir.join("proof.json");
    std::fs::write(&file, &export.stdout).unwrap();
    let path = file.to_str().unwrap();
    let check = Outboxctl::on(&trail.db)
        .args(&["evidence", "check", path, "--public-key", &trail.public])
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .run()
        .await;
    assert!(check.ok, "{}", check.stderr);
    assert!(
        check.stdout.contains("under checkpoint 1"),
        "{}",
        check.stdout
    );
    let mut changed = export.stdout.clone().into_bytes();
    let at = changed.len() / 2;
    changed[at] = if changed[at] == b'0' { b'1' } else { b'0' };
    std::fs::write(&file, &changed).unwrap();
    let check = outboxctl(&trail.db, &["evidence", "check", path]).await;
    assert!(!check.ok, "a changed bundle still checks: {}", check.stdout);
    assert!(
        check.stderr.contains("the bundle does not verify"),
        "{}",
        check.stderr
    );
    // Signed by another key than the auditor's: refused.
    let (other, _) = CheckpointSigner::generate();
    std::fs::write(&file, &export.stdout).unwrap();
    let check = outboxctl(
        &trail.db,
        &[
            "evidence",
            "check",
            path,
            "--public-key",
            &other.public_key().to_text(),
        ],
    )
    .await;
    assert!(!check.ok);
    assert!(
        check.stderr.contains("not one of the keys given"),
        "{}",
        check.stderr
    );
    // Left behind only when an assertion above failed, to look at.
    std::fs::remove_dir_all(&dir).unwrap();
    // An alert both checkpoints recorded: its bundle carries both, each with the one
    // before it, and checks without a note.
    let both = export_and_check(&trail, trail.replayed).await;
    assert!(both.ok, "{}", both.stderr);
    assert!(
        both.stdout.contains("under checkpoint 2") && !both.stdout.contains("note:"),
        "{}",
        both.stdout
    );
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("outbox-evidence-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_line_is_named() {
    let trail = Trail::build().await;
    let row: i64 = sqlx::query_scalar(
        "SELECT id FROM alert_events WHERE alert_id = $1 ORDER BY chain_pos LIMIT 1",
    )
    .bind(trail.held)
    .fetch_one(&trail.db.pool)
    .await
    .unwrap();
    trail
        .tamper(&[&format!(
            "UPDATE alert_events SET line = line || ' (approved by the CFO)' WHERE id = {row}"
        )])
        .await;
    let place = format!("alert {}, entry 1 (alert_events row {row})", trail.held);
    trail.both_verifies_name(trail.held, &place).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_outcome_is_named() {
    let trail = Trail::build().await;
    trail
        .tamper(&[&format!(
            "UPDATE alert_outcomes SET outcome = 'accepted' WHERE alert_id = '{}'",
            trail.held
        )])
        .await;
    let place = format!("alert {}: is accepted, but the last transition", trail.held);
    trail.both_verifies_name(trail.held, &place).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_attempt_is_named() {
    let trail = Trail::build().await;
    // The first refused attempt: the chain breaks at the attempt after it.
    let (refused, next): (i64, i64) = sqlx::query_as(
        "SELECT min(id), (SELECT min(d.id) FROM delivery_attempts d \
                          WHERE d.alert_id = $1 AND d.id > min(a.id)) \
         FROM delivery_attempts a WHERE alert_id = $1",
    )
    .bind(trail.retried)
    .fetch_one(&trail.db.pool)
    .await
    .unwrap();
    assert_ne!(refused, next, "the alert was retried");
    trail
        .tamper(&[&format!(
            "DELETE FROM delivery_attempts WHERE id = {refused}"
        )])
        .await;
    let place = format!("(delivery_attempts row {next}): does not match its chain");
    trail.both_verifies_name(trail.retried, &place).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_newest_attempt_is_named_by_its_checkpoint() {
    let trail = Trail::build().await;
    // The accepted attempt, the alert's last entry, and its outcome with it: the chain
    // that is left is whole, and says `pending` again; the checkpoint remembers more.
    trail
        .tamper(&[
            &format!(
                "DELETE FROM delivery_attempts WHERE id = (SELECT max(id) FROM delivery_attempts \
                 WHERE alert_id = '{}')",
                trail.retried
            ),
            &format!(
                "WITH gone AS (DELETE FROM alert_outcomes WHERE alert_id = '{0}' RETURNING alert_id) \
                 INSERT INTO outbox (alert_id, destination_id, attempts) \
                 SELECT a.id, a.destination_id, 1 FROM alerts a WHERE a.id = '{0}'",
                trail.retried
            ),
        ])
        .await;
    let place = format!("checkpoint 1: recorded alert {}", trail.retried);
    fails_naming(&trail.verify(&["--all"]).await, &place);
    fails_naming(
        &trail.verify(&["--alert", &trail.retried.to_string()]).await,
        "checkpoint 1",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_attempt_is_named() {
    let trail = Trail::build().await;
    // A held alert made to look delivered an hour ago: an accepted attempt (linked by the
    // product's own trigger, so its hash is right) and the outcome to match.
    sqlx::query(
        "INSERT INTO delivery_attempts (alert_id, attempt, worker, fencing_token, started_at, \
             finished_at, idempotency_key, payload_sha256, outcome, http_status, to_state, line) \
         SELECT id, 2, 'w', 1, now() - interval '1 hour', now() - interval '1 hour', id::text, \
                payload_sha256, 'accepted', 200, 'accepted', 'attempt 2 accepted (HTTP 200)' \
         FROM alerts WHERE id = $1",
    )
    .bind(trail.held)
    .execute(&trail.db.pool)
    .await
    .unwrap();
    trail
        .tamper(&[&format!(
            "UPDATE alert_outcomes SET outcome = 'accepted' WHERE alert_id = '{}'",
            trail.held
        )])
        .await;
    let place = format!("alert {}, entry", trail.held);
    let all = trail.verify(&["--all"]).await;
    fails_naming(&all, &place);
    assert!(
        all.stdout.contains("before checkpoint 2 was made"),
        "{}",
        all.stdout
    );
    fails_naming(
        &trail.verify(&["--alert", &trail.held.to_string()]).await,
        "before checkpoint 2 was made",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backdated_attempt_is_named() {
    let trail = Trail::build().await;
    let row: i64 = sqlx::query_scalar("SELECT max(id) FROM delivery_attempts WHERE alert_id = $1")
        .bind(trail.retried)
        .fetch_one(&trail.db.pool)
        .await
        .unwrap();
    trail
        .tamper(&[&format!(
            "UPDATE delivery_attempts SET started_at = started_at - interval '1 hour', \
             finished_at = finished_at - interval '1 hour' WHERE id = {row}"
        )])
        .await;
    let place = format!("(delivery_attempts row {row}): does not match its chain");
    fails_naming(&trail.verify(&["--all"]).await, &place);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consistently_rewritten_chain_is_named_by_its_checkpoint() {
    let trail = Trail::build().await;
    // The approval line reworded and every hash of the alert's chain recomputed with the
    // product's own functions: the chain alone verifies; checkpoint 1 does not agree.
    trail
        .tamper(&[
            &format!(
                "UPDATE alert_events SET line = 'approved by the CFO' \
                 WHERE alert_id = '{}' AND from_state IS NULL",
                trail.retried
            ),
            &rehash_chain(trail.retried),
        ])
        .await;
    let place = format!("checkpoint 1: recorded alert {}", trail.retried);
    trail.both_verifies_name(trail.retried, &place).await;
}

/// A statement that recomputes every hash of `alert`'s chain with the product's own
/// functions, as whoever rewrites a chain consistently would.
pub(crate) fn rehash_chain(alert: Uuid) -> String {
    format!(
        "DO $$ DECLARE head bytea; e record; BEGIN \
           SELECT evidence_genesis(a) INTO head FROM alerts a WHERE a.id = '{alert}'; \
           FOR e IN SELECT 0 AS t, id, chain_pos FROM alert_events WHERE alert_id = '{alert}' \
                    UNION ALL SELECT 1, id, chain_pos FROM delivery_attempts WHERE alert_id = '{alert}' \
                    ORDER BY chain_pos LOOP \
             IF e.t = 0 THEN \
               UPDATE alert_events x SET entry_hash = sha256(head || evidence_event_record(x)) \
                WHERE x.id = e.id RETURNING entry_hash INTO head; \
             ELSE \
               UPDATE delivery_attempts x SET entry_hash = sha256(head || evidence_attempt_record(x)) \
                WHERE x.id = e.id RETURNING entry_hash INTO head; \
             END IF; \
           END LOOP; END $$"
    )
}

/// Exports `alert`'s bundle and checks it with the trail's key.
async fn export_and_check(trail: &Trail, alert: Uuid) -> CliRun {
    let export = outboxctl_ok(
        &trail.db,
        &["evidence", "export", "--alert", &alert.to_string()],
    )
    .await;
    check_bundle(
        &trail.db,
        export.stdout.as_bytes(),
        &["--public-key", &trail.public],
        &[],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backdated_entry_stays_named_once_the_next_checkpoint_covers_it() {
    let trail = Trail::build().await;
    // A held alert made to look delivered an hour ago (linked by the product's own
    // trigger, so its hash is right), then a genuine checkpoint over it.
    let row: i64 = sqlx::query_scalar(
        "INSERT INTO delivery_attempts (alert_id, attempt, worker, fencing_token, started_at, \
             finished_at, idempotency_key, payload_sha256, outcome, http_status, to_state, line) \
         SELECT id, 2, 'w', 1, now() - interval '1 hour', now() - interval '1 hour', id::text, \
                payload_sha256, 'accepted', 200, 'accepted', 'attempt 2 accepted (HTTP 200)' \
         FROM alerts WHERE id = $1 RETURNING id",
    )
    .bind(trail.held)
    .fetch_one(&trail.db.pool)
    .await
    .unwrap();
    trail
        .tamper(&[&format!(
            "UPDATE alert_outcomes SET outcome = 'accepted' WHERE alert_id = '{}'",
            trail.held
        )])
        .await;
    checkpoint(&trail.db, &trail.secret).await;
    let place = format!("(delivery_attempts row {row}): is dated");
    for args in [
        vec!["--all"],
        vec!["--since", "1h"],
        vec!["--alert", &trail.held.to_string()],
    ] {
        let run = trail.verify_pinned(&args).await;
        fails_naming(&run, &place);
        assert!(
            run.stdout
                .contains("more than 5 minutes before checkpoint 2 was made"),
            "{args:?}: {}",
            run.stdout
        );
    }
    // Its bundle carries checkpoint 2 before checkpoint 3, the first to cover the entry.
    check_refuses(
        &export_and_check(&trail, trail.held).await,
        "before checkpoint 2 was made",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_rewritten_under_fresh_positions_is_named_by_the_checkpoint_that_recorded_it() {
    let trail = Trail::build().await;
    let alert = trail.retried;
    // Checkpoint 1 recorded the alert. Its approval is reworded, each entry given a fresh
    // position (in chain order) and today's date, every hash recomputed; the next genuine
    // checkpoint then covers the rewritten chain, and signs it.
    trail
        .tamper(&[
            &format!(
                "UPDATE alert_events SET line = 'approved by the CFO' \
                 WHERE alert_id = '{alert}' AND from_state IS NULL"
            ),
            &format!(
                "DO $$ DECLARE e record; BEGIN \
                   FOR e IN SELECT 0 AS t, id, chain_pos FROM alert_events WHERE alert_id = '{alert}' \
                            UNION ALL SELECT 1, id, chain_pos FROM delivery_attempts \
                            WHERE alert_id = '{alert}' ORDER BY chain_pos LOOP \
                     IF e.t = 0 THEN \
                       UPDATE alert_events SET chain_pos = nextval('evidence_chain_pos_seq'), \
                              at = clock_timestamp() WHERE id = e.id; \
                     ELSE \
                       UPDATE delivery_attempts SET chain_pos = nextval('evidence_chain_pos_seq'), \
                              started_at = clock_timestamp(), finished_at = clock_timestamp() \
                        WHERE id = e.id; \
                     END IF; \
                   END LOOP; END $$"
            ),
            &rehash_chain(alert),
        ])
        .await;
    checkpoint(&trail.db, &trail.secret).await;
    let place = format!("checkpoint 1: recorded alert {alert}");
    fails_naming(
        &trail.verify_pinned(&["--alert", &alert.to_string()]).await,
        &place,
    );
    fails_naming(&trail.verify_pinned(&["--all"]).await, &place);
    // The bundle carries checkpoint 1 too, whose leaf is not the rewritten chain's.
    check_refuses(
        &export_and_check(&trail, alert).await,
        "is not under checkpoint 1's root",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_payload_that_is_not_the_approved_one_is_named() {
    let trail = Trail::build().await;
    let payload = "{\"n\": 2, \"note\": \"wire the money\"}";
    let (stored, approved): (String, String) = sqlx::query_as(
        "SELECT encode(sha256(convert_to($2, 'UTF8')), 'hex'), encode(payload_sha256, 'hex') \
         FROM alerts WHERE id = $1",
    )
    .bind(trail.held)
    .bind(payload)
    .fetch_one(&trail.db.pool)
    .await
    .unwrap();
    trail
        .tamper(&[&format!(
            "UPDATE alerts SET payload = '{payload}' WHERE id = '{}'",
            trail.held
        )])
        .await;
    let place = format!(
        "alert {}: its stored payload is not the approved one: SHA-256 {stored}, approved \
         {approved}",
        trail.held
    );
    for args in [
        vec!["--all"],
        vec!["--since", "1h"],
        vec!["--alert", &trail.held.to_string()],
    ] {
        fails_naming(&trail.verify_pinned(&args).await, &place);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_newest_checkpoint_is_named() {
    let trail = Trail::build().await;
    let first_hash: Vec<u8> =
        sqlx::query_scalar("SELECT previous FROM evidence_checkpoints WHERE seq = 2")
            .fetch_one(&trail.db.pool)
            .await
            .unwrap();
    trail
        .tamper(&["DELETE FROM evidence_checkpoints WHERE seq = 2"])
        .await;
    trail
        .both_verifies_name(trail.retried, "checkpoint 2: is missing")
        .await;
    // The tip rewritten as well: the database is consistent again, and only the
    // checkpoint's hash kept elsewhere (its maker's output, its log line) shows it is gone.
    let hex: String = first_hash.iter().map(|b| format!("{b:02x}")).collect();
    trail
        .tamper(&[&format!(
            "UPDATE evidence_checkpoint_tip SET seq = 1, hash = '\\x{hex}'"
        )])
        .await;
    let consistent = trail.verify(&["--all"]).await;
    assert!(consistent.ok, "{}", consistent.stdout);
    let anchored = trail
        .verify(&["--all", "--checkpoint", &trail.second_checkpoint])
        .await;
    fails_naming(
        &anchored,
        "checkpoint 2: is missing, though it was made with hash",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_signed_again_with_another_key_fail_against_the_auditors_key() {
    let trail = Trail::build().await;
    // The administrator's own key, recorded as if it were the product's, and every
    // checkpoint signed again with it.
    let (forger, _) = CheckpointSigner::generate();
    let checkpoints = outbox_store::evidence_chain::checkpoints_after(&trail.db.pool, 0, 10, false)
        .await
        .unwrap();
    let mut statements = vec![format!(
        "INSERT INTO evidence_keys (key_id, public_key) VALUES ('{}', '{}')",
        forger.key_id(),
        forger.public_key().to_text()
    )];
    for c in &checkpoints {
        let signature = forger.sign(&outbox_evidence::checkpoint::checkpoint_of(c));
        let hex: String = signature.iter().map(|b| format!("{b:02x}")).collect();
        statements.push(format!(
            "UPDATE evidence_checkpoints SET key_id = '{}', signature = '\\x{hex}' WHERE seq = {}",
            forger.key_id(),
            c.seq
        ));
    }
    let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
    trail.tamper(&statements).await;
    // With the keys the database holds, the forgery is consistent...
    let unpinned = trail.verify(&["--all"]).await;
    assert!(unpinned.ok, "{}", unpinned.stdout);
    assert!(
        unpinned.stdout.contains("pin yours with --public-key"),
        "{}",
        unpinned.stdout
    );
    // ...and against the auditor's own key it is not.
    let place = format!(
        "checkpoint 1: is signed by key {}, which is not a trusted key",
        forger.key_id()
    );
    fails_naming(&trail.verify_pinned(&["--all"]).await, &place);
    fails_naming(
        &trail
            .verify_pinned(&["--alert", &trail.retried.to_string()])
            .await,
        &place,
    );
    let _ = &trail.secret;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_from_before_the_chain_are_chained_by_the_backfill_and_verify() {
    let trail = Trail::build().await;
    // As a database from before this version: no entry chained, no checkpoint, and the
    // backfill still to walk every alert.
    trail
        .tamper(&[
            "UPDATE alert_events SET chain_pos = NULL, entry_hash = NULL",
            "UPDATE delivery_attempts SET chain_pos = NULL, entry_hash = NULL",
            "UPDATE outbox SET chain_head = NULL",
            "DELETE FROM evidence_checkpoints",
            "DELETE FROM evidence_checkpoint_tip",
            "UPDATE evidence_backfill SET up_to = (SELECT id FROM alerts ORDER BY id DESC LIMIT 1), \
             after = '00000000-0000-0000-0000-000000000000', chained = 0, finished_at = NULL",
        ])
        .await;
    let before = trail.verify(&["--all"]).await;
    fails_naming(&before, "carries no chain hash");
    // An entry written meanwhile to an unchained alert stays unchained until the backfill
    // chains the alert's whole trail in order.
    outboxctl_ok(
        &trail.db,
        &[
            "replay",
            &trail.held.to_string(),
            "--note",
            "during the upgrade",
        ],
    )
    .await;
    let unchained: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM alert_events WHERE alert_id = $1 AND entry_hash IS NULL",
    )
    .bind(trail.held)
    .fetch_one(&trail.db.pool)
    .await
    .unwrap();
    assert!(
        unchained >= 2,
        "the new line was chained onto an unchained trail"
    );

    let run = Outboxctl::on(&trail.db)
        .args(&["evidence", "checkpoint", "--backfill"])
        .env("OUTBOX_EVIDENCE_SIGNING_KEY", &trail.secret)
        .run()
        .await;
    assert!(run.ok, "{}", run.stderr);
    let left: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM alert_events WHERE entry_hash IS NULL) \
              + (SELECT count(*) FROM delivery_attempts WHERE entry_hash IS NULL)",
    )
    .fetch_one(&trail.db.pool)
    .await
    .unwrap();
    assert_eq!(left, 0);
    let after = trail.verify_pinned(&["--all"]).await;
    assert!(after.ok, "{}\n{}", after.stdout, after.stderr);
    assert!(
        after.stdout.contains("verified 7 alerts"),
        "{}",
        after.stdout
    );
    // A checkpoint made before the backfill finished would have covered nothing of it;
    // this one covers every alert.
    let size: i64 = sqlx::query_scalar("SELECT size FROM evidence_checkpoints WHERE seq = 1")
        .fetch_one(&trail.db.pool)
        .await
        .unwrap();
    assert_eq!(size, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruned_alerts_keep_a_chain_their_checkpoints_verify() {
    let trail = Trail::build().await;
    let run = outboxctl_ok(&trail.db, &["prune", "--older-than", "1ms", "--json"]).await;
    assert!(run.stdout.contains("\"alerts\":5"), "{}", run.stdout);
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM evidence_pruned_chains")
        .fetch_one(&trail.db.pool)
        .await
        .unwrap();
    assert_eq!(kept, 5);
    let all = trail.verify_pinned(&["--all"]).await;
    assert!(all.ok, "{}\n{}", all.stdout, all.stderr);
    let one = trail
        .verify_pinned(&["--alert", &trail.retried.to_string()])
        .await;
    assert!(one.ok, "{}", one.stdout);
    assert!(
        one.stdout
            .contains("(pruned: the entries' hashes were kept"),
        "{}",
        one.stdout
    );
    // The kept head changed (one bit of its last byte): the checkpoint that covered it
    // says so.
    trail
        .tamper(&[&format!(
            "UPDATE evidence_pruned_chains SET entry_hashes = set_byte(entry_hashes, \
                 octet_length(entry_hashes) - 1, \
                 get_byte(entry_hashes, octet_length(entry_hashes) - 1) # 1) \
             WHERE alert_id = '{}'",
            trail.retried
        )])
        .await;
    fails_naming(
        &trail.verify(&["--all"]).await,
        &format!("checkpoint 1: recorded alert {}", trail.retried),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_evidence_arguments_are_refused_clearly() {
    let db = TestDb::new().await;
    let cases: [(&[&str], &str); 5] = [
        (&["evidence", "verify"], "--alert"),
        (
            &["evidence", "verify", "--all", "--checkpoint", "2:abc"],
            "64 hex digits",
        ),
        (
            &[
                "evidence",
                "verify",
                "--all",
                "--public-key",
                "ed25519-pub:nope",
            ],
            "--public-key",
        ),
        (
            &[
                "evidence",
                "verify",
                "--alert",
                "01a2c3d4-0000-7000-8000-000000000000",
            ],
            "no alert 01a2c3d4-0000-7000-8000-000000000000",
        ),
        (
            &["evidence", "check", "/nonexistent/proof.json"],
            "cannot read /nonexistent/proof.json",
        ),
    ];
    for (args, needle) in cases {
        let run = outboxctl(&db, args).await;
        assert!(!run.ok, "{args:?} passed");
        assert!(
            run.stderr.contains(needle),
            "{args:?}: `{needle}` not in {}",
            run.stderr
        );
    }
    let bad_key = Outboxctl::on(&db)
        .args(&["evidence", "checkpoint"])
        .env("OUTBOX_EVIDENCE_SIGNING_KEY", "ed25519:not-base64")
        .run()
        .await;
    assert!(!bad_key.ok);
    assert_eq!(bad_key.stderr.lines().count(), 1, "{}", bad_key.stderr);
    assert!(
        bad_key.stderr.contains("OUTBOX_EVIDENCE_SIGNING_KEY"),
        "{}",
        bad_key.stderr
    );
    assert!(
        !bad_key.stderr.contains("not-base64"),
        "the key is echoed: {}",
        bad_key.stderr
    );
    assert_eq!(db.count("evidence_checkpoints").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_checkpoint_waits_for_the_one_being_made_then_covers_the_rest() {
    let db = TestDb::new().await;
    let tenant = common::add_tenant(&db, "acme", &["ops"]).await;
    approve_many(&db, tenant.id, "ops", 3).await;
    // Another process making a checkpoint: it holds the maker's lock in its transaction.
    let mut maker = db.pool.begin().await.unwrap();
    let held: bool = sqlx::query_scalar(
        "SELECT pg_try_advisory_xact_lock(hashtext('outbox.evidence.checkpoint'))",
    )
    .fetch_one(&mut *maker)
    .await
    .unwrap();
    assert!(held);
    let mut operator = Process::spawn(
        env!("CARGO_BIN_EXE_outboxctl"),
        &["evidence", "checkpoint"],
        &[("DATABASE_URL", db.url.as_str()), ("USER", "alice")],
    );
    // The operator's command found the lock taken and says it waits.
    let deadline = std::time::Instant::now() + DEADLINE;
    while !operator
        .log_lines()
        .iter()
        .any(|line| line.contains("another process is making a checkpoint; waiting for it"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "it never said it waits: {:?}",
            operator.log_lines()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    maker.rollback().await.unwrap();
    let status = operator.exit_status().await;
    assert!(status.success(), "{:?}", operator.log_lines());
    let (covered, issued): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT max(covers_to) FROM evidence_checkpoints), \
                (SELECT max(chain_pos) FROM alert_events)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(covered, issued, "the checkpoint left entries uncovered");
}

/// `evidence checkpoint` signed with `secret` (and `args`), run to its end.
async fn checkpoint_run(db: &TestDb, secret: &str, args: &[&str]) -> CliRun {
    let mut all = vec!["evidence", "checkpoint"];
    all.extend_from_slice(args);
    Outboxctl::on(db)
        .args(&all)
        .env("OUTBOX_EVIDENCE_SIGNING_KEY", secret)
        .run()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_newest_checkpoint_is_refused_not_signed_again() {
    let trail = Trail::build().await;
    let stored = outbox_store::evidence_chain::checkpoints_after(&trail.db.pool, 0, 10, false)
        .await
        .unwrap();
    let first = format!(
        "1:{}",
        outbox_core::evidence::chain::hex(
            &outbox_evidence::checkpoint::checkpoint_of(&stored[0]).hash()
        )
    );
    trail
        .tamper(&["DELETE FROM evidence_checkpoints WHERE seq = 2"])
        .await;
    // The tip still names checkpoint 2: the key does not sign another checkpoint 2.
    let refused = checkpoint_run(&trail.db, &trail.secret, &[]).await;
    assert!(!refused.ok, "{}", refused.stdout);
    assert_eq!(refused.stderr.lines().count(), 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("checkpoint 2 was deleted"),
        "{}",
        refused.stderr
    );
    assert_eq!(trail.db.count("evidence_checkpoints").await, 1);
    // Going on after checkpoint 1 would sign a second checkpoint 2 too.
    let behind = checkpoint_run(&trail.db, &trail.secret, &["--continue-after", &first]).await;
    assert!(!behind.ok, "{}", behind.stdout);
    assert!(
        behind.stderr.contains("would sign a number twice"),
        "{}",
        behind.stderr
    );
    assert_eq!(trail.db.count("evidence_checkpoints").await, 1);
    // After the lost checkpoint as its maker printed it: numbered 3, chained from it, and
    // `verify` goes on naming checkpoint 2 as missing.
    let resumed = checkpoint_run(
        &trail.db,
        &trail.secret,
        &["--continue-after", &trail.second_checkpoint],
    )
    .await;
    assert!(resumed.ok, "{}", resumed.stderr);
    assert!(
        resumed.stdout.starts_with("checkpoint 3 "),
        "{}",
        resumed.stdout
    );
    let previous: Vec<u8> =
        sqlx::query_scalar("SELECT previous FROM evidence_checkpoints WHERE seq = 3")
            .fetch_one(&trail.db.pool)
            .await
            .unwrap();
    let lost_hash = trail.second_checkpoint.split_once(':').unwrap().1;
    assert_eq!(
        outbox_core::evidence::chain::hex(&previous.try_into().unwrap()),
        lost_hash
    );
    fails_naming(
        &trail.verify_pinned(&["--all"]).await,
        "checkpoint 2: is missing (checkpoint 3 chains from it)",
    );
    // From there on, checkpoints chain as usual.
    outboxctl_ok(
        &trail.db,
        &["replay", &trail.held.to_string(), "--note", "again"],
    )
    .await;
    let next = checkpoint_run(&trail.db, &trail.secret, &[]).await;
    assert!(next.ok, "{}", next.stderr);
    assert!(next.stdout.starts_with("checkpoint 4 "), "{}", next.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_maker_refuses_when_its_checkpoint_and_the_tip_are_both_rewritten() {
    let db = TestDb::new().await;
    let tenant = common::add_tenant(&db, "acme", &["ops"]).await;
    approve_many(&db, tenant.id, "ops", 2).await;
    let (signer, secret) = CheckpointSigner::generate();
    let decider = DeciderServe::on(&db.url)
        .with_metrics()
        .env("OUTBOX_EVIDENCE_SIGNING_KEY", &secret)
        .flags(&["--checkpoint-interval", "200ms"])
        .start()
        .await;
    wait_for_db(&db, "SELECT count(*) FROM evidence_checkpoints", |n| n >= 1).await;
    // The newest checkpoint deleted and the tip rewritten to match, so the database agrees
    // with itself and only the maker's memory knows.
    let deleted = common::evidence::roll_back_newest_checkpoint(&db).await;
    let refused_line = |decider: &common::decider::Decider| {
        decider
            .log_lines()
            .into_iter()
            .find(|line| line.contains("ERROR") && line.contains("evidence checkpoint refused"))
    };
    let remade = format!("SELECT count(*) FROM evidence_checkpoints WHERE seq >= {deleted}");
    let deadline = std::time::Instant::now() + DEADLINE;
    while refused_line(&decider).is_none() {
        let count: i64 = sqlx::query_scalar(&remade)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(count, 0, "checkpoint {deleted} was signed a second time");
        assert!(
            std::time::Instant::now() < deadline,
            "no refusal was logged"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let line = refused_line(&decider).unwrap();
    assert!(
        line.contains(&format!("made or found checkpoint {deleted}:")),
        "{line}"
    );
    let http = reqwest::Client::new();
    wait_for_series(
        &http,
        decider.metrics(),
        "outbox_evidence_checkpoints_refused_total",
        |n| n >= 1.0,
    )
    .await;
    let count: i64 = sqlx::query_scalar(&remade)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(count, 0, "checkpoint {deleted} was signed a second time");
    let _ = signer;
}

/// One approved alert under a checkpoint signed by a new key: the database, the alert's
/// bundle as `evidence export` wrote it, and the key's public half.
async fn one_signed_bundle() -> (TestDb, Vec<u8>, String) {
    let db = TestDb::new().await;
    let tenant = common::add_tenant(&db, "acme", &["ops"]).await;
    let alert = approve_many(&db, tenant.id, "ops", 1).await[0];
    let (signer, secret) = CheckpointSigner::generate();
    checkpoint(&db, &secret).await;
    let export = outboxctl_ok(&db, &["evidence", "export", "--alert", &alert.to_string()]).await;
    (
        db,
        export.stdout.into_bytes(),
        signer.public_key().to_text(),
    )
}

/// `evidence check` on `bytes`, with `args` and `envs`, and no database to reach.
async fn check_bundle(db: &TestDb, bytes: &[u8], args: &[&str], envs: &[(&str, &str)]) -> CliRun {
    let dir = tempfile_dir();
    let file = dir.join("proof.json");
    std::fs::write(&file, bytes).unwrap();
    let mut all = vec!["evidence", "check", file.to_str().unwrap()];
    all.extend_from_slice(args);
    let run = Outboxctl::on(db)
        .args(&all)
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .envs(envs)
        .run()
        .await;
    std::fs::remove_dir_all(&dir).unwrap();
    run
}

/// `check` failed with a one-line reason naming `needle`, and printed nothing.
fn check_refuses(run: &CliRun, needle: &str) {
    assert!(!run.ok, "the bundle passed: {}", run.stdout);
    assert_eq!(run.stdout, "");
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(needle),
        "`{needle}` not in {}",
        run.stderr
    );
}

/// The bundle with its approval line reworded and every head recomputed: an alert's trail
/// as whoever writes a bundle by hand can make it, without any checkpoint.
fn reworded(bytes: &[u8]) -> Bundle {
    let mut bundle: Bundle = serde_json::from_slice(bytes).unwrap();
    let EntryFacts::Event(approval) = &mut bundle.entries[0].entry else {
        panic!("the first entry is the approval line")
    };
    approval.line = "approved by the CFO".into();
    let mut head = genesis(&bundle.alert.record()).unwrap();
    for entry in &mut bundle.entries {
        head = link(&head, &entry.entry.record()).unwrap();
        entry.head = head;
    }
    bundle.checkpoint = None;
    bundle.earlier_checkpoints = Some(vec![]);
    bundle
}

/// `bundle` under a one-leaf checkpoint that `forger` made and signed, its public key
/// inside.
fn signed_by(mut bundle: Bundle, forger: &CheckpointSigner) -> Bundle {
    let leaf = Leaf {
        alert_id: bundle.alert.id,
        entries: bundle.entries.len() as u64,
        head: bundle.entries.last().unwrap().head,
    };
    let checkpoint = Checkpoint {
        seq: 1,
        made_at_micros: chrono::Utc::now().timestamp_micros(),
        size: 1,
        root: merkle_root(&[leaf.hash()]),
        previous: [0; 32],
    };
    let signature: String = forger
        .sign(&checkpoint)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    bundle.checkpoint = Some(BundleCheckpoint {
        seq: checkpoint.seq,
        made_at_micros: checkpoint.made_at_micros,
        size: checkpoint.size,
        root: checkpoint.root,
        previous: checkpoint.previous,
        entries: leaf.entries,
        leaf_index: 0,
        inclusion_proof: vec![],
        key_id: Some(forger.key_id().to_owned()),
        signature: Some(signature),
        public_key: Some(forger.public_key().to_text()),
        preceding: Some(vec![]),
    });
    bundle
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invented_bundle_under_no_checkpoint_fails_the_check() {
    let (db, exported, public) = one_signed_bundle().await;
    let invented = outbox_evidence::bundle::to_canonical(&reworded(&exported));
    check_refuses(
        &check_bundle(&db, &invented, &["--public-key", &public], &[]).await,
        "the bundle is not anchored",
    );
    check_refuses(
        &check_bundle(&db, &invented, &[], &[]).await,
        "not anchored",
    );
    // Asked for, it says what it shows, and that this proves nothing.
    let allowed = check_bundle(&db, &invented, &["--allow-unanchored"], &[]).await;
    assert!(allowed.ok, "{}", allowed.stderr);
    assert!(
        allowed.stdout.contains("entries chain correctly")
            && allowed.stdout.contains("NOT ANCHORED"),
        "{}",
        allowed.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_signed_with_its_own_key_fails_the_check() {
    let (db, exported, public) = one_signed_bundle().await;
    let (forger, _) = CheckpointSigner::generate();
    let forged = outbox_evidence::bundle::to_canonical(&signed_by(reworded(&exported), &forger));
    check_refuses(
        &check_bundle(&db, &forged, &[], &[]).await,
        "no key was given to check checkpoint 1's signature with",
    );
    check_refuses(
        &check_bundle(&db, &forged, &["--public-key", &public], &[]).await,
        "not one of the keys given",
    );
    let embedded = check_bundle(&db, &forged, &["--trust-embedded-key"], &[]).await;
    assert!(embedded.ok, "{}", embedded.stderr);
    assert!(
        embedded.stdout.contains(&format!(
            "signed by key {}, the bundle's own key: NOT TRUSTED",
            forger.key_id()
        )),
        "{}",
        embedded.stdout
    );
    // The genuine bundle, with the auditor's key, is the one that proves something.
    let genuine = check_bundle(&db, &exported, &["--public-key", &public], &[]).await;
    assert!(genuine.ok, "{}", genuine.stderr);
    assert!(
        genuine.stdout.contains("(one you trust)"),
        "{}",
        genuine.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_trusts_the_keys_in_the_environment_as_verify_does() {
    let (db, exported, public) = one_signed_bundle().await;
    let (forger, _) = CheckpointSigner::generate();
    let forged = outbox_evidence::bundle::to_canonical(&signed_by(reworded(&exported), &forger));
    let trusted = [("OUTBOX_EVIDENCE_PUBLIC_KEYS", public.as_str())];
    check_refuses(
        &check_bundle(&db, &forged, &[], &trusted).await,
        "not one of the keys given",
    );
    check_refuses(
        &check_bundle(&db, &forged, &["--trust-embedded-key"], &trusted).await,
        "--trust-embedded-key: keys to trust were given",
    );
    let genuine = check_bundle(&db, &exported, &[], &trusted).await;
    assert!(genuine.ok, "{}", genuine.stderr);
    assert!(
        genuine.stdout.contains("(one you trust)"),
        "{}",
        genuine.stdout
    );
    // A flag wins over the variable, as for `verify`.
    let other = forger.public_key().to_text();
    check_refuses(
        &check_bundle(&db, &exported, &["--public-key", &other], &trusted).await,
        "not one of the keys given",
    );
    let bad = [("OUTBOX_EVIDENCE_PUBLIC_KEYS", "ed25519-pub:nope")];
    check_refuses(
        &check_bundle(&db, &exported, &[], &bad).await,
        "OUTBOX_EVIDENCE_PUBLIC_KEYS",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_whose_attempt_records_another_payload_fails_the_check() {
    let trail = Trail::build().await;
    let tenant: Uuid = sqlx::query_scalar("SELECT tenant_id FROM alerts LIMIT 1")
        .fetch_one(&trail.db.pool)
        .await
        .unwrap();
    let alert = approve_one_more(&trail.db, tenant, "another-payload").await;
    drain(&trail.db, "w", &[]).await;
    // Before the next checkpoint: its attempt made to say another payload was sent, and
    // the chain rehashed to match. The checkpoint then signs the rewritten chain.
    trail
        .tamper(&[
            &format!(
                "UPDATE delivery_attempts SET payload_sha256 = '\\x{}' WHERE alert_id = '{alert}'",
                "22".repeat(32)
            ),
            &rehash_chain(alert),
        ])
        .await;
    checkpoint(&trail.db, &trail.secret).await;
    let export = outboxctl_ok(
        &trail.db,
        &["evidence", "export", "--alert", &alert.to_string()],
    )
    .await;
    let bundle: Bundle = serde_json::from_str(&export.stdout).unwrap();
    assert!(bundle.checkpoint.is_some(), "{}", export.stdout);
    check_refuses(
        &check_bundle(
            &trail.db,
            export.stdout.as_bytes(),
            &["--public-key", &trail.public],
            &[],
        )
        .await,
        &format!(
            "records payload fingerprint {}, but the alert's payload is",
            "22".repeat(32)
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_alert_is_named_by_the_checkpoints_that_record_it() {
    let trail = Trail::build().await;
    let alert = trail.replayed;
    trail
        .tamper(&[
            &format!("DELETE FROM alert_events WHERE alert_id = '{alert}'"),
            &format!("DELETE FROM delivery_attempts WHERE alert_id = '{alert}'"),
            &format!("DELETE FROM alert_outcomes WHERE alert_id = '{alert}'"),
            &format!("DELETE FROM outbox WHERE alert_id = '{alert}'"),
            &format!("DELETE FROM alerts WHERE id = '{alert}'"),
        ])
        .await;
    fails_naming(
        &trail.verify(&["--alert", &alert.to_string()]).await,
        &format!("alert {alert}: is not in the database, but checkpoints 1 to 2 record it: it was deleted"),
    );
    // An id no checkpoint records is only unknown.
    let unknown = Uuid::now_v7();
    let run = trail.verify(&["--alert", &unknown.to_string()]).await;
    assert!(!run.ok);
    assert!(
        run.stderr.contains(&format!("no alert {unknown}")),
        "{}",
        run.stderr
    );
    assert!(!run.stdout.contains("mismatch"), "{}", run.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keygen_writes_the_secret_only_where_its_owner_alone_reads_it() {
    use std::os::unix::fs::PermissionsExt;
    let db = TestDb::new().await;
    // Standard output is a pipe here, as with `keygen > file` or `| tee`: refused.
    let piped = outboxctl(&db, &["evidence", "keygen"]).await;
    assert!(!piped.ok);
    assert_eq!(piped.stdout, "", "the secret went to the pipe");
    assert!(piped.stderr.contains("--out FILE"), "{}", piped.stderr);

    let dir = tempfile_dir();
    let file = dir.join("evidence-signing.key");
    let path = file.to_str().unwrap();
    let made = outboxctl_ok(&db, &["evidence", "keygen", "--out", path]).await;
    assert_eq!(made.stdout, "");
    assert!(made.stderr.contains("ed25519-pub:"), "{}", made.stderr);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the key file is {mode:o}");
    let secret = std::fs::read_to_string(&file).unwrap();
    let signer = CheckpointSigner::from_text(&secret).unwrap();
    assert!(made.stderr.contains(signer.key_id()), "{}", made.stderr);
    // Never over an existing file.
    let again = outboxctl(&db, &["evidence", "keygen", "--out", path]).await;
    assert!(!again.ok);
    assert!(
        again.stderr.contains("never overwritten"),
        "{}",
        again.stderr
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), secret);
    // On purpose, to a pipe.
    let sent = outboxctl_ok(&db, &["evidence", "keygen", "--stdout"]).await;
    assert!(sent.stdout.starts_with("ed25519:"), "{}", sent.stdout);
    // The same key as a signed-note verifier key, for the checkpoint log's notes.
    let signer = CheckpointSigner::from_text(sent.stdout.trim()).unwrap();
    assert!(
        sent.stderr.contains(&format!(
            "signed-note verifier key {}:",
            outbox_core::evidence::note::note_verifier_key(&signer.public_key())
        )),
        "{}",
        sent.stderr
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_past_the_size_cap_is_refused_unread() {
    let db = TestDb::new().await;
    let dir = tempfile_dir();
    let file = dir.join("proof.json");
    // Sparse: 64 MiB and one byte, without writing them.
    std::fs::File::create(&file)
        .unwrap()
        .set_len(64 * 1024 * 1024 + 1)
        .unwrap();
    let run = outboxctl(&db, &["evidence", "check", file.to_str().unwrap()]).await;
    check_refuses(&run, "larger than 64 MiB");
    std::fs::remove_dir_all(&dir).unwrap();
}
