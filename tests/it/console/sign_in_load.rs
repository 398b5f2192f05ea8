//! Wrong-password sign-ins sent all at once from many addresses (each within its own
//! failure limit): the password checks they cost are bounded per process, so the console's
//! memory stays within that bound, the approval API the same process serves keeps
//! answering, and a sign-in that finds no check free is told to come back (503).

use super::*;
use common::decider::DeciderServe;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

/// The checks allowed at once in the spawned decider.
const CHECKS: u64 = 2;
/// Memory one argon2id check fills at `hash_password`'s cost.
const CHECK_KIB: u64 = 19 * 1024;
/// Room for everything else a burst of connections takes (buffers, blocking threads'
/// stacks, the database pool): generous, and still far below one check per sign-in.
const SLACK_KIB: u64 = 160 * 1024;
/// Sign-ins in the burst, each from an address of its own.
const SIGN_INS: usize = 100;

/// A field of `/proc/<pid>/status` in KiB (`VmRSS:`, `VmHWM:`).
fn memory_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

/// One wrong-password sign-in from `address` (a loopback address: Linux routes all of
/// 127.0.0.0/8 to the host), as a browser makes it: the form, then the post. Returns the
/// answer's status and `Retry-After`.
async fn wrong_sign_in(base: String, address: IpAddr, name: String) -> (u16, Option<String>) {
    let http = reqwest::Client::builder()
        .local_address(address)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(DEADLINE)
        .build()
        .unwrap();
    let (cookie, token) = fetch_login_form(&http, &base).await;
    let answer = http
        .post(format!("{base}/console/login"))
        .header("cookie", cookie)
        .form(&[
            ("name", name.as_str()),
            ("password", "not the password"),
            ("login_token", &token),
        ])
        .send()
        .await
        .unwrap();
    let retry_after = answer
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (answer.status().as_u16(), retry_after)
}

/// The value of an unlabelled sample in Prometheus text.
fn sample(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {metrics}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_ins_sent_together_check_few_passwords_at_once_and_approvals_keep_answering() {
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &["ops"]).await;
    let checks = CHECKS.to_string();
    let decider = DeciderServe::on(&db.url)
        .with_metrics()
        .with_console()
        .flags(&["--console-max-password-checks", &checks])
        .start()
        .await;
    let (metrics, api) = (decider.metrics().to_owned(), decider.api.clone());
    let console = decider.console().to_owned();
    let pid = decider.id().unwrap();
    let baseline = memory_kib(pid, "VmHWM:");

    let burst: Vec<_> = (0..SIGN_INS)
        .map(|i| {
            let address = IpAddr::V4(Ipv4Addr::new(127, 0, 1, 2 + i as u8));
            tokio::spawn(wrong_sign_in(
                console.clone(),
                address,
                format!("guess-{i}"),
            ))
        })
        .collect();
    // Approvals go on while the burst lasts; each is answered, within the client's
    // generous deadline.
    let http = reqwest::Client::builder()
        .timeout(DEADLINE)
        .build()
        .unwrap();
    let mut latencies = Vec::new();
    while latencies.is_empty() || !burst.iter().all(|sign_in| sign_in.is_finished()) {
        let started = Instant::now();
        let approval = http
            .post(format!("{api}/v1/alerts"))
            .bearer_auth(&tenant.token)
            .json(&common::renewal(latencies.len()))
            .send()
            .await
            .unwrap();
        assert_eq!(approval.status(), StatusCode::CREATED);
        latencies.push(started.elapsed());
    }
    let mut answers = BTreeMap::<u16, usize>::new();
    for sign_in in burst {
        let (status, retry_after) = sign_in.await.unwrap();
        assert!(
            status == 401 || (status == 503 && retry_after.is_some()),
            "a wrong password is 401, no free check 503 with Retry-After; got {status}"
        );
        *answers.entry(status).or_default() += 1;
    }
    let peak = memory_kib(pid, "VmHWM:");
    let after = memory_kib(pid, "VmRSS:");
    latencies.sort();
    eprintln!(
        "{SIGN_INS} sign-ins at once, {CHECKS} checks allowed: answers {answers:?}; \
         decider peak {} MiB (from {} MiB), {} MiB after; {} approvals meanwhile, \
         median {:?}, slowest {:?}",
        peak / 1024,
        baseline / 1024,
        after / 1024,
        latencies.len(),
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
    );
    let bound = baseline + CHECKS * CHECK_KIB + SLACK_KIB;
    assert!(
        peak <= bound,
        "the decider grew to {peak} KiB (bound {bound} KiB: {baseline} KiB before, \
         {CHECKS} checks of {CHECK_KIB} KiB, {SLACK_KIB} KiB slack)"
    );
    assert_eq!(db.count("alerts").await, latencies.len() as i64);
    // Each checked sign-in counts as a failure; one turned away guessed nothing.
    let checked = answers.get(&401).copied().unwrap_or(0);
    assert!(checked > 0, "{answers:?}");
    assert_eq!(db.count("console_sign_in_failures").await, checked as i64);
    let figures = metrics_text(&http, &metrics).await;
    assert_eq!(
        sample(&figures, "outbox_console_password_checks_running"),
        0
    );
    assert_eq!(
        sample(&figures, "outbox_console_password_checks_max"),
        CHECKS
    );
    assert_eq!(
        sample(&figures, "outbox_console_sign_ins_turned_away_total"),
        answers.get(&503).copied().unwrap_or(0) as u64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_that_finds_no_password_check_free_is_told_to_come_back_and_counts_nothing() {
    let console = Console::start_with(
        TestDb::new().await,
        outbox_console::ConsoleConfig {
            password_checks: outbox_console::PasswordChecks::new(
                std::num::NonZeroUsize::MIN,
                Duration::ZERO,
            ),
            ..outbox_console::ConsoleConfig::default()
        },
    )
    .await;
    let base = console.base.clone();
    let burst: Vec<_> = (0..20)
        .map(|i| {
            let address = IpAddr::V4(Ipv4Addr::new(127, 0, 2, 2 + i as u8));
            tokio::spawn(wrong_sign_in(base.clone(), address, format!("guess-{i}")))
        })
        .collect();
    let mut answers = BTreeMap::<u16, usize>::new();
    for sign_in in burst {
        let (status, retry_after) = sign_in.await.unwrap();
        if status == 503 {
            assert_eq!(retry_after.as_deref(), Some("2"));
        }
        *answers.entry(status).or_default() += 1;
    }
    let busy = answers.get(&503).copied().unwrap_or(0);
    let checked = answers.get(&401).copied().unwrap_or(0);
    assert!(busy > 0 && checked > 0, "{answers:?}");
    assert_eq!(busy + checked, 20, "{answers:?}");
    assert_eq!(
        console.db.count("console_sign_in_failures").await,
        checked as i64,
        "a sign-in turned away is not counted as a guess"
    );
}
