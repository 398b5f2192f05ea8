//! A seeded chaos run, judged by the independent checker.
//!
//! Real processes: two deciders serving approvals (identical approvals race between
//! them, corrections are issued while the originals are in flight) and running the
//! renewal monitor every second over the same contracts, three dispatchers,
//! one sink per destination capability: idempotent with a short retention window,
//! lookup, plain with `hold`, plain with `retry`, and an email destination (policy
//! `hold`) on a sink's SMTP inbox; and two destinations that order per key, each on a
//! sink of its own: plain with `hold`, where a head whose answer is lost blocks its lane
//! until an operator resolves it, and lookup, where an uncertain head is settled by asking
//! and its lane goes on. Their approvals use a few keys, several alerts each (some keyed by
//! `ordering_key`, some by a shared subject), so the lanes have depth; corrections land in
//! them too. A seeded schedule attacks them: SIGKILL and restart of
//! dispatchers and deciders, SIGSTOP past a lease, PostgreSQL backends terminated, a
//! statement timeout too low to work with for a while, answers lost after acceptance,
//! 500s, 503s and 429s, answers slower than the timeout; over SMTP, the connection closed
//! after the final dot (accepted, reply lost), 451s and 550s after the data, and final
//! replies slower than the timeout; one dispatcher also crashes at the named crash points.
//! Then the faults stop, a dispatcher drains, and the checker counts from the database,
//! the sinks' own records and the inbox (every Message-ID at most once, every accepted
//! email's Message-ID there): for the ordered destinations also that each lane's alerts
//! were first accepted in the sink's log in approval order, and that what is still
//! pending waits behind a held or failed head (such lanes stay blocked after the drain,
//! which is correct). Every process makes evidence checkpoints each second meanwhile, and
//! the run ends with `outboxctl evidence verify --all` passing.
//!
//! `CHAOS_SEEDS` (default `1,2`) and `CHAOS_DURATION` (per seed, default `15s`, longer on
//! a host too busy for the load to fill the lanes by then) make it
//! a soak test: `CHAOS_SEEDS=11 CHAOS_DURATION=10m cargo test --features failpoints
//! --test it chaos:: -- --nocapture`.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use common::add_tenant;
use common::decider::{Decider, DeciderServe};
use common::destinations::add_destination;
use common::procs::*;
use outbox_checker::{Capability, SinkRecord};
use outbox_testkit::TestDb;
use rand::{Rng, SeedableRng};
use serde_json::json;
use sqlx::Connection;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn seeds() -> Vec<u64> {
    std::env::var("CHAOS_SEEDS")
        .unwrap_or_else(|_| "1,2".to_owned())
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .expect("CHAOS_SEEDS: numbers separated by commas")
        })
        .collect()
}

fn duration() -> Duration {
    std::env::var("CHAOS_DURATION")
        .ok()
        .map(|d| {
            outbox_core::duration::parse_positive(&d).expect("CHAOS_DURATION: e.g. 15s or 10m")
        })
        .unwrap_or(Duration::from_secs(15))
}

/// The webhook destinations, each on a sink of its own: its name, what it can do, and
/// whether it orders per key.
const DESTINATIONS: [(&str, Capability, bool); 6] = [
    ("idempotent", Capability::Idempotent, false),
    ("lookup", Capability::Lookup, false),
    ("hold", Capability::PlainHold, false),
    ("retry", Capability::PlainRetry, false),
    ("lanes-hold", Capability::PlainHold, true),
    ("lanes-lookup", Capability::Lookup, true),
];

/// The email destination, on the SMTP inbox; its uncertain sends are held.
const MAIL: &str = "mail";

/// Where the load's approvals go, in turn.
const APPROVED_TO: [&str; 7] = [
    "idempotent",
    "lookup",
    "hold",
    "retry",
    MAIL,
    "lanes-hold",
    "lanes-lookup",
];

