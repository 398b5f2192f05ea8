//! Destination health: a destination whose every send fails for its window is disabled
//! automatically (reason, audit line, metric), one that recovers within it is not, and
//! the merge of many dispatchers' reports is right whatever order they arrive in. Store
//! level for the merge; real dispatchers and sinks for the rest.

use crate::common::alerts::{self, approve_many, state_of};
use crate::common::assert_contains;
use crate::common::destinations::{acme_with_ops_at, add_destination, DestinationAdd};
use crate::common::procs::*;
use crate::common::{add_tenant, outboxctl, outboxctl_ok};
use chrono::{DateTime, Duration as Span, Utc};
use outbox_store::health::{self, SendTally};
use outbox_testkit::TestDb;
use serde_json::json;
use uuid::Uuid;

/// A destination `name` of tenant `acme` (created if need be), with its id.
async fn destination(db: &TestDb, name: &str) -> Uuid {
    let tenant = match outbox_store::tenants::find(&db.pool, "acme").await {
        Ok(tenant) => tenant.id,
        Err(_) => add_tenant(db, "acme", &[]).await.id,
    };
    add_destination(db, tenant, name, "http://127.0.0.1:9/hook", |_| {}).await;
    outbox_store::destinations::id_by_name(&db.pool, tenant, name)
        .await
        .unwrap()
}

fn tally(
    destination_id: Uuid,
    first_failure: Option<DateTime<Utc>>,
    last_failure: Option<DateTime<Utc>>,
    last_success: Option<DateTime<Utc>>,
) -> SendTally {
    SendTally {
        destination_id,
        first_failure,
        last_failure,
        last_success,
    }
}

/// Two dispatchers' reports, merged in one order and then (on another destination) in
/// the other: the health rows must come out the same.
async fn both_orders(db: &TestDb, a: SendTally, b: SendTally) -> [health::Health; 2] {
    let mut merged = Vec::new();
    for (n, (first, second)) in [(a, b), (b, a)].into_iter().enumerate() {
        let id = destination(db, &format!("d-{}-{n}", Uuid::new_v4())).await;
        let first = SendTally {
            destination_id: id,
            ..first
        };
        let second = SendTally {
            destination_id: id,
            ..second
        };
        assert!(health::report(&db.pool, "one", &[first])
            .await
            .unwrap()
            .is_empty());
        assert!(health::report(&db.pool, "two", &[second])
            .await
            .unwrap()
            .is_empty());
        merged.push(health::health(&db.pool, id).await.unwrap().unwrap());
    }
    [merged[0].clone(), merged[1].clone()]
}

