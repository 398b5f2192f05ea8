//! `outboxctl template preview`: the real binary renders a stored alert (read from a real
//! database) or a payload file as email, and prints it without sending anything.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::assert_contains;
use common::{add_tenant, assert_refused, counts, outboxctl, outboxctl_ok, CliRun};
use outbox_store::alerts::{approve, Approval, ApproveOutcome};
use outbox_testkit::TestDb;

/// A renewal payload as the contract monitor stores it (the amount a JSON number), with a
/// vendor that tries HTML and a terminal escape sequence.
const RENEWAL: &str = r#"{"kind": "contract_renewal", "contract": "ACME-7", "vendor": "Acme <script>alert(1)</script>\u001b]0;owned\u0007", "amount": 12000.00, "currency": "EUR", "renewal_date": "2027-01-15", "action_date": "2026-12-16", "days_remaining": 30, "tier": 30}"#;

async fn approved(
    db: &TestDb,
    tenant: uuid::Uuid,
    subject: &str,
    occurrence: &str,
    payload: &str,
) -> String {
    let outcome = approve(
        &db.pool,
        Approval {
            tenant_id: tenant,
            destination: "ops",
            subject,
            occurrence,
            payload_json: payload,
            actor: "tests",
            ordering_key: None,
        },
    )
    .await
    .unwrap();
    let ApproveOutcome::Created(id) = outcome else {
        panic!("not created: {outcome:?}");
    };
    id.to_string()
}

#[tokio::test]
async fn a_stored_alert_previews_in_both_locales_escaped_for_mail_and_terminal() {
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &["ops"]).await;
    let id = approved(&db, tenant.id, "contract:ACME-7", "2027-01-15/30d", RENEWAL).await;
    let before = counts(&db).await;

    let es = outboxctl_ok(
        &db,
        &["template", "preview", "--alert", &id, "--locale", "es"],
    )
    .await;
    let subject = es.stdout.lines().next().unwrap();
    assert!(
        subject.starts_with("Subject: Renovación: el contrato ACME-7 de Acme"),
        "{subject}"
    );
    assert!(
        subject.contains("se renueva el 15 de enero de 2027"),
        "{subject}"
    );
    assert_contains(&es.stdout, "por 12.000,00 €.");
    assert_contains(&es.stdout, "quedan 30 días.");
    assert!(es
        .stdout
        .contains("Template: contract_renewal, es, sha256:"));
    // The HTML body shows the vendor's markup as text...
    assert!(es.stdout.contains("--- text/html ---"));
    assert_contains(
        &es.stdout,
        "Acme &lt;script&gt;alert(1)&lt;&#x2f;script&gt;",
    );
    let html = es.stdout.split("--- text/html ---").nth(1).unwrap();
    assert!(!html.contains("<script>"), "{html}");
    // ...and no part reaches the terminal with its escape sequence.
    assert!(!es.stdout.contains('\u{1b}'), "{:?}", es.stdout);
    assert_contains(&es.stdout, "\\x1b]0;owned\\x07");

    let en = outboxctl_ok(
        &db,
        &["template", "preview", "--alert", &id, "--format", "text"],
    )
    .await;
    assert_contains(&en.stdout, "renews on January 15, 2027 for €12,000.00.");
    assert_contains(&en.stdout, "act by December 16, 2026: 30 days left.");
    assert!(!en.stdout.contains("text/html"), "{}", en.stdout);

    // Previewing wrote nothing.
    assert_eq!(counts(&db).await, before);
}

#[tokio::test]
async fn a_stored_alert_without_the_renewal_fields_previews_with_the_generic_template() {
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &["ops"]).await;
    // As approved through the API: a renewal kind, but without dates or tier.
    let payload = r#"{"kind": "contract_renewal", "contract": "C-1", "vendor": "Acme Tools", "amount": "12000.00", "currency": "EUR", "days_remaining": 30}"#;
    let id = approved(&db, tenant.id, "contract:C-1", "2027-03-31/30d", payload).await;
    let run = outboxctl_ok(
        &db,
        &["template", "preview", "--alert", &id, "--format", "text"],
    )
    .await;
    assert!(
        run.stdout.starts_with("Subject: Alert: contract_renewal\n"),
        "{}",
        run.stdout
    );
    assert_contains(&run.stdout, "Template: generic, en,");
    assert_contains(&run.stdout, "amount: 12000.00\n");
    assert_contains(&run.stdout, "vendor: Acme Tools\n");
}

