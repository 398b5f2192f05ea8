//! The console in a real headless Chromium, driven through WebDriver (chromedriver) with
//! fantoccini: the decider binary serves it (`--console-listen`), a real dispatcher and
//! sink make an alert held and then deliver it after an operator replays it in the page.
//! Screenshots of each page go to `target/console-screenshots/`.

use super::*;
use common::decider::DeciderServe;
use fantoccini::{Client, ClientBuilder, Locator};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const CHROMEDRIVER: &str = "chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

fn screenshots_dir() -> PathBuf {
    // CARGO_TARGET_TMPDIR is `target/tmp`: the screenshots go beside it.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn screenshot(browser: &Client, name: &str) {
    let png = browser.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "{name}: not a PNG");
    std::fs::write(screenshots_dir().join(format!("{name}.png")), png).unwrap();
}

/// Starts chromedriver on a port it picks itself (`--port=0`) and reads the port from its
/// announcement: a port found free beforehand could be taken by another test's process
/// before chromedriver binds it. Its output goes to the test's captured output.
async fn chromedriver() -> (Child, String) {
    let mut child = Command::new(CHROMEDRIVER)
        .arg("--port=0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|err| {
            panic!("cannot start {CHROMEDRIVER} ({err}): install Debian's chromium and chromium-driver (.ci/run does)")
        });
    let (announced, port) = tokio::sync::oneshot::channel::<u16>();
    let mut announced = Some(announced);
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stdout.next_line().await {
            eprintln!("[chromedriver] {line}");
            // "ChromeDriver was started successfully on port 39009."
            if let Some(rest) = line.split("started successfully on port ").nth(1) {
                if let (Some(tx), Ok(port)) = (announced.take(), rest.trim_end_matches('.').parse())
                {
                    let _ = tx.send(port);
                }
            }
        }
    });
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stderr.next_line().await {
            eprintln!("[chromedriver] {line}");
        }
    });
    let port = tokio::time::timeout(DEADLINE, port)
        .await
        .expect("chromedriver did not announce its port")
        .expect("chromedriver ended before announcing its port");
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let started = Instant::now();
    loop {
        if let Ok(response) = http.get(format!("{url}/status")).send().await {
            if response.status().is_success() {
                break;
            }
        }
        assert!(started.elapsed() < DEADLINE, "chromedriver did not answer");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (child, url)
}

async fn browser(webdriver: &str, profile: &std::path::Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(webdriver)
        .await
        .expect("a WebDriver session in headless Chromium")
}

/// Types `text` into the field with `id`.
async fn type_into(browser: &Client, id: &str, text: &str) {
    let field = browser.find(Locator::Id(id)).await.unwrap();
    field.send_keys(text).await.unwrap();
}

