//! The demo's sink: started with faults (answers lost after acceptance, 503s; over SMTP,
//! 451s), told which alerts must end held, and read back at the end (its counts, its
//! inbox, its records of every request).

use anyhow::{bail, Context};
use outbox_runtime::process::spawn_logged;
use std::path::Path;
use std::time::Duration;
use tokio::process::{Child, Command};

use super::mailboxes::{MAILBOXES, MAIL_FROM};

/// The sink's faults, its seed, and listeners on loopback ports of the system's choosing.
const SINK_ARGS: [&str; 19] = [
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
];

/// The running sink (stopped when dropped).
#[derive(Debug)]
pub(super) struct Sink {
    child: Child,
    /// Its HTTP base URL, `http://127.0.0.1:PORT`.
    pub(super) url: String,
    /// Its SMTP listener's address.
    pub(super) smtp_addr: String,
}

impl Sink {
    /// Starts the sink with faults, writing every email it receives to `eml_dir` too.
    pub(super) async fn start(binary: &Path, eml_dir: Option<&Path>) -> anyhow::Result<Sink> {
        let mut args: Vec<String> = SINK_ARGS.map(str::to_owned).into();
        if let Some(dir) = eml_dir {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            args.extend(["--eml-dir".to_owned(), dir.display().to_string()]);
        }
        let sink = spawn(binary, &args).await?;
        eprintln!(
            "sink with faults at {}: 15% of answers lost after acceptance, 10% 503s; \
             its SMTP inbox at {} answers 10% of messages 451",
            sink.url, sink.smtp_addr
        );
        Ok(sink)
    }

    /// The address the sink listens on, which the dispatchers' egress guard must open.
    pub(super) fn ip(&self) -> anyhow::Result<String> {
        Ok(url::Url::parse(&self.url)?
            .host_str()
            .context("the sink's address")?
            .to_owned())
    }

    /// Makes sure there are alerts to reconcile by hand afterwards: the first one for
    /// `legal` (no lookup, no de-duplication) has its answer lost, and so has the CFO's
    /// first email (the relay takes it, and its reply to the final dot is lost): both end
    /// held. Returns that email's alert.
    pub(super) async fn hold_first_alerts(
        &self,
        pool: &outbox_store::PgPool,
    ) -> anyhow::Result<Option<uuid::Uuid>> {
        use outbox_store::outcome_counts::first_alert_for;
        let held_webhook = first_alert_for(pool, "legal").await?;
        let held_email = first_alert_for(pool, MAILBOXES[0].destination).await?;
        if held_webhook.is_none() && held_email.is_none() {
            return Ok(None);
        }
        let domain = MAIL_FROM.rsplit('@').next().unwrap_or_default();
        let faults = serde_json::json!({
            "drop_response_for_keys": held_webhook.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "smtp_drop_for_message_ids": held_email.iter().map(|id| format!("{id}@{domain}")).collect::<Vec<_>>(),
        });
        let answer = reqwest::Client::new()
            .post(format!("{}/_sink/faults", self.url))
            .json(&faults)
            .send()
            .await?;
        if !answer.status().is_success() {
            bail!("the sink refused its fault settings: {}", answer.status());
        }
        Ok(held_email)
    }

    /// What the sink serves at `path` (its counts, its inbox, its records), as JSON.
    pub(super) async fn read<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
    ) -> anyhow::Result<T> {
        Ok(reqwest::get(format!("{}{path}", self.url))
            .await?
            .json()
            .await?)
    }

    /// Stops the sink.
    pub(super) async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Spawns the sink (its log read and dropped) and returns it with its HTTP base URL and
/// its SMTP listener's address, as it announced them.
async fn spawn(binary: &Path, args: &[String]) -> anyhow::Result<Sink> {
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
    Ok(Sink {
        child: sink.child,
        url: format!("http://{http}"),
        smtp_addr: smtp,
    })
}