/// How many lanes the load's approvals to an ordered destination go to, in turn.
const LANE_KEYS: usize = 6;
/// How many of them are named by `ordering_key`; the rest by a subject their alerts share
/// (each alert a new occurrence of it).
const KEYED_LANES: usize = 4;

/// The load's `n`th approval: to `destination`, in one of a few lanes where it orders.
fn approval(n: u64, destination: &str) -> serde_json::Value {
    let payload = json!({"n": n, "text": "renewal due"});
    if !DESTINATIONS
        .iter()
        .any(|(name, _, ordered)| *ordered && *name == destination)
    {
        return json!({"destination": destination, "subject": format!("chaos:{n}"),
                      "occurrence": "o", "payload": payload});
    }
    let lane = (n / APPROVED_TO.len() as u64) as usize % LANE_KEYS;
    if lane < KEYED_LANES {
        json!({"destination": destination, "subject": format!("chaos:{n}"), "occurrence": "o",
               "ordering_key": format!("customer:{lane}"), "payload": payload})
    } else {
        json!({"destination": destination, "subject": format!("account:{lane}"),
               "occurrence": format!("o{n}"), "payload": payload})
    }
}

/// Dispatcher `n`. The third one also crashes at the named crash points now and then: the
/// process aborts after a claim, after a send before its outcome is recorded, or inside
/// the completion's transaction (the fault loop restarts it).
fn dispatcher(db: &TestDb, n: usize) -> Process {
    let args = dispatcher_args(
        db,
        &format!("chaos-{n}"),
        &[
            "--lease",
            "1s",
            "--retry-delays",
            "100ms,200ms,400ms",
            "--batch-size",
            "16",
            "--max-in-flight",
            "32",
            "--checkpoint-interval",
            "1s",
        ],
    );
    let crash_points = (n == 2).then_some(
        "dispatch-after-claim=1%return;dispatch-after-send=1%return;complete-before-commit=1%return",
    );
    spawn_dispatcher(&args, crash_points)
}

