//! The egress guard end to end: the real dispatcher, decider and outboxctl against
//! destinations and feeds on addresses they must not reach, with a real listener that
//! counts every connection it gets.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::add_tenant;
use common::alerts::{approve_many, evidence, state_of};
use common::decider;
use common::destinations::{add_destination, DestinationAdd};
use common::procs::{drain, Sink, TEST_ALLOW_PRIVATE};
use outbox_testkit::TestDb;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A listener on 127.0.0.1 that answers 200 to anything and counts connections: without
/// the guard, every loopback spelling below would be accepted here.
async fn counting_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buffer = [0u8; 8192];
                let _ = socket.read(&mut buffer).await;
                let _ = socket
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    (port, connections)
}

/// Names in /etc/hosts that point at a loopback address (at least `localhost`).
fn loopback_names_from_hosts_file() -> Vec<String> {
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let mut names: Vec<String> = hosts
        .lines()
        .map(|line| line.split('#').next().unwrap_or(""))
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let address: std::net::IpAddr = fields.next()?.parse().ok()?;
            address
                .is_loopback()
                .then(|| fields.map(str::to_owned).collect::<Vec<_>>())
        })
        .flatten()
        .filter(|name| !name.contains(':'))
        .collect();
    names.sort();
    names.dedup();
    if !names.contains(&"localhost".to_owned()) {
        names.push("localhost".to_owned());
    }
    names
}

