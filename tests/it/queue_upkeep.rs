//! Upkeep by dispatchers. The live queue's own vacuum: a dispatcher vacuums `outbox` once
//! its dead tuples pass `--queue-vacuum-after`, whether or not autovacuum would. Read from
//! the server's own statistics (`pg_stat_user_tables`), which count manual vacuums apart
//! from autovacuum's. The subject index's pending list: a dispatcher merges it while
//! approvals fill it. Read from the index itself (`pgstattuple`'s `pgstatginindex`). The
//! attempts' time index: a dispatcher summarizes each page range of `delivery_attempts`
//! once it has filled. Read from the index's range map (`pageinspect`).

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::alerts::approve_many;
use common::destinations::acme_with_ops_at;
use common::procs::*;
use outbox_testkit::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_vacuums_the_queue_once_its_dead_tuples_pass_the_threshold_and_keeps_its_pages(
) {
    let sink = Sink::start(&[]).await;
    let (db, tenant_id) = acme_with_ops_at(&sink, |_| {}).await;
    // Autovacuum must not be what clears them, wherever the server runs it.
    sqlx::query("ALTER TABLE outbox SET (autovacuum_enabled = false)")
        .execute(&db.pool)
        .await
        .unwrap();
    approve_many(&db, tenant_id, "ops", 400).await;

    let _dispatcher = spawn_dispatcher(
        &dispatcher_args(&db, "upkeep", &["--queue-vacuum-after", "300"]),
        None,
    );
    wait_for_db(
        &db,
        "SELECT count(*) FROM alert_states WHERE state = 'accepted'",
        |n| n == 400,
    )
    .await;
    assert_eq!(sink.stats().await["distinct_keys"], 400);

    // 400 deliveries leave 800 dead tuples in `outbox` (each row updated by its claim,
    // then deleted); once the server counts them, the dispatcher vacuums the table.
    wait_for_db(
        &db,
        "SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'outbox'",
        |n| n >= 1,
    )
    .await;
    let (dead, autovacuums): (i64, i64) = sqlx::query_as(
        "SELECT n_dead_tup, autovacuum_count FROM pg_stat_user_tables WHERE relname = 'outbox'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(dead < 300, "{dead} dead tuples left after the vacuum");
    assert_eq!(autovacuums, 0, "the dispatcher's vacuum, not autovacuum's");
    // Every row is gone, so a vacuum that truncates would have given back every page,
    // under the table's ACCESS EXCLUSIVE lock; the dispatcher's keeps them for the next rows.
    let pages: i64 = sqlx::query_scalar(
        "SELECT pg_relation_size('outbox') / current_setting('block_size')::int8",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        pages > 0,
        "the dispatcher's vacuum truncated the queue table"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_merges_the_subject_index_pending_list_and_the_search_still_finds_every_alert()
{
    let sink = Sink::start(&[]).await;
    let (db, tenant_id) = acme_with_ops_at(&sink, |_| {}).await;
    // Autovacuum merges the list too: it must not be what empties it here.
    sqlx::query("ALTER TABLE alerts SET (autovacuum_enabled = false)")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("CREATE EXTENSION pgstattuple")
        .execute(&db.pool)
        .await
        .unwrap();
    let pending = "SELECT pending_tuples FROM pgstatginindex('alerts_subject_trgm_idx')";
    approve_many(&db, tenant_id, "ops", 300).await;
    let before: i64 = sqlx::query_scalar(pending)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    // Each subject (`contract:A-<n>`) has a dozen trigrams, each an entry of the list.
    assert!(
        before >= 300,
        "{before} entries pending after 300 approvals"
    );

    let _dispatcher = spawn_dispatcher(&dispatcher_args(&db, "merge", &[]), None);
    wait_for_db(&db, pending, |n| n == 0).await;
    // Merged into the index, not lost: the search by a part of the subject, which reads
    // the trigram index, finds every alert.
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::query("SET enable_seqscan = off")
        .execute(&mut *conn)
        .await
        .unwrap();
    let found: i64 =
        sqlx::query_scalar("SELECT count(*) FROM alerts WHERE subject LIKE '%ntract:A-%'")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    assert_eq!(found, 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_summarizes_each_filled_range_of_the_attempts_and_leaves_the_last_one_open() {
    let sink = Sink::start(&[]).await;
    let (db, tenant_id) = acme_with_ops_at(&sink, |_| {}).await;
    // A vacuum summarizes ranges too: it must not be what does it here.
    sqlx::query("ALTER TABLE delivery_attempts SET (autovacuum_enabled = false)")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("CREATE EXTENSION pageinspect")
        .execute(&db.pool)
        .await
        .unwrap();
    let _dispatcher = spawn_dispatcher(&dispatcher_args(&db, "summarize", &[]), None);
    approve_many(&db, tenant_id, "ops", 20).await;
    wait_for_db(
        &db,
        "SELECT count(*) FROM alert_states WHERE state = 'accepted'",
        |n| n == 20,
    )
    .await;

    // Two and a half ranges of attempt rows (a range is 128 pages), in time order: the 20
    // real attempts, then copies of them carrying a kilobyte of answer each, so that a
    // few thousand rows fill the pages. A copy says no state (`to_state`), so it settles
    // nothing.
    let pages =
        "SELECT pg_relation_size('delivery_attempts') / current_setting('block_size')::int8";
    let mut copies = 0;
    while wait_for_db(&db, pages, |_| true).await < 2 * 128 + 64 {
        copies += sqlx::query(
            "INSERT INTO delivery_attempts (alert_id, attempt, kind, worker, fencing_token, \
                 started_at, finished_at, idempotency_key, payload_sha256, outcome, \
                 http_status, response_excerpt) \
             SELECT d.alert_id, d.attempt + n, d.kind, d.worker, d.fencing_token, \
                    d.started_at, clock_timestamp(), d.idempotency_key, d.payload_sha256, \
                    d.outcome, d.http_status, \
                    (SELECT string_agg(md5(d.alert_id::text || n || k), '') \
                     FROM generate_series(1, 31) k) \
             FROM delivery_attempts d CROSS JOIN generate_series(1000, 1049) n \
             WHERE d.to_state IS NOT NULL",
        )
        .execute(&db.pool)
        .await
        .unwrap()
        .rows_affected();
    }
    let filled = attempt_pages(&db).await / 128;
    assert!(filled >= 2);

    // The range map has one entry per range: a summary's address, or (0,0) for a range
    // not summarized. The dispatcher summarizes the filled ranges...
    let summarized = "SELECT count(*) FROM brin_revmap_data(get_raw_page('delivery_attempts_finished_brin', 1)) \
                      WHERE pages <> '(0,0)'::tid";
    let done = wait_for_db(&db, summarized, |n| n >= filled).await;
    // ...and not the last one, still filling: every insert into a summarized range would
    // write to the index until it fills.
    assert_eq!(done, filled, "summarized ranges of {filled} filled ones");
    // Nothing but the last range is left for a vacuum to summarize.
    let left: i32 =
        sqlx::query_scalar("SELECT brin_summarize_new_values('delivery_attempts_finished_brin')")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(left, 1);

    // The summaries find the rows: the last minute's attempts through the index alone.
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::query("SET enable_seqscan = off")
        .execute(&mut *conn)
        .await
        .unwrap();
    let recent: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM delivery_attempts WHERE finished_at > now() - interval '1 minute'",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!(recent, 20 + copies as i64);
}

/// The pages of `delivery_attempts`, as the server counts them.
async fn attempt_pages(db: &TestDb) -> i64 {
    sqlx::query_scalar(
        "SELECT pg_relation_size('delivery_attempts') / current_setting('block_size')::int8",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn the_vacuum_threshold_must_be_a_positive_number_or_off() {
    let db = TestDb::new().await;
    for bad in ["0", "1.5", "lots"] {
        let args = dispatcher_args(&db, "bad", &["--queue-vacuum-after", bad]);
        let output = outbox_testkit::process::Run::new(env!("CARGO_BIN_EXE_dispatcher"))
            .args(&args)
            .output()
            .await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success(),
            "--queue-vacuum-after {bad} was taken"
        );
        assert!(
            stderr.contains("--queue-vacuum-after")
                && stderr.contains("neither a positive number of dead tuples nor `off`"),
            "{bad}: {stderr}"
        );
    }
    let nothing = db.count("delivery_attempts").await;
    assert_eq!(nothing, 0);
}