/// A decider serving approvals, logging at info level.
async fn decider(db: &TestDb) -> Decider {
    DeciderServe::on(&db.url)
        .env("RUST_LOG", "info")
        .flags(&["--checkpoint-interval", "1s"])
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seeded_chaos_loses_and_duplicates_nothing() {
    for seed in seeds() {
        chaos(seed, duration()).await;
    }
}

async fn chaos(seed: u64, run_for: Duration) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &[]).await;
    let seed_text = seed.to_string();
    let mut sinks = Vec::new();
    for (name, capability, ordered) in DESTINATIONS {
        let mut args = vec![
            "--seed",
            &seed_text,
            "--drop-response-rate",
            "0.1",
            "--fail-rate",
            "0.05",
        ];
        match capability {
            Capability::Idempotent => args.extend(["--retention", "10s"]),
            Capability::Lookup => args.push("--lookup"),
            _ => {}
        }
        let sink = Sink::start(&args).await;
        let lookup = sink.lookup_template();
        add_destination(&db, tenant.id, name, &sink.hook_url(), |d| {
            d.timeout = Duration::from_millis(800);
            match capability {
                Capability::Idempotent => d.idempotency_retention = Some(Duration::from_secs(10)),
                Capability::Lookup => d.lookup_url_template = Some(lookup),
                Capability::PlainRetry => d.on_uncertain = outbox_core::OnUncertain::Retry,
                Capability::PlainHold => {}
            }
        })
        .await;
        if ordered {
            order_per_key(&db, tenant.id, name).await;
        }
        sinks.push((name, capability, sink));
    }
    // The inbox loses the reply to 10% of final dots and refuses 5% after the data
    // (451, retried), as the webhook sinks lose and refuse answers.
    let inbox = SmtpSink::start(&[
        "--seed",
        &seed_text,
        "--smtp-drop-rate",
        "0.1",
        "--smtp-fail-rate",
        "0.05",
        "--smtp-fail-reply",
        "451 4.3.0 try again later",
    ])
    .await;
    add_email_destination(&db, tenant.id, &inbox.smtp_addr).await;

    // Contracts due for an alert now: the deciders' monitors approve them (to every
    // destination) while the API approvals run, every second, in both deciders.
    let soon = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date()
        .checked_add(jiff::Span::new().days(10))
        .unwrap();
    let mut csv = String::from("external_id,vendor,amount,currency,renewal_date\n");
    for n in 0..20 {
        csv.push_str(&format!("K-{n},Vendor {n},100.00,EUR,{soon}\n"));
    }
    outbox_decider::contracts::import(
        &db.pool,
        tenant.id,
        &csv,
        outbox_decider::contracts::Format::Csv,
    )
    .await
    .unwrap();

    let mut dispatchers: Vec<Process> = (0..3).map(|n| dispatcher(&db, n)).collect();
    let mut deciders = Vec::new();
    for _ in 0..2 {
        deciders.push(decider(&db).await);
    }
    let bases: Arc<Mutex<Vec<String>>> =
        Arc::new(Mutex::new(deciders.iter().map(|d| d.api.clone()).collect()));

    // Load: approvals through both deciders, identical ones racing, and corrections (of
    // every eighth, so that they come to every destination in turn).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (bases, stop, token) = (bases.clone(), stop.clone(), tenant.token.clone());
        tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap();
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let destination = APPROVED_TO[(n % APPROVED_TO.len() as u64) as usize];
                let body = approval(n, destination);
                let targets: Vec<String> = bases.lock().unwrap().clone();
                // The same approval sent to every decider at once.
                let sends: Vec<_> = targets
                    .iter()
                    .map(|base| {
                        let request = http
                            .post(format!("{base}/v1/alerts"))
                            .bearer_auth(&token)
                            .json(&body);
                        tokio::spawn(async move { alert_id(request.send().await).await })
                    })
                    .collect();
                let mut answers = Vec::new();
                for send in sends {
                    answers.push(send.await.unwrap());
                }
                if n.is_multiple_of(8) {
                    if let Some(id) = answers.into_iter().flatten().next() {
                        let base = &targets[0];
                        let _ = http
                            .post(format!("{base}/v1/alerts/{id}/revisions"))
                            .bearer_auth(&token)
                            .json(&json!({"payload": {"n": n, "text": "corrected"}, "reason": "chaos correction"}))
                            .send()
                            .await;
                    }
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
            n
        })
    };

    // Faults, from the seed. They use a connection of their own, opened before any
    // statement timeout is lowered, so the referee's pool is never affected.
    let mut admin = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let started = Instant::now();
    let mut faults = Vec::new();
    let mut last_progress = Instant::now();
    // The faults last the run's duration and, on a host so busy that the load was slow,
    // until it has put enough in the lanes for their order to be judged (the judgement
    // below needs depth); a deadline ends the wait, and the assertions then say what fell
    // short.
    while started.elapsed() < run_for
        || (started.elapsed() < run_for * 4 && !load_deep_enough(&db).await)
    {
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..600))).await;
        // Dispatchers that crashed at a crash point come back, as a supervisor would.
        for (i, d) in dispatchers.iter_mut().enumerate() {
            if d.try_wait().unwrap().is_some() {
                *d = dispatcher(&db, i);
                faults.push("crash at a named crash point");
            }
        }
        if last_progress.elapsed() >= Duration::from_secs(30) {
            last_progress = Instant::now();
            eprintln!(
                "seed {seed}: {}s of {}s, {} faults so far",
                started.elapsed().as_secs(),
                run_for.as_secs(),
                faults.len()
            );
        }
        match rng.random_range(0..8) {
            0 => {
                let i = rng.random_range(0..dispatchers.len());
                dispatchers[i].kill().await.unwrap();
                dispatchers[i] = dispatcher(&db, i);
                faults.push("SIGKILL dispatcher");
            }
            1 => {
                let i = rng.random_range(0..dispatchers.len());
                signal(&dispatchers[i], "STOP");
                tokio::time::sleep(Duration::from_millis(3500)).await;
                signal(&dispatchers[i], "CONT");
                faults.push("SIGSTOP dispatcher past its lease");
            }
            2 => {
                sqlx::query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = current_database() AND application_name IN ('dispatcher', 'decider') \
                       AND pid <> pg_backend_pid() ORDER BY random() LIMIT 2",
                )
                .execute(&mut admin)
                .await
                .unwrap();
                faults.push("backends terminated");
            }
            3 => {
                let (_, _, sink) = &sinks[rng.random_range(0..sinks.len())];
                sink.faults(json!({"latency_ms": 1200})).await;
                tokio::time::sleep(Duration::from_millis(800)).await;
                sink.faults(json!({"latency_ms": 0})).await;
                faults.push("answers slower than the timeout");
            }
            4 => {
                let (_, _, sink) = &sinks[rng.random_range(0..sinks.len())];
                sink.faults(json!({"script": [
                    {"status": 500}, {"status": 503}, {"status": 429, "headers": {"Retry-After": "1"}}
                ]}))
                .await;
                faults.push("500, 503 and 429");
            }
            5 => {
                // New sessions get a statement timeout too low for anything but the
                // simplest statement; the components' sessions are cut so they reconnect
                // under it. Then it is lifted, and they reconnect again.
                let set = format!("ALTER DATABASE {} SET statement_timeout = '5ms'", db.name);
                sqlx::query(&set).execute(&mut admin).await.unwrap();
                terminate_components(&mut admin).await;
                tokio::time::sleep(Duration::from_millis(1500)).await;
                let reset = format!("ALTER DATABASE {} RESET statement_timeout", db.name);
                sqlx::query(&reset).execute(&mut admin).await.unwrap();
                terminate_components(&mut admin).await;
                faults.push("statement_timeout 5ms for 1.5s");
            }
            7 => {
                let fault = match rng.random_range(0..3) {
                    0 => {
                        inbox.sink.faults(json!({"smtp_latency_ms": 1200})).await;
                        tokio::time::sleep(Duration::from_millis(800)).await;
                        inbox.sink.faults(json!({"smtp_latency_ms": 0})).await;
                        "final SMTP replies slower than the timeout"
                    }
                    1 => {
                        inbox
                            .sink
                            .faults(json!({"smtp_data_script": [
                                "451 4.3.0 try again later", "550 5.1.1 no such user"
                            ]}))
                            .await;
                        "451 and 550 after the message data"
                    }
                    _ => {
                        inbox.sink.faults(json!({"smtp_drop_rate": 0.5})).await;
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        inbox.sink.faults(json!({"smtp_drop_rate": 0.1})).await;
                        "half the final SMTP replies lost"
                    }
                };
                faults.push(fault);
            }
            _ => {
                let i = rng.random_range(0..deciders.len());
                deciders[i].kill().await.unwrap();
                let fresh = decider(&db).await;
                bases.lock().unwrap()[i] = fresh.api.clone();
                deciders[i] = fresh;
                faults.push("SIGKILL decider");
            }
        }
    }

    // Heal: no more faults or load; one dispatcher drains what is left.
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let approvals_sent = load.await.unwrap();
    for (_, _, sink) in &sinks {
        let http = reqwest::Client::new();
        http.delete(format!("{}/_sink/faults", sink.base))
            .send()
            .await
            .unwrap();
        sink.faults(json!({"drop_response_rate": 0.0, "fail_rate": 0.0}))
            .await;
    }
    reqwest::Client::new()
        .delete(format!("{}/_sink/faults", inbox.sink.base))
        .send()
        .await
        .unwrap();
    for mut d in dispatchers {
        let _ = d.kill().await;
    }
    drain(
        &db,
        "healer",
        &[
            "--drain-horizon",
            "10s",
            "--lease",
            "1s",
            "--retry-delays",
            "100ms,200ms,400ms",
        ],
    )
    .await;

    let mut judged = Vec::new();
    for (name, capability, sink) in &sinks {
        let records = sink
            .all_records()
            .await
            .iter()
            .map(|r| SinkRecord {
                key: r["key"].as_str().map(str::to_owned),
                payload_sha256: r["payload_sha256"].as_str().map(str::to_owned),
                outcome: r["outcome"].as_str().unwrap_or("").to_owned(),
            })
            .collect();
        judged.push(outbox_checker::Sink {
            destination: (*name).to_owned(),
            capability: *capability,
            records,
        });
    }
    let mail = outbox_checker::Inbox {
        destination: MAIL.to_owned(),
        capability: Capability::PlainHold,
        messages: inbox
            .messages()
            .await
            .iter()
            .map(|m| outbox_checker::InboxMessage {
                message_id: m["message_id"].as_str().map(str::to_owned),
                alert_id: m["alert_id"].as_str().map(str::to_owned),
                sha256: m["sha256"].as_str().unwrap_or("").to_owned(),
            })
            .collect(),
    };
    let report = outbox_checker::check_with_inboxes(&db.pool, seed, &judged, &[mail])
        .await
        .unwrap();
    eprintln!(
        "{report}  ({approvals_sent} approvals sent, {} faults: {})",
        faults.len(),
        summarize(&faults)
    );
    if !report.passed() {
        let explained = outbox_checker::explain(&db.pool, &report, &judged)
            .await
            .unwrap();
        panic!("seed {seed} broke an invariant:\n{report}\n{explained}");
    }
    assert!(
        report.alerts > 50,
        "the run approved too little to mean anything: {report}"
    );
    // The evidence trail held through crashes, restarts and checkpoints made under load
    // by whichever process won their lock: every chain and checkpoint verifies.
    let made_during_run = db.count("evidence_checkpoints").await;
    assert!(
        made_during_run >= 3,
        "only {made_during_run} checkpoints were made"
    );
    common::outboxctl_ok(&db, &["evidence", "checkpoint"]).await;
    let verified = common::outboxctl(&db, &["evidence", "verify", "--all"]).await;
    if !verified.ok {
        panic!(
            "seed {seed}: the evidence does not verify:\n{}\n{}\n{}",
            verified.stdout,
            verified.stderr,
            chains_named_in(&db, &verified.stdout).await
        );
    }
    // The ordered destinations' lanes had depth, and their order was judged: at the
    // `hold` one some lanes are blocked by a held head, with alerts waiting behind it.
    for (name, ..) in DESTINATIONS.iter().filter(|(_, _, ordered)| *ordered) {
        let lanes = report
            .ordered
            .iter()
            .find(|l| l.destination == *name)
            .unwrap_or_else(|| panic!("no lanes at {name}: {report}"));
        assert!(
            lanes.deepest >= 5 && lanes.judged >= 2 * LANE_KEYS,
            "too little went through the lanes at {name} to judge their order: {report}"
        );
    }
}

