//! `outboxctl demo`: the whole system on the sample data, in a database of its own.
//!
//! It starts a sink with faults (answers lost after acceptance, 503s; over SMTP, 451s and
//! one final reply lost), runs two deciders at once over the sample contracts and articles
//! (the second one finding nothing left to decide), then two dispatchers, and ends with
//! what happened to every alert, next to the sink's own counts and its inbox. Two email
//! destinations read the alerts as people do: the CFO gets the renewal alerts in Spanish,
//! the operations team the news alerts in English; one email of each is printed as the
//! inbox received it. It exits 0 only when the invariants hold: nothing left in flight,
//! every alert accepted, held or failed, no alert applied twice by the sink, every
//! accepted email in the inbox exactly once (by Message-ID, with the stored bytes), and
//! the held email in the inbox once, explained.

use anyhow::{bail, Context};
use outbox_core::OnUncertain;
use outbox_runtime::process::spawn_logged;
use outbox_store::destinations::NewDestination;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

use crate::mail_view;
use crate::table::Table;

/// The instant the deciders evaluate at: the sample contracts' tiers fall due around it.
const DEMO_NOW: &str = "2027-03-01T09:00:00Z";
/// The whole run may take this long before it is called a failure.
const DEADLINE: Duration = Duration::from_secs(90);
/// The sender of the demo's email; its domain names every Message-ID.
const MAIL_FROM: &str = "alerts@demo.example";
/// The email destinations: name, recipient, locale, and who reads it.
const MAILBOXES: [(&str, &str, &str, &str); 2] = [
    (
        "cfo-mail",
        "cfo@demo.example",
        "es",
        "the CFO, renewal alerts in Spanish",
    ),
    (
        "ops-mail",
        "ops-team@demo.example",
        "en",
        "the operations team, news alerts in English",
    ),
];

/// The sample data, built in: the same files people read and copy in `examples/`.
const SAMPLE_CONTRACTS: &str = include_str!("../../../examples/contracts.csv");
const SAMPLE_ARTICLES: &str = include_str!("../../../examples/articles.json");

/// `demo` flags.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// A folder with your own `contracts.csv` and `articles.json` to run the demo on.
    /// Without it, the sample data built into outboxctl (the files in the project's
    /// `examples/`), so the demo runs from any directory.
    #[arg(long)]
    examples: Option<PathBuf>,
    /// Drop the demo's database at the end instead of keeping it for a look around.
    #[arg(long)]
    drop: bool,
    /// Also write every email the demo's inbox receives to this folder, as `.eml` files
    /// (open them in a mail client).
    #[arg(long)]
    eml_dir: Option<PathBuf>,
}