/// Database-rounded (microseconds) times, some minutes ago.
fn minutes_ago(minutes: i64) -> DateTime<Utc> {
    let at = Utc::now() - Span::minutes(minutes);
    DateTime::from_timestamp_micros(at.timestamp_micros()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_merge_the_same_in_either_order() {
    let db = TestDb::new().await;
    let nil = Uuid::nil();
    let (t0, t1, t2, t3) = (
        minutes_ago(40),
        minutes_ago(30),
        minutes_ago(20),
        minutes_ago(10),
    );

    // One dispatcher saw failures, another an acceptance after them: not failing.
    let [x, y] = both_orders(
        &db,
        tally(nil, Some(t1), Some(t1), None),
        tally(nil, None, None, Some(t2)),
    )
    .await;
    assert_eq!(x, y);
    assert_eq!(
        x.failing_since, None,
        "an acceptance newer than the failure clears it"
    );
    assert_eq!(x.last_success_at, Some(t2));
    assert_eq!(x.last_failure_at, Some(t1));

    // A failure after the other's acceptance: failing since that failure.
    let [x, y] = both_orders(
        &db,
        tally(nil, Some(t3), Some(t3), None),
        tally(nil, None, None, Some(t2)),
    )
    .await;
    assert_eq!(x, y);
    assert_eq!(x.failing_since, Some(t3));

    // Both failing, neither accepted: failing since the earliest failure.
    let [x, y] = both_orders(
        &db,
        tally(nil, Some(t1), Some(t3), None),
        tally(nil, Some(t0), Some(t2), None),
    )
    .await;
    assert_eq!(x, y);
    assert_eq!(x.failing_since, Some(t0));
    assert_eq!(x.last_failure_at, Some(t3));

    // One failed, then accepted, then failed again; the other failed before that
    // acceptance: failing since the failure after the acceptance.
    let [x, y] = both_orders(
        &db,
        tally(nil, Some(t3), Some(t3), Some(t2)),
        tally(nil, Some(t0), Some(t1), None),
    )
    .await;
    assert_eq!(x, y);
    assert_eq!(x.failing_since, Some(t3));
    assert_eq!(x.auto_disabled_at, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_past_the_window_disables_once_and_an_operator_gets_a_fresh_window() {
    let db = TestDb::new().await;
    let id = destination(&db, "ops").await;
    let tenant = outbox_store::tenants::find(&db.pool, "acme").await.unwrap();
    let never = destination(&db, "patient").await;
    disable_ops_after_failing_for(&db, tenant.id, 60).await;
    health::set_disable_after_failing(&db.pool, tenant.id, "patient", None)
        .await
        .unwrap();
    let (t0, t1) = (minutes_ago(5), minutes_ago(0));

    let disabled = health::report(
        &db.pool,
        "w1",
        &[
            tally(id, Some(t0), Some(t1), None),
            tally(never, Some(t0), Some(t1), None),
        ],
    )
    .await
    .unwrap();
    assert_eq!(disabled.len(), 1, "{disabled:?}");
    assert_eq!(disabled[0].id, id, "a destination set to `never` stays on");
    assert_eq!(disabled[0].failing_since, t0);
    let (enabled, reason): (bool, String) =
        sqlx::query_as("SELECT enabled, disabled_reason FROM destinations WHERE id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(!enabled);
    assert!(
        reason.starts_with("disabled automatically: every send has failed since ")
            && reason.ends_with("longer than its 1m window"),
        "{reason}"
    );
    assert!(health::health(&db.pool, id)
        .await
        .unwrap()
        .unwrap()
        .auto_disabled_at
        .is_some());

    // Another dispatcher's report finds it disabled already: no second disable.
    let again = health::report(&db.pool, "w2", &[tally(id, Some(t0), Some(t1), None)])
        .await
        .unwrap();
    assert!(again.is_empty());
    let audit: Vec<(String, String, String, String)> =
        sqlx::query_as("SELECT operator, action, target, note FROM console_audit ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        audit,
        vec![(
            "dispatcher:w1".to_owned(),
            "destination disabled".to_owned(),
            "ops".to_owned(),
            reason
        )]
    );

    // An operator enables it: failures from before that no longer count.
    assert!(outbox_store::destination_switch::set_destination_enabled(
        &db.pool, tenant.id, "ops", true, "alice"
    )
    .await
    .unwrap());
    let after = health::report(&db.pool, "w1", &[tally(id, Some(t0), Some(t1), None)])
        .await
        .unwrap();
    assert!(after.is_empty(), "{after:?}");
    let row = health::health(&db.pool, id).await.unwrap().unwrap();
    assert_eq!(row.failing_since, None);
    assert_eq!(row.auto_disabled_at, None);
    let enabled: bool = sqlx::query_scalar("SELECT enabled FROM destinations WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(enabled);
}

/// Every send to a destination answered 503 for longer than its 2 s window: the
/// dispatcher disables it (reason, audit line, metric), and claims none of its rows
/// after that, while another destination's alerts still go out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_failing_for_its_window_is_disabled_and_claims_stop() {
    let failing = Sink::start(&[]).await;
    let healthy = Sink::start(&[]).await;
    failing
        .faults(json!({"fail_rate": 1.0, "fail_status": 503}))
        .await;
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &[]).await;
    add_destination(&db, tenant.id, "ops", &failing.hook_url(), |_| {}).await;
    add_destination(&db, tenant.id, "fine", &healthy.hook_url(), |_| {}).await;
    outboxctl_ok(
        &db,
        &[
            "destination",
            "update",
            "ops",
            "--tenant",
            "acme",
            "--disable-after-failing",
            "2s",
        ],
    )
    .await;
    // Retries never run out during the test.
    sqlx::query("UPDATE destinations SET max_attempts = 1000")
        .execute(&db.pool)
        .await
        .unwrap();
    approve_many(&db, tenant.id, "ops", 3).await;

    let args = dispatcher_args(&db, "w", &["--health-report-interval", "200ms"]);
    let (_dispatcher, metrics) = spawn_dispatcher_with_metrics(&args, &[]).await;

    wait_for_db(
        &db,
        "SELECT count(*) FROM destinations WHERE name = 'ops' AND NOT enabled",
        |n| n == 1,
    )
    .await;
    let (reason, failing_since, auto_disabled_at): (String, DateTime<Utc>, DateTime<Utc>) =
        sqlx::query_as(
            "SELECT d.disabled_reason, h.failing_since, h.auto_disabled_at \
             FROM destinations d JOIN destination_health h ON h.destination_id = d.id \
             WHERE d.name = 'ops'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        reason.contains("every send has failed since") && reason.contains("2s window"),
        "{reason}"
    );
    assert!(auto_disabled_at - failing_since >= Span::seconds(2));
    let audit: Vec<(String, String)> =
        sqlx::query_as("SELECT operator, note FROM console_audit WHERE target = 'ops'")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(audit, vec![("dispatcher:w".to_owned(), reason.clone())]);
    let text = metrics_text(&reqwest::Client::new(), &metrics).await;
    assert!(
        text.contains(
            "outbox_destinations_disabled_total{destination=\"ops\",reason=\"failing\"} 1"
        ),
        "{text}"
    );

    // Once nothing of `ops` is in flight and all of it is due again, an alert to another
    // destination goes out: the claim that took it would have taken `ops`'s rows too.
    wait_for_db(
        &db,
        "SELECT count(*) FROM outbox o JOIN destinations d ON d.id = o.destination_id \
         WHERE d.name = 'ops' AND o.status <> 'sending' AND o.next_attempt_at <= now()",
        |n| n == 3,
    )
    .await;
    let sent_before = failing.stats().await["requests"].as_i64().unwrap();
    let other = approve_many(&db, tenant.id, "fine", 1).await[0];
    healthy
        .wait_for("the other alert", |s| s["applied"] == 1)
        .await;
    wait_for_db(
        &db,
        &format!(
            "SELECT count(*) FROM alert_states WHERE alert_id = '{other}' AND state = 'accepted'"
        ),
        |n| n == 1,
    )
    .await;
    assert_eq!(
        failing.stats().await["requests"].as_i64().unwrap(),
        sent_before,
        "nothing more went to the disabled destination"
    );
    let states: Vec<String> = sqlx::query_scalar(
        "SELECT s.state FROM alert_states s JOIN alerts a ON a.id = s.alert_id \
         JOIN destinations d ON d.id = a.destination_id WHERE d.name = 'ops'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(states, vec!["pending"; 3], "its alerts wait, pending");
}

/// Failures, then an acceptance: the failures no longer count. A later failure starts
/// the window again, even once the first failure is older than the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_that_recovers_within_its_window_stays_enabled() {
    let sink = Sink::start(&[]).await;
    let (db, tenant_id) = acme_with_ops_at(&sink, |_| {}).await;
    let id = outbox_store::destinations::id_by_name(&db.pool, tenant_id, "ops")
        .await
        .unwrap();
    disable_ops_after_failing_for(&db, tenant_id, 2).await;
    sink.faults(json!({"script": [{"status": 503}, {"status": 503}]}))
        .await;
    let first = approve_many(&db, tenant_id, "ops", 1).await[0];
    drain(
        &db,
        "w",
        &["--health-report-interval", "100ms", "--drain-horizon", "5s"],
    )
    .await;
    assert_eq!(state_of(&db, first).await, "accepted");
    let after_recovery = health::health(&db.pool, id).await.unwrap().unwrap();
    assert_eq!(after_recovery.failing_since, None);
    let first_failure = after_recovery.last_failure_at.unwrap();
    assert!(after_recovery.last_success_at.unwrap() > first_failure);

    // Once the first failures are older than the window, one more failure: the window
    // starts at it, not at the failures the acceptance cleared.
    wait_for_db(
        &db,
        &format!(
            "SELECT count(*) FROM (SELECT 1 WHERE now() > '{}'::timestamptz + interval '2 s') x",
            first_failure.to_rfc3339()
        ),
        |n| n == 1,
    )
    .await;
    sink.faults(json!({"fail_rate": 1.0, "fail_status": 503}))
        .await;
    sqlx::query("UPDATE destinations SET max_attempts = 1")
        .execute(&db.pool)
        .await
        .unwrap();
    let second = approve_one(&db, tenant_id, "contract:B-1").await;
    drain(&db, "w", &["--health-report-interval", "100ms"]).await;
    assert_eq!(state_of(&db, second).await, "failed");
    let row = health::health(&db.pool, id).await.unwrap().unwrap();
    assert!(row.failing_since.unwrap() > row.last_success_at.unwrap());
    let enabled: bool = sqlx::query_scalar("SELECT enabled FROM destinations WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(enabled, "recovered within the window: still enabled");
    assert_eq!(db.count("console_audit").await, 0);
}

/// Sets `ops` to be disabled once it has failed for `seconds`.
async fn disable_ops_after_failing_for(db: &TestDb, tenant_id: Uuid, seconds: u64) {
    let window = Some(std::time::Duration::from_secs(seconds));
    health::set_disable_after_failing(&db.pool, tenant_id, "ops", window)
        .await
        .unwrap();
}

/// Approves one alert for `ops` about `subject`.
async fn approve_one(db: &TestDb, tenant_id: Uuid, subject: &str) -> Uuid {
    let payload = json!({"text": "renewal due"}).to_string();
    alerts::approve_one(db, tenant_id, "ops", subject, "2027-01-31/30d", &payload).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outboxctl_sets_and_shows_the_failing_window_and_refuses_nonsense() {
    let db = TestDb::new().await;
    add_tenant(&db, "acme", &[]).await;
    let add = |name: &'static str, window: &'static str| {
        let add = DestinationAdd::webhook(name, "http://127.0.0.1:9/hook")
            .loopback_allowed()
            .args(&["--disable-after-failing", window]);
        let db = &db;
        async move { add.run(db).await }
    };
    let bad = add("bad", "soon").await;
    assert!(!bad.ok);
    assert!(
        bad.stderr.contains("--disable-after-failing") && bad.stderr.contains("`soon`"),
        "{}",
        bad.stderr
    );
    let zero = add("zero", "0s").await;
    assert!(
        !zero.ok && zero.stderr.contains("greater than zero"),
        "{}",
        zero.stderr
    );
    assert_eq!(db.count("destinations").await, 0, "nothing written");

    assert!(add("two-days", "2d").await.ok);
    assert!(add("never", "never").await.ok);
    let windows: Vec<(String, Option<i64>)> = sqlx::query_as(
        "SELECT name, extract(epoch FROM disable_after_failing)::int8 FROM destinations ORDER BY name",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        windows,
        vec![
            ("never".to_owned(), None),
            ("two-days".to_owned(), Some(172_800))
        ]
    );

    let update = outboxctl_ok(
        &db,
        &[
            "destination",
            "update",
            "two-days",
            "--tenant",
            "acme",
            "--disable-after-failing",
            "never",
        ],
    )
    .await;
    assert!(update.stderr.contains("never disabled automatically"));
    let nothing = outboxctl(&db, &["destination", "update", "never", "--tenant", "acme"]).await;
    assert!(
        !nothing.ok && nothing.stderr.contains("nothing to change"),
        "{}",
        nothing.stderr
    );
    let unknown = outboxctl(
        &db,
        &[
            "destination",
            "update",
            "nope",
            "--tenant",
            "acme",
            "--disable-after-failing",
            "1h",
        ],
    )
    .await;
    assert!(
        !unknown.ok && unknown.stderr.contains("no destination named `nope`"),
        "{}",
        unknown.stderr
    );

    let list = outboxctl(&db, &["destination", "list", "--tenant", "acme"]).await;
    assert!(list.ok);
    assert_contains(&list.stdout, "AUTO-DISABLE");
    assert_eq!(list.stdout.matches("never").count(), 3, "{}", list.stdout);
}
