//! The monitors against a real database: tiers over simulated days, cycles, time zones,
//! news ingestion and watchlists, the news poller, repeated and concurrent deciders, and
//! bad source files.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::decider::{self, DeciderServe};
use common::destinations::add_destination;
use common::procs::DEADLINE;
use jiff::civil::Date;
use jiff::Timestamp;
use outbox_testkit::TestDb;
use std::sync::{Arc, Mutex};

/// A tenant (in `zone`) with destinations `ops` and `finance`.
async fn tenant(db: &TestDb, name: &str, zone: &str) -> uuid::Uuid {
    let id = outbox_store::tenants::create(&db.pool, name, zone, None)
        .await
        .unwrap();
    for destination in ["ops", "finance"] {
        add_destination(db, id, destination, "http://127.0.0.1:9/hook", |_| {}).await;
    }
    id
}

async fn import(db: &TestDb, tenant: uuid::Uuid, csv: &str) {
    outbox_decider::contracts::import(
        &db.pool,
        tenant,
        csv,
        outbox_decider::contracts::Format::Csv,
    )
    .await
    .unwrap();
}

fn contract(id: &str, renewal: &str, notice: u32) -> String {
    format!("external_id,vendor,amount,currency,renewal_date,notice_days,destinations\n{id},Acme Tools,1200.00,EUR,{renewal},{notice},ops\n")
}

/// Noon UTC, `days` before `date`.
fn noon_before(date: &str, days: i64) -> Timestamp {
    let date: Date = date.parse().unwrap();
    let day = date.checked_sub(jiff::Span::new().days(days)).unwrap();
    day.at(12, 0, 0, 0)
        .to_zoned(jiff::tz::TimeZone::UTC)
        .unwrap()
        .timestamp()
}

async fn run(db: &TestDb, now: Timestamp) -> u64 {
    outbox_decider::run_once(&db.pool, now, None)
        .await
        .unwrap()
        .renewal_alerts
}