/// Whether the load has committed enough for the judgement to mean something: over a
/// hundred alerts, and at each ordered destination a lane of at least six alerts among
/// forty or more.
async fn load_deep_enough(db: &TestDb) -> bool {
    let ordered: Vec<&str> = DESTINATIONS
        .iter()
        .filter(|(_, _, ordered)| *ordered)
        .map(|(name, ..)| *name)
        .collect();
    let (alerts, deep_destinations): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM alerts), \
                (SELECT count(*) FROM ( \
                   SELECT k.destination_id FROM ( \
                     SELECT a.destination_id, count(*) AS depth FROM alerts a \
                     JOIN destinations d ON d.id = a.destination_id AND d.name = ANY($1) \
                     GROUP BY a.destination_id, COALESCE(a.ordering_key, a.subject)) k \
                   GROUP BY k.destination_id \
                   HAVING max(k.depth) >= 6 AND sum(k.depth) >= 40) deep)",
    )
    .bind(&ordered)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    alerts > 100 && deep_destinations == ordered.len() as i64
}

/// The entries (position; table, row, time, actor, line) of the alerts `report` names,
/// for a failure's message.
async fn chains_named_in(db: &TestDb, report: &str) -> String {
    let mut out = String::new();
    let ids: std::collections::BTreeSet<uuid::Uuid> = report
        .split(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
        .filter_map(|w| uuid::Uuid::parse_str(w).ok())
        .collect();
    for id in ids.into_iter().take(5) {
        let rows: Vec<(Option<i64>, String)> = sqlx::query_as(
            "SELECT chain_pos, format('event %s at %s by %s: %s', id, at, actor, line) \
             FROM alert_events WHERE alert_id = $1 \
             UNION ALL SELECT chain_pos, format('attempt %s at %s by %s: %s', id, finished_at, \
                    worker, coalesce(line, outcome)) \
             FROM delivery_attempts WHERE alert_id = $1 \
             ORDER BY 1",
        )
        .bind(id)
        .fetch_all(&db.pool)
        .await
        .unwrap();
        out.push_str(&format!("alert {id}:\n"));
        for row in rows {
            out.push_str(&format!("  {row:?}\n"));
        }
    }
    out
}

/// Makes destination `name` of `tenant` order its alerts per key; a failed head blocks
/// its lane.
async fn order_per_key(db: &TestDb, tenant: uuid::Uuid, name: &str) {
    let id = outbox_store::destinations::id_by_name(&db.pool, tenant, name)
        .await
        .unwrap();
    let settings = outbox_store::lanes::OrderingSettings {
        ordering: outbox_core::Ordering::PerKey,
        on_head_failed: outbox_core::OnHeadFailed::Block,
    };
    outbox_store::lanes::set_ordering(&db.pool, id, settings, false, "test")
        .await
        .unwrap();
}

/// The email destination `mail`, on the SMTP inbox at `smtp_addr`: no lookup, no key a
/// relay de-duplicates by, so its uncertain sends are held.
async fn add_email_destination(db: &TestDb, tenant: uuid::Uuid, smtp_addr: &str) {
    let email = outbox_store::destinations::EmailSettings {
        relay: smtp_addr.parse::<std::net::SocketAddr>().unwrap().into(),
        smtp_tls: outbox_core::SmtpTls::None,
        smtp_username: None,
        smtp_password: None,
        smtp_ca_pem: None,
        mail: outbox_store::destinations::Mailing {
            from: "alerts@acme.example".to_owned(),
            to: vec!["ops@acme.example".to_owned()],
            locale: None,
        },
    };
    let new = outbox_store::destinations::NewDestination {
        timeout: Duration::from_millis(800),
        ..outbox_store::destinations::NewDestination::email(tenant, MAIL, email)
    };
    outbox_store::destinations::create(&db.pool, &new)
        .await
        .unwrap();
}

/// The alert id an approval answered with, if it did.
async fn alert_id(answer: reqwest::Result<reqwest::Response>) -> Option<String> {
    match answer {
        Ok(r) if r.status().is_success() => r
            .json::<serde_json::Value>()
            .await
            .ok()
            .and_then(|v| v["id"].as_str().map(str::to_owned)),
        _ => None,
    }
}

/// Cuts every session of the components (they reconnect).
async fn terminate_components(admin: &mut sqlx::PgConnection) {
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name IN ('dispatcher', 'decider')",
    )
    .execute(admin)
    .await
    .unwrap();
}

fn summarize(faults: &[&str]) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for f in faults {
        *counts.entry(f).or_default() += 1;
    }
    counts
        .iter()
        .map(|(f, n)| format!("{n}x {f}"))
        .collect::<Vec<_>>()
        .join(", ")
}
