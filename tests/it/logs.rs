//! What the logs say: JSON lines whose spans carry the alert id, attempt and worker, and
//! never a bearer token or a signing secret, even at debug level.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::add_tenant;
use common::decider::DeciderServe;
use common::destinations::add_destination;
use common::procs::*;
use outbox_testkit::TestDb;

const SECRET: &str = "whsec_dGhpcyBpcyB0aGUgbmV3IHNlY3JldCBrZXkgISE=";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_carry_the_alert_and_never_a_token_or_a_secret() {
    let db = TestDb::new().await;
    let sink = Sink::start(&["--secret", SECRET]).await;
    let tenant = add_tenant(&db, "acme", &[]).await;
    add_destination(&db, tenant.id, "ops", &sink.hook_url(), |d| {
        d.signing_secrets = vec![SECRET.to_owned()];
    })
    .await;
    let decider = DeciderServe::on(&db.url)
        .with_metrics()
        .env("RUST_LOG", "debug")
        .start()
        .await;
    let (api, decider_metrics) = (decider.api.clone(), decider.metrics().to_owned());
    let args = dispatcher_args(&db, "logger", &[]);
    let (dispatcher, metrics) =
        spawn_dispatcher_with_metrics(&args, &[("RUST_LOG", "debug")]).await;

    let http = reqwest::Client::new();
    let approval = serde_json::json!({"destination": "ops", "subject": "s", "occurrence": "o", "payload": {"a": 1}});
    let answer = http
        .post(format!("{api}/v1/alerts"))
        .bearer_auth(&tenant.token)
        .json(&approval)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::CREATED);
    let id = answer.json::<serde_json::Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // A refused token is logged too, and must not show either.
    let forged = format!("aot_{}", "B".repeat(43));
    let refused = http
        .post(format!("{api}/v1/alerts"))
        .bearer_auth(&forged)
        .json(&approval)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::UNAUTHORIZED);
    sink.wait_for("the alert", |s| s["applied"] == 1).await;
    assert_eq!(sink.records(&id).await[0]["signature"], "valid");
    wait_for_db(
        &db,
        "SELECT count(*) FROM alert_states WHERE state = 'accepted'",
        |n| n == 1,
    )
    .await;

    let decider_text = metrics_text(&http, &decider_metrics).await;
    assert!(
        decider_text.contains("outbox_approvals_total{result=\"created\"} 1"),
        "{decider_text}"
    );
    assert!(
        decider_text.contains("outbox_depth{state=\"held\"} 0"),
        "{decider_text}"
    );
    // The dispatcher counts a delivery once its record is committed; poll for it.
    wait_for_series(
        &http,
        &metrics,
        "outbox_approval_to_acceptance_seconds_count{destination=\"ops\"}",
        |count| count == 1.0,
    )
    .await;

    let decider_logs = decider.log_lines().join("\n");
    let dispatcher_logs = dispatcher.log_lines().join("\n");
    for (name, logs) in [("decider", &decider_logs), ("dispatcher", &dispatcher_logs)] {
        assert!(!logs.is_empty(), "{name} logged nothing");
        assert!(!logs.contains(&tenant.token), "{name} logged the API token");
        assert!(!logs.contains(&forged), "{name} logged a presented token");
        assert!(!logs.contains(SECRET), "{name} logged the signing secret");
        assert!(
            !logs.contains(&SECRET["whsec_".len()..]),
            "{name} logged the secret's key"
        );
        for line in logs.lines() {
            serde_json::from_str::<serde_json::Value>(line)
                .unwrap_or_else(|_| panic!("{name} wrote a line that is not JSON: {line}"));
        }
    }
    // The dispatcher's lines about the alert carry its id, attempt and worker.
    let about_alert: Vec<serde_json::Value> = dispatcher_logs
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["span"]["alert_id"] == id.as_str())
        .collect();
    assert!(!about_alert.is_empty(), "no log line carries the alert id");
    assert_eq!(about_alert[0]["span"]["attempt"], 1);
    assert_eq!(about_alert[0]["span"]["worker"], "logger");
}