async fn occurrences(db: &TestDb) -> Vec<String> {
    sqlx::query_scalar("SELECT occurrence FROM alerts ORDER BY created_at, occurrence")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn daily_runs_from_day_70_to_day_0_alert_on_days_60_30_and_15() {
    let db = TestDb::new().await;
    let t = tenant(&db, "acme", "UTC").await;
    import(&db, t, &contract("C-1", "2027-03-31", 0)).await;
    let mut fired = Vec::new();
    for day in (0..=70).rev() {
        let created = run(&db, noon_before("2027-03-31", day)).await;
        if created > 0 {
            fired.push((day, created));
        }
    }
    assert_eq!(fired, vec![(60, 1), (30, 1), (15, 1)]);
    assert_eq!(
        occurrences(&db).await,
        ["2027-03-31/60d", "2027-03-31/30d", "2027-03-31/15d"]
    );
    // And every alert has its outbox row.
    assert_eq!(db.count("outbox").await, 3);
}

/// A monitor's run is one trace: every alert it approves keeps that trace (and names it in
/// its first evidence line), and the next run's alerts are in another.
#[tokio::test]
async fn each_monitor_run_is_a_trace_its_alerts_keep() {
    let db = TestDb::new().await;
    let t = tenant(&db, "acme", "UTC").await;
    let mut csv =
        String::from("external_id,vendor,amount,currency,renewal_date,notice_days,destinations\n");
    for n in 0..3 {
        csv.push_str(&format!(
            "C-{n},Vendor {n},100.00,EUR,2027-03-31,0,ops;finance\n"
        ));
    }
    import(&db, t, &csv).await;
    assert_eq!(run(&db, noon_before("2027-03-31", 60)).await, 6);
    assert_eq!(run(&db, noon_before("2027-03-31", 30)).await, 6);
    let traces: Vec<(String, i64)> = sqlx::query_as(
        "SELECT substr(traceparent, 4, 32), count(*) FROM alerts \
         GROUP BY 1 ORDER BY min(created_at)",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(traces.len(), 2, "{traces:?}");
    assert!(
        traces.iter().all(|(trace, n)| trace.len() == 32 && *n == 6),
        "{traces:?}"
    );
    let lines: Vec<String> =
        sqlx::query_scalar("SELECT e.line FROM alert_events e JOIN alerts a ON a.id = e.alert_id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert!(
        lines.iter().all(|line| traces
            .iter()
            .any(|(trace, _)| line.ends_with(&format!("; trace {trace}")))),
        "{lines:?}"
    );
}

#[tokio::test]
async fn a_contract_imported_ten_days_before_gets_one_15_day_alert() {
    let db = TestDb::new().await;
    let t = tenant(&db, "acme", "UTC").await;
    import(&db, t, &contract("C-1", "2027-03-31", 0)).await;
    for day in (0..=10).rev() {
        run(&db, noon_before("2027-03-31", day)).await;
    }
    assert_eq!(occurrences(&db).await, ["2027-03-31/15d"]);
    let payload: serde_json::Value = sqlx::query_scalar("SELECT payload::jsonb FROM alerts")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(payload["days_remaining"], 10);
    assert_eq!(payload["tier"], 15);
    assert_eq!(payload["amount"], serde_json::json!(1200.00));
    assert_eq!(payload["vendor"], "Acme Tools");
}

#[tokio::test]
async fn a_decider_down_from_day_31_to_14_sends_the_15_day_alert_only() {
    let db = TestDb::new().await;
    let t = tenant(&db, "acme", "UTC").await;
    import(&db, t, &contract("C-1", "2027-03-31", 0)).await;
    for day in (31..=70).rev().chain((0..=14).rev()) {
        run(&db, noon_before("2027-03-31", day)).await;
    }
    assert_eq!(occurrences(&db).await, ["2027-03-31/60d", "2027-03-31/15d"]);
}

#[tokio::test]
async fn nothing_after_the_date_and_notice_moves_the_tiers() {
    let db = TestDb::new().await;
    let t = tenant(&db, "acme", "UTC").await;
    import(&db, t, &contract("PAST", "2027-03-31", 0)).await;
    assert_eq!(run(&db, noon_before("2027-03-31", -1)).await, 0);
    // With 30 days' notice the action date is 1 March: tiers count back from it.
    import(&db, t, &contract("NOTICE", "2027-03-31", 30)).await;
    assert_eq!(run(&db, noon_before("2027-03-01", 61)).await, 0);
    assert_eq!(run(&db, noon_before("2027-03-01", 60)).await, 1);
    assert_eq!(occurrences(&db).await, ["2027-03-31/60d"]);
    let action: String = sqlx::query_scalar("SELECT payload::jsonb->>'action_date' FROM alerts")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(action, "2027-03-01");
}

#[tokio::test]
async fn next_years_renewal_and_a_changed_date_are_new_cycles() {
    let db = TestDb::new().await;
    let t = tenant(&db, "acme", "UTC").await;
    import(&db, t, &contract("C-1", "2027-03-31", 0)).await;
    assert_eq!(run(&db, noon_before("2027-03-31", 30)).await, 1);
    // The contract renews: next year's date is a new cycle, not blocked by this year's.
    import(&db, t, &contract("C-1", "2028-03-31", 0)).await;
    assert_eq!(run(&db, noon_before("2028-03-31", 30)).await, 1);
    // The date changes: a new cycle too.
    import(&db, t, &contract("C-1", "2028-04-30", 0)).await;
    assert_eq!(run(&db, noon_before("2028-04-30", 30)).await, 1);
    assert_eq!(
        occurrences(&db).await,
        ["2027-03-31/30d", "2028-03-31/30d", "2028-04-30/30d"]
    );
    assert_eq!(db.count("contracts").await, 1, "re-import updates in place");
}

#[tokio::test]
async fn days_are_counted_in_each_tenants_time_zone() {
    let db = TestDb::new().await;
    let auckland = tenant(&db, "kiwi", "Pacific/Auckland").await;
    let los_angeles = tenant(&db, "bear", "America/Los_Angeles").await;
    for t in [auckland, los_angeles] {
        import(&db, t, &contract("C-1", "2027-02-01", 0)).await;
    }
    // At 12:00 UTC on 1 January it is already 2 January in Auckland (30 days to go),
    // still 1 January in Los Angeles (31 days to go).
    let instant: Timestamp = "2027-01-01T12:00:00Z".parse().unwrap();
    assert_eq!(run(&db, instant).await, 2);
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT t.name, a.occurrence, (a.payload::jsonb->>'days_remaining')::int8 \
         FROM alerts a JOIN tenants t ON t.id = a.tenant_id ORDER BY t.name",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![
            ("bear".into(), "2027-02-01/60d".into(), 31),
            ("kiwi".into(), "2027-02-01/30d".into(), 30),
        ]
    );
}

