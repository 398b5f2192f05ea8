//! A database of its own for each run: created on the server before the run, and dropped
//! after it whatever the run's result.

use anyhow::Context;
use std::future::Future;

/// Runs `body` on a new database on `server_url` (`body` gets its URL), then drops the
/// database. A failure to drop it fails the run too, before the run's own result.
pub(crate) async fn on_own_database<T, Run, Ran>(server_url: &str, body: Run) -> anyhow::Result<T>
where
    Run: FnOnce(String) -> Ran,
    Ran: Future<Output = anyhow::Result<T>>,
{
    let (url, name) = outbox_store::connect::create_database(server_url, "outbox_bench")
        .await
        .context("creating the benchmark database")?;
    let result = body(url).await;
    outbox_store::connect::drop_database(server_url, &name).await?;
    result
}
