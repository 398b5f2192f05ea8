//! Connection pools and the migrator.

use backon::{ExponentialBuilder, Retryable};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use std::str::FromStr;
use std::time::Duration;

use crate::StoreError;

/// The schema, embedded from the workspace's `migrations/` folder.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Opens a pool. `application_name` names the component in `pg_stat_activity`, so an
/// operator (or a fault test) can tell a decider's sessions from a dispatcher's.
///
/// Every session runs with `jit = off`. Our statements are short and run thousands of
/// times a second; PostgreSQL compiles a statement to machine code whenever its estimated
/// cost passes `jit_above_cost`, and that compilation alone takes 100 ms or more of CPU.
/// The claim's estimate includes sub-plans that only run for uncertain rows, and on tables
/// that have never been analysed it grows with the tables. Under sustained load with
/// autovacuum off, it crossed the threshold once `delivery_attempts` held about 550,000
/// rows, and every claim from then on paid the compilation: the approval-to-acceptance
/// p50 went from 15 ms to 150–200 ms. Nothing we run gains from JIT.
pub async fn connect(
    database_url: &str,
    application_name: &str,
    max_connections: u32,
) -> Result<PgPool, StoreError> {
    let options = PgConnectOptions::from_str(database_url)?
        .application_name(application_name)
        .options([("jit", "off")]);
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options)
        .await?;
    Ok(pool)
}

/// Like [`connect`], but waits for a database that is still starting (as under
/// `docker compose up`), retrying with exponential backoff for up to about `patience`.
/// Errors that waiting cannot fix (a malformed URL, bad credentials, a missing database)
/// are returned at once.
pub async fn connect_with_retry(
    database_url: &str,
    application_name: &str,
    max_connections: u32,
    patience: Duration,
) -> Result<PgPool, StoreError> {
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .with_total_delay(Some(patience))
        .without_max_times()
        .with_jitter();
    (|| connect(database_url, application_name, max_connections))
        .retry(backoff)
        .when(is_worth_waiting_for)
        .notify(|err, wait| {
            tracing::warn!(error = %err, retry_in = ?wait, "database not reachable yet");
        })
        .await
}

fn is_worth_waiting_for(err: &StoreError) -> bool {
    match err {
        StoreError::Database(sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut) => true,
        // 57P03: the server is starting up or shutting down.
        StoreError::Database(sqlx::Error::Database(db)) => db.code().as_deref() == Some("57P03"),
        _ => false,
    }
}

/// Checks that the database answers a trivial query.
pub async fn ping(db: impl sqlx::PgExecutor<'_>) -> Result<(), StoreError> {
    sqlx::query("SELECT 1").execute(db).await?;
    Ok(())
}

/// Creates a database of its own, named `<prefix>_<uuid>`, on the server `server_url`
/// points at; returns a URL for it and its name.
pub async fn create_database(
    server_url: &str,
    prefix: &str,
) -> Result<(String, String), StoreError> {
    use sqlx::{ConnectOptions, Connection};
    let admin = PgConnectOptions::from_str(server_url)?;
    let name = format!("{prefix}_{}", uuid::Uuid::now_v7().simple());
    let mut conn = admin.connect().await?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    // The caller's URL with only the database changed: same host, user and options.
    let url = match url::Url::parse(server_url) {
        Ok(mut parsed) => {
            parsed.set_path(&format!("/{name}"));
            parsed.to_string()
        }
        Err(_) => admin.database(&name).to_url_lossy().to_string(),
    };
    Ok((url, name))
}

/// Drops a database made by [`create_database`], forcing out its sessions.
pub async fn drop_database(server_url: &str, name: &str) -> Result<(), StoreError> {
    use sqlx::{ConnectOptions, Connection};
    let admin = PgConnectOptions::from_str(server_url)?;
    let mut conn = admin.connect().await?;
    sqlx::query(&format!(
        "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
        name.replace('"', "")
    ))
    .execute(&mut conn)
    .await?;
    conn.close().await?;
    Ok(())
}
