//! Hostile input, end to end: a destination whose answer carries terminal escape
//! sequences, identities with control and bidirectional characters, payloads that
//! PostgreSQL cannot store, oversized articles. Each is tried against the real API, the
//! real `outboxctl` and `dispatcher` binaries and a real database; each must be shown
//! escaped or refused with its specific reason, and refusals write nothing.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::assert_contains;
use common::destinations::add_destination;
use common::procs::{drain, wait_for_db};
use common::{add_tenant, counts, outboxctl, renewal, Api, CliRun};
use outbox_testkit::TestDb;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// What the hostile destination answers: retitles the terminal, clears it, and reverses
/// the display of what follows.
const HOSTILE_ANSWER: &str = "\u{1b}]0;pwned\u{7}\u{1b}[2J \u{202e}gnp.exe";

/// True when `text` holds a character a terminal would act on.
fn has_raw_controls(text: &str) -> bool {
    text.chars()
        .any(|c| c != '\n' && outbox_core::untrusted::is_unsafe_on_terminal(c))
}

/// A destination that answers every request `400` with [`HOSTILE_ANSWER`].
async fn start_hostile_destination() -> String {
    let app = axum::Router::new()
        .fallback(|| async { (axum::http::StatusCode::BAD_REQUEST, HOSTILE_ANSWER) });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// Asserts a refusal: non-zero exit, one `error:` line mentioning `needle`, no raw
/// control character, nothing on stdout.
fn assert_refused(run: &CliRun, needle: &str) {
    common::assert_refused(run, needle);
    assert!(
        !has_raw_controls(&run.stderr),
        "raw control in: {:?}",
        run.stderr
    );
}

#[tokio::test]
async fn a_destinations_answer_cannot_act_on_the_operators_terminal() {
    let api = Api::start().await;
    let url = start_hostile_destination().await;
    add_destination(&api.db, api.acme.id, "hostile", &url, |_| {}).await;
    let mut body = renewal(1);
    body["destination"] = json!("hostile");
    let (status, created) = api.approve(&api.acme.token, &body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    drain(&api.db, "hostile-test", &[]).await;
    wait_for_db(
        &api.db,
        "SELECT count(*) FROM alert_states WHERE state = 'failed'",
        |n| n == 1,
    )
    .await;

    // The evidence holds the answer as sent.
    let (_, detail) = api.get(&format!("/v1/alerts/{id}"), &api.acme.token).await;
    assert_eq!(detail["attempts"][0]["response_excerpt"], HOSTILE_ANSWER);

    // People see it escaped, and see that it was there.
    for args in [
        vec!["outbox", "list", "--status", "failed"],
        vec!["alert", "show", id.as_str()],
    ] {
        let run = outboxctl(&api.db, &args).await;
        assert!(run.ok, "{args:?}: {}", run.stderr);
        assert!(
            !has_raw_controls(&run.stdout),
            "{args:?} printed raw controls: {:?}",
            run.stdout
        );
        assert!(
            run.stdout.contains("\\x1b]0;pwned\\x07\\x1b[2J"),
            "{args:?}: {}",
            run.stdout
        );
    }
    let show = outboxctl(&api.db, &["alert", "show", &id]).await;
    assert_contains(&show.stdout, "\\u{202e}gnp.exe");

    // `--json` carries no raw control either, and still says exactly what was sent.
    for args in [
        vec!["alert", "show", id.as_str(), "--json"],
        vec!["outbox", "list", "--status", "failed", "--json"],
    ] {
        let run = outboxctl(&api.db, &args).await;
        assert!(run.ok, "{args:?}: {}", run.stderr);
        assert!(!has_raw_controls(&run.stdout), "{args:?}: {:?}", run.stdout);
    }
    let json: Value = serde_json::from_str(
        &outboxctl(&api.db, &["alert", "show", &id, "--json"])
            .await
            .stdout,
    )
    .unwrap();
    assert_eq!(json["attempts"][0]["response_excerpt"], HOSTILE_ANSWER);
}

#[tokio::test]
async fn the_api_refuses_bidirectional_controls_in_identities() {
    let api = Api::start().await;
    for (field, value) in [
        ("subject", "invoice-\u{202e}fdp.exe"),
        ("occurrence", "2027-03-31\u{2066}/30d"),
        ("subject", "contract:\u{200f}C-1"),
    ] {
        let mut body = renewal(1);
        body[field] = json!(value);
        let (status, problem) = api.approve(&api.acme.token, &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert_eq!(problem["type"], "/problems/invalid-field");
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains(&format!("field `{field}` contains a bidirectional control")),
            "{problem}"
        );
    }
    assert_eq!(counts(&api.db).await, (0, 0, 0));
}

/// Payloads that took PostgreSQL past its limits, as the API's text.
fn hostile_payloads() -> Vec<(&'static str, String)> {
    vec![
        (
            "nest deeper than 64 levels",
            format!(
                r#"{{"a": {}1{}}}"#,
                "[".repeat(100_000),
                "]".repeat(100_000)
            ),
        ),
        ("is out of range", r#"{"a": 1e999999}"#.to_owned()),
        (
            "too many digits before the decimal point",
            format!(r#"{{"a": {}}}"#, "9".repeat(200_000)),
        ),
    ]
}

#[tokio::test]
async fn hostile_payloads_get_invalid_payload_and_write_nothing() {
    let api = Api::start().await;
    for (reason, payload) in hostile_payloads() {
        let body = format!(
            r#"{{"destination": "ops", "subject": "s", "occurrence": "o", "payload": {payload}}}"#
        );
        let (status, problem) = api.post_raw("/v1/alerts", &api.acme.token, body).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{reason}: {problem}"
        );
        assert_eq!(problem["type"], "/problems/invalid-payload", "{problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(reason), "{detail}");
        assert!(detail.len() < 400, "the payload is not echoed: {detail}");
    }
    assert_eq!(counts(&api.db).await, (0, 0, 0));

    // Revisions, through the API and through outboxctl, are held to the same rules.
    let (status, created) = api.approve(&api.acme.token, &renewal(1)).await;
    assert_eq!(status, StatusCode::CREATED);
    let id = created["id"].as_str().unwrap().to_owned();
    let before = counts(&api.db).await;
    let file = std::env::temp_dir().join(format!("hostile-payload-{}.json", uuid::Uuid::new_v4()));
    for (reason, payload) in hostile_payloads() {
        let body = format!(r#"{{"payload": {payload}, "reason": "correction"}}"#);
        let (status, problem) = api
            .post_raw(&format!("/v1/alerts/{id}/revisions"), &api.acme.token, body)
            .await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{reason}: {problem}"
        );
        assert_eq!(problem["type"], "/problems/invalid-payload", "{problem}");

        std::fs::write(&file, &payload).unwrap();
        let run = outboxctl(
            &api.db,
            &[
                "revise",
                &id,
                "--payload",
                file.to_str().unwrap(),
                "--reason",
                "fix",
            ],
        )
        .await;
        assert_refused(&run, reason);
    }
    std::fs::remove_file(&file).unwrap();
    assert_eq!(counts(&api.db).await, before);

    // Whatever path a payload takes, the store applies the same check.
    let refused = outbox_store::alerts::approve(
        &api.db.pool,
        outbox_store::alerts::Approval {
            tenant_id: api.acme.id,
            destination: "ops",
            subject: "direct",
            occurrence: "o",
            payload_json: r#"{"a": 1e999999}"#,
            actor: "test",
            ordering_key: None,
        },
    )
    .await;
    assert!(
        matches!(refused, Err(outbox_store::StoreError::UnstorablePayload(_))),
        "{refused:?}"
    );
    assert_eq!(counts(&api.db).await, before);
}

/// Writes `text` to a fresh file with `extension`; returns its path.
fn temp_file(extension: &str, text: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("hostile-{}.{extension}", uuid::Uuid::new_v4()));
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn contract_import_applies_the_identity_rules() {
    let db = TestDb::new().await;
    add_tenant(&db, "acme", &["ops"]).await;
    let header = "external_id,vendor,amount,currency,renewal_date\n";
    for (row, needle) in [
        (
            "\"C-\u{1b}]0;pwned\u{7}\",Acme,1,EUR,2027-01-31\n",
            "field `external_id` contains a control character",
        ),
        (
            "\"C-1\nforged: line\",Acme,1,EUR,2027-01-31\n",
            "field `external_id` contains a control character",
        ),
        (
            "C-\u{202e}1,Acme,1,EUR,2027-01-31\n",
            "field `external_id` contains a bidirectional control",
        ),
    ] {
        // A good row beside the bad one: the file is refused whole.
        let file = temp_file("csv", &format!("{header}C-0,Acme,1,EUR,2027-01-31\n{row}"));
        let run = outboxctl(
            &db,
            &[
                "contract",
                "import",
                file.to_str().unwrap(),
                "--tenant",
                "acme",
            ],
        )
        .await;
        std::fs::remove_file(&file).unwrap();
        assert_refused(&run, needle);
        assert_contains(&run.stderr, "line 3");
    }
    assert_eq!(db.count("contracts").await, 0);
}

#[tokio::test]
async fn oversized_and_hostile_articles_are_refused_whole() {
    let db = TestDb::new().await;
    let post = |uuid: &str, text: &str| {
        json!({"uuid": uuid, "url": "https://news.example/a", "title": "Acme",
               "text": text, "published": "2027-01-01T10:00:00Z"})
    };
    let over = "a".repeat(outbox_decider::news::MAX_ARTICLE_TEXT_BYTES + 1);
    for (posts, needle) in [
        (
            vec![post("ok-1", "fine"), post("big", &over)],
            "post 2: field `text` is 1048577 bytes; the limit is 1048576 bytes",
        ),
        (
            vec![post("u-\u{1b}[2J", "fine")],
            "post 1: field `uuid` contains a control character",
        ),
        (
            vec![post("u-\u{202e}", "fine")],
            "post 1: field `uuid` contains a bidirectional control",
        ),
    ] {
        let file = temp_file("json", &json!({ "posts": posts }).to_string());
        let run = outboxctl(&db, &["article", "ingest", file.to_str().unwrap()]).await;
        std::fs::remove_file(&file).unwrap();
        assert_refused(&run, needle);
    }
    // A file over the page cap is refused before it is read whole.
    let huge = temp_file(
        "json",
        &" ".repeat(outbox_decider::news::MAX_ARTICLE_PAGE_BYTES + 1),
    );
    let run = outboxctl(&db, &["article", "ingest", huge.to_str().unwrap()]).await;
    std::fs::remove_file(&huge).unwrap();
    assert_refused(&run, "is larger than 16 MiB");
    assert_eq!(db.count("articles").await, 0);
}

/// The payload number limits agree with PostgreSQL itself: every number the check
/// accepts, PostgreSQL stores; every number PostgreSQL refuses, the check refuses. (The
/// check is stricter only past its exponent bound, ±1,000,000.)
#[tokio::test]
async fn number_limits_agree_with_postgresql() {
    let db = TestDb::new().await;
    let mantissas = [
        "0",
        "1",
        "9",
        "10",
        "-7",
        "0.01",
        "1.5",
        "123.456",
        "0.000",
        "1.0000000000",
        "99.9e0",
    ];
    let mut exponents: Vec<i64> = vec![-1_000_000, -999_999, -20_000, -1, 0, 1, 999_999];
    exponents.extend(-16_395..-16_375);
    exponents.extend(131_060..131_080);
    let mut checked = 0;
    for mantissa in mantissas {
        for exponent in &exponents {
            // `99.9e0` carries its own exponent: used as written.
            let number = if mantissa.contains('e') {
                mantissa.to_owned()
            } else {
                format!("{mantissa}e{exponent}")
            };
            let json = format!("{{\"n\": {number}}}");
            let ours = outbox_core::json_limits::check_json_limits(json.as_bytes(), 4).is_ok();
            let theirs = sqlx::query_scalar::<_, bool>("SELECT $1::text::jsonb IS NOT NULL")
                .bind(&json)
                .fetch_one(&db.pool)
                .await
                .is_ok();
            if ours {
                assert!(theirs, "{number}: accepted here, refused by PostgreSQL");
            }
            if theirs && exponent.abs() <= outbox_core::json_limits::MAX_NUMBER_EXPONENT {
                assert!(ours, "{number}: stored by PostgreSQL, refused here");
            }
            checked += 1;
        }
    }
    assert!(checked > 400);
}
