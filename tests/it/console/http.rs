//! Every page and action over HTTP: sign-in, roles, form tokens, tenant limits, escaping,
//! headers, paging, bulk replays. What is asserted is read back from the database.

use super::*;
use common::destinations::DestinationAdd;
use common::{outboxctl, outboxctl_ok, revise};

const PAGES: &[&str] = &[
    "/console",
    "/console/outbox",
    "/console/outbox?state=held",
    "/console/destinations",
    "/console/audit",
];

fn assert_security_headers(page: &Page, path: &str) {
    let header = |name: &str| {
        page.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_else(|| panic!("{path}: no {name}"))
    };
    let csp = header("content-security-policy");
    assert!(csp.contains("default-src 'self'"), "{path}: {csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
    assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
    assert_eq!(header("x-content-type-options"), "nosniff");
    assert_eq!(header("referrer-policy"), "no-referrer");
    assert_eq!(header("cache-control"), "no-store");
}

async fn evidence_and_state(db: &TestDb, id: Uuid) -> (String, Vec<String>) {
    (state_of(db, id).await, evidence(db, id).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_and_action_needs_a_signed_in_account() {
    let console = Console::start(TestDb::new().await).await;
    let tenant = add_tenant(&console.db, "acme", &["ops"]).await;
    let id = approve_many(&console.db, tenant.id, "ops", 1).await[0];
    let alert = format!("/console/alerts/{id}");
    for path in PAGES.iter().copied().chain([alert.as_str()]) {
        let page = console.get(None, path).await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{path}");
        assert_eq!(page.location(), "/console/login", "{path}");
        assert_security_headers(&page, path);
    }
    let forged = Session {
        cookie: "outbox_console=not-a-session".into(),
        csrf: String::new(),
    };
    assert_eq!(
        console.get(Some(&forged), "/console").await.location(),
        "/console/login"
    );
    let before = evidence_and_state(&console.db, id).await;
    let post = console
        .post(
            None,
            &format!("{alert}/resolve"),
            &[("resolution", "abandon"), ("note", "x")],
        )
        .await;
    assert_eq!(post.location(), "/console/login");
    assert_eq!(evidence_and_state(&console.db, id).await, before);

    let login = console.get(None, "/console/login").await;
    assert_eq!(login.status, StatusCode::OK);
    assert_security_headers(&login, "/console/login");
    let css = console.get(None, "/console/static/console.css").await;
    assert_eq!(css.headers["content-type"], "text/css; charset=utf-8");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outboxctl_creates_accounts_whose_password_is_shown_once_and_stored_hashed() {
    let console = Console::start(TestDb::new().await).await;
    add_tenant(&console.db, "acme", &["ops"]).await;
    let add = outboxctl_ok(
        &console.db,
        &["operator", "add", "alice", "--role", "operator"],
    )
    .await;
    let password = add.stdout.trim().to_owned();
    assert!(password.len() >= 40, "{password}");
    let stored: String =
        sqlx::query_scalar("SELECT password_hash FROM operator_accounts WHERE name = 'alice'")
            .fetch_one(&console.db.pool)
            .await
            .unwrap();
    assert!(stored.starts_with("$argon2id$"), "{stored}");
    assert!(!stored.contains(&password));

    outboxctl_ok(
        &console.db,
        &[
            "operator",
            "add",
            "bob",
            "--role",
            "viewer",
            "--tenants",
            "acme",
        ],
    )
    .await;
    let list = outboxctl(&console.db, &["operator", "list"]).await;
    assert!(
        list.stdout.contains("alice") && list.stdout.contains("all"),
        "{}",
        list.stdout
    );
    assert!(
        list.stdout.contains("bob") && list.stdout.contains("acme"),
        "{}",
        list.stdout
    );
    assert!(!list.stdout.contains(&password));

    // Bad input: a one-line reason, a non-zero exit, nothing written.
    for args in [
        &["operator", "add", "<b>", "--role", "operator"][..],
        &[
            "operator", "add", "carol", "--role", "operator", "--tenant", "nope",
        ][..],
        &["operator", "add", "alice", "--role", "viewer"][..],
        &["operator", "remove", "nobody"][..],
    ] {
        let run = outboxctl(&console.db, args).await;
        assert!(!run.ok, "{args:?}");
        assert_eq!(run.stderr.lines().count(), 1, "{args:?}: {}", run.stderr);
        assert!(run.stderr.starts_with("error:"), "{}", run.stderr);
    }
    assert_eq!(console.db.count("operator_accounts").await, 2);

    let wrong = console.login("alice", "guess").await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(
        wrong
            .headers
            .get_all("set-cookie")
            .iter()
            .all(|c| !c.to_str().unwrap().starts_with("outbox_console=")),
        "no session cookie"
    );
    let nobody = console.login("nobody", "guess").await;
    assert_eq!(nobody.status, StatusCode::UNAUTHORIZED);
    assert_eq!(console.db.count("console_sessions").await, 0);

    let login = console.login("alice", &password).await;
    let set_cookie = login.headers["set-cookie"].to_str().unwrap().to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(set_cookie.contains(attribute), "{set_cookie}");
    }
    assert!(!set_cookie.contains("Secure"), "{set_cookie}");
    let session_id = set_cookie
        .split(';')
        .next()
        .unwrap()
        .split_once('=')
        .unwrap()
        .1
        .to_owned();
    let stored: Vec<u8> = sqlx::query_scalar("SELECT id_sha256 FROM console_sessions")
        .fetch_one(&console.db.pool)
        .await
        .unwrap();
    assert_eq!(stored.len(), 32);
    assert_ne!(stored, session_id.as_bytes());

    let session = console.sign_in("alice", &password).await;
    assert!(console
        .get(Some(&session), "/console")
        .await
        .body
        .contains("alice"));
    let refused = console
        .post(Some(&session), "/console/logout", &[("csrf", "wrong")])
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let out = console
        .post(
            Some(&session),
            "/console/logout",
            &[("csrf", &session.csrf)],
        )
        .await;
    assert_eq!(out.location(), "/console/login");
    assert_eq!(
        console.get(Some(&session), "/console").await.location(),
        "/console/login"
    );

    assert_eq!(
        console.db.count("console_sessions").await,
        1,
        "the first sign-in is still open"
    );
    outboxctl_ok(&console.db, &["operator", "remove", "alice"]).await;
    assert_eq!(
        console.db.count("console_sessions").await,
        0,
        "alice's sessions end with her"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_cookies_are_marked_secure() {
    let console = Console::start_with(
        TestDb::new().await,
        outbox_console::ConsoleConfig {
            secure_cookies: true,
            ..outbox_console::ConsoleConfig::default()
        },
    )
    .await;
    let password = console.account("alice", "viewer", None).await;
    let login = console.login("alice", &password).await;
    assert!(login.headers["set-cookie"]
        .to_str()
        .unwrap()
        .contains("; Secure"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_reads_every_page_but_sees_no_action_and_cannot_act() {
    let db = TestDb::new().await;
    let (_sink, _, ids) = held_alerts(&db, "acme", 1).await;
    let console = Console::start(db).await;
    let viewer = console.signed_in("vera", "viewer", None).await;
    let alert = format!("/console/alerts/{}", ids[0]);
    for path in PAGES.iter().copied().chain([alert.as_str()]) {
        let page = console.get(Some(&viewer), path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
        assert_security_headers(&page, path);
        for action in ["Replay…", "Resolve:", "Disable</button>", "bulk-link"] {
            assert!(
                !page.body.contains(action),
                "{path} shows {action} to a viewer"
            );
        }
    }
    let page = console.get(Some(&viewer), &alert).await;
    assert_contains(&page.body, "held for reconciliation");

    let before = evidence_and_state(&console.db, ids[0]).await;
    assert_eq!(
        console
            .get(Some(&viewer), &format!("{alert}/replay"))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    // A forged POST with the viewer's own valid token: refused by role.
    let forged = console
        .post(
            Some(&viewer),
            &format!("{alert}/replay"),
            &[("csrf", &viewer.csrf), ("note", "sneaky")],
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert_contains(&forged.body, "viewer");
    assert_eq!(evidence_and_state(&console.db, ids[0]).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_replays_with_a_note_after_a_confirm_page_and_the_evidence_names_them() {
    let db = TestDb::new().await;
    let (_sink, _, ids) = held_alerts(&db, "acme", 2).await;
    let console = Console::start(db).await;
    let alice = console.signed_in("alice", "operator", None).await;
    let alert = format!("/console/alerts/{}", ids[0]);
    let path = format!("{alert}/replay");

    let page = console.get(Some(&alice), &alert).await;
    assert_contains(&page.body, &format!("href=\"{path}\""));
    let confirm = console.get(Some(&alice), &path).await;
    assert_eq!(confirm.status, StatusCode::OK);
    assert_contains(&confirm.body, "name=\"note\"");

    let before = evidence_and_state(&console.db, ids[0]).await;
    let refusals = [
        (vec![("note", "no token")], StatusCode::FORBIDDEN),
        (
            vec![("csrf", "forged"), ("note", "wrong token")],
            StatusCode::FORBIDDEN,
        ),
        (
            vec![("csrf", alice.csrf.as_str()), ("note", "  ")],
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (form, status) in refusals {
        let refused = console.post(Some(&alice), &path, &form).await;
        assert_eq!(refused.status, status, "{form:?}: {}", refused.body);
        assert_eq!(evidence_and_state(&console.db, ids[0]).await, before);
    }
    // A POST from another site's page is refused even with the right token.
    let cross = console
        .http
        .post(format!("{}{path}", console.base))
        .header("cookie", &alice.cookie)
        .header("origin", "http://evil.example")
        .form(&[("csrf", alice.csrf.as_str()), ("note", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status(), StatusCode::FORBIDDEN);
    assert_eq!(evidence_and_state(&console.db, ids[0]).await, before);

    let done = console
        .post(
            Some(&alice),
            &path,
            &[
                ("csrf", &alice.csrf),
                ("note", "vendor confirmed the outage"),
            ],
        )
        .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(done.location(), alert);
    assert_eq!(state_of(&console.db, ids[0]).await, "pending");
    let console_line = evidence(&console.db, ids[0]).await.pop().unwrap();

    // The same action through outboxctl --actor alice writes the same line, except for
    // who: a console account and a command-line operator of the same name never look
    // alike.
    outboxctl_ok(
        &console.db,
        &[
            "replay",
            &ids[1].to_string(),
            "--note",
            "vendor confirmed the outage",
            "--actor",
            "alice",
        ],
    )
    .await;
    assert!(
        console_line.starts_with("replayed by console:alice"),
        "{console_line}"
    );
    assert_eq!(
        evidence(&console.db, ids[1]).await.pop().unwrap(),
        console_line.replacen("console:alice", "cli:alice", 1)
    );
    let actors: Vec<String> = sqlx::query_scalar(
        "SELECT actor FROM alert_events WHERE alert_id = ANY($1) AND actor LIKE 'operator:%'",
    )
    .bind(&ids)
    .fetch_all(&console.db.pool)
    .await
    .unwrap();
    assert_eq!(actors, ["operator:console:alice", "operator:cli:alice"]);
    let audit = console.get(Some(&alice), "/console/audit").await;
    assert!(
        audit.body.contains("<td>console:alice</td>") && audit.body.contains("<td>cli:alice</td>"),
        "{}",
        audit.body
    );

    // The store's rule refuses a second replay; the page says why and nothing changes.
    let after = evidence_and_state(&console.db, ids[0]).await;
    let again = console
        .post(
            Some(&alice),
            &path,
            &[("csrf", &alice.csrf), ("note", "again")],
        )
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert_contains(&again.body, "only held or failed");
    assert_eq!(evidence_and_state(&console.db, ids[0]).await, after);

    let audit = console.get(Some(&alice), "/console/audit").await;
    assert_contains(&audit.body, "vendor confirmed the outage");
    assert!(audit.body.contains(&ids[0].to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolutions_need_a_note_and_a_confirm_and_go_through_the_store() {
    let db = TestDb::new().await;
    let (_sink, _, ids) = held_alerts(&db, "acme", 3).await;
    let console = Console::start(db).await;
    let alice = console.signed_in("alice", "operator", None).await;
    let resolve = |id: Uuid| format!("/console/alerts/{id}/resolve");

    for (resolution, id) in [
        ("accepted", ids[0]),
        ("not-delivered", ids[1]),
        ("abandon", ids[2]),
    ] {
        let confirm = console
            .get(Some(&alice), &format!("{}?as={resolution}", resolve(id)))
            .await;
        assert_eq!(confirm.status, StatusCode::OK, "{}", confirm.body);
        assert!(confirm.body.contains(&format!("value=\"{resolution}\"")));
    }
    let unknown = console
        .get(Some(&alice), &format!("{}?as=guess", resolve(ids[0])))
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);

    let before = evidence_and_state(&console.db, ids[0]).await;
    let no_reference = console
        .post(
            Some(&alice),
            &resolve(ids[0]),
            &[
                ("csrf", &alice.csrf),
                ("resolution", "accepted"),
                ("note", "seen"),
            ],
        )
        .await;
    assert_eq!(no_reference.status, StatusCode::BAD_REQUEST);
    assert_eq!(evidence_and_state(&console.db, ids[0]).await, before);

    let form = |resolution: &'static str, reference: &'static str| {
        vec![
            ("csrf", alice.csrf.clone()),
            ("resolution", resolution.to_owned()),
            ("reference", reference.to_owned()),
            ("note", format!("checked: {resolution}")),
        ]
    };
    for (id, resolution, reference, state) in [
        (ids[0], "accepted", "INV-42", "accepted"),
        (ids[1], "not-delivered", "", "pending"),
        (ids[2], "abandon", "", "failed"),
    ] {
        let fields = form(resolution, reference);
        let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let done = console.post(Some(&alice), &resolve(id), &fields).await;
        assert_eq!(
            done.status,
            StatusCode::SEE_OTHER,
            "{resolution}: {}",
            done.body
        );
        assert_eq!(state_of(&console.db, id).await, state);
        let line = evidence(&console.db, id).await.pop().unwrap();
        assert!(
            line.contains("by console:alice") && line.contains(&format!("checked: {resolution}")),
            "{line}"
        );
    }
    let reference = reference_of(&console.db, ids[0]).await;
    assert_eq!(reference.as_deref(), Some("INV-42"));
}

/// The page shows the lifecycle's answer, not a copy of its rules: a held alert that a
/// later revision corrected offers no Replay and no "not delivered" (both would send the
/// outdated payload) and says why in their place, while recording what happened stays
/// open. A held alert nobody corrected keeps every button.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrected_alert_offers_no_replay_and_says_why() {
    let db = TestDb::new().await;
    let (_sink, _, ids) = held_alerts(&db, "acme", 2).await;
    revise(
        &db,
        &ids[0].to_string(),
        r#"{"alert": 0, "text": "corrected"}"#,
    )
    .await;
    let console = Console::start(db).await;
    let alice = console.signed_in("alice", "operator", None).await;

    let corrected = console
        .get(Some(&alice), &format!("/console/alerts/{}", ids[0]))
        .await;
    assert_eq!(corrected.status, StatusCode::OK);
    assert!(
        !corrected.body.contains("id=\"replay\""),
        "Replay offered for a corrected alert: {}",
        corrected.body
    );
    assert!(!corrected.body.contains("id=\"resolve-not-delivered\""));
    assert!(
        corrected.body.contains("id=\"replay-refused\"")
            && corrected
                .body
                .contains("has been corrected by a later revision"),
        "{}",
        corrected.body
    );
    assert!(corrected
        .body
        .contains("id=\"resolve-not-delivered-refused\""));
    assert!(corrected.body.contains("id=\"resolve-accepted\""));
    assert!(corrected.body.contains("id=\"resolve-abandon\""));

    let untouched = console
        .get(Some(&alice), &format!("/console/alerts/{}", ids[1]))
        .await;
    for button in [
        "replay",
        "resolve-accepted",
        "resolve-not-delivered",
        "resolve-abandon",
    ] {
        assert!(
            untouched.body.contains(&format!("id=\"{button}\"")),
            "{button}: {}",
            untouched.body
        );
    }
    assert!(!untouched.body.contains("class=\"refusal\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_limited_to_a_tenant_cannot_read_or_act_past_it() {
    let db = TestDb::new().await;
    let (_a, acme, acme_ids) = held_alerts(&db, "acme", 2).await;
    let (_g, _, globex_ids) = held_alerts(&db, "globex", 2).await;
    let console = Console::start(db).await;
    // globex's operator acts first, so the audit log has a line to hide.
    let all = console.signed_in("root", "operator", None).await;
    let replay = |id: Uuid| format!("/console/alerts/{id}/replay");
    let done = console
        .post(
            Some(&all),
            &replay(globex_ids[1]),
            &[("csrf", &all.csrf), ("note", "globex secret note")],
        )
        .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER);

    let ann = console.signed_in("ann", "operator", Some(&[acme])).await;
    for path in [
        "/console",
        "/console/outbox?state=held",
        "/console/outbox",
        "/console/destinations",
        "/console/audit",
    ] {
        let page = console.get(Some(&ann), path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        for id in &globex_ids {
            assert!(
                !page.body.contains(&id.to_string()),
                "{path} shows globex's {id}"
            );
        }
        assert!(!page.body.contains("globex"), "{path} names globex");
    }
    let listed = console.get(Some(&ann), "/console/outbox?state=held").await;
    assert!(acme_ids
        .iter()
        .all(|id| listed.body.contains(&id.to_string())));
    let asked = console
        .get(Some(&ann), "/console/outbox?tenant=globex")
        .await;
    assert_contains(&asked.body, "No alert matches.");
    let overview = console.get(Some(&ann), "/console").await;
    assert_contains(&overview.body, "id=\"held-count\">2<");

    let globex_alert = format!("/console/alerts/{}", globex_ids[0]);
    assert_eq!(
        console.get(Some(&ann), &globex_alert).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        console.get(Some(&ann), &replay(globex_ids[0])).await.status,
        StatusCode::NOT_FOUND
    );
    let before = evidence_and_state(&console.db, globex_ids[0]).await;
    let forged = console
        .post(
            Some(&ann),
            &replay(globex_ids[0]),
            &[("csrf", &ann.csrf), ("note", "not mine")],
        )
        .await;
    assert_eq!(forged.status, StatusCode::NOT_FOUND);
    assert_eq!(evidence_and_state(&console.db, globex_ids[0]).await, before);

    let globex_destination: Uuid = sqlx::query_scalar(
        "SELECT d.id FROM destinations d JOIN tenants t ON t.id = d.tenant_id WHERE t.name = 'globex'",
    )
    .fetch_one(&console.db.pool)
    .await
    .unwrap();
    let toggle = console
        .post(
            Some(&ann),
            &format!("/console/destinations/{globex_destination}/enabled"),
            &[("csrf", &ann.csrf), ("enabled", "false")],
        )
        .await;
    assert_eq!(toggle.status, StatusCode::NOT_FOUND);
    let enabled: bool = sqlx::query_scalar("SELECT enabled FROM destinations WHERE id = $1")
        .bind(globex_destination)
        .fetch_one(&console.db.pool)
        .await
        .unwrap();
    assert!(enabled);
    // Bulk replays count only the account's tenants.
    let dry = console
        .get(Some(&ann), "/console/bulk-replay?state=held")
        .await;
    assert_contains(&dry.body, "id=\"dry-run-count\">2<");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_text_is_shown_as_text() {
    let console = Console::start(TestDb::new().await).await;
    let tenant = add_tenant(&console.db, "acme", &["ops"]).await;
    let script = "<script>alert(1)</script>";
    let payload = json!({
        "vendor": script,
        "note": "\"quoted\" & 'single'",
        "file": "invoice\u{202e}gnp.exe",
    })
    .to_string();
    let subject = format!("contract:{script}\u{202e}gpj.exe");
    let occurrence = "2027-01-31/30d";
    let id = approve_one(
        &console.db,
        tenant.id,
        "ops",
        &subject,
        occurrence,
        &payload,
    )
    .await;
    let viewer = console.signed_in("vera", "viewer", None).await;
    for path in [
        format!("/console/alerts/{id}"),
        "/console/outbox".to_owned(),
    ] {
        let page = console.get(Some(&viewer), &path).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(!page.body.contains("<script>"), "{path}: {}", page.body);
        assert!(
            page.body
                .contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"),
            "{path}: {}",
            page.body
        );
        assert!(
            !page.body.contains('\u{202e}'),
            "{path} sends the bidi override"
        );
        assert!(page.body.contains("\\u{202e}"), "{path}: {}", page.body);
    }
    // The payload block too: its bidi override is shown, not obeyed.
    let page = console
        .get(Some(&viewer), &format!("/console/alerts/{id}"))
        .await;
    let start = page.body.find("id=\"payload\">").unwrap();
    let block = &page.body[start..start + page.body[start..].find("</pre>").unwrap()];
    assert!(block.contains("invoice\\u{202e}gnp.exe"), "{block}");
    // A search for markup is escaped back into the form, not run.
    let search = console
        .get(
            Some(&viewer),
            "/console/outbox?subject=%22%3E%3Cscript%3Ealert(2)%3C%2Fscript%3E",
        )
        .await;
    assert!(!search.body.contains("<script>alert(2)"), "{}", search.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_list_filters_and_pages_by_keyset() {
    let console = Console::start(TestDb::new().await).await;
    let tenant = add_tenant(&console.db, "acme", &["ops"]).await;
    let ids = approve_many(&console.db, tenant.id, "ops", 120).await;
    let viewer = console.signed_in("vera", "viewer", None).await;

    let mut seen = Vec::new();
    let mut path = "/console/outbox?tenant=acme&state=pending".to_owned();
    loop {
        let page = console.get(Some(&viewer), &path).await;
        assert_eq!(page.status, StatusCode::OK);
        let rows: Vec<Uuid> = page
            .body
            .split("class=\"alert-link\" href=\"/console/alerts/")
            .skip(1)
            .map(|rest| Uuid::parse_str(&rest[..36]).unwrap())
            .collect();
        assert!(rows.len() <= 50);
        seen.extend(rows);
        match page.body.split("href=\"").find_map(|rest| {
            let link = rest.split('"').next().unwrap();
            (link.contains("before=") && rest.contains("id=\"older\""))
                .then(|| link.replace("&amp;", "&").replace("&#x2f;", "/"))
        }) {
            Some(next) => {
                assert!(next.contains("tenant=acme&state=pending"), "{next}");
                path = next;
            }
            None => break,
        }
    }
    let mut expected = ids.clone();
    expected.reverse();
    assert_eq!(seen, expected, "newest first, each alert once");

    let one = console
        .get(Some(&viewer), "/console/outbox?subject=A-117")
        .await;
    assert_eq!(one.body.matches("class=\"alert-link\"").count(), 1);
    let future = console
        .get(Some(&viewer), "/console/outbox?from=2999-01-01T00%3A00")
        .await;
    assert!(future.body.contains("No alert matches."));
    let past = console
        .get(Some(&viewer), "/console/outbox?to=2000-01-01T00%3A00")
        .await;
    assert!(past.body.contains("No alert matches."));
    let now_range = console
        .get(
            Some(&viewer),
            "/console/outbox?from=2000-01-01T00%3A00&to=2999-01-01T00%3A00",
        )
        .await;
    assert_eq!(now_range.body.matches("class=\"alert-link\"").count(), 50);
    for bad in ["state=lost", "from=yesterday", "before=nope"] {
        let page = console
            .get(Some(&viewer), &format!("/console/outbox?{bad}"))
            .await;
        assert_eq!(page.status, StatusCode::BAD_REQUEST, "{bad}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destinations_are_switched_off_and_on_by_operators_with_an_audit_line() {
    let console = Console::start(TestDb::new().await).await;
    add_tenant(&console.db, "acme", &["ops"]).await;
    let alice = console.signed_in("alice", "operator", None).await;
    let id: Uuid = sqlx::query_scalar("SELECT id FROM destinations")
        .fetch_one(&console.db.pool)
        .await
        .unwrap();
    let path = format!("/console/destinations/{id}/enabled");
    let page = console.get(Some(&alice), "/console/destinations").await;
    assert_contains(&page.body, &format!("action=\"{path}\""));
    assert_contains(&page.body, "<td>hold</td>");

    let switch = |value: &'static str| {
        let (console, alice, path) = (&console, &alice, &path);
        async move {
            console
                .post(
                    Some(alice),
                    path,
                    &[("csrf", &alice.csrf), ("enabled", value)],
                )
                .await
        }
    };
    let off = switch("false").await;
    assert_eq!(off.status, StatusCode::SEE_OTHER);
    let (enabled, reason): (bool, Option<String>) =
        sqlx::query_as("SELECT enabled, disabled_reason FROM destinations WHERE id = $1")
            .bind(id)
            .fetch_one(&console.db.pool)
            .await
            .unwrap();
    assert!(!enabled);
    assert_eq!(reason.as_deref(), Some("disabled by console:alice"));
    let overview = console.get(Some(&alice), "/console").await;
    assert_contains(&overview.body, "disabled: disabled by console:alice");
    let audit = console.get(Some(&alice), "/console/audit").await;
    assert_contains(&audit.body, "destination disabled");
    assert_contains(&audit.body, "acme&#x2f;ops");

    let on = switch("true").await;
    assert_eq!(on.status, StatusCode::SEE_OTHER);
    let enabled: bool = sqlx::query_scalar("SELECT enabled FROM destinations WHERE id = $1")
        .bind(id)
        .fetch_one(&console.db.pool)
        .await
        .unwrap();
    assert!(enabled);
    assert_eq!(switch("maybe").await.status, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_replay_counts_first_then_replays_each_alert_once_in_the_background() {
    let db = TestDb::new().await;
    let (_sink, _, ids) = held_alerts(&db, "acme", 7).await;
    let console = Console::start_with(
        db,
        outbox_console::ConsoleConfig {
            bulk_batch: 3,
            ..outbox_console::ConsoleConfig::default()
        },
    )
    .await;
    let alice = console.signed_in("alice", "operator", None).await;
    let list = console
        .get(Some(&alice), "/console/outbox?state=held")
        .await;
    assert_contains(&list.body, "id=\"bulk-link\"");

    let events = console.db.count("alert_events").await;
    let dry = console
        .get(Some(&alice), "/console/bulk-replay?state=held&tenant=acme")
        .await;
    assert_contains(&dry.body, "id=\"dry-run-count\">7<");
    assert_eq!(
        console.db.count("alert_events").await,
        events,
        "a dry run changes nothing"
    );
    let not_replayable = console
        .get(Some(&alice), "/console/bulk-replay?state=accepted")
        .await;
    assert_eq!(not_replayable.status, StatusCode::BAD_REQUEST);

    let started = console
        .post(
            Some(&alice),
            "/console/bulk-replay",
            &[
                ("csrf", &alice.csrf),
                ("state", "held"),
                ("tenant", "acme"),
                ("note", "relay back up"),
            ],
        )
        .await;
    assert_eq!(started.status, StatusCode::SEE_OTHER, "{}", started.body);
    let progress = started.location().to_owned();
    wait_for_db(
        &console.db,
        "SELECT count(*) FROM console_bulk_replays WHERE state = 'done' AND replayed = 7",
        |n| n == 1,
    )
    .await;
    for id in &ids {
        assert_eq!(state_of(&console.db, *id).await, "pending");
        let replays = evidence(&console.db, *id)
            .await
            .into_iter()
            .filter(|line| {
                line.starts_with("replayed by console:alice") && line.contains("relay back up")
            })
            .count();
        assert_eq!(replays, 1, "{id}");
    }
    let page = console.get(Some(&alice), &progress).await;
    assert_contains(&page.body, "id=\"bulk-replayed\">7<");
    assert_contains(&page.body, "id=\"bulk-state\">done<");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_replay_left_half_done_by_a_dead_worker_resumes_after_its_cursor() {
    let db = TestDb::new().await;
    let (_sink, _, ids) = held_alerts(&db, "acme", 5).await;
    let filter = outbox_store::alert_listings::AlertFilter {
        state: Some(outbox_core::AlertState::Held),
        ..Default::default()
    };
    let run = outbox_store::bulk_replays::create_bulk_replay(
        &db.pool,
        "alice",
        "resume me",
        None,
        &filter,
        5,
    )
    .await
    .unwrap();
    // A worker took it, replayed the two newest alerts, recorded its cursor, and died.
    let taken = outbox_store::bulk_replays::take_bulk_replay(&db.pool, Duration::from_millis(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken.id, run);
    for id in ids.iter().rev().take(2) {
        outbox_store::alert_actions::replay(&db.pool, *id, "alice", "resume me")
            .await
            .unwrap();
    }
    outbox_store::bulk_replays::advance_bulk_replay(
        &db.pool,
        run,
        2,
        0,
        Some(ids[3]),
        false,
        Duration::from_millis(1),
    )
    .await
    .unwrap();

    let console = Console::start(db).await;
    wait_for_db(
        &console.db,
        "SELECT count(*) FROM console_bulk_replays WHERE state = 'done' AND replayed = 5 AND skipped = 0",
        |n| n == 1,
    )
    .await;
    for id in &ids {
        let replays = evidence(&console.db, *id)
            .await
            .into_iter()
            .filter(|line| line.starts_with("replayed by alice"))
            .count();
        assert_eq!(replays, 1, "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_bulk_replay_stays_stopped_until_resumed() {
    let db = TestDb::new().await;
    let (_sink, _, _ids) = held_alerts(&db, "acme", 3).await;
    let run = outbox_store::bulk_replays::create_bulk_replay(
        &db.pool,
        "alice",
        "later",
        None,
        &outbox_store::alert_listings::AlertFilter {
            state: Some(outbox_core::AlertState::Held),
            ..Default::default()
        },
        3,
    )
    .await
    .unwrap();
    assert!(
        outbox_store::bulk_replays::set_bulk_replay_running(&db.pool, run, false)
            .await
            .unwrap()
    );
    let console = Console::start(db).await;
    let alice = console.signed_in("alice", "operator", None).await;
    let page = console
        .get(Some(&alice), &format!("/console/bulk-replay/{run}"))
        .await;
    assert_contains(&page.body, "id=\"resume\"");
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM alert_outcomes WHERE outcome = 'held'")
            .fetch_one(&console.db.pool)
            .await
            .unwrap(),
        3,
        "a stopped run replays nothing"
    );
    let resumed = console
        .post(
            Some(&alice),
            &format!("/console/bulk-replay/{run}/running"),
            &[("csrf", &alice.csrf), ("running", "true")],
        )
        .await;
    assert_eq!(resumed.status, StatusCode::SEE_OTHER);
    wait_for_db(
        &console.db,
        "SELECT count(*) FROM alert_outcomes WHERE outcome = 'held'",
        |n| n == 0,
    )
    .await;
    let audit = console.get(Some(&alice), "/console/audit").await;
    assert_contains(&audit.body, "bulk replay resumed");
}

/// A sign-in POST as a forged form would send it: with `cookie` (if any) and `token`.
async fn forged_login(
    console: &Console,
    cookie: Option<&str>,
    token: &str,
    password: &str,
) -> Page {
    let mut request = console
        .http
        .post(format!("{}/console/login", console.base))
        .form(&[
            ("name", "alice"),
            ("password", password),
            ("login_token", token),
        ]);
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let response = request.send().await.unwrap();
    Page {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_session_cookie_the_client_chose_is_replaced_by_a_fresh_one() {
    let console = Console::start(TestDb::new().await).await;
    let password = console.account("alice", "operator", None).await;
    let chosen = "outbox_console_login=chosen-by-the-attacker";
    let shown_with = |cookie: &str| {
        let request = console
            .http
            .get(format!("{}/console/login", console.base))
            .header("cookie", cookie.to_owned());
        async move {
            let page = page(request.send().await.unwrap()).await;
            let set = page.headers["set-cookie"].to_str().unwrap().to_owned();
            set.split(';').next().unwrap().to_owned()
        }
    };
    let issued = shown_with(chosen).await;
    assert_ne!(issued, chosen, "the chosen value is not kept");
    assert!(issued.starts_with("outbox_console_login="), "{issued}");
    // One the console made is kept: reloading the form does not start a new one.
    assert_eq!(shown_with(&issued).await, issued);
    // The chosen value signs nobody in, whatever token comes with it.
    let (_, token) = console.login_form().await;
    let page = forged_login(&console, Some(chosen), &token, &password).await;
    assert_eq!(page.status, StatusCode::FORBIDDEN, "{}", page.body);
    assert_eq!(console.db.count("console_sessions").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_without_its_forms_token_and_cookie_is_refused() {
    let console = Console::start(TestDb::new().await).await;
    let password = console.account("alice", "operator", None).await;
    let (cookie_a, token_a) = console.login_form().await;
    let (cookie_b, _) = console.login_form().await;
    assert_ne!(cookie_a, cookie_b, "each new form has its own pre-session");
    for (what, page) in [
        ("neither", forged_login(&console, None, "", &password).await),
        (
            "a token but no cookie",
            forged_login(&console, None, &token_a, &password).await,
        ),
        (
            "a cookie but no token",
            forged_login(&console, Some(&cookie_a), "", &password).await,
        ),
        (
            "another form's token",
            forged_login(&console, Some(&cookie_b), &token_a, &password).await,
        ),
        (
            "a made-up token",
            forged_login(&console, Some(&cookie_a), "bm90LWEtdG9rZW4", &password).await,
        ),
    ] {
        assert_eq!(page.status, StatusCode::FORBIDDEN, "{what}");
        assert!(
            page.body.contains("reload the sign-in page"),
            "{what}: {}",
            page.body
        );
    }
    assert_eq!(console.db.count("console_sessions").await, 0);
    assert_eq!(
        console.db.count("console_sign_in_failures").await,
        0,
        "a forged form is not even counted"
    );
    // The same form, as shown: signed in, and the pre-session cookie is cleared.
    let page = forged_login(&console, Some(&cookie_a), &token_a, &password).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    assert!(page
        .headers
        .get_all("set-cookie")
        .iter()
        .any(|c| c.to_str().unwrap().starts_with("outbox_console_login=;")));
    assert_eq!(console.db.count("console_sessions").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_sign_ins_are_limited_per_name_whether_or_not_it_exists() {
    let console = Console::start(TestDb::new().await).await;
    let password = console.account("alice", "operator", None).await;
    let bob_password = console.account("bob", "viewer", None).await;
    for name in ["alice", "nobody"] {
        for _ in 0..5 {
            assert_eq!(
                console.login(name, "guess").await.status,
                StatusCode::UNAUTHORIZED,
                "{name}"
            );
        }
    }
    // The sixth is refused before any password is checked: the right one too.
    let alice = console.login("alice", &password).await;
    let nobody = console.login("nobody", "guess").await;
    for page in [&alice, &nobody] {
        assert_eq!(page.status, StatusCode::TOO_MANY_REQUESTS);
        let retry_after: u64 = page.headers["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=900).contains(&retry_after), "{retry_after}");
        assert_contains(
            &page.body,
            "too many failed sign-ins for this name or from this address",
        );
    }
    let message = |page: &Page| {
        let start = page.body.find("id=\"login-error\"").unwrap();
        page.body[start..].split('<').next().unwrap().to_owned()
    };
    assert_eq!(
        message(&alice),
        message(&nobody),
        "nothing tells which name exists"
    );
    assert_eq!(console.db.count("console_sessions").await, 0);

    // Another name is not held back by alice's failures, and a success clears its count:
    // four failures and a success, twice, never reach the limit of five.
    for _ in 0..2 {
        for _ in 0..4 {
            assert_eq!(
                console.login("bob", "guess").await.status,
                StatusCode::UNAUTHORIZED
            );
        }
        assert_eq!(
            console.login("bob", &bob_password).await.status,
            StatusCode::SEE_OTHER
        );
        let bob_failures: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM console_sign_in_failures WHERE account_name = 'bob'",
        )
        .fetch_one(&console.db.pool)
        .await
        .unwrap();
        assert_eq!(bob_failures, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_sign_ins_are_limited_per_client_address() {
    let console = Console::start_with(
        TestDb::new().await,
        outbox_console::ConsoleConfig {
            sign_in_limits: outbox_store::operator_accounts::SignInLimits {
                window: Duration::from_secs(900),
                per_name: 100,
                per_address: 3,
            },
            ..outbox_console::ConsoleConfig::default()
        },
    )
    .await;
    let password = console.account("alice", "operator", None).await;
    for name in ["a", "b", "c"] {
        assert_eq!(
            console.login(name, "guess").await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    let page = console.login("alice", &password).await;
    assert_eq!(page.status, StatusCode::TOO_MANY_REQUESTS, "{}", page.body);
    let addresses: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT host(client_addr) FROM console_sign_in_failures")
            .fetch_all(&console.db.pool)
            .await
            .unwrap();
    assert_eq!(addresses, vec!["127.0.0.1".to_owned()]);
    assert_eq!(console.db.count("console_sessions").await, 0);
    // Made-up names from an address past its limit do not add a line each to the audit
    // log: they are counted on one line for the address.
    for i in 0..20 {
        let page = console.login(&format!("made-up-{i}"), "guess").await;
        assert_eq!(page.status, StatusCode::TOO_MANY_REQUESTS);
    }
    let failed: Vec<(String, String, i32)> = sqlx::query_as(
        "SELECT operator, target, count FROM console_audit \
         WHERE action = 'sign-in failed' ORDER BY id",
    )
    .fetch_all(&console.db.pool)
    .await
    .unwrap();
    let line = |name: &str, count| (format!("console:{name}"), "127.0.0.1".to_owned(), count);
    assert_eq!(
        failed,
        [
            line("a", 1),
            line("b", 1),
            line("c", 1),
            line("(any name)", 21)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_disabled_for_failing_is_flagged_on_the_overview() {
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &["ops", "calm"]).await;
    let ops = outbox_store::destinations::id_by_name(&db.pool, tenant.id, "ops")
        .await
        .unwrap();
    let calm = outbox_store::destinations::id_by_name(&db.pool, tenant.id, "calm")
        .await
        .unwrap();
    outbox_store::health::set_disable_after_failing(
        &db.pool,
        tenant.id,
        "ops",
        Some(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    let (long_ago, now) = (
        chrono::Utc::now() - chrono::Duration::hours(2),
        chrono::Utc::now(),
    );
    let failing = |id| outbox_store::health::SendTally {
        destination_id: id,
        first_failure: Some(long_ago),
        last_failure: Some(now),
        last_success: None,
    };
    let calm_failing = outbox_store::health::SendTally {
        first_failure: Some(now),
        ..failing(calm)
    };
    let disabled = outbox_store::health::report(&db.pool, "w", &[failing(ops), calm_failing])
        .await
        .unwrap();
    assert_eq!(disabled.len(), 1);
    let console = Console::start(db).await;
    let viewer = console.signed_in("vera", "viewer", None).await;
    let overview = console.get(Some(&viewer), "/console").await;
    assert_contains(&overview.body, "id=\"auto-disabled\"");
    assert_contains(
        &overview.body,
        "disabled automatically: every send has failed since",
    );
    assert_contains(&overview.body, "1h window");
    assert!(
        overview.body.contains("failing since"),
        "calm is flagged as failing, still on"
    );
    let destinations = console.get(Some(&viewer), "/console/destinations").await;
    assert!(destinations.body.contains("disabled automatically"));
    let audit = console.get(Some(&viewer), "/console/audit").await;
    assert_contains(&audit.body, "dispatcher:w");
}

/// The `href` of the element with `id` in a page, unescaped.
fn link(page: &Page, id: &str) -> Option<String> {
    let marker = format!("id=\"{id}\" href=\"");
    let start = page.body.find(&marker)? + marker.len();
    Some(
        page.body[start..]
            .split('"')
            .next()?
            .replace("&#x2f;", "/")
            .replace("&amp;", "&"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_pages_by_keyset_with_urls_that_keep_their_lines() {
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &["ops"]).await;
    let id = approve_many(&db, tenant.id, "ops", 1).await[0];
    // 55 evidence lines by alice and 55 console actions by bob, all at the same instant:
    // the order within one time must still be total.
    sqlx::query(
        "INSERT INTO alert_events (alert_id, at, from_state, to_state, actor, line) \
         SELECT $1, '2026-11-30T10:00:00Z', 'held', 'pending', 'operator:alice', 'alice ' || i \
         FROM generate_series(1, 55) i",
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO console_audit (at, operator, tenant_id, action, target, note) \
         SELECT '2026-11-30T10:00:00Z', 'bob', $1, 'destination disabled', 'ops', 'bob ' || i \
         FROM generate_series(1, 55) i",
    )
    .bind(tenant.id)
    .execute(&db.pool)
    .await
    .unwrap();
    let console = Console::start(db).await;
    let viewer = console.signed_in("vera", "viewer", None).await;
    // Lines without a note (the viewer's own sign-in) are left out of what is compared.
    let notes = |page: &Page| -> Vec<String> {
        page.body
            .split("<td class=\"line\">")
            .skip(1)
            .map(|cell| cell.split('<').next().unwrap().to_owned())
            .filter(|note| !note.is_empty())
            .collect()
    };

    let mut seen = Vec::new();
    let mut urls = Vec::new();
    let mut url = "/console/audit".to_owned();
    loop {
        let page = console.get(Some(&viewer), &url).await;
        assert_eq!(page.status, StatusCode::OK, "{url}: {}", page.body);
        seen.extend(notes(&page));
        urls.push(url.clone());
        match link(&page, "audit-next") {
            Some(next) => url = next,
            None => break,
        }
    }
    assert_eq!(urls.len(), 3, "{urls:?}");
    assert_eq!(seen.len(), 110);
    let distinct: std::collections::BTreeSet<_> = seen.iter().collect();
    assert_eq!(distinct.len(), 110, "no line twice, none left out");
    // Evidence lines sort before console actions of the same time, newest id first.
    assert_eq!(seen[0], "alice 55");
    assert_eq!(seen[109], "bob 1");

    // A newer line does not move what a page's URL shows.
    let second = notes(&console.get(Some(&viewer), &urls[1]).await);
    sqlx::query(
        "INSERT INTO console_audit (operator, action, target, note) \
         VALUES ('carol', 'destination enabled', 'ops', 'newer')",
    )
    .execute(&console.db.pool)
    .await
    .unwrap();
    assert_eq!(notes(&console.get(Some(&viewer), &urls[1]).await), second);
    assert_eq!(
        notes(&console.get(Some(&viewer), "/console/audit").await)[0],
        "newer"
    );

    // One operator's lines, paged with the filter kept in the links.
    let bob = console
        .get(Some(&viewer), "/console/audit?operator=bob")
        .await;
    assert_eq!(notes(&bob).len(), 50);
    let next = link(&bob, "audit-next").unwrap();
    assert!(
        next.starts_with("/console/audit?operator=bob&after="),
        "{next}"
    );
    let rest = console.get(Some(&viewer), &next).await;
    assert_eq!(
        notes(&rest),
        (1..=5)
            .rev()
            .map(|i| format!("bob {i}"))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        link(&rest, "audit-first").unwrap(),
        "/console/audit?operator=bob"
    );

    let bad = console
        .get(Some(&viewer), "/console/audit?after=yesterday")
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_contains(&bad.body, "not an audit page cursor");
}

/// The audit log's lines as `(operator, action, target, note, count)`, oldest first.
async fn audit_lines(db: &TestDb) -> Vec<(String, String, String, String, i32)> {
    sqlx::query_as("SELECT operator, action, target, note, count FROM console_audit ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_ins_sign_outs_and_failed_sign_ins_are_in_the_audit_log() {
    // A day's window, so that the run does not straddle two windows of the count.
    let mut config = outbox_console::ConsoleConfig::default();
    config.sign_in_limits.window = Duration::from_secs(86_400);
    let console = Console::start_with(TestDb::new().await, config).await;
    let alice = console.signed_in("alice", "operator", None).await;
    let out = console
        .post(Some(&alice), "/console/logout", &[("csrf", &alice.csrf)])
        .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    // A flood of guesses for one name from one address: the first ones are checked, the
    // rest refused by the limit; all of them are one line, counted.
    for _ in 0..50 {
        let page = console.login("mallory", "guess").await;
        assert!(matches!(page.status.as_u16(), 401 | 429), "{}", page.status);
    }
    let lines = audit_lines(&console.db).await;
    let expected = [
        ("console:alice", "signed in", "127.0.0.1", "", 1),
        ("console:alice", "signed out", "", "", 1),
        ("console:mallory", "sign-in failed", "127.0.0.1", "", 50),
    ];
    assert_eq!(
        lines
            .iter()
            .map(|(o, a, t, n, c)| (o.as_str(), a.as_str(), t.as_str(), n.as_str(), *c))
            .collect::<Vec<_>>(),
        expected
    );
    let admin = console.signed_in("admin", "viewer", None).await;
    let page = console.get(Some(&admin), "/console/audit").await;
    assert_contains(
        &page.body,
        "sign-in failed <span class=\"count\">×50</span>",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outboxctl_changes_to_accounts_tokens_destinations_and_secrets_are_in_the_audit_log() {
    let db = TestDb::new().await;
    let acme = add_tenant(&db, "acme", &["ops"]).await;
    let keys = format!(
        "k1:{}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [1u8; 32])
    );
    let run = |args: Vec<&'static str>| {
        let db = &db;
        async move {
            let run = outboxctl(db, &args).await;
            assert!(run.ok, "{args:?}: {}", run.stderr);
            run.stdout
        }
    };
    run(vec![
        "operator", "add", "bob", "--role", "viewer", "--tenant", "acme",
    ])
    .await;
    run(vec!["operator", "remove", "bob"]).await;
    run(vec!["token", "create", "--tenant", "acme", "--label", "ci"]).await;
    let token_id: Uuid = sqlx::query_scalar("SELECT id FROM api_tokens WHERE label = 'ci'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    outboxctl_ok(&db, &["token", "revoke", &token_id.to_string()]).await;
    DestinationAdd::webhook("crm", "http://h/x").add(&db).await;
    // `destination VERB crm --tenant acme`, then `extra`.
    let crm = |verb: &'static str, extra: &[&'static str]| {
        run([&["destination", verb, "crm", "--tenant", "acme"][..], extra].concat())
    };
    crm("update", &["--disable-after-failing", "1h"]).await;
    // `--actor` names who changed the ordering in the evidence of the alerts it lets go,
    // and so in the audit log too: one actor for both, not `$USER` in one of them.
    crm("update", &["--ordering", "per-key", "--actor", "admin"]).await;
    crm("disable", &["--actor", "admin"]).await;
    crm("enable", &["--actor", "admin"]).await;
    crm("rotate-secret", &["--generate"]).await;
    outboxctl_ok(&db, &["--secret-keys", &keys, "secrets", "rewrap"]).await;
    // A command that fails leaves no line.
    assert!(!outboxctl(&db, &["operator", "remove", "nobody"]).await.ok);

    let lines = audit_lines(&db).await;
    let token = format!("token {token_id}");
    let expected = [
        ("cli:alice", "operator added", "bob", "viewer, tenants acme"),
        ("cli:alice", "operator removed", "bob", ""),
        ("cli:alice", "token created", "token of acme", "ci"),
        ("cli:alice", "token revoked", token.as_str(), ""),
        ("cli:alice", "destination added", "acme/crm", ""),
        ("cli:alice", "destination updated", "acme/crm", ""),
        ("cli:admin", "destination updated", "acme/crm", ""),
        ("cli:admin", "destination disabled", "acme/crm", ""),
        ("cli:admin", "destination enabled", "acme/crm", ""),
        ("cli:alice", "destination secret rotated", "acme/crm", ""),
        ("cli:alice", "secrets rewrapped", "every stored secret", ""),
    ];
    assert_eq!(
        lines
            .iter()
            .map(|(o, a, t, n, _)| (o.as_str(), a.as_str(), t.as_str(), n.as_str()))
            .collect::<Vec<_>>(),
        expected
    );
    // A console account of the same name reads as another actor, and an account limited
    // to the tenant sees the lines about it.
    let console = Console::start(db).await;
    let limited = console
        .signed_in("admin", "operator", Some(&[acme.id]))
        .await;
    let page = console.get(Some(&limited), "/console/audit").await;
    assert_contains(&page.body, "<td>cli:admin</td>");
    assert_contains(&page.body, "<td>console:admin</td>");
    assert_contains(&page.body, "destination secret rotated");
    assert!(
        !page.body.contains("operator removed"),
        "no tenant: {}",
        page.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_limited_to_a_tenant_sees_its_own_bulk_replays_in_the_audit_log_and_no_other() {
    let console = Console::start(TestDb::new().await).await;
    let acme = add_tenant(&console.db, "acme", &["ops"]).await;
    let globex = add_tenant(&console.db, "globex", &["ops"]).await;
    let alice = console
        .signed_in("alice", "operator", Some(&[acme.id]))
        .await;
    let gary = console
        .signed_in("gary", "operator", Some(&[globex.id]))
        .await;
    let root = console.signed_in("root", "operator", None).await;
    let start = |session: &Session, tenant: &'static str, note: &'static str| {
        let session = session.clone();
        let console = &console;
        async move {
            let page = console
                .post(
                    Some(&session),
                    "/console/bulk-replay",
                    &[
                        ("csrf", &session.csrf),
                        ("state", "held"),
                        ("tenant", tenant),
                        ("note", note),
                    ],
                )
                .await;
            assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
        }
    };
    start(&alice, "acme", "acme's own replay").await;
    start(&gary, "globex", "globex's own replay").await;
    // Started by an account of every tenant, over one tenant: that tenant's accounts see it.
    start(&root, "globex", "globex replay by root").await;
    let seen = |session: &Session| {
        let session = session.clone();
        let console = &console;
        async move { console.get(Some(&session), "/console/audit").await.body }
    };
    let alices = seen(&alice).await;
    assert!(alices.contains("acme&#x27;s own replay"), "{alices}");
    assert!(!alices.contains("globex"), "{alices}");
    let garys = seen(&gary).await;
    assert!(garys.contains("globex&#x27;s own replay"), "{garys}");
    assert!(garys.contains("globex replay by root"), "{garys}");
    assert!(!garys.contains("acme"), "{garys}");
    let roots = seen(&root).await;
    for note in [
        "acme&#x27;s own replay",
        "globex&#x27;s own replay",
        "globex replay by root",
    ] {
        assert!(roots.contains(note), "{note}: {roots}");
    }
}

/// An alert's page shows its trace id, linked to the trace viewer the operator set
/// (`--trace-url-template`); an alert approved before trace context was kept shows none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alerts_trace_is_linked_to_the_trace_viewer() {
    let db = TestDb::new().await;
    let (_sink, _, ids) = held_alerts(&db, "acme", 1).await;
    // An operator's correction starts a trace of its own.
    revise(
        &db,
        &ids[0].to_string(),
        r#"{"alert": 0, "text": "corrected"}"#,
    )
    .await;
    let (revision, trace_id): (Uuid, String) =
        sqlx::query_as("SELECT id, substr(traceparent, 4, 32) FROM alerts WHERE revision = 1")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let template = outbox_console::parse_trace_url_template(
        "https://tempo.example/explore/trace/{trace_id}?orgId=1",
    )
    .unwrap();
    let console = Console::start_with(
        db,
        outbox_console::ConsoleConfig {
            trace_url_template: Some(template),
            ..outbox_console::ConsoleConfig::default()
        },
    )
    .await;
    let viewer = console.signed_in("vera", "viewer", None).await;

    let page = console
        .get(Some(&viewer), &format!("/console/alerts/{revision}"))
        .await;
    assert_eq!(page.status, StatusCode::OK);
    // The page escapes `/` in attributes as `&#x2f;`, which a browser reads back.
    let body = page.body.replace("&#x2f;", "/");
    assert!(
        body.contains(&format!(
            "href=\"https://tempo.example/explore/trace/{trace_id}?orgId=1\""
        )),
        "{body}"
    );
    let untraced = console
        .get(Some(&viewer), &format!("/console/alerts/{}", ids[0]))
        .await;
    assert!(!untraced.body.contains("id=\"trace\""), "{}", untraced.body);

    for bad in [
        "ftp://x/{trace_id}",
        "https://tempo.example/trace",
        "https://x/{trace_id}\" onclick=\"x",
    ] {
        assert!(
            outbox_console::parse_trace_url_template(bad).is_err(),
            "{bad}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_destinations_blocked_lanes_show_their_head_reason_and_wait() {
    let sink = Sink::start(&[]).await;
    let console = Console::start(TestDb::new().await).await;
    let tenant = add_tenant(&console.db, "acme", &[]).await.id;
    add_destination(&console.db, tenant, "tickets", &sink.hook_url(), |_| {}).await;
    let id = outbox_store::destinations::id_by_name(&console.db.pool, tenant, "tickets")
        .await
        .unwrap();
    let ordered = outbox_store::lanes::OrderingSettings {
        ordering: outbox_core::Ordering::PerKey,
        on_head_failed: outbox_core::OnHeadFailed::Block,
    };
    outbox_store::lanes::set_ordering(&console.db.pool, id, ordered, false, "test")
        .await
        .unwrap();
    let head = approve_one(
        &console.db,
        tenant,
        "tickets",
        "contract:A-17",
        "60d",
        RENEWAL,
    )
    .await;
    approve_one(
        &console.db,
        tenant,
        "tickets",
        "contract:A-17",
        "30d",
        RENEWAL,
    )
    .await;
    // The head's answer is lost and nothing can settle it: it is held, and the alert
    // behind it waits.
    sink.faults(serde_json::json!({"drop_response_for_keys": [head.to_string()]}))
        .await;
    drain(&console.db, "w1", &[]).await;

    let alice = console.signed_in("alice", "operator", None).await;
    let page = console.get(Some(&alice), "/console/destinations").await;
    assert_contains(&page.body, "per key, block failed heads");
    assert_contains(&page.body, "1 blocked lane<");
    assert_contains(&page.body, "Blocked lanes of acme/tickets");
    assert_contains(
        &page.body,
        &format!("<a href=\"/console/alerts/{head}\">{head}</a>"),
    );
    assert_contains(&page.body, "<td>held</td>");
    assert_contains(&page.body, "<td>contract:A-17</td>");
    assert_contains(&page.body, "<td>1</td>");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alert_page_says_how_far_its_evidence_verifies() {
    let db = TestDb::new().await;
    let (_sink, _, ids) = held_alerts(&db, "acme", 2).await;
    let console = Console::start(db).await;
    let viewer = console.signed_in("vera", "viewer", None).await;
    let check = |body: &str| {
        let start = body
            .find("id=\"evidence-check\"")
            .expect("the evidence check is shown");
        body[start..start + body[start..].find("</dd>").unwrap()].to_owned()
    };

    let page = console
        .get(Some(&viewer), &format!("/console/alerts/{}", ids[0]))
        .await;
    assert!(
        check(&page.body).contains("entries chain correctly; no checkpoint covers them yet"),
        "{}",
        check(&page.body)
    );
    outbox_evidence::checkpoint::make_checkpoint(
        &console.db.pool,
        None,
        &mut outbox_evidence::checkpoint::Memory::default(),
    )
    .await
    .unwrap()
    .unwrap();
    let page = console
        .get(Some(&viewer), &format!("/console/alerts/{}", ids[0]))
        .await;
    assert!(
        check(&page.body).contains("evidence verified up to checkpoint 1 at"),
        "{}",
        check(&page.body)
    );

    // An outcome changed by hand: the page says so.
    sqlx::query("UPDATE alert_outcomes SET outcome = 'accepted' WHERE alert_id = $1")
        .bind(ids[1])
        .execute(&console.db.pool)
        .await
        .unwrap();
    let page = console
        .get(Some(&viewer), &format!("/console/alerts/{}", ids[1]))
        .await;
    let shown = check(&page.body);
    assert!(shown.contains("class=\"mismatch\""), "{shown}");
    assert!(shown.contains("does not verify (1 problem(s))"), "{shown}");
    assert!(
        shown.contains("is accepted, but the last transition"),
        "{shown}"
    );
}
