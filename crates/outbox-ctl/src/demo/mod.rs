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
//!
//! - `server`: which PostgreSQL it runs on (a private one when none answers).
//! - `processes`: the binaries beside outboxctl; the deciders and dispatchers run.
//! - `sink`: the sink with its faults, and what it recorded.
//! - `mailboxes`: the two email destinations and their readers.
//! - `data`: the tenant, destinations and monitors' sources it starts from.
//! - `report`, `mail_view`: the printout, emails as people read them.
//! - `verdict`: the invariants, checked by the referee (`outbox_checker`).

mod data;
mod mail_view;
mod mailboxes;
mod processes;
mod report;
mod server;
mod sink;
mod verdict;

use std::path::PathBuf;
use std::time::Instant;

use sink::Sink;

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

/// `outboxctl demo`: the demo on the server it chooses, which is removed at the end when
/// it is a private one; an error unless the invariants held.
pub(crate) async fn run(database_url: &str, args: DemoArgs) -> anyhow::Result<()> {
    let server = server::choose(database_url)?;
    let passed = run_on(&server.url, args, server.private.is_some()).await;
    drop(server);
    if passed? {
        Ok(())
    } else {
        Err(anyhow::anyhow!("the demo's invariants did not hold"))
    }
}

/// Runs the demo on the server at `database_url`; `on_private_server` when that server
/// is removed at the end, so the demo's database cannot be kept for a look around.
/// Whether the invariants held.
async fn run_on(
    database_url: &str,
    args: DemoArgs,
    on_private_server: bool,
) -> anyhow::Result<bool> {
    let started = Instant::now();
    let binaries = processes::binaries()?;
    let (contracts, articles) = data::sample(args.examples.as_deref())?;

    // A database of its own, so the demo never touches real data.
    let (demo_url, demo_name) =
        outbox_store::connect::create_database(database_url, "outbox_demo").await?;
    eprintln!("demo database: {demo_name}");
    let pool = outbox_store::connect(&demo_url, "outboxctl-demo", 4).await?;
    outbox_store::MIGRATOR.run(&pool).await?;

    let sink = Sink::start(&binaries.join("sink"), args.eml_dir.as_deref()).await?;
    let tenant = data::create_destinations(&pool, &sink).await?;
    data::feed_monitors(&pool, tenant, &contracts, &articles).await?;
    let approved = processes::decide(&binaries, &demo_url, &pool).await?;
    outbox_store::destination_switch::set_destination_enabled(
        &pool, tenant, "ops-mail", true, "demo",
    )
    .await?;
    let held_email = sink.hold_first_alerts(&pool).await?;
    let dispatchers = processes::start_dispatchers(&binaries, &demo_url, &sink.ip()?)?;
    processes::wait_for_delivery(dispatchers, &pool, approved, started).await?;

    let sink_stats: serde_json::Value = sink.read("/stats").await?;
    let inbox: Vec<serde_json::Value> = sink.read("/_sink/messages").await?;
    let outcomes = outbox_store::outcome_counts::report(&pool).await?;
    report::print_counts(approved, &outcomes, &sink_stats);
    let mut broken = report::print_held(&outcomes, held_email, &inbox);
    broken.extend(report::print_one_email_each(&pool, &inbox).await?);
    let records: Vec<serde_json::Value> = sink.read("/_sink/records").await?;
    broken.extend(
        verdict::broken_invariants(&pool, approved, &outcomes, &sink_stats, &records, &inbox)
            .await?,
    );
    sink.stop().await;

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
    leave_database(
        database_url,
        &demo_url,
        &demo_name,
        args.drop,
        on_private_server,
    )
    .await?;
    Ok(broken.is_empty())
}

/// Keeps the demo's database for a look around (saying how), or drops it with `--drop`;
/// on a private server it goes with the server.
async fn leave_database(
    database_url: &str,
    demo_url: &str,
    demo_name: &str,
    drop: bool,
    on_private_server: bool,
) -> anyhow::Result<()> {
    if on_private_server {
        println!(
            "the private server goes with the demo; to keep the demo's database for a look \
             around, start PostgreSQL and set DATABASE_URL"
        );
    } else if drop {
        outbox_store::connect::drop_database(database_url, demo_name).await?;
    } else {
        // The URL as given, its password (if any) shown as `***`: this line is kept in
        // terminals' scrollback and CI logs.
        println!(
            "the demo's database is kept; look around with DATABASE_URL='{}' outboxctl outbox list --status held",
            outbox_core::redact::database_url(demo_url)
        );
    }
    Ok(())
}