#[tokio::test]
async fn a_dst_change_does_not_shift_a_tier_by_a_day() {
    let db = TestDb::new().await;
    let t = tenant(&db, "berlin", "Europe/Berlin").await;
    // 30 days before 30 November is 31 October, the day summer time ends.
    import(&db, t, &contract("C-1", "2027-11-30", 0)).await;
    let late_on_30_october: Timestamp = "2027-10-30T21:30:00Z".parse().unwrap(); // 23:30 CEST
    let early_on_31_october: Timestamp = "2027-10-30T22:30:00Z".parse().unwrap(); // 00:30 CEST
    assert_eq!(run(&db, late_on_30_october).await, 1, "the 60-day alert");
    assert_eq!(
        run(&db, early_on_31_october).await,
        1,
        "the 30-day alert, on 31 October"
    );
    let last: i64 = sqlx::query_scalar(
        "SELECT (payload::jsonb->>'days_remaining')::int8 FROM alerts WHERE occurrence = '2027-11-30/30d'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(last, 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_firing_fifty_times_and_four_deciders_at_once_make_one_alert_per_identity() {
    let db = TestDb::new().await;
    let t = tenant(&db, "acme", "UTC").await;
    let mut csv =
        String::from("external_id,vendor,amount,currency,renewal_date,notice_days,destinations\n");
    for n in 0..40 {
        csv.push_str(&format!(
            "C-{n},Vendor {n},100.00,EUR,2027-03-31,0,ops;finance\n"
        ));
    }
    import(&db, t, &csv).await;
    let now = noon_before("2027-03-31", 20).to_string();

    // Four deciders at once, each firing several times.
    let mut children = Vec::new();
    for _ in 0..4 {
        let run = decider::run_once(&db.url).args(["--now", &now]);
        children.push(tokio::spawn(run.output()));
    }
    for child in children {
        assert!(child.await.unwrap().status.success());
    }
    // Then cron fires again and again on the same day.
    for _ in 0..50 {
        outbox_decider::run_once(&db.pool, now.parse().unwrap(), None)
            .await
            .unwrap();
    }
    assert_eq!(
        db.count("alerts").await,
        80,
        "40 contracts x 2 destinations, tier 30"
    );
    assert_eq!(db.count("outbox").await, 80);
    let most: i64 = sqlx::query_scalar(
        "SELECT max(n) FROM (SELECT count(*) AS n FROM alerts \
         GROUP BY tenant_id, subject, occurrence, destination_id) x",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(most, 1);
}

/// A run of thousands of alerts is approved in transactions of at most 500, two in flight,
/// while two other deciders approve the same run: every due alert is created once with
/// its outbox row, nobody deadlocks, and at a destination that orders per key each
/// contract's lane takes its alerts in run order (the 30-day alert waits behind the
/// 60-day one), whichever transaction carried them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_thousands_creates_each_alert_once_and_keeps_each_lane_in_order() {
    const CONTRACTS: usize = 1_300;
    let db = TestDb::new().await;
    let t = tenant(&db, "acme", "UTC").await;
    crate::lanes::order_per_key(&db, t, "ops", outbox_core::OnHeadFailed::Block).await;
    let ops = outbox_store::destinations::id_by_name(&db.pool, t, "ops")
        .await
        .unwrap();
    let mut csv =
        String::from("external_id,vendor,amount,currency,renewal_date,notice_days,destinations\n");
    for n in 0..CONTRACTS {
        csv.push_str(&format!(
            "C-{n:04},Vendor {n},100.00,EUR,2027-03-31,0,ops;finance\n"
        ));
    }
    import(&db, t, &csv).await;
    assert_eq!(
        run(&db, noon_before("2027-03-31", 60)).await,
        2 * CONTRACTS as u64
    );

    // The 30-day run, three times at once: two decider processes and this one.
    let now = noon_before("2027-03-31", 30).to_string();
    let others: Vec<_> = (0..2)
        .map(|_| tokio::spawn(decider::run_once(&db.url).args(["--now", &now]).output()))
        .collect();
    outbox_decider::run_once(&db.pool, now.parse().unwrap(), None)
        .await
        .unwrap();
    for other in others {
        let output = other.await.unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    assert_eq!(db.count("alerts").await, 4 * CONTRACTS as i64);
    assert_eq!(db.count("outbox").await, 4 * CONTRACTS as i64);
    // Per contract at `ops`: the 60-day alert heads the lane (position 1, behind nobody),
    // the 30-day one is position 2 behind it.
    let lanes_in_order: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM alerts first JOIN outbox fo ON fo.alert_id = first.id \
         JOIN alerts second ON second.subject = first.subject \
              AND second.destination_id = first.destination_id \
              AND second.occurrence = '2027-03-31/30d' \
         JOIN outbox so ON so.alert_id = second.id \
         WHERE first.destination_id = $1 AND first.occurrence = '2027-03-31/60d' \
           AND first.lane_seq = 1 AND fo.lane_after IS NULL \
           AND second.lane_seq = 2 AND so.lane_after = first.id",
    )
    .bind(ops)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(lanes_in_order, CONTRACTS as i64);
    let lanes: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT last_seq, count(*) FROM alert_lanes WHERE destination_id = $1 GROUP BY 1",
    )
    .bind(ops)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        lanes,
        [(2, CONTRACTS as i64)],
        "one lane per contract, two alerts each"
    );
}