/// Runs the demo on the server at `database_url`; `on_private_server` when that server
/// is removed at the end, so the demo's database cannot be kept for a look around.
pub(crate) async fn run(
    database_url: &str,
    args: DemoArgs,
    on_private_server: bool,
) -> anyhow::Result<bool> {
    let started = Instant::now();
    let binaries = std::env::current_exe()?
        .parent()
        .map(Path::to_path_buf)
        .context("locating the other binaries")?;
    for name in ["sink", "decider", "dispatcher"] {
        if !binaries.join(name).exists() {
            bail!(
                "`{name}` is not next to outboxctl in {}; build all binaries first (cargo build --release --bins)",
                binaries.display()
            );
        }
    }
    let (contracts, articles) = match &args.examples {
        Some(dir) => {
            let read = |name: &str| {
                std::fs::read_to_string(dir.join(name))
                    .with_context(|| format!("reading {}", dir.join(name).display()))
            };
            (read("contracts.csv")?, read("articles.json")?)
        }
        None => (SAMPLE_CONTRACTS.to_owned(), SAMPLE_ARTICLES.to_owned()),
    };

    // A database of its own, so the demo never touches real data.
    let (demo_url, demo_name) =
        outbox_store::connect::create_database(database_url, "outbox_demo").await?;
    eprintln!("demo database: {demo_name}");
    let pool = outbox_store::connect(&demo_url, "outboxctl-demo", 4).await?;
    outbox_store::MIGRATOR.run(&pool).await?;

    let mut sink_args: Vec<String> = [
        "--listen",
        "127.0.0.1:0",
        "--retention",
        "24h",
        "--lookup",
        "--drop-response-rate",
        "0.15",
        "--fail-rate",
        "0.1",
        "--fail-status",
        "503",
        "--smtp-listen",
        "127.0.0.1:0",
        "--smtp-fail-rate",
        "0.1",
        "--smtp-fail-reply",
        "451 4.3.0 try again later",
        "--seed",
        "7",
    ]
    .map(str::to_owned)
    .into();
    if let Some(dir) = &args.eml_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        sink_args.extend(["--eml-dir".to_owned(), dir.display().to_string()]);
    }
    let (mut sink, sink_url, smtp_addr) = spawn_sink(&binaries.join("sink"), &sink_args).await?;
    eprintln!(
        "sink with faults at {sink_url}: 15% of answers lost after acceptance, 10% 503s; \
         its SMTP inbox at {smtp_addr} answers 10% of messages 451"
    );

    let tenant = outbox_store::tenants::create(&pool, "demo", "UTC", None).await?;
    let destination = |name: &str, configure: &dyn Fn(&mut NewDestination)| {
        let mut d = NewDestination {
            tenant_id: tenant,
            name: name.to_owned(),
            url: format!("{sink_url}/{name}"),
            signing_secrets: vec!["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned()],
            idempotency_header: "Idempotency-Key".to_owned(),
            idempotency_retention: None,
            lookup_url_template: None,
            on_uncertain: OnUncertain::Hold,
            timeout: Duration::from_secs(1),
            max_in_flight: 16,
        };
        configure(&mut d);
        // As `destination add` chooses when --max-in-flight is not given.
        d.max_in_flight = outbox_core::in_flight::default_max_in_flight(
            d.lookup_url_template.is_some(),
            d.idempotency_retention.is_some(),
        );
        d
    };
    let lookup = format!("{sink_url}/requests/{{key}}");
    for d in [
        destination("ops", &|d| {
            d.idempotency_retention = Some(Duration::from_secs(86_400))
        }),
        destination("finance", &|d| d.lookup_url_template = Some(lookup.clone())),
        destination("legal", &|_| {}),
    ] {
        outbox_store::destinations::create(&pool, &d).await?;
    }
    for (name, to, locale, _) in MAILBOXES {
        let new = NewDestination {
            url: format!("smtp://{smtp_addr}"),
            signing_secrets: vec![],
            ..destination(name, &|_| {})
        };
        let email = outbox_store::destinations::EmailSettings {
            smtp_tls: "none".to_owned(),
            smtp_username: None,
            smtp_password: None,
            mail_from: MAIL_FROM.to_owned(),
            mail_to: vec![to.to_owned()],
            locale: Some(locale.to_owned()),
            smtp_ca_pem: None,
        };
        let id = outbox_store::destinations::new_id();
        outbox_store::destinations::create_email_with_id(&pool, id, &new, &email).await?;
    }
    // Contracts that name no destination go to every enabled one: the operations team's
    // mailbox is disabled while the monitors decide, so it gets the news alerts its
    // watchlist names it for, and no renewals. It is enabled before delivery starts.
    outbox_store::operator::set_destination_enabled(&pool, tenant, "ops-mail", false, "demo")
        .await?;
    eprintln!(
        "destinations: ops (de-duplicates by key), finance (lookup by key), legal (neither: hold), \
         cfo-mail ({}), ops-mail ({}); both mailboxes hold an uncertain send",
        MAILBOXES[0].3, MAILBOXES[1].3
    );
    outbox_decider::contracts::import(
        &pool,
        tenant,
        &contracts,
        outbox_decider::contracts::Format::Csv,
    )
    .await?;
    outbox_store::monitors::add_watchlist_entry(
        &pool,
        &outbox_store::monitors::NewWatchlistEntry {
            tenant_id: tenant,
            name: "northwind".to_owned(),
            query: "\"northwind hosting\" outage -rumour".to_owned(),
            destinations: vec!["ops".to_owned(), "ops-mail".to_owned()],
            group_events: true,
            group_window_secs: 48 * 3600,
        },
    )
    .await?;
    outbox_decider::news::ingest(&pool, &articles).await?;

    // Two deciders at once, as an overlapping scheduler would run them.
    let deciders: Vec<Child> = (0..2)
        .map(|_| {
            Command::new(binaries.join("decider"))
                .args(["run-once", "--now", DEMO_NOW, "--database-url", &demo_url])
                .env("RUST_LOG", "warn")
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut decided = Vec::new();
    for decider in deciders {
        let output = decider.wait_with_output().await?;
        if !output.status.success() {
            bail!(
                "a decider failed: {}",
                String::from_utf8_lossy(&output.stdout)
            );
        }
        decided.push(String::from_utf8_lossy(&output.stdout).trim().to_owned());
    }
    let approved = outbox_store::outcome_counts::progress(&pool).await?.total;
    eprintln!("decider A: {}", decided[0]);
    eprintln!("decider B: {}", decided[1]);
    eprintln!("{approved} alerts approved in all: one per identity, whichever run decided it");

    outbox_store::operator::set_destination_enabled(&pool, tenant, "ops-mail", true, "demo")
        .await?;

    // Make sure there are alerts to reconcile by hand afterwards: the first one for
    // `legal` (no lookup, no de-duplication) has its answer lost, and so has the CFO's
    // first email (the relay takes it, and its reply to the final dot is lost): both end
    // held.
    let held_webhook = outbox_store::outcome_counts::first_alert_for(&pool, "legal").await?;
    let held_email = outbox_store::outcome_counts::first_alert_for(&pool, MAILBOXES[0].0).await?;
    if held_webhook.is_some() || held_email.is_some() {
        let domain = MAIL_FROM.rsplit('@').next().unwrap_or_default();
        let faults = serde_json::json!({
            "drop_response_for_keys": held_webhook.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "smtp_drop_for_message_ids": held_email.iter().map(|id| format!("{id}@{domain}")).collect::<Vec<_>>(),
        });
        let answer = reqwest::Client::new()
            .post(format!("{sink_url}/_sink/faults"))
            .json(&faults)
            .send()
            .await?;
        if !answer.status().is_success() {
            bail!("the sink refused its fault settings: {}", answer.status());
        }
    }

    let sink_ip = url::Url::parse(&sink_url)?
        .host_str()
        .context("the sink's address")?
        .to_owned();
    let dispatchers: Vec<Child> = (1..=2)
        .map(|n| {
            Command::new(binaries.join("dispatcher"))
                .args([
                    "--database-url",
                    &demo_url,
                    "--worker-id",
                    &format!("demo-{n}"),
                    "--drain",
                    "--drain-horizon",
                    "5s",
                    "--lease",
                    "2s",
                    "--retry-delays",
                    "200ms,500ms,1s",
                    "--poll-interval",
                    "100ms",
                    // The demo's sink listens on loopback, which the egress guard refuses
                    // unless opened: exactly that address is.
                    "--allow-private",
                    &sink_ip,
                ])
                .env("RUST_LOG", "error")
                .kill_on_drop(true)
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let progress = indicatif::ProgressBar::new(approved.unsigned_abs());
    progress.set_style(
        indicatif::ProgressStyle::with_template("delivering {bar:30} {pos}/{len} settled {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut dispatchers = dispatchers;
    loop {
        let now = outbox_store::outcome_counts::progress(&pool).await?;
        progress.set_position(now.settled.unsigned_abs());
        progress.set_message(format!("({} uncertain)", now.uncertain));
        let mut running = false;
        for d in &mut dispatchers {
            match d.try_wait()? {
                None => running = true,
                Some(status) if !status.success() => {
                    progress.abandon();
                    bail!("a dispatcher failed ({status})");
                }
                Some(_) => {}
            }
        }
        if !running {
            break;
        }
        if started.elapsed() > DEADLINE {
            progress.abandon();
            bail!("the demo did not finish within {}s", DEADLINE.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    progress.finish_and_clear();
    let sink_stats: serde_json::Value = reqwest::get(format!("{sink_url}/stats"))
        .await?
        .json()
        .await?;
    let inbox: Vec<serde_json::Value> = reqwest::get(format!("{sink_url}/_sink/messages"))
        .await?
        .json()
        .await?;

    let report = outbox_store::outcome_counts::report(&pool).await?;
    let mut table = Table::new(["", "ALERTS"]);
    table.row(["approved".to_owned(), approved.to_string()]);
    table.row([
        "accepted on the first try".to_owned(),
        report.first_try.to_string(),
    ]);
    table.row([
        "accepted after a retry".to_owned(),
        report.after_retry.to_string(),
    ]);
    table.row([
        "accepted by a resend the destination de-duplicated".to_owned(),
        report.by_dedup_resend.to_string(),
    ]);
    table.row([
        "accepted, confirmed by lookup".to_owned(),
        report.by_lookup.to_string(),
    ]);
    table.row(["held for an operator".to_owned(), report.held.to_string()]);
    table.row(["failed".to_owned(), report.failed.to_string()]);
    table.row(["still in flight".to_owned(), report.live.to_string()]);
    println!();
    print!("{table}");
    let mut sink_table = Table::new(["THE SINK'S OWN COUNTS", ""]);
    for key in [
        "requests",
        "distinct_keys",
        "applied",
        "wire_duplicates",
        "effective_duplicates",
        "dropped",
        "failed",
        "bad_signatures",
    ] {
        sink_table.row([key.replace('_', " "), sink_stats[key].to_string()]);
    }
    println!();
    print!("{sink_table}");
    let mut inbox_table = Table::new(["THE SINK'S INBOX (SMTP)", ""]);
    for (key, label) in [
        ("messages", "messages"),
        ("distinct_message_ids", "distinct message ids"),
        ("duplicate_message_ids", "duplicate message ids"),
        ("dropped", "final reply lost"),
        ("refused", "refused (451, retried)"),
    ] {
        inbox_table.row([label.to_owned(), sink_stats["smtp"][key].to_string()]);
    }
    println!();
    print!("{inbox_table}");
    let in_inbox = |id: &uuid::Uuid| -> Vec<&serde_json::Value> {
        inbox
            .iter()
            .filter(|m| m["alert_id"].as_str() == Some(id.to_string().as_str()))
            .collect()
    };
    let mut broken = Vec::new();
    if !report.held_lines.is_empty() {
        println!();
        println!("held, and why:");
        for (id, line) in &report.held_lines {
            println!("  {id}  {}", outbox_core::untrusted::visible(line));
            if Some(*id) != held_email {
                continue;
            }
            // The relay's record settles what the dispatcher could not know.
            match in_inbox(id).as_slice() {
                [message] => println!(
                    "    the inbox has it once (queue id {}, its final reply lost): it arrived, so \
                     `outboxctl resolve {id} --accepted --reference {} --note \"in the inbox\"`",
                    message["queue_id"].as_str().unwrap_or("?"),
                    message["queue_id"].as_str().unwrap_or("?"),
                ),
                found => broken.push(format!(
                    "the held email {id} is in the inbox {} times, not once",
                    found.len()
                )),
            }
        }
    }
    for (name, to, locale, reader) in MAILBOXES {
        println!();
        println!("one email to {to} ({reader}), as the inbox received it:");
        let received = inbox.iter().find(|m| {
            m["dropped"] == false
                && m["rcpt_to"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|t| t == to))
        });
        match received {
            Some(message) => print_email(&pool, message).await?,
            None => broken.push(format!("no email reached {name} ({locale})")),
        }
    }

    let accepted =
        report.first_try + report.after_retry + report.by_dedup_resend + report.by_lookup;
    if report.live != 0 {
        broken.push(format!("{} alerts still in flight", report.live));
    }
    if accepted + report.held + report.failed != approved {
        broken.push("some alerts are in no final state".to_owned());
    }
    if sink_stats["effective_duplicates"] != 0 {
        broken.push("the sink applied an alert twice".to_owned());
    }
    if sink_stats["bad_signatures"] != 0 {
        broken.push("the sink saw a bad signature".to_owned());
    }
    // Key by key, from the sink's own records, by the same referee as the fault suite:
    // every accepted alert applied, nothing applied twice, wire duplicates only where the
    // destination de-duplicates or answers lookups, no stray keys, one alert per identity.
    let records: Vec<serde_json::Value> = reqwest::get(format!("{sink_url}/_sink/records"))
        .await?
        .json()
        .await?;
    let sinks: Vec<outbox_checker::Sink> = [
        ("ops", outbox_checker::Capability::Idempotent),
        ("finance", outbox_checker::Capability::Lookup),
        ("legal", outbox_checker::Capability::PlainHold),
    ]
    .into_iter()
    .map(|(name, capability)| outbox_checker::Sink {
        destination: name.to_owned(),
        capability,
        records: records
            .iter()
            .filter(|r| r["path"].as_str() == Some(&format!("/{name}")))
            .map(|r| outbox_checker::SinkRecord {
                key: r["key"].as_str().map(str::to_owned),
                payload_sha256: r["payload_sha256"].as_str().map(str::to_owned),
                outcome: r["outcome"].as_str().unwrap_or("").to_owned(),
            })
            .collect(),
    })
    .collect();
    // The inboxes, by the same referee: every accepted email there exactly once by
    // Message-ID, with the bytes stored before its first send; nothing there twice.
    let inboxes: Vec<outbox_checker::Inbox> = MAILBOXES
        .iter()
        .map(|(name, to, _, _)| outbox_checker::Inbox {
            destination: (*name).to_owned(),
            capability: outbox_checker::Capability::PlainHold,
            messages: inbox
                .iter()
                .filter(|m| {
                    m["rcpt_to"]
                        .as_array()
                        .is_some_and(|r| r.iter().any(|t| t == to))
                })
                .map(|m| outbox_checker::InboxMessage {
                    message_id: m["message_id"].as_str().map(str::to_owned),
                    alert_id: m["alert_id"].as_str().map(str::to_owned),
                    sha256: m["sha256"].as_str().unwrap_or("").to_owned(),
                })
                .collect(),
        })
        .collect();
    let verdict = outbox_checker::check_with_inboxes(&pool, 7, &sinks, &inboxes).await?;
    for offence in &verdict.offences {
        broken.push(format!("{}: {}", offence.kind, offence.detail));
    }
    let _ = sink.kill().await;
    println!();
    if broken.is_empty() {
        println!(
            "invariants hold: every alert settled, none applied twice, every accepted email \
             in the inbox once ({:.1}s)",
            started.elapsed().as_secs_f64()
        );
    } else {
        println!("INVARIANTS BROKEN: {}", broken.join("; "));
    }
    pool.close().await;
    if on_private_server {
        println!(
            "the private server goes with the demo; to keep the demo's database for a look \
             around, start PostgreSQL and set DATABASE_URL"
        );
    } else if args.drop {
        outbox_store::connect::drop_database(database_url, &demo_name).await?;
    } else {
        println!(
            "the demo's database is kept; look around with DATABASE_URL='{demo_url}' outboxctl outbox list --status held"
        );
    }
    Ok(broken.is_empty())
}

/// Prints one received email: the header fields that matter, from the message the
/// dispatcher stored (the inbox holds the same bytes: the checker compares them), with the
/// subject as the inbox decoded it, then the decoded text part.
async fn print_email(
    pool: &outbox_store::PgPool,
    received: &serde_json::Value,
) -> anyhow::Result<()> {
    let alert_id: uuid::Uuid = received["alert_id"]
        .as_str()
        .and_then(|id| id.parse().ok())
        .context("the inbox's message has no X-Alert-Id")?;
    let stored = outbox_store::rendered::find(pool, alert_id)
        .await?
        .context("the alert has no stored message")?;
    let show = outbox_core::untrusted::visible;
    for (name, value) in mail_view::headers(&stored.bytes) {
        let value = match (name.as_str(), received["subject"].as_str()) {
            ("Subject", Some(decoded)) => decoded.to_owned(),
            _ => value,
        };
        println!("  {name}: {}", show(&value));
    }
    println!();
    let text = mail_view::text_part(&stored.bytes).unwrap_or_else(|| "(no text part)".into());
    for line in text.trim_end().lines() {
        if line.is_empty() {
            println!();
        } else {
            println!("  {}", show(line));
        }
    }
    Ok(())
}

/// Spawns the sink (its log read and dropped) and returns it with its HTTP base URL and
/// its SMTP listener's address, as it announced them.
async fn spawn_sink(binary: &Path, args: &[String]) -> anyhow::Result<(Child, String, String)> {
    let mut command = Command::new(binary);
    command.args(args);
    let mut sink = spawn_logged(command, |_| {})?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let http = sink
        .listening("sink listening", deadline)
        .await
        .context("waiting for the sink")?;
    let smtp = sink
        .listening("sink SMTP listening", deadline)
        .await
        .context("waiting for the sink")?;
    Ok((sink.child, format!("http://{http}"), smtp))
}