async fn sign_in(browser: &Client, base: &str, name: &str, password: &str) {
    browser
        .goto(&format!("{base}/console/login"))
        .await
        .unwrap();
    type_into(browser, "name", name).await;
    type_into(browser, "password", password).await;
    browser
        .find(Locator::Id("sign-in"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert_eq!(text_of(browser, "signed-in-as").await, name);
}

/// The element with `id` on the page the browser shows, waiting up to [`DEADLINE`] for it:
/// a click that navigates may return before the new page is in place. When it never
/// appears, the panic says which page the browser shows instead.
async fn element(browser: &Client, id: &str) -> fantoccini::elements::Element {
    match browser
        .wait()
        .at_most(DEADLINE)
        .for_element(Locator::Id(id))
        .await
    {
        Ok(element) => element,
        Err(err) => panic!(
            "no #{id} ({err}); the browser shows {}: {}",
            browser.current_url().await.unwrap(),
            browser.source().await.unwrap()
        ),
    }
}

/// The text of the element with `id`, read once it is there (see [`element`]).
async fn text_of(browser: &Client, id: &str) -> String {
    element(browser, id).await.text().await.unwrap()
}

/// Waits up to [`DEADLINE`] for the browser to show `path` (a click's navigation, a form's
/// redirect); when it never does, the panic says which page it shows instead.
async fn wait_for_path(browser: &Client, base: &str, path: &str) {
    let wanted = reqwest::Url::parse(&format!("{base}{path}")).unwrap();
    if let Err(err) = browser.wait().at_most(DEADLINE).for_url(&wanted).await {
        panic!(
            "the browser never reached {wanted} ({err}); it shows {}: {}",
            browser.current_url().await.unwrap(),
            browser.source().await.unwrap()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_finds_a_held_alert_replays_it_and_sees_it_accepted_in_a_browser() {
    let db = TestDb::new().await;
    let (sink, tenant, ids) = held_alerts(&db, "acme", 1).await;
    let held = ids[0];
    // A second destination, disabled automatically after every send failed for longer
    // than its window (as a dispatcher's health report does it), with alerts waiting.
    add_destination(&db, tenant, "crm", "http://127.0.0.1:9/hook", |_| {}).await;
    let crm = outbox_store::destinations::id_by_name(&db.pool, tenant, "crm")
        .await
        .unwrap();
    outbox_store::health::set_disable_after_failing(
        &db.pool,
        tenant,
        "crm",
        Some(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    let disabled = outbox_store::health::report(
        &db.pool,
        "browser-test",
        &[outbox_store::health::SendTally {
            destination_id: crm,
            first_failure: Some(chrono::Utc::now() - chrono::Duration::minutes(75)),
            last_failure: Some(chrono::Utc::now()),
            last_success: None,
        }],
    )
    .await
    .unwrap();
    assert_eq!(disabled.len(), 1);
    approve_many(&db, tenant, "crm", 4).await;
    let add = |name: &'static str, role: &'static str| {
        let db = &db;
        async move {
            let run = common::outboxctl(db, &["operator", "add", name, "--role", role]).await;
            assert!(run.ok, "{}", run.stderr);
            run.stdout.trim().to_owned()
        }
    };
    let alice_password = add("alice", "operator").await;
    let vera_password = add("vera", "viewer").await;

    let decider = DeciderServe::on(&db.url)
        .with_console()
        .default_interval()
        .env("RUST_LOG", "info")
        .start()
        .await;
    let base = decider.console().to_owned();
    let _dispatcher = spawn_dispatcher(&dispatcher_args(&db, "browser-test", &[]), None);
    let (_chromedriver, webdriver) = chromedriver().await;
    let profile =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("chromium-{}", Uuid::new_v4()));
    let browser = browser(&webdriver, &profile).await;

    // Signed out, every page sends the browser to the sign-in page.
    browser.goto(&format!("{base}/console")).await.unwrap();
    assert!(browser
        .current_url()
        .await
        .unwrap()
        .as_str()
        .ends_with("/console/login"));
    screenshot(&browser, "01-sign-in").await;
    sign_in(&browser, &base, "alice", &alice_password).await;

    // The overview shows the held alert; open it.
    assert_eq!(text_of(&browser, "held-count").await, "1");
    let flagged = text_of(&browser, "auto-disabled").await;
    assert!(
        flagged.contains("crm") && flagged.contains("every send has failed since"),
        "{flagged}"
    );
    screenshot(&browser, "02-overview").await;
    browser
        .find(Locator::Css(&format!(
            "#attention a[href='/console/alerts/{held}']"
        )))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for_path(&browser, &base, &format!("/console/alerts/{held}")).await;
    assert_eq!(text_of(&browser, "state").await, "held");
    let trail = text_of(&browser, "evidence").await;
    assert!(trail.contains("held for reconciliation"), "{trail}");
    screenshot(&browser, "03-alert-held").await;

    // Replay it, with a note, through the confirm page.
    element(&browser, "replay").await.click().await.unwrap();
    element(&browser, "note")
        .await
        .send_keys("checked with the vendor: not received")
        .await
        .unwrap();
    screenshot(&browser, "04-confirm-replay").await;
    element(&browser, "confirm").await.click().await.unwrap();
    // The replay answers with a redirect to the alert: let that navigation finish before
    // the loop below starts its own.
    wait_for_path(&browser, &base, &format!("/console/alerts/{held}")).await;

    // The real dispatcher delivers it; the page, reloaded, says accepted.
    let started = Instant::now();
    loop {
        browser
            .goto(&format!("{base}/console/alerts/{held}"))
            .await
            .unwrap();
        if text_of(&browser, "state").await == "accepted" {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the replayed alert was never accepted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let trail = text_of(&browser, "evidence").await;
    assert!(
        trail.contains(
            "replayed by console:alice (was held): checked with the vendor: not received"
        ),
        "{trail}"
    );
    screenshot(&browser, "05-alert-accepted").await;
    // The sink's own record: the replay arrived with the alert's own key.
    assert!(!sink.records(&held.to_string()).await.is_empty());
    assert_eq!(state_of(&db, held).await, "accepted");

    browser
        .goto(&format!("{base}/console/outbox"))
        .await
        .unwrap();
    assert!(browser
        .find(Locator::Css(&format!("a[href='/console/alerts/{held}']")))
        .await
        .is_ok());
    screenshot(&browser, "06-outbox").await;
    browser
        .goto(&format!("{base}/console/destinations"))
        .await
        .unwrap();
    screenshot(&browser, "07-destinations").await;
    browser
        .goto(&format!("{base}/console/audit"))
        .await
        .unwrap();
    let audit = text_of(&browser, "audit").await;
    assert!(
        audit.contains("alice") && audit.contains("checked with the vendor"),
        "{audit}"
    );
    screenshot(&browser, "08-audit").await;

    // A viewer sees no action, and a POST forged with the viewer's session is refused.
    browser.delete_all_cookies().await.unwrap();
    sign_in(&browser, &base, "vera", &vera_password).await;
    browser
        .goto(&format!("{base}/console/alerts/{held}"))
        .await
        .unwrap();
    assert!(
        browser.find(Locator::Id("actions")).await.is_err(),
        "a viewer sees action buttons"
    );
    assert!(browser.find(Locator::Id("replay")).await.is_err());
    screenshot(&browser, "09-viewer-alert").await;
    browser
        .goto(&format!("{base}/console/alerts/{held}/replay"))
        .await
        .unwrap();
    assert!(browser
        .source()
        .await
        .unwrap()
        .contains("viewers can read but not act"));
    let cookie = browser.get_named_cookie("outbox_console").await.unwrap();
    browser.goto(&format!("{base}/console")).await.unwrap();
    let csrf = csrf_of(&browser.source().await.unwrap());
    let events_before = evidence(&db, held).await;
    let forged = reqwest::Client::new()
        .post(format!("{base}/console/alerts/{held}/resolve"))
        .header("cookie", format!("{}={}", cookie.name(), cookie.value()))
        .form(&[
            ("csrf", csrf.as_str()),
            ("resolution", "abandon"),
            ("note", "forged"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert_eq!(evidence(&db, held).await, events_before);
    assert_eq!(state_of(&db, held).await, "accepted");

    browser.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&profile);
}