/// Every spelling of a loopback or metadata address a tenant could give as a URL host, and
/// the reason the guard must give for it.
fn hostile_hosts() -> Vec<(String, &'static str)> {
    let mut hosts: Vec<(String, &'static str)> = [
        ("127.0.0.1", "loopback"),
        ("2130706433", "loopback"),
        ("0x7f000001", "loopback"),
        ("017700000001", "loopback"),
        ("127.1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("[::1]", "loopback"),
        (
            "[::ffff:127.0.0.1]",
            "loopback (IPv4-mapped form of 127.0.0.1)",
        ),
        ("169.254.169.254", "link-local"),
    ]
    .into_iter()
    .map(|(host, why)| (host.to_owned(), why))
    .collect();
    for name in loopback_names_from_hosts_file() {
        hosts.push((name, "loopback"));
    }
    hosts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_loopback_spelling_fails_its_alert_disables_the_destination_and_never_connects() {
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &[]).await;
    let (port, connections) = counting_listener().await;
    let hosts = hostile_hosts();
    let mut alerts = Vec::new();
    for (n, (host, _)) in hosts.iter().enumerate() {
        // Written straight to the store, as rows from before the guard existed would be:
        // outboxctl refuses them (tested below).
        let name = format!("d{n}");
        let url = format!("http://{host}:{port}/hook");
        add_destination(&db, tenant.id, &name, &url, |_| {}).await;
        alerts.push(approve_many(&db, tenant.id, &name, 1).await[0]);
    }
    // No range opened: what a production dispatcher does.
    drain(&db, "guarded", &["--allow-private", ""]).await;

    for ((host, why), alert) in hosts.iter().zip(&alerts) {
        assert_eq!(state_of(&db, *alert).await, "failed", "{host}");
        let lines = evidence(&db, *alert).await.join("\n");
        assert!(
            lines.contains(&format!("is not allowed: {why}")),
            "{host}: {lines}"
        );
        assert!(
            lines.contains("the destination was disabled"),
            "{host}: {lines}"
        );
        // Nothing that tells what listens there: no refused/timeout/closed class.
        assert!(
            !lines.contains("refused") && !lines.contains("timed out"),
            "{host}: {lines}"
        );
    }
    let classes: Vec<(String, String)> =
        sqlx::query_as("SELECT DISTINCT outcome, error_class FROM delivery_attempts")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(classes, vec![("not_sent".to_owned(), "blocked".to_owned())]);
    let disabled: Vec<(bool, Option<String>)> =
        sqlx::query_as("SELECT enabled, disabled_reason FROM destinations")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(disabled.len(), hosts.len());
    for (enabled, reason) in disabled {
        assert!(!enabled);
        assert!(reason.unwrap().contains("is not allowed"));
    }
    assert_eq!(connections.load(Ordering::SeqCst), 0, "nothing connected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_lookup_url_holds_the_uncertain_alert_and_disables_the_destination() {
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &[]).await;
    let sink = Sink::start(&["--lookup"]).await;
    // Sends go to the sink on 127.0.0.1 (opened); lookups to 127.0.0.2 (not opened).
    let lookup = sink.lookup_template().replace("127.0.0.1", "127.0.0.2");
    add_destination(&db, tenant.id, "ops", &sink.hook_url(), |d| {
        d.lookup_url_template = Some(lookup.clone());
    })
    .await;
    let alert = approve_many(&db, tenant.id, "ops", 1).await[0];
    sink.faults(serde_json::json!({"drop_response_for_keys": [alert.to_string()]}))
        .await;
    drain(
        &db,
        "lookup",
        &["--allow-private", "127.0.0.1/32", "--drain-horizon", "5s"],
    )
    .await;
    assert_eq!(state_of(&db, alert).await, "held");
    let lines = evidence(&db, alert).await.join("\n");
    assert!(
        lines.contains("lookup not sent: destination address 127.0.0.2 is not allowed: loopback"),
        "{lines}"
    );
    let enabled: bool = sqlx::query_scalar("SELECT enabled FROM destinations")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(!enabled);
}

#[tokio::test]
async fn destination_add_refuses_a_blocked_url_up_front_and_writes_nothing() {
    let db = TestDb::new().await;
    add_tenant(&db, "acme", &[]).await;
    for (host, why) in hostile_hosts() {
        let url = format!("http://{host}:9000/hook");
        let run = DestinationAdd::webhook("ops", &url).run(&db).await;
        assert!(!run.ok, "{url} accepted");
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        assert!(
            run.stderr.starts_with("error: --url: destination address")
                && run.stderr.contains(&format!("is not allowed: {why}")),
            "{url}: {}",
            run.stderr
        );
    }
    // The lookup URL gets the same check.
    let run = DestinationAdd::webhook("ops", "http://127.0.0.1:9000/hook")
        .args(&["--lookup-url", "http://169.254.169.254/{key}"])
        .args(&["--allow-private", "127.0.0.0/8"])
        .run(&db)
        .await;
    assert!(!run.ok);
    assert!(
        run.stderr.starts_with(
            "error: --lookup-url: destination address 169.254.169.254 is not allowed: link-local"
        ),
        "{}",
        run.stderr
    );
    assert_eq!(db.count("destinations").await, 0);
}

#[tokio::test]
async fn framing_and_hop_by_hop_headers_cannot_carry_the_notification_id() {
    let db = TestDb::new().await;
    add_tenant(&db, "acme", &[]).await;
    for header in [
        "Host",
        "Content-Length",
        "Transfer-Encoding",
        "Connection",
        "Keep-Alive",
        "Upgrade",
        "TE",
        "Trailer",
        "Expect",
        "Content-Encoding",
        "Authorization",
        "Cookie",
        "Proxy-Authorization",
        "Content-Type",
        "webhook-signature",
    ] {
        let run = DestinationAdd::webhook("ops", "https://8.8.8.8/hook")
            .args(&["--idempotency-header", header])
            .run(&db)
            .await;
        assert!(!run.ok, "{header} accepted");
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        assert!(
            run.stderr.starts_with("error: --idempotency-header: ")
                && run.stderr.contains("cannot carry the notification id"),
            "{header}: {}",
            run.stderr
        );
    }
    assert_eq!(db.count("destinations").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatcher_refuses_to_send_with_a_framing_header_written_by_other_means() {
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &[]).await;
    let (port, connections) = counting_listener().await;
    let url = format!("http://127.0.0.1:{port}/hook");
    let headers = [
        "Host",
        "Content-Length",
        "Transfer-Encoding",
        "Expect",
        "Content-Encoding",
        "Authorization",
        "Cookie",
    ];
    for header in headers {
        add_destination(&db, tenant.id, header, &url, |d| {
            d.idempotency_header = header.to_owned();
        })
        .await;
    }
    let mut alerts = Vec::new();
    for header in headers {
        alerts.push((header, approve_many(&db, tenant.id, header, 1).await[0]));
    }
    drain(&db, "headers", &["--allow-private", TEST_ALLOW_PRIVATE]).await;
    for (header, alert) in alerts {
        assert_eq!(state_of(&db, alert).await, "failed", "{header}");
        let lines = evidence(&db, alert).await.join("\n");
        assert!(
            lines.contains(&format!("`{header}` cannot carry the notification id")),
            "{header}: {lines}"
        );
    }
    assert_eq!(connections.load(Ordering::SeqCst), 0, "nothing was sent");
}

/// A server that records every request it gets: path, query and headers.
pub(crate) async fn recording_server() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let kept = seen.clone();
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let kept = kept.clone();
        async move {
            kept.lock()
                .unwrap()
                .push(format!("{} {:?}", request.uri(), request.headers()));
            axum::Json(serde_json::json!({"posts": []}))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

/// A feed that redirects `/redirect` to `elsewhere`, and whose `/paged` page links its
/// `next` page on `elsewhere`.
async fn hostile_feed(elsewhere: String) -> String {
    let to = elsewhere.clone();
    let app = axum::Router::new()
        .route(
            "/redirect",
            axum::routing::get(move || {
                let to = to.clone();
                async move {
                    (
                        axum::http::StatusCode::FOUND,
                        [(axum::http::header::LOCATION, format!("{to}/collect"))],
                    )
                }
            }),
        )
        .route(
            "/paged",
            axum::routing::get(move || {
                let elsewhere = elsewhere.clone();
                async move {
                    axum::Json(serde_json::json!({
                        "posts": [],
                        "moreResultsAvailable": 5,
                        "next": format!("{elsewhere}/collect?ts=2"),
                    }))
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// A fresh database with tenant `acme`, its destination `ops`, and a watchlist entry for
/// `acme` whose news alerts go to `ops`.
pub(crate) async fn acme_watching_the_news() -> TestDb {
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &["ops"]).await;
    outbox_store::sources::add_watchlist_entry(
        &db.pool,
        &outbox_store::sources::NewWatchlistEntry {
            tenant_id: tenant.id,
            name: "acme".to_owned(),
            query: "acme".to_owned(),
            destinations: vec!["ops".to_owned()],
            group_events: false,
            group_window_secs: 48 * 3600,
        },
    )
    .await
    .unwrap();
    db
}

/// `decider run-once` polling `news_url` with a token; its exit status and stderr.
async fn poll_once(db: &TestDb, news_url: &str) -> (bool, String) {
    let output = decider::poll_news_once(&db.url, news_url)
        .env("WEBZ_TOKEN", "feed-secret-token")
        .env("RUST_LOG", "error")
        .output()
        .await;
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_news_poller_follows_no_redirect_and_sends_the_token_to_no_other_origin() {
    let db = acme_watching_the_news().await;
    let (elsewhere, seen) = recording_server().await;
    let feed = hostile_feed(elsewhere).await;

    let (redirected, redirect_stderr) = poll_once(&db, &format!("{feed}/redirect")).await;
    let (paged, paged_stderr) = poll_once(&db, &format!("{feed}/paged")).await;
    {
        let seen = seen.lock().unwrap();
        assert!(
            seen.is_empty(),
            "the other origin was asked (and so could see the token): {seen:?}"
        );
    }
    assert!(!redirected, "a redirect is an error");
    assert!(
        redirect_stderr.contains("redirects are not followed"),
        "{redirect_stderr}"
    );
    assert!(!paged, "a `next` link elsewhere is an error");
    assert!(paged_stderr.contains("another origin"), "{paged_stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_news_poller_refuses_a_feed_on_a_blocked_address() {
    let db = acme_watching_the_news().await;
    let (port, connections) = counting_listener().await;
    for host in ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"] {
        // Without the loopback opening that the other tests give it.
        let output = decider::run_once(&db.url)
            .args(["--news-url", &format!("http://{host}:{port}/newsApiLite")])
            .env("WEBZ_TOKEN", "feed-secret-token")
            .env("RUST_LOG", "error")
            .output()
            .await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{host}");
        assert!(
            stderr.contains("is not allowed: loopback"),
            "{host}: {stderr}"
        );
    }
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "the feed was never asked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_feed_page_is_cut_off_at_the_cap() {
    let db = acme_watching_the_news().await;
    // A feed that streams a page without end, counting what it managed to write.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let written = Arc::new(AtomicUsize::new(0));
    let counter = written.clone();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buffer = [0u8; 8192];
        let _ = socket.read(&mut buffer).await;
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
        if socket.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let chunk = format!("10000\r\n{}\r\n", " ".repeat(0x10000));
        while socket.write_all(chunk.as_bytes()).await.is_ok() {
            counter.fetch_add(0x10000, Ordering::SeqCst);
        }
    });
    let source = outbox_decider::news::NewsSource {
        url: format!("http://{addr}/newsApiLite"),
        token: None,
        egress: outbox_egress::Guard::new(
            outbox_egress::AllowList::parse(TEST_ALLOW_PRIVATE).unwrap(),
        ),
    };
    let http = source.client().unwrap();
    let result = tokio::time::timeout(
        Duration::from_secs(20),
        outbox_decider::news::poll(&db.pool, &http, &source),
    )
    .await
    .expect("the poll ends long before its own timeout");
    let err = result.unwrap_err().to_string();
    assert!(err.contains("larger than"), "{err}");
    let cap = outbox_decider::news::MAX_FEED_PAGE_BYTES;
    // What was written includes what sat in socket buffers when the poller stopped.
    assert!(
        written.load(Ordering::SeqCst) < 2 * cap + (8 << 20),
        "read on past the cap: {} bytes",
        written.load(Ordering::SeqCst)
    );
}
