//! The plans of a tenant's listing, as the approval API runs it, on a table large enough
//! (60,000 alerts of one tenant, 20,000 of another) and analysed, that the planner's
//! choices are the ones it makes in production: no filter the API takes reads the table
//! from end to end, and the first page of the common ones reads about a page of alerts.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use super::*;
use outbox_testkit::TestDb;
use serde_json::Value;

/// Alerts of the listed tenant; every hundredth of each kind is held, failed, superseded or
/// still pending, the rest were accepted by a dispatcher's attempt.
const TENANT_ALERTS: i64 = 60_000;
/// Newer alerts of another tenant, all still in the outbox (a backlog).
const OTHER_ALERTS: i64 = 20_000;
const LIMIT: i64 = 51;

async fn destination(db: &TestDb, tenant_id: Uuid, name: &str) -> Uuid {
    crate::destinations::create(
        &db.pool,
        &crate::destinations::NewDestination {
            timeout: Duration::from_secs(1),
            max_in_flight: 16,
            ..crate::destinations::NewDestination::webhook(
                tenant_id,
                name,
                "http://127.0.0.1:9/hook",
            )
        },
    )
    .await
    .unwrap()
}

/// `count` alerts of `tenant` to `destination`, approved from `days_ago` on, one
/// millisecond apart, with time-ordered ids as the product's own, subjects `{prefix}{i}`
/// and payloads of half a kilobyte, as the table's pages hold them in production (the
/// planner weighs a scan of the table by its pages); without any state yet (the caller
/// gives them theirs).
async fn seed(
    db: &TestDb,
    tenant: Uuid,
    destination: Uuid,
    prefix: &str,
    days_ago: i32,
    count: i64,
) {
    sqlx::query(
        "INSERT INTO alerts (id, tenant_id, subject, occurrence, destination_id, revision, \
             payload, payload_sha256, created_at, created_by) \
         SELECT (lpad(to_hex((extract(epoch FROM at) * 1000)::int8), 12, '0') || '7' \
                 || substr(md5($3 || i), 1, 3) || '8' || substr(md5($3 || i), 4, 15))::uuid, \
                $1, $3 || i, 'due', $2, 0, payload, sha256(convert_to(payload, 'UTF8')), at, \
                'test' \
         FROM generate_series(1, $5::int8) AS i, \
              LATERAL (SELECT now() - make_interval(days => $4) \
                              + i * interval '1 millisecond' AS at, \
                              jsonb_build_object('contract', i, 'note', repeat('x', 400))::text \
                                  AS payload) t",
    )
    .bind(tenant)
    .bind(destination)
    .bind(prefix)
    .bind(days_ago)
    .bind(count)
    .execute(&db.pool)
    .await
    .unwrap();
}

