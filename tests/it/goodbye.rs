//! How the long-running processes end on the database's side: every connection a stopped
//! dispatcher or decider opened is closed with the protocol's goodbye (`Terminate`), not
//! dropped with the process, which the server would log as `could not receive data from
//! client: Connection reset by peer`, one line per connection at every stop.
//!
//! The processes reach the test database through a relay that watches what each client
//! sends last before it hangs up.

use crate::common::alerts::{approve_many, state_of};
use crate::common::decider::{run_once, DeciderServe};
use crate::common::destinations::acme_with_ops_at;
use crate::common::procs::{dispatcher_args, signal, spawn_dispatcher, wait_for_db, Sink};
use outbox_testkit::process::DEADLINE;
use outbox_testkit::TestDb;
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use sqlx::ConnectOptions;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A frontend `Terminate` message: type `X`, length 4 (itself), no body.
const TERMINATE: [u8; 5] = [b'X', 0, 0, 0, 4];

/// How a connection through the relay ended, from the client's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Its last message was `Terminate`, then it closed.
    Goodbye,
    /// It closed (or was reset) without saying goodbye.
    Dropped,
}

/// A TCP relay in front of the test server: the URL that reaches `db` through it (without
/// TLS, so that the messages can be read) and, per connection it carried, how it ended.
struct Relay {
    url: String,
    connections: Arc<Mutex<Vec<Option<Ending>>>>,
}

impl Relay {
    async fn in_front_of(db: &TestDb) -> Relay {
        let options = PgConnectOptions::from_str(&db.url).unwrap();
        let server = format!("{}:{}", options.get_host(), options.get_port());
        assert!(
            !options.get_host().starts_with('/'),
            "the relay needs a server on TCP, not {server}"
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let url = options
            .host("127.0.0.1")
            .port(port)
            .ssl_mode(PgSslMode::Disable)
            .to_url_lossy()
            .to_string();
        let connections: Arc<Mutex<Vec<Option<Ending>>>> = Arc::default();
        let seen = connections.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let index = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(None);
                    seen.len() - 1
                };
                let upstream = TcpStream::connect(&server).await.unwrap();
                let seen = seen.clone();
                tokio::spawn(async move {
                    let ending = carry(client, upstream).await;
                    seen.lock().unwrap()[index] = Some(ending);
                });
            }
        });
        Relay { url, connections }
    }

    /// How each connection ended, once every one has (waiting up to [`DEADLINE`]).
    async fn endings(&self) -> Vec<Ending> {
        let started = Instant::now();
        loop {
            let seen = self.connections.lock().unwrap().clone();
            if let Some(endings) = seen.iter().copied().collect::<Option<Vec<_>>>() {
                return endings;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "connections still open through the relay: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Carries one connection both ways until the client hangs up; says whether the last
/// bytes it sent were a `Terminate` message.
async fn carry(client: TcpStream, upstream: TcpStream) -> Ending {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = upstream.into_split();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    });
    let mut last = Vec::new();
    let mut buf = vec![0; 64 * 1024];
    loop {
        match from_client.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                last.extend_from_slice(&buf[..n]);
                let keep = last.len().saturating_sub(TERMINATE.len());
                last.drain(..keep);
                if to_server.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = to_server.shutdown().await;
    if last == TERMINATE {
        Ending::Goodbye
    } else {
        Ending::Dropped
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_dispatcher_closes_each_of_its_connections_with_a_goodbye() {
    let sink = Sink::start(&[]).await;
    let (db, tenant) = acme_with_ops_at(&sink, |_| {}).await;
    let relay = Relay::in_front_of(&db).await;
    let mut dispatcher = spawn_dispatcher(
        &dispatcher_args(&db, "w", &["--database-url", &relay.url]),
        None,
    );
    // At work: one delivery done (claim, attempt, outcome), and its wake-up listener on a
    // connection of its own.
    let id = approve_many(&db, tenant, "ops", 1).await[0];
    let started = Instant::now();
    while state_of(&db, id).await != "accepted" {
        assert!(started.elapsed() < DEADLINE, "the alert was not delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_for_db(
        &db,
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND query LIKE 'LISTEN%'",
        |listening| listening == 1,
    )
    .await;

    signal(&dispatcher, "TERM");
    assert!(dispatcher.exit_status().await.success());
    let endings = relay.endings().await;
    assert!(endings.len() >= 2, "{endings:?}");
    assert!(
        endings.iter().all(|ending| *ending == Ending::Goodbye),
        "{endings:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_decider_closes_each_of_its_connections_with_a_goodbye() {
    let db = TestDb::new().await;
    let relay = Relay::in_front_of(&db).await;
    let mut decider = DeciderServe::on(&relay.url).with_metrics().start().await;
    // Readiness asks the database whether it takes writes.
    let ready = reqwest::get(format!("{}/readyz", decider.metrics()))
        .await
        .unwrap();
    assert!(ready.status().is_success(), "{}", ready.status());
    signal(&decider, "TERM");
    assert!(decider.exit_status().await.success());

    let output = run_once(&relay.url).output().await;
    assert!(output.status.success(), "{output:?}");

    let endings = relay.endings().await;
    assert!(endings.len() >= 2, "{endings:?}");
    assert!(
        endings.iter().all(|ending| *ending == Ending::Goodbye),
        "{endings:?}"
    );
}
