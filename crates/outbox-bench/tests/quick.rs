//! The benchmark keeps working: `bench run --quick` goes through every phase (bulk and
//! API approvals, drains over HTTP and without it, 1 and 2 dispatcher processes, latency,
//! claim cost with history, retention, ordered lanes on a small backlog, a few seconds of
//! the sustained-load mode) on its own database and sink. The run checks each
//! drain itself (every alert accepted once, one attempt row each, no duplicate at the sink,
//! never more rows in `sending` than the bound) and fails if one does not hold; this test
//! reads the figures back and checks them again. It never asserts a time. The drains start
//! the `dispatcher` binary built beside `bench` (`cargo test --workspace` builds both).

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use serde_json::Value;

#[tokio::test]
async fn the_quick_benchmark_delivers_everything_once() {
    let (report, stderr): (Value, _) = bench(&["run", "--quick", "--json"]).await;
    let n = report["settings"]["n"].as_u64().unwrap();
    let mut drains = vec![&report["deliveries_http"], &report["deliveries_noop"]];
    drains.extend(report["horizontal"].as_array().unwrap());
    assert_eq!(drains.len(), 4, "HTTP, no-op, 1 and 2 processes");
    for drain in drains {
        assert_eq!(drain["n"].as_u64(), Some(n));
        assert_eq!(drain["sink_duplicates"].as_u64(), Some(0), "{drain}");
        assert!(
            drain["max_sending"].as_i64() <= drain["sending_bound"].as_i64(),
            "{drain}"
        );
        assert_eq!(
            drain["evidence"]["not_accepted"].as_i64(),
            Some(0),
            "{drain}"
        );
        assert_eq!(
            drain["evidence"]["accepted"].as_i64(),
            drain["evidence"]["attempt_rows"].as_i64(),
            "one attempt row per accepted alert: {drain}"
        );
    }
    assert_eq!(report["deliveries_http"]["sink_requests"].as_u64(), Some(n));
    for latency in [&report["latency_idle"], &report["latency_half_capacity"]] {
        assert!(latency["samples"].as_u64().unwrap() > 0, "{latency}");
        assert!(latency["p50_ms"].as_f64().unwrap() > 0.0, "{latency}");
    }
    // A few seconds of the sustained-load mode: one line per second, each with the
    // tables' tuples, and everything approved during it accepted once.
    let sustained = &report["sustained"];
    let intervals = sustained["intervals"].as_array().unwrap();
    assert!(!intervals.is_empty(), "{sustained}");
    for interval in intervals {
        let tables: Vec<&str> = interval["tables"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["table"].as_str().unwrap())
            .collect();
        for hot in ["outbox", "alerts", "delivery_attempts", "alert_events"] {
            assert!(tables.contains(&hot), "{hot} missing: {interval}");
        }
    }
    assert!(
        sustained["rate_per_sec"].as_f64().unwrap() > 0.0,
        "{sustained}"
    );
    assert!(sustained["approved"].as_u64().unwrap() > 0, "{sustained}");
    assert_eq!(sustained["failed_approvals"], 0, "{sustained}");
    assert_eq!(sustained["sink_duplicates"], 0, "{sustained}");
    // The ordered-lanes phase on a small backlog: the run itself fails if the one-key lane
    // arrives out of order or two of its alerts are ever at the sink at once.
    let rounds = report["lanes"]["rounds"].as_array().unwrap();
    assert!(!rounds.is_empty(), "{}", report["lanes"]);
    for round in rounds {
        for drain in [
            &round["unordered"]["drain"],
            &round["per_key"]["drain"],
            &round["one_key"]["drain"],
        ] {
            assert_eq!(drain["sink_duplicates"].as_u64(), Some(0), "{drain}");
            assert_eq!(drain["sink_requests"], drain["n"], "{drain}");
        }
        assert!(
            round["one_key"]["drain"]["max_sending"].as_i64() <= Some(1),
            "one key, one in flight: {round}"
        );
    }
    let claim = &report["claim_cost"];
    assert_eq!(claim["pruned_alerts"], claim["history"], "{claim}");
    assert!(stderr.contains("bench: claim cost"), "{stderr}");
}

/// `bench hot-claim` on a small backlog: every case drains the whole backlog, today's
/// layout never updates in place (a claim sets `status`, which its indexes name), and the
/// layout without those indexes does once its pages have room: the figures its report
/// rests on come from the server's own counters.
#[tokio::test]
async fn the_hot_claim_probe_drains_each_layout_and_tells_them_apart() {
    let (drains, _): (Vec<Value>, _) = bench(&[
        "hot-claim",
        "--rows",
        "2000",
        "--batch",
        "100",
        "--rounds",
        "1",
        "--json",
    ])
    .await;
    assert_eq!(drains.len(), 3, "one drain per case: {drains:?}");
    for drain in &drains {
        assert_eq!(drain["rows"].as_u64(), Some(2000), "{drain}");
        assert!(drain["wal_bytes"].as_f64().unwrap() > 0.0, "{drain}");
        let hot = drain["hot_pct"].as_f64().unwrap();
        match (
            drain["case"]["layout"].as_str().unwrap(),
            drain["case"]["fillfactor"].as_u64().unwrap(),
        ) {
            ("Today", _) => assert_eq!(hot, 0.0, "{drain}"),
            ("Hot", 50) => assert!(hot > 50.0, "{drain}"),
            ("Hot", _) => {}
            other => panic!("unexpected case {other:?}"),
        }
    }
}

/// Runs `bench` with `args` against the test server and reads its JSON report and its
/// progress lines, after checking that it succeeded (the progress lines shown if not).
async fn bench<T: serde::de::DeserializeOwned>(args: &[&str]) -> (T, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(args)
        .env("DATABASE_URL", outbox_testkit::server_url())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    (serde_json::from_slice(&output.stdout).unwrap(), stderr)
}
