//! Who delivers during a measurement and with which settings ([`Dispatchers`],
//! [`DrainSettings`]), and those dispatchers at work (`Running`): one in this process,
//! or `dispatcher` processes built beside the benchmark.

use anyhow::Context;
use outbox_dispatcher::Transport;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Who delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dispatchers {
    /// One dispatcher inside this process, with this transport.
    InProcess(#[serde(skip)] Transport),
    /// This many `dispatcher` processes side by side, each with `--drain`.
    Processes(u32),
}

/// Dispatcher settings for a drain.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DrainSettings {
    /// Who delivers.
    pub dispatchers: Dispatchers,
    /// Rows per claim statement.
    pub batch_size: u32,
    /// Rows a dispatcher holds in `sending` at once (its crash blast radius).
    pub max_in_flight: u32,
    /// Sends a dispatcher runs at once (`--max-concurrent-sends`).
    pub max_concurrent_sends: u32,
    /// The sink's address: the one address the dispatchers' egress guard opens (the
    /// bench's sinks listen on loopback, which is otherwise refused).
    #[serde(skip)]
    pub sink_ip: Option<std::net::IpAddr>,
}

/// The address of a sink's URL when its host is an IP literal (as the bench's are).
pub fn sink_ip(url: &str) -> Option<std::net::IpAddr> {
    let url = reqwest::Url::parse(url).ok()?;
    let host = url.host_str()?;
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

impl DrainSettings {
    /// The allow-list opening exactly the sink's address.
    fn allow_private(&self) -> String {
        self.sink_ip.map(|ip| ip.to_string()).unwrap_or_default()
    }
}

/// Dispatchers at work.
pub(crate) enum Running {
    InProcess {
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<
            Result<outbox_dispatcher::RunSummary, outbox_dispatcher::DispatchError>,
        >,
    },
    Processes(Vec<tokio::process::Child>),
}

impl Running {
    pub(crate) async fn start(
        database_url: &str,
        settings: DrainSettings,
    ) -> anyhow::Result<Running> {
        match settings.dispatchers {
            Dispatchers::InProcess(transport) => {
                let dispatcher_pool = outbox_store::connect_planned(
                    database_url,
                    "dispatcher",
                    16,
                    outbox_dispatcher::POOL_PLANS,
                )
                .await?;
                let config = outbox_dispatcher::Config {
                    worker_id: outbox_dispatcher::default_worker_id(),
                    batch_size: settings.batch_size,
                    max_in_flight: settings.max_in_flight,
                    max_concurrent_sends: Some(settings.max_concurrent_sends),
                    lease: Duration::from_secs(30),
                    poll_interval: Duration::from_secs(1),
                    retry_schedule: outbox_core::retry::RetrySchedule::parse("5s,30s,2m")
                        .map_err(anyhow::Error::msg)?,
                    // The no-op send has no sink to watch: the dispatcher ends by itself once
                    // nothing is due, and the drain waits for that (`Running::wait_until_ended`).
                    drain: matches!(transport, outbox_dispatcher::Transport::Discard)
                        .then_some(Duration::ZERO),
                    shutdown_deadline: Duration::from_secs(20),
                    metrics_listen: None,
                    connect_timeout: Duration::from_secs(5),
                    transport,
                    // The workload stores its secrets in plain text.
                    secret_keys: Default::default(),
                    egress: outbox_egress::Guard::new(
                        outbox_egress::AllowList::parse(&settings.allow_private())
                            .map_err(anyhow::Error::msg)?,
                    ),
                    templates: Default::default(),
                    templates_dir: None,
                    health_report_interval: Duration::from_secs(5),
                    queue_vacuum_after: Some(outbox_dispatcher::DEFAULT_QUEUE_VACUUM_AFTER),
                    // As deployed: checkpoints every minute (the figures include them).
                    evidence: outbox_evidence::checkpoint::CheckpointInterval(Some(
                        outbox_evidence::checkpoint::DEFAULT_INTERVAL,
                    ))
                    .settings(None)
                    .unwrap_or_default(),
                };
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let task = tokio::spawn(async move {
                    let closing = dispatcher_pool.clone();
                    let ran = outbox_dispatcher::run(dispatcher_pool, config, async {
                        let _ = stopped.await;
                    })
                    .await;
                    // As the `dispatcher` binary does: no connection left for the server
                    // to log as reset.
                    outbox_store::close_at_exit(&closing).await;
                    ran
                });
                Ok(Running::InProcess { stop, task })
            }
            Dispatchers::Processes(k) => {
                let program = sibling_binary("dispatcher")?;
                let mut children = Vec::new();
                for i in 0..k {
                    let child = tokio::process::Command::new(&program)
                        .arg("--database-url")
                        .arg(database_url)
                        .arg("--worker-id")
                        .arg(format!("bench-{i}"))
                        .arg("--batch-size")
                        .arg(settings.batch_size.to_string())
                        .arg("--max-in-flight")
                        .arg(settings.max_in_flight.to_string())
                        .arg("--max-concurrent-sends")
                        .arg(settings.max_concurrent_sends.to_string())
                        .arg("--drain")
                        .arg("--allow-private")
                        .arg(settings.allow_private())
                        .env("RUST_LOG", "warn")
                        .kill_on_drop(true)
                        .spawn()
                        .with_context(|| format!("starting {}", program.display()))?;
                    children.push(child);
                }
                Ok(Running::Processes(children))
            }
        }
    }

    /// Waits (until `deadline`) for the dispatchers to end by themselves, as they do once
    /// nothing is due when they drain: the in-process no-op dispatcher, or processes.
    pub(crate) async fn wait_until_ended(&mut self, deadline: Instant) -> anyhow::Result<()> {
        loop {
            let ended = match self {
                Running::InProcess { task, .. } => task.is_finished(),
                Running::Processes(children) => {
                    let mut all = true;
                    for child in children.iter_mut() {
                        all &= child.try_wait()?.is_some();
                    }
                    all
                }
            };
            if ended {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the dispatchers did not end in 30 minutes"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        match self {
            Running::InProcess { stop, task } => {
                let _ = stop.send(());
                task.await??;
            }
            Running::Processes(children) => {
                for mut child in children {
                    let status = child.wait().await?;
                    anyhow::ensure!(status.success(), "a dispatcher process ended with {status}");
                }
            }
        }
        Ok(())
    }
}

/// A binary built beside the running one (`target/<profile>/<name>`).
pub fn sibling_binary(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating this program")?;
    let dir = exe.parent().context("this program has no directory")?;
    // Test binaries live one level down, in `deps/`.
    for candidate in [dir.join(name), dir.join("..").join(name)] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    anyhow::bail!(
        "`{name}` is not built beside {}; build the workspace's binaries first",
        exe.display()
    )
}
