//! Slow and idle clients against the real `decider serve` and `sink`: hundreds of
//! connections that send nothing, half a request head, or a body a byte at a time are
//! closed by the server within its deadlines, while `/healthz`, an approval and a delivery
//! keep answering within a second. Idle connections, however they keep their place, make
//! room for new clients, and one address holds only its share; past the cap with every
//! connection busy, a new one is closed at once. A stop still finishes the request in
//! progress.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::add_tenant;
use common::assert_contains;
use common::decider::DeciderServe;
use common::destinations::add_destination;
use common::procs::*;
use outbox_testkit::TestDb;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The header and body deadlines the servers under test are given.
const DEADLINE_SECS: &str = "2s";
/// How long after its deadline a slow connection may still be open: generous, for a
/// loaded machine, yet far below "never".
const CLOSE_SLACK: Duration = Duration::from_secs(8);
/// Slow connections of each kind.
const PER_KIND: usize = 100;
/// A legitimate request must be answered within this, attack or not.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// The two attacks run one at a time: each is hundreds of connections on a small machine,
/// and the answer times they check are the server's, not those of a machine under both.
static ONE_ATTACK_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What a slow client does once connected.
#[derive(Debug, Clone, Copy)]
enum Slow {
    /// Connects and sends nothing.
    Silent,
    /// Sends a request line and then one header byte every 200 ms, never ending the head.
    PartialHead,
    /// Sends a complete head announcing 1000 bytes of body, then one byte every 200 ms.
    TrickledBody,
}

/// Plays a slow client on `stream` and returns when the server has closed it (end of stream
/// or a reset), with how long after `started` that was.
async fn slow_client(
    stream: TcpStream,
    started: Instant,
    path: &'static str,
    kind: Slow,
) -> Duration {
    let (mut reader, mut writer) = stream.into_split();
    let trickle = tokio::spawn(async move {
        let head = match kind {
            Slow::Silent => return,
            Slow::PartialHead => format!("POST {path} HTTP/1.1\r\nhost: x\r\n"),
            Slow::TrickledBody => format!(
                "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                 content-length: 1000\r\n\r\n{{"
            ),
        };
        if writer.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let drip: &[u8] = match kind {
            Slow::PartialHead => b"x-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            _ => b"                                                            ",
        };
        for byte in drip.iter().cycle() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if writer.write_all(&[*byte]).await.is_err() {
                return; // the server closed the connection
            }
        }
    });
    let mut buffer = [0u8; 1024];
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {} // an answer (a timeout page) before the close is fine
        }
    }
    trickle.abort();
    started.elapsed()
}

/// Opens [`PER_KIND`] slow connections of each kind, all connected when this returns; each
/// task returns how long its connection stayed open. They come from eight addresses other
/// than the legitimate clients' 127.0.0.1, each within its share of connections.
async fn slow_clients(addr: &str, path: &'static str) -> Vec<tokio::task::JoinHandle<Duration>> {
    let mut clients = Vec::new();
    for kind in [Slow::Silent, Slow::PartialHead, Slow::TrickledBody] {
        for i in 0..PER_KIND {
            let started = Instant::now();
            let stream = connect_from([127, 0, 0, 10 + (i % 8) as u8], addr).await;
            clients.push(tokio::spawn(slow_client(stream, started, path, kind)));
        }
    }
    clients
}

/// Every slow connection must have been closed by the server within its deadline plus
/// [`CLOSE_SLACK`]; returns the longest any stayed open.
async fn all_closed(clients: Vec<tokio::task::JoinHandle<Duration>>) -> Duration {
    let limit = Duration::from_secs(2) + CLOSE_SLACK;
    let mut longest = Duration::ZERO;
    for client in clients {
        let open_for = tokio::time::timeout(limit + Duration::from_secs(1), client)
            .await
            .expect("a slow connection was never closed by the server")
            .unwrap();
        assert!(
            open_for <= limit,
            "a slow connection stayed open {open_for:?}"
        );
        longest = longest.max(open_for);
    }
    longest
}

fn host_port(base: &str) -> String {
    base.trim_start_matches("http://").to_owned()
}