/// The tenants, their alerts settled as described at [`TENANT_ALERTS`], and statistics.
async fn listed_table(db: &TestDb) -> Uuid {
    let acme = crate::tenants::create(&db.pool, "acme", "UTC", None)
        .await
        .unwrap();
    let globex = crate::tenants::create(&db.pool, "globex", "UTC", None)
        .await
        .unwrap();
    let ops = destination(db, acme, "ops").await;
    destination(db, acme, "quiet").await;
    let globex_ops = destination(db, globex, "ops").await;
    seed(db, acme, ops, "contract:C-", 10, TENANT_ALERTS).await;
    seed(db, globex, globex_ops, "globex:", 1, OTHER_ALERTS).await;
    let n = "substr(a.subject, strpos(a.subject, '-') + 1)::int8 % 100";
    for statement in [
        format!(
            "INSERT INTO alert_outcomes (alert_id, outcome, settled_at) \
             SELECT a.id, CASE {n} WHEN 7 THEN 'held' WHEN 17 THEN 'failed' \
                                   ELSE 'superseded' END, a.created_at \
             FROM alerts a WHERE a.tenant_id = $1 AND {n} IN (7, 17, 27)"
        ),
        format!(
            "INSERT INTO outbox (alert_id, destination_id) \
             SELECT a.id, a.destination_id FROM alerts a WHERE a.tenant_id = $1 AND {n} = 37"
        ),
        "INSERT INTO outbox (alert_id, destination_id) \
         SELECT a.id, a.destination_id FROM alerts a WHERE a.tenant_id <> $1"
            .to_owned(),
        format!(
            "INSERT INTO delivery_attempts (alert_id, attempt, kind, worker, fencing_token, \
                 started_at, finished_at, idempotency_key, payload_sha256, outcome, \
                 http_status, to_state, line) \
             SELECT a.id, 1, 'send', 'test', 0, a.created_at, a.created_at, a.id::text, \
                    a.payload_sha256, 'accepted', 200, 'accepted', 'attempt 1 accepted' \
             FROM alerts a WHERE a.tenant_id = $1 AND {n} NOT IN (7, 17, 27, 37)"
        ),
    ] {
        sqlx::query(&statement)
            .bind(acme)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    sqlx::query("VACUUM ANALYZE alerts, outbox, alert_outcomes, delivery_attempts")
        .execute(&db.pool)
        .await
        .unwrap();
    acme
}

/// Every node of a plan, depth first.
fn nodes(plan: &Value) -> Vec<&Value> {
    let mut all = vec![plan];
    for child in plan["Plans"].as_array().into_iter().flatten() {
        all.extend(nodes(child));
    }
    all
}

/// The listing's plan as it ran (`EXPLAIN ANALYZE`), bounded as the API bounds it.
async fn explain_page(
    db: &TestDb,
    tenant: Uuid,
    filter: &AlertFilter,
    before: Option<Uuid>,
) -> (Value, String) {
    let tenants = [tenant];
    let mut tx = db.pool.begin().await.unwrap();
    bound_listing(&mut tx, Duration::from_secs(60))
        .await
        .unwrap();
    let explained: Value = page_query(
        "EXPLAIN (ANALYZE, FORMAT JSON) ",
        Some(&tenants),
        filter,
        before,
        LIMIT,
    )
    .build_query_scalar()
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    let root = explained[0]["Plan"].clone();
    let text = serde_json::to_string_pretty(&root).unwrap();
    (root, text)
}

/// Alerts rows the plan read: those it kept and those its filters removed, over every
/// scan of the table.
fn alerts_read(plan: &Value) -> f64 {
    nodes(plan)
        .into_iter()
        .filter(|node| node["Relation Name"] == "alerts")
        .map(|node| {
            let rows = node["Actual Rows"].as_f64().unwrap_or(0.0)
                + node["Rows Removed by Filter"].as_f64().unwrap_or(0.0)
                + node["Rows Removed by Index Recheck"]
                    .as_f64()
                    .unwrap_or(0.0);
            rows * node["Actual Loops"].as_f64().unwrap_or(1.0)
        })
        .sum()
}

fn assert_no_table_scan(name: &str, plan: &Value, text: &str) {
    for node in nodes(plan) {
        assert!(
            !(node["Node Type"] == "Seq Scan" && node["Relation Name"] == "alerts"),
            "{name}: the listing reads the whole alerts table: {text}"
        );
    }
}

#[tokio::test]
async fn every_filter_the_api_takes_is_served_by_an_index() {
    let db = TestDb::new().await;
    let acme = listed_table(&db).await;
    let filter =
        |state: Option<AlertState>, destination: Option<&str>, subject: Option<&str>| AlertFilter {
            state,
            destination: destination.map(str::to_owned),
            subject: subject.map(str::to_owned),
            ..AlertFilter::default()
        };
    // The middle of the tenant's history, as a `before` from an earlier page.
    let middle: Uuid = sqlx::query_scalar(
        "SELECT id FROM alerts WHERE tenant_id = $1 ORDER BY id OFFSET $2 LIMIT 1",
    )
    .bind(acme)
    .bind(TENANT_ALERTS / 2)
    .fetch_one(&db.pool)
    .await
    .unwrap();

    // The first page of these reads about a page of alerts, whatever the tenant holds.
    let page_at_most = (2 * (LIMIT + 1)) as f64;
    for (name, filter, before) in [
        ("no filter", filter(None, None, None), None),
        (
            "accepted",
            filter(Some(AlertState::Accepted), None, None),
            None,
        ),
        ("a destination", filter(None, Some("ops"), None), None),
        (
            "an empty destination",
            filter(None, Some("quiet"), None),
            None,
        ),
        (
            "a common subject text",
            filter(None, None, Some("contract")),
            None,
        ),
        (
            "accepted to a destination",
            filter(Some(AlertState::Accepted), Some("ops"), None),
            None,
        ),
        ("a later page", filter(None, None, None), Some(middle)),
        (
            "a later page of accepted",
            filter(Some(AlertState::Accepted), None, None),
            Some(middle),
        ),
    ] {
        let (plan, text) = explain_page(&db, acme, &filter, before).await;
        assert_no_table_scan(name, &plan, &text);
        let read = alerts_read(&plan);
        assert!(
            read <= page_at_most,
            "{name}: {read} alerts read for a page of {LIMIT}: {text}"
        );
    }

    // A rare subject text is looked up in the trigram index.
    let (plan_of_rare, text) =
        explain_page(&db, acme, &filter(None, None, Some("C-4321")), None).await;
    assert_no_table_scan("a rare subject text", &plan_of_rare, &text);
    assert!(text.contains("alerts_subject_trgm_idx"), "{text}");

    // Every other state is read through the table that holds it, never the whole table.
    for state in AlertState::ALL {
        let (plan, text) = explain_page(&db, acme, &filter(Some(*state), None, None), None).await;
        assert_no_table_scan(state.as_str(), &plan, &text);
    }
}

#[test]
fn a_subject_search_needs_three_letters_or_digits_in_a_row() {
    for indexed in [
        "abc",
        "C-123",
        "contract:ACME-7",
        "x 2027",
        "Müller",
        "日本語",
    ] {
        assert!(subject_search_is_indexed(indexed), "{indexed}");
    }
    for unindexed in ["", "ab", "7", "C-1", "a:b:c", "ab cd", "%%%", "__ _"] {
        assert!(!subject_search_is_indexed(unindexed), "{unindexed}");
    }
}