#[tokio::test]
async fn a_payload_file_previews_with_a_tenants_override() {
    let db = TestDb::new().await;
    let dir = std::env::temp_dir().join(format!("outbox-preview-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let payload = dir.join("payload.json");
    std::fs::write(&payload, RENEWAL).unwrap();
    let templates = dir.join("templates");
    std::fs::create_dir_all(&templates).unwrap();
    std::fs::write(
        templates.join("contract_renewal.es.subject.txt"),
        "Aviso {{ contract }}: {{ amount }} el {{ renewal_date }}",
    )
    .unwrap();
    let (payload, templates) = (payload.to_str().unwrap(), templates.to_str().unwrap());

    // `template preview` of the Spanish renewal, as shipped and with the tenant's subject.
    let preview = ["template", "preview", "--kind", "contract_renewal"];
    let spanish = [&preview[..], &["--locale", "es", "--payload", payload]].concat();
    let shipped = outboxctl_ok(&db, &spanish).await;
    let overridden = [
        &spanish[..],
        &["--templates", templates, "--format", "html"],
    ]
    .concat();
    let overridden = outboxctl_ok(&db, &overridden).await;
    assert!(
        overridden
            .stdout
            .starts_with("Subject: Aviso ACME-7: 12.000,00 € el 15 de enero de 2027\n"),
        "{}",
        overridden.stdout
    );
    // The bodies stay as shipped; the version names the templates actually used.
    let html_of = |run: &CliRun| {
        run.stdout
            .split("--- text/html ---")
            .nth(1)
            .unwrap()
            .to_owned()
    };
    assert_eq!(html_of(&overridden), html_of(&shipped));
    let version_of = |run: &CliRun| run.stdout.lines().nth(1).unwrap().to_owned();
    assert_ne!(version_of(&overridden), version_of(&shipped));

    // A news payload as an event, in English.
    let news = dir.join("news.json");
    std::fs::write(
        &news,
        r#"{"kind": "news", "watchlist": "suppliers", "article": "A-17", "title": "Acme Tools recalls drills", "url": "https://news.example/a-17", "site": "news.example", "published": "2026-11-03T08:30:00Z", "matched_terms": ["acme", "recall"], "snippet": "A recall."}"#,
    )
    .unwrap();
    let event = outboxctl_ok(
        &db,
        &[
            "template",
            "preview",
            "--kind",
            "news_event",
            "--payload",
            news.to_str().unwrap(),
            "--format",
            "text",
        ],
    )
    .await;
    assert!(event
        .stdout
        .starts_with("Subject: Event on suppliers: Acme Tools recalls drills\n"));
    assert_contains(&event.stdout, "news.example, November 3, 2026");
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn bad_preview_input_is_refused_in_one_line() {
    let db = TestDb::new().await;
    let dir = std::env::temp_dir().join(format!("outbox-preview-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let payload = dir.join("payload.json");
    std::fs::write(&payload, RENEWAL).unwrap();
    let broken = dir.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("generic.en.txt"), "{% if fields %}never closed").unwrap();
    let missing_field = dir.join("missing.json");
    std::fs::write(
        &missing_field,
        r#"{"kind": "contract_renewal", "contract": "X"}"#,
    )
    .unwrap();
    let (payload, broken, missing_field) = (
        payload.to_str().unwrap(),
        broken.to_str().unwrap(),
        missing_field.to_str().unwrap(),
    );

    let unknown = uuid::Uuid::new_v4().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--alert", &unknown], "no alert"),
        (vec!["--alert", "A-17"], "is not an alert id"),
        (
            vec![
                "--kind",
                "contract_renewal",
                "--locale",
                "fr",
                "--payload",
                payload,
            ],
            "unknown locale `fr`",
        ),
        (
            vec!["--kind", "renewal", "--payload", payload],
            "unknown template kind",
        ),
        (
            vec![
                "--kind",
                "generic",
                "--payload",
                payload,
                "--templates",
                broken,
            ],
            "does not compile",
        ),
        (
            vec!["--kind", "contract_renewal", "--payload", missing_field],
            "`vendor` is missing",
        ),
        (
            vec![
                "--kind",
                "generic",
                "--payload",
                "/nonexistent/payload.json",
            ],
            "cannot read",
        ),
    ];
    for (args, needle) in cases {
        let mut all = vec!["template", "preview"];
        all.extend(args);
        let run = outboxctl(&db, &all).await;
        assert_refused(&run, needle);
    }
    std::fs::remove_dir_all(&dir).ok();
}
