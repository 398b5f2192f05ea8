//! The approval API served from this process for a run (`Api`), and a client of it
//! with the benchmark tenant's token (`ApiClient`).

use anyhow::Context;
use outbox_store::PgPool;
use std::time::Duration;
use uuid::Uuid;

use crate::workload::Workload;

/// How long the benchmark's API clients keep an idle connection: under the API's idle
/// timeout (75 s, outbox-runtime's `ServerLimits::DEFAULT_IDLE_TIMEOUT`).
const API_CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The approval API, served from this process.
pub(crate) struct Api {
    pub(crate) client: ApiClient,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// A client of the approval API with the benchmark tenant's token.
#[derive(Clone)]
pub(crate) struct ApiClient {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Api {
    /// Serves the API on a free loopback port from `pool`, with a token of the workload's
    /// tenant for its client.
    pub(crate) async fn start(pool: PgPool, workload: &Workload) -> anyhow::Result<Api> {
        let token = outbox_store::tokens::create(&pool, workload.tenant_id, Some("benchmark"))
            .await?
            .expose()
            .to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // The benchmark is one client address opening as many connections as its open-loop
        // rate needs, as a reverse proxy in front of the API would: the per-address share
        // that protects the API from one crowding client is lifted to the whole cap, as the
        // approval API's page (docs/approval-api.md) advises behind a proxy.
        let mut limits = outbox_runtime::http_server::ServerLimits::default();
        limits.max_connections_per_client = limits.max_connections;
        let task = tokio::spawn(outbox_api::serve_with(
            outbox_api::Listeners {
                api: listener,
                operations: None,
            },
            pool,
            limits,
            async {
                let _ = stopped.await;
            },
        ));
        Ok(Api {
            client: ApiClient {
                base,
                token,
                // Idle connections are dropped before the API's own idle timeout closes
                // them, as any well-behaved client does: with reqwest's default (90 s) a
                // request now and then raced the server's close and failed to send,
                // which a long open-loop run counts as a failed approval.
                http: reqwest::Client::builder()
                    .pool_idle_timeout(API_CLIENT_IDLE_TIMEOUT)
                    .build()?,
            },
            stop,
            task,
        })
    }

    /// Stops serving and waits for the server to end.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

impl ApiClient {
    /// Approves alert `i` of the workload (`POST /v1/alerts`); returns its id.
    pub(crate) async fn approve_one(&self, workload: &Workload, i: u64) -> anyhow::Result<Uuid> {
        let body = format!(
            r#"{{"destination":{},"subject":{},"occurrence":"firing","payload":{}}}"#,
            serde_json::Value::String(workload.destination_name.clone()),
            serde_json::Value::String(workload.subject(i)),
            workload.payload(i)
        );
        let response = self
            .http
            .post(format!("{}/v1/alerts", self.base))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        let status = response.status();
        let answer: serde_json::Value = response.json().await?;
        anyhow::ensure!(
            status.as_u16() == 201,
            "approval answered {status}: {answer}"
        );
        answer["id"]
            .as_str()
            .and_then(|id| Uuid::parse_str(id).ok())
            .context("an approval answer without an id")
    }
}