/// Spawns `decider serve` on ephemeral ports with the test's deadlines, plus `extra`: the
/// process and the approval API's base.
async fn decider(db: &TestDb, extra: &[&str]) -> (Process, String) {
    let mut flags = Vec::new();
    for flag in ["--header-timeout", "--body-timeout"] {
        if !extra.contains(&flag) {
            flags.extend([flag, DEADLINE_SECS]);
        }
    }
    flags.extend_from_slice(extra);
    let decider = DeciderServe::on(&db.url).flags(&flags).start().await;
    (decider.process, decider.api)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(ANSWER_WITHIN)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_disconnected_while_the_api_keeps_answering() {
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &["ops"]).await;
    let (_decider, api) = decider(&db, &[]).await;

    let _alone = ONE_ATTACK_AT_A_TIME.lock().await;
    let attack = slow_clients(&host_port(&api), "/v1/alerts").await;
    // While the slow connections are held open, legitimate requests are answered in time.
    // A fresh client each round: a new connection, as a new caller would open.
    let mut slowest_answer = Duration::ZERO;
    for round in 0..5 {
        let http = client();
        let started = Instant::now();
        let health = http.get(format!("{api}/healthz")).send().await.unwrap();
        assert_eq!(health.status(), reqwest::StatusCode::OK);
        slowest_answer = slowest_answer.max(started.elapsed());
        let started = Instant::now();
        let approval = http
            .post(format!("{api}/v1/alerts"))
            .bearer_auth(&tenant.token)
            .json(&common::renewal(round))
            .send()
            .await
            .unwrap();
        assert_eq!(approval.status(), reqwest::StatusCode::CREATED);
        slowest_answer = slowest_answer.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let longest = all_closed(attack).await;
    eprintln!(
        "decider: slowest answer {slowest_answer:?}; \
         the slowest slow connection was closed after {longest:?}"
    );
    assert_eq!(db.count("alerts").await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_disconnected_while_the_sink_keeps_answering() {
    let sink = Sink::start(&[
        "--header-timeout",
        DEADLINE_SECS,
        "--body-timeout",
        DEADLINE_SECS,
    ])
    .await;

    let _alone = ONE_ATTACK_AT_A_TIME.lock().await;
    let attack = slow_clients(&host_port(&sink.base), "/hook").await;
    let mut slowest_answer = Duration::ZERO;
    for round in 0..5 {
        let http = client();
        let started = Instant::now();
        let stats = http
            .get(format!("{}/stats", sink.base))
            .send()
            .await
            .unwrap();
        assert_eq!(stats.status(), reqwest::StatusCode::OK);
        slowest_answer = slowest_answer.max(started.elapsed());
        let started = Instant::now();
        let delivery = http
            .post(sink.hook_url())
            .header("idempotency-key", format!("k-{round}"))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(delivery.status(), reqwest::StatusCode::OK);
        slowest_answer = slowest_answer.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let longest = all_closed(attack).await;
    eprintln!(
        "sink: slowest answer {slowest_answer:?}; \
         the slowest slow connection was closed after {longest:?}"
    );
    // The slow bodies never completed, so none of them was applied or even recorded.
    let stats = sink.stats().await;
    assert_eq!(stats["applied"], 5, "{stats}");
    assert_eq!(stats["requests"], 5, "{stats}");
}

/// Waits until the server closes the connection (end of stream or reset); panics after `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) {
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(within, stream.read(&mut buffer)).await;
    match read {
        Ok(Ok(0) | Err(_)) => {}
        Ok(Ok(n)) => panic!("expected a close, got {n} bytes"),
        Err(_) => panic!("the connection was still open after {within:?}"),
    }
}

/// A TCP connection to `addr` from the loopback address `source` (Linux answers for all of
/// 127.0.0.0/8), so that one test plays several clients.
async fn connect_from(source: [u8; 4], addr: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(std::net::SocketAddr::from((source, 0)))
        .unwrap();
    socket.connect(addr.parse().unwrap()).await.unwrap()
}

/// Sends `GET /healthz` on a keep-alive connection and reads the answer: `true` when it is
/// a `200`, `false` when the server closed the connection instead.
async fn healthz(stream: &mut TcpStream) -> bool {
    if stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    while !String::from_utf8_lossy(&answer).contains("\"ok\"") {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
        }
    }
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));
    true
}

