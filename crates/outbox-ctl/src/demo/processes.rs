//! The product's binaries as the demo runs them, found beside outboxctl: two deciders at
//! once, then two dispatchers until nothing is left to deliver, with a progress bar.

use anyhow::{bail, Context};
use outbox_store::PgPool;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// The instant the deciders evaluate at: the sample contracts' tiers fall due around it.
const DEMO_NOW: &str = "2027-03-01T09:00:00Z";
/// The whole run may take this long before it is called a failure.
const DEADLINE: Duration = Duration::from_secs(90);

/// The folder of outboxctl, which must hold the sink, the decider and the dispatcher.
pub(super) fn binaries() -> anyhow::Result<PathBuf> {
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
    Ok(binaries)
}

/// Two deciders at once, as an overlapping scheduler would run them; says what each
/// found and how many alerts were approved in all, and returns that number.
pub(super) async fn decide(binaries: &Path, demo_url: &str, pool: &PgPool) -> anyhow::Result<i64> {
    let deciders: Vec<Child> = (0..2)
        .map(|_| {
            Command::new(binaries.join("decider"))
                .args(["run-once", "--now", DEMO_NOW])
                // Through the environment, never the command line: `ps` shows every
                // user a command line, password included.
                .env("DATABASE_URL", demo_url)
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
    let approved = outbox_store::outcome_counts::progress(pool).await?.total;
    eprintln!("decider A: {}", decided[0]);
    eprintln!("decider B: {}", decided[1]);
    eprintln!("{approved} alerts approved in all: one per identity, whichever run decided it");
    Ok(approved)
}

/// Two dispatchers, draining the queue, allowed to reach the sink at `sink_ip` (loopback,
/// which the egress guard refuses unless opened: exactly that address is).
pub(super) fn start_dispatchers(
    binaries: &Path,
    demo_url: &str,
    sink_ip: &str,
) -> anyhow::Result<Vec<Child>> {
    let dispatchers = (1..=2)
        .map(|n| {
            Command::new(binaries.join("dispatcher"))
                .args([
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
                    "--allow-private",
                    sink_ip,
                ])
                // As for the deciders: the URL may hold a password.
                .env("DATABASE_URL", demo_url)
                .env("RUST_LOG", "error")
                .kill_on_drop(true)
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    Ok(dispatchers)
}

/// Waits for every dispatcher to exit, showing how many of the `approved` alerts are
/// settled; a dispatcher that fails, or a run past [`DEADLINE`] since `started`, is an
/// error.
pub(super) async fn wait_for_delivery(
    mut dispatchers: Vec<Child>,
    pool: &PgPool,
    approved: i64,
    started: Instant,
) -> anyhow::Result<()> {
    let progress = indicatif::ProgressBar::new(approved.unsigned_abs());
    progress.set_style(
        indicatif::ProgressStyle::with_template("delivering {bar:30} {pos}/{len} settled {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    loop {
        let now = outbox_store::outcome_counts::progress(pool).await?;
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
    Ok(())
}
