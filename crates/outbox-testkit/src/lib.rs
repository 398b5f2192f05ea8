//! Test support for the alert outbox: every test gets its own freshly migrated PostgreSQL
//! database on the server named by `DATABASE_URL` (default: the local server), dropped
//! when the test ends, whether it passed or panicked.
//!
//! Layout: [`TestDb`] (create, migrate, connect, drop) and [`server_url`]; [`tls`]: a CA
//! and server certificates made at test time, for the TLS tests; [`process`]: the
//! workspace's binaries as a test's child processes (log file, wait until listening, log
//! printed when the test fails, killed when dropped); [`cluster`]: PostgreSQL servers of a
//! test's own (a primary, streaming replicas, crashes and promotions) for failover tests;
//! [`patroni`]: a Patroni cluster of a test's own (etcd, two nodes, HAProxy), made from the
//! project's `deploy/patroni/` files; [`otlp`]: an OTLP/HTTP trace receiver on loopback
//! that the product's OpenTelemetry exporter sends to, decoding what arrives with the
//! official protobuf types and drawing each trace as a tree.

pub mod cluster;
pub mod otlp;
pub mod patroni;
pub mod process;
pub mod tls;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};
use std::str::FromStr;

/// The server tests run against: `DATABASE_URL`; without it the default server
/// (`127.0.0.1`, `PGPORT` or 5432); and when nothing answers there, one private server for
/// the whole test binary, started from the PostgreSQL programs installed on the machine (as
/// the `postgres` user when the tests run as root) and removed once the binary has ended,
/// however it ended. One line on stderr names it.
pub fn server_url() -> String {
    use outbox_runtime::private_postgres::{self, PrivateServer, RunAs};
    use std::sync::OnceLock;
    static PRIVATE: OnceLock<Result<PrivateServer, String>> = OnceLock::new();
    if let Ok(url) = std::env::var("DATABASE_URL") {
        return url;
    }
    if PRIVATE.get().is_none() && private_postgres::default_server_answers() {
        return private_postgres::default_url();
    }
    let private = PRIVATE.get_or_init(|| {
        let parent = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tmp");
        let _ = std::fs::create_dir_all(&parent);
        let parent = parent.canonicalize().unwrap_or(parent);
        let started = PrivateServer::start(&parent, RunAs::PostgresWhenRoot)
            .map_err(|err| err.to_string())?;
        let (host, port) = private_postgres::default_address();
        // Straight to stderr, past the test harness's capture: once per test binary.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "no PostgreSQL answers at {host}:{port} and DATABASE_URL is not set: the tests \
             run on a private server, {}, started in {:.1} s",
            started.describe(),
            started.started_in.as_secs_f64()
        );
        Ok(started)
    });
    match private {
        Ok(server) => server.url("postgres"),
        Err(why) => panic!("{why}"),
    }
}

/// A database of its own for one test.
#[derive(Debug)]
pub struct TestDb {
    /// The database's name (`outbox_test_<uuid>`).
    pub name: String,
    /// A URL that connects to it, for child processes.
    pub url: String,
    /// A pool connected to it.
    pub pool: PgPool,
    admin: PgConnectOptions,
}

impl TestDb {
    /// Creates and migrates a fresh database, with a pool of up to 10 connections.
    pub async fn new() -> Self {
        Self::with_pool_size(10).await
    }

    /// Like [`TestDb::new`], with a pool of up to `max_connections`.
    pub async fn with_pool_size(max_connections: u32) -> Self {
        Self::migrated_by(max_connections, &outbox_store::MIGRATOR).await
    }

    /// A database migrated only as far as the migrations before `version`, as a database of
    /// an earlier release is: a test of an upgrade writes what that release wrote, then
    /// runs [`outbox_store::MIGRATOR`] on it as `outboxctl migrate` does.
    pub async fn migrated_before(version: i64) -> Self {
        let earlier = sqlx::migrate::Migrator {
            migrations: outbox_store::MIGRATOR
                .iter()
                .filter(|migration| migration.version < version)
                .cloned()
                .collect(),
            ..sqlx::migrate::Migrator::DEFAULT
        };
        Self::migrated_by(10, &earlier).await
    }

    async fn migrated_by(max_connections: u32, migrator: &sqlx::migrate::Migrator) -> Self {
        let admin = PgConnectOptions::from_str(&server_url()).expect("DATABASE_URL must be a URL");
        let name = format!("outbox_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = admin.connect().await.expect("connect to the test server");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .expect("create the test database");
        conn.close().await.ok();

        let options = admin.clone().database(&name);
        let url = options.to_url_lossy().to_string();
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(max_connections)
            .connect_with(options)
            .await
            .expect("connect to the test database");
        migrator
            .run(&pool)
            .await
            .expect("migrate the test database");
        TestDb {
            name,
            url,
            pool,
            admin,
        }
    }

    /// Counts the rows of `table` (a trusted name from the test itself).
    pub async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&self.pool)
            .await
            .expect("count rows")
    }

    /// Waits until a session of this database is waiting for a lock while it runs a
    /// statement whose text contains `statement_part`: the barrier a race test sets before
    /// it lets the lock go. Polls `pg_stat_activity` for up to 30 s, then fails the test.
    pub async fn until_a_statement_waits_for_a_lock(&self, statement_part: &str) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let waiting: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock' \
                   AND strpos(query, $1) > 0)",
            )
            .bind(statement_part)
            .fetch_one(&self.pool)
            .await
            .expect("read pg_stat_activity");
            if waiting {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no statement containing `{statement_part}` ever waited for a lock"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // Drop runs inside the test's runtime, which cannot be awaited on here, and the pool's
        // connections belong to that runtime, so they are not closed politely: a short-lived
        // thread with its own runtime drops the database WITH (FORCE), which ends them (and
        // any a killed child process left behind) on the server side.
        let admin = self.admin.clone();
        let name = std::mem::take(&mut self.name);
        let dropper = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime for dropping the test database");
            runtime.block_on(async move {
                if let Ok(mut conn) = PgConnection::connect_with(&admin).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut conn)
                        .await;
                }
            });
        });
        let _ = dropper.join();
    }
}