/// A client holding a keep-alive connection from `source` the way an attacker keeps its
/// place: a request now, then one every `every` (just inside the idle timeout), starting
/// after `offset`. Says when its first request was answered, and returns once the server
/// closes the connection.
fn keep_place(
    addr: String,
    source: [u8; 4],
    every: Duration,
    offset: Duration,
) -> (
    tokio::sync::oneshot::Receiver<()>,
    tokio::task::JoinHandle<()>,
) {
    let (answered, first_answer) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut stream = connect_from(source, &addr).await;
        assert!(healthz(&mut stream).await, "a first request was refused");
        let _ = answered.send(());
        tokio::time::sleep(offset).await;
        loop {
            if !healthz(&mut stream).await {
                return;
            }
            tokio::time::sleep(every).await;
        }
    });
    (first_answer, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_at_the_cap_make_room_for_new_clients() {
    const CAP: usize = 40;
    const PER_ADDRESS: usize = 10;
    // As many as one address may hold, so that each makes room at the server's cap.
    const NEWCOMERS: usize = PER_ADDRESS;
    const EVERY: Duration = Duration::from_secs(2);
    let db = TestDb::new().await;
    let (_decider, api) = decider(
        &db,
        &[
            "--idle-timeout",
            "4s",
            "--max-client-connections",
            "40",
            "--max-client-connections-per-address",
            "10",
        ],
    )
    .await;
    let addr = host_port(&api);

    // Four attacking addresses fill every place with connections that re-request every
    // 2 s, inside the 4 s idle timeout: without making room they would stay forever. Their
    // re-requests are spread over the period, so at any moment one of them has been idle
    // for nearly 2 s.
    let mut attackers = Vec::new();
    for i in 0..CAP {
        let source = [127, 0, 0, 2 + (i / PER_ADDRESS) as u8];
        let offset = EVERY * i as u32 / CAP as u32;
        let (first_answer, task) = keep_place(addr.clone(), source, EVERY, offset);
        first_answer
            .await
            .expect("an attacker's connection was refused");
        attackers.push(task);
    }

    // A legitimate client arrives with the server full: each of its new connections is
    // answered, and stays answered while it keeps using it.
    let mut newcomers = Vec::new();
    for _ in 0..NEWCOMERS {
        let mut stream = connect_from([127, 0, 0, 1], &addr).await;
        assert!(
            tokio::time::timeout(ANSWER_WITHIN, healthz(&mut stream))
                .await
                .expect("a newcomer was not answered in time"),
            "a newcomer's connection was closed while idle ones held every place"
        );
        newcomers.push(stream);
        for stream in &mut newcomers {
            assert!(
                healthz(stream).await,
                "a connection in use was closed to make room"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The places were made by closing the attackers' idle connections (each attacker
    // notices its close on its own time: wait for them).
    let started = Instant::now();
    loop {
        let closed = attackers.iter().filter(|task| task.is_finished()).count();
        if closed >= NEWCOMERS {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{closed} attacking connections closed for {NEWCOMERS} newcomers"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for stream in &mut newcomers {
        assert!(healthz(stream).await, "a newcomer's connection was closed");
    }
    for task in attackers {
        task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_address_holds_at_most_its_share_of_connections() {
    const PER_ADDRESS: usize = 10;
    const OPENED: usize = 25;
    let db = TestDb::new().await;
    let (_decider, api) = decider(
        &db,
        &[
            "--idle-timeout",
            "4s",
            "--max-client-connections-per-address",
            "10",
        ],
    )
    .await;
    let addr = host_port(&api);
    let mut held = Vec::new();
    for i in 0..OPENED {
        let offset = Duration::from_secs(2) * i as u32 / OPENED as u32;
        let (first_answer, task) =
            keep_place(addr.clone(), [127, 0, 0, 2], Duration::from_secs(2), offset);
        first_answer.await.expect("a connection was refused");
        held.push(task);
    }
    // Each connection past the address's share closed one of its own idle ones.
    let started = Instant::now();
    loop {
        let closed = held.iter().filter(|task| task.is_finished()).count();
        if closed == OPENED - PER_ADDRESS {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{closed} of {OPENED} connections from one address closed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Another address is not counted against it.
    let response = client().get(format!("{api}/healthz")).send().await.unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    let open = held.iter().filter(|task| !task.is_finished()).count();
    assert_eq!(open, PER_ADDRESS, "connections kept from the one address");
    for task in held {
        task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_with_every_connection_busy_a_new_one_is_closed_at_once() {
    // Twenty deliveries to a sink that takes a minute to answer, from one address whose
    // share is twenty: none of its connections is idle, so none can make room.
    let sink = Sink::start(&[
        "--latency",
        "60s",
        "--max-client-connections-per-address",
        "20",
    ])
    .await;
    let addr = host_port(&sink.base);
    let mut busy = Vec::new();
    for i in 0..20 {
        let mut stream = connect_from([127, 0, 0, 2], &addr).await;
        let body = "{}";
        let request = format!(
            "POST /hook HTTP/1.1\r\nhost: x\r\nidempotency-key: busy-{i}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        busy.push(stream);
    }
    // Recorded when decided, before the latency: every connection is answering.
    sink.wait_for("the busy deliveries", |s| s["applied"] == 20)
        .await;
    let mut extra = connect_from([127, 0, 0, 2], &addr).await;
    closed_within(&mut extra, ANSWER_WITHIN).await;

    // Once they go, the address has room again.
    drop(busy);
    let started = Instant::now();
    loop {
        let mut stream = connect_from([127, 0, 0, 2], &addr).await;
        if stats_answered(&mut stream).await {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the sink never took the address again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `GET /stats` on the sink: `true` when answered.
async fn stats_answered(stream: &mut TcpStream) -> bool {
    if stream
        .write_all(b"GET /stats HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let db = TestDb::new().await;
    let (_decider, api) = decider(&db, &["--idle-timeout", "1s"]).await;
    let mut stream = TcpStream::connect(host_port(&api)).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    while !String::from_utf8_lossy(&answer).contains("\"ok\"") {
        let n = stream.read(&mut buffer).await.unwrap();
        assert!(n > 0, "closed before answering");
        answer.extend_from_slice(&buffer[..n]);
    }
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));
    // Kept alive (not closed with the answer), then closed once idle for a second.
    let started = Instant::now();
    closed_within(&mut stream, Duration::from_secs(1) + CLOSE_SLACK).await;
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "closed after {:?}, not kept alive",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_finishes_the_request_in_progress() {
    let mut sink = Sink::start(&["--latency", "1s"]).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let delivery = tokio::spawn(
        http.post(sink.hook_url())
            .header("idempotency-key", "in-flight")
            .body("{}")
            .send(),
    );
    // The delivery is recorded when decided, before its latency: stop the sink then.
    sink.wait_for("the delivery", |s| s["applied"] == 1).await;
    signal(&sink.child, "TERM");
    let response = delivery.await.unwrap().unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    let status = tokio::time::timeout(DEADLINE, sink.child.wait())
        .await
        .expect("the sink did not stop")
        .unwrap();
    assert!(status.success(), "sink exited with {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_readiness_are_served_only_on_the_metrics_listener() {
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &["ops"]).await;
    let decider = DeciderServe::on(&db.url).with_metrics().start().await;
    let (api, metrics) = (&decider.api, decider.metrics());
    let http = client();
    let approval = http
        .post(format!("{api}/v1/alerts"))
        .bearer_auth(&tenant.token)
        .json(&common::renewal(1))
        .send()
        .await
        .unwrap();
    assert_eq!(approval.status(), reqwest::StatusCode::CREATED);

    // The tenants' port: liveness only. The figures span every tenant.
    for path in ["/metrics", "/readyz"] {
        let response = http.get(format!("{api}{path}")).send().await.unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::NOT_FOUND, "{path}");
    }
    let health = http.get(format!("{api}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), reqwest::StatusCode::OK);

    // The operators' port has all three.
    let text = metrics_text(&http, metrics).await;
    assert!(
        text.contains("outbox_approvals_total{result=\"created\"} 1"),
        "{text}"
    );
    for path in ["/readyz", "/healthz"] {
        let response = http.get(format!("{metrics}{path}")).send().await.unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::OK, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_metrics_listener_no_metrics_are_served() {
    let db = TestDb::new().await;
    let decider = DeciderServe::on(&db.url).start().await;
    let api = &decider.api;
    let response = client().get(format!("{api}/metrics")).send().await.unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::NOT_FOUND);
    // A metrics listener would have been announced before the API's listener.
    assert!(!decider
        .log_lines()
        .iter()
        .any(|line| line.contains("decider metrics listening")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_do_not_see_worker_ids_but_operators_do() {
    const WORKER: &str = "probe-host.internal:31337";
    let db = TestDb::new().await;
    let sink = Sink::start(&[]).await;
    let tenant = add_tenant(&db, "acme", &[]).await;
    add_destination(&db, tenant.id, "ops", &sink.hook_url(), |_| {}).await;
    let (_decider, api) = decider(&db, &[]).await;
    let http = client();
    let approval: serde_json::Value = http
        .post(format!("{api}/v1/alerts"))
        .bearer_auth(&tenant.token)
        .json(&serde_json::json!({
            "destination": "ops", "subject": "s", "occurrence": "o", "payload": {"a": 1}
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = approval["id"].as_str().unwrap().to_owned();
    drain(&db, WORKER, &[]).await;

    let shown = http
        .get(format!("{api}/v1/alerts/{id}"))
        .bearer_auth(&tenant.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let detail: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(detail["state"], "accepted", "{shown}");
    assert_eq!(detail["attempts"][0]["worker"], "dispatcher", "{shown}");
    assert!(!shown.contains("probe-host"), "{shown}");
    assert!(
        detail["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|line| line["actor"] == "dispatcher"),
        "{shown}"
    );

    let operator = common::outboxctl(&db, &["alert", "show", &id]).await;
    assert!(operator.ok, "{}", operator.stderr);
    assert_contains(&operator.stdout, WORKER);
}