const ARTICLES: &str = include_str!("../fixtures/articles.json");

async fn watchlist(db: &TestDb, t: uuid::Uuid, name: &str, query: &str, group: bool) {
    outbox_store::sources::add_watchlist_entry(
        &db.pool,
        &outbox_store::sources::NewWatchlistEntry {
            tenant_id: t,
            name: name.to_owned(),
            query: query.to_owned(),
            destinations: vec!["ops".to_owned()],
            group_events: group,
            group_window_secs: 48 * 3600,
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn news_ingested_twice_and_two_deciders_give_one_alert_per_entry_article_and_destination() {
    let db = TestDb::new().await;
    let t = tenant(&db, "acme", "UTC").await;
    watchlist(
        &db,
        t,
        "northwind",
        "\"northwind hosting\" outage -rumour",
        false,
    )
    .await;
    watchlist(
        &db,
        t,
        "northwind-events",
        "\"northwind hosting\" outage -rumour",
        true,
    )
    .await;
    assert_eq!(
        outbox_decider::news::ingest(&db.pool, ARTICLES)
            .await
            .unwrap(),
        (5, 5)
    );
    assert_eq!(
        outbox_decider::news::ingest(&db.pool, ARTICLES)
            .await
            .unwrap(),
        (0, 5)
    );
    assert_eq!(db.count("articles").await, 5);

    let runs: Vec<_> = (0..2)
        .map(|_| {
            let run = decider::run_once(&db.url);
            tokio::spawn(run.output())
        })
        .collect();
    for run in runs {
        assert!(run.await.unwrap().status.success());
    }

    let alerts: Vec<(String, String)> = sqlx::query_as(
        "SELECT w.name, a.occurrence FROM alerts a \
         JOIN watchlist_entries w ON a.subject = 'watchlist:' || w.id \
         ORDER BY w.name, a.occurrence",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        alerts,
        vec![
            // Three articles match; the rumour is excluded; the price story does not match.
            ("northwind".into(), "article:a-001".into()),
            ("northwind".into(), "article:a-002".into()),
            ("northwind".into(), "article:a-003".into()),
            // Grouped: one thread and a same-title repeat are one event, keyed by the first.
            ("northwind-events".into(), "event:a-001".into()),
        ]
    );
    let payload: serde_json::Value =
        sqlx::query_scalar("SELECT payload::jsonb FROM alerts WHERE occurrence = 'article:a-002'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        payload["title"],
        "Outage at Northwind Hosting hits two regions"
    );
    assert_eq!(payload["site"], "wire.example");
    assert_eq!(
        payload["matched_terms"],
        serde_json::json!(["northwind hosting", "outage"])
    );
    assert!(payload["snippet"]
        .as_str()
        .unwrap()
        .contains("Northwind Hosting"));
}

/// A Webz.io-compatible endpoint serving three pages, recording what it was asked.
async fn fake_webz() -> (String, Arc<Mutex<Vec<String>>>) {
    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = asked.clone();
    let app = axum::Router::new().route(
        "/newsApiLite",
        axum::routing::get(move |uri: axum::http::Uri| {
            let seen = seen.clone();
            async move {
                let query = uri.query().unwrap_or("").to_owned();
                seen.lock().unwrap().push(query.clone());
                assert!(
                    query.contains("token=secret-token"),
                    "the token is sent: {query}"
                );
                let ts = query
                    .split('&')
                    .find_map(|p| p.strip_prefix("ts="))
                    .unwrap_or("0")
                    .parse::<u32>()
                    .unwrap();
                let posts: Vec<serde_json::Value> = if ts < 3 {
                    (0..2)
                        .map(|i| {
                            serde_json::json!({
                                "uuid": format!("p{ts}-{i}"),
                                "url": format!("https://news.example/{ts}/{i}"),
                                "title": format!("Acme update {ts}.{i}"),
                                "text": "Acme Tools said things.",
                                "published": "2027-02-01T10:00:00Z",
                                "thread": {"uuid": format!("t{ts}{i}"), "site": "news.example"}
                            })
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                let more = if ts < 2 { 4 - 2 * ts } else { 0 };
                axum::Json(serde_json::json!({
                    "posts": posts,
                    "moreResultsAvailable": more,
                    "next": format!("/newsApiLite?token=secret-token&q=acme&ts={}", ts + 1),
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/newsApiLite"), asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_poller_follows_next_and_resumes_from_its_cursor() {
    let db = TestDb::new().await;
    let t = tenant(&db, "acme", "UTC").await;
    watchlist(&db, t, "acme", "acme", false).await;
    let (url, asked) = fake_webz().await;

    let poll = || async {
        let status = decider::poll_news_once(&db.url, &url)
            .env("WEBZ_TOKEN", "secret-token")
            .output()
            .await
            .status;
        assert!(status.success());
    };
    poll().await;
    assert_eq!(db.count("articles").await, 6, "three pages of two");
    assert_eq!(db.count("alerts").await, 6);
    let first_run: Vec<String> = asked.lock().unwrap().drain(..).collect();
    assert_eq!(first_run.len(), 3, "{first_run:?}");
    assert!(
        !first_run[0].contains("ts="),
        "starts at the beginning: {first_run:?}"
    );

    // A restart resumes from the cursor, not from the beginning.
    poll().await;
    let second_run: Vec<String> = asked.lock().unwrap().drain(..).collect();
    assert_eq!(second_run.len(), 1, "{second_run:?}");
    assert!(second_run[0].contains("ts=3"), "{second_run:?}");
    let cursor: String = sqlx::query_scalar("SELECT next_url FROM news_cursors")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        !cursor.contains("secret-token"),
        "the token is never stored: {cursor}"
    );
    assert_eq!(db.count("alerts").await, 6);
}

async fn outboxctl(db: &TestDb, args: &[&str]) -> (bool, String) {
    let run = common::outboxctl(db, args).await;
    (run.ok, run.stderr)
}

#[tokio::test]
async fn bad_contract_rows_and_malformed_articles_are_named_and_write_nothing() {
    let db = TestDb::new().await;
    tenant(&db, "acme", "UTC").await;
    let (ok, stderr) = outboxctl(
        &db,
        &[
            "contract",
            "import",
            "tests/fixtures/contracts_bad.csv",
            "--tenant",
            "acme",
        ],
    )
    .await;
    assert!(!ok);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("3 bad row(s), nothing imported"),
        "{stderr}"
    );
    assert!(
        stderr.contains("line 3: amount `12,5` is not a decimal number"),
        "{stderr}"
    );
    assert!(
        stderr.contains("line 4: renewal_date `2027-02-30`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("line 5: destination `nowhere` does not exist"),
        "{stderr}"
    );
    assert_eq!(db.count("contracts").await, 0);

    let (ok, stderr) = outboxctl(
        &db,
        &["article", "ingest", "tests/fixtures/articles_bad.json"],
    )
    .await;
    assert!(!ok);
    assert!(
        stderr.contains("post 2: field `published` is missing"),
        "{stderr}"
    );
    assert_eq!(db.count("articles").await, 0);

    let (ok, stderr) = outboxctl(&db, &["article", "ingest", "tests/fixtures/contracts.csv"]).await;
    assert!(!ok);
    assert!(stderr.contains("not a Webz.io page"), "{stderr}");

    // The good files import whole.
    let (ok, stderr) = outboxctl(
        &db,
        &[
            "contract",
            "import",
            "tests/fixtures/contracts.csv",
            "--tenant",
            "acme",
        ],
    )
    .await;
    assert!(ok, "{stderr}");
    let (ok, stderr) = outboxctl(
        &db,
        &[
            "contract",
            "import",
            "tests/fixtures/contracts.json",
            "--tenant",
            "acme",
        ],
    )
    .await;
    assert!(ok, "{stderr}");
    assert_eq!(db.count("contracts").await, 5);
    let stored: (String, String, Option<Vec<i32>>) = sqlx::query_as(
        "SELECT amount::text, currency, tiers FROM contracts WHERE external_id = 'J-2'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(stored, ("150".into(), "EUR".into(), Some(vec![90, 30, 7])));
    let (ok, _) = outboxctl(&db, &["article", "ingest", "tests/fixtures/articles.json"]).await;
    assert!(ok);
    assert_eq!(db.count("articles").await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decider_serve_runs_the_monitors_beside_the_api() {
    let db = TestDb::new().await;
    let t = tenant(&db, "acme", "UTC").await;
    // Renewal in ten days from now: the 15-day alert is due at once.
    let soon = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date()
        .checked_add(jiff::Span::new().days(10))
        .unwrap()
        .to_string();
    import(&db, t, &contract("C-1", &soon, 0)).await;
    let decider = DeciderServe::on(&db.url).start().await;
    let started = std::time::Instant::now();
    while db.count("alerts").await == 0 {
        assert!(started.elapsed() < DEADLINE, "the monitors never ran");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(occurrences(&db).await, [format!("{soon}/15d")]);
    let health = reqwest::get(format!("{}/healthz", decider.api))
        .await
        .unwrap();
    assert_eq!(health.status(), reqwest::StatusCode::OK);
}

#[tokio::test]
async fn a_chain_of_related_articles_stays_one_event() {
    let db = TestDb::new().await;
    let t = tenant(&db, "acme", "UTC").await;
    watchlist(&db, t, "acme", "acme", true).await;
    // A and B share a title; B and C share a thread: all one event, keyed by A.
    let page = serde_json::json!({"posts": [
        {"uuid": "A", "url": "https://x/a", "title": "Acme recalls widgets", "text": "Acme.",
         "published": "2027-02-01T08:00:00Z", "thread": {"uuid": "T1"}},
        {"uuid": "B", "url": "https://x/b", "title": "Acme recalls widgets", "text": "Acme.",
         "published": "2027-02-01T09:00:00Z", "thread": {"uuid": "T2"}},
        {"uuid": "C", "url": "https://x/c", "title": "Widget recall widens", "text": "Acme again.",
         "published": "2027-02-01T10:00:00Z", "thread": {"uuid": "T2"}}
    ]});
    outbox_decider::news::ingest(&db.pool, &page.to_string())
        .await
        .unwrap();
    outbox_decider::run_once(&db.pool, Timestamp::now(), None)
        .await
        .unwrap();
    assert_eq!(occurrences(&db).await, ["event:A"]);
}

#[tokio::test]
async fn a_news_feed_that_is_down_does_not_stop_renewal_alerts() {
    let db = TestDb::new().await;
    let t = tenant(&db, "acme", "UTC").await;
    watchlist(&db, t, "acme", "acme", false).await;
    import(&db, t, &contract("C-1", "2027-03-31", 0)).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = outbox_decider::news::NewsSource {
        url: format!("http://127.0.0.1:{port}/newsApiLite"),
        token: None,
        egress: outbox_egress::Guard::new(
            outbox_egress::AllowList::parse(common::procs::TEST_ALLOW_PRIVATE).unwrap(),
        ),
    };
    let result =
        outbox_decider::run_once(&db.pool, noon_before("2027-03-31", 30), Some(&down)).await;
    assert!(result.is_err(), "the failure is reported");
    assert_eq!(
        occurrences(&db).await,
        ["2027-03-31/30d"],
        "and renewals still ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_found_the_database_unavailable_runs_again_within_seconds() {
    let db = TestDb::new().await;
    let t = tenant(&db, "acme", "UTC").await;
    // Due at the 30-day tier today, wherever today is.
    let renewal = jiff::Zoned::now()
        .date()
        .checked_add(jiff::Span::new().days(20))
        .unwrap();
    import(&db, t, &contract("C-1", &renewal.to_string(), 0)).await;

    // The database takes no writes, as a standby or a primary being demoted: every new
    // session is read-only.
    let set_read_only = |on: bool| {
        format!(
            "ALTER DATABASE {} SET default_transaction_read_only = {}",
            db.name,
            if on { "on" } else { "off" }
        )
    };
    // The switch is made on a session opened before the database turns read-only, which
    // keeps its own read-write default: a session opened afterwards could not switch back.
    let mut admin = db.pool.acquire().await.unwrap();
    sqlx::query(&set_read_only(true))
        .execute(&mut *admin)
        .await
        .unwrap();
    let rollbacks = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    let before = rollbacks().await;
    let pool = outbox_store::connect(&db.url, "monitors-under-test", 2)
        .await
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let monitors = tokio::spawn(outbox_decider::run_every(
        pool,
        std::time::Duration::from_secs(3600),
        None,
        async {
            let _ = stopped.await;
        },
    ));

    // The first run (at once) fails: its transaction is rolled back.
    let started = std::time::Instant::now();
    while rollbacks().await == before {
        assert!(started.elapsed() < DEADLINE, "the first run never failed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(db.count("alerts").await, 0);

    // The database takes writes again; the monitors' sessions are cut, as a failover cuts
    // them. The next run comes within seconds, not at the next hourly tick.
    sqlx::query(&set_read_only(false))
        .execute(&mut *admin)
        .await
        .unwrap();
    drop(admin);
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name = 'monitors-under-test'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let started = std::time::Instant::now();
    while db.count("alerts").await == 0 {
        assert!(
            started.elapsed() < DEADLINE,
            "the monitors did not run again after the database came back"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(db.count("alerts").await, 1, "one alert: C-1's 30-day tier");
    let _ = stop.send(());
    monitors.await.unwrap();
}
