//! Which PostgreSQL the demo runs on: the one `DATABASE_URL` (or `--database-url`) names;
//! without either, the default server (`127.0.0.1`, `PGPORT` or 5432); and when nothing
//! answers there, a private, throwaway server started from the PostgreSQL programs
//! installed on the machine, stopped and removed when the demo ends.

use outbox_runtime::private_postgres::{self, PrivateServer, RunAs};
use std::path::PathBuf;

/// The server the demo uses, and the private one to keep alive while it runs (if any).
pub(crate) struct DemoServer {
    pub(crate) url: String,
    pub(crate) private: Option<PrivateServer>,
}

/// Chooses the demo's server, saying which in one line when it is not the one named.
pub(crate) fn choose(database_url: &str) -> anyhow::Result<DemoServer> {
    let named = std::env::var_os("DATABASE_URL").is_some()
        || database_url != outbox_runtime::DEFAULT_DATABASE_URL;
    if named || private_postgres::default_server_answers() {
        let url = if named {
            database_url.to_owned()
        } else {
            private_postgres::default_url()
        };
        return Ok(DemoServer { url, private: None });
    }
    let private = PrivateServer::start(&private_server_parent(), RunAs::CurrentUser)?;
    let (host, port) = private_postgres::default_address();
    eprintln!(
        "no PostgreSQL answers at {host}:{port} and DATABASE_URL is not set: the demo runs on \
         a private server, {}, started in {:.1} s and removed when the demo ends",
        private.describe(),
        private.started_in.as_secs_f64()
    );
    Ok(DemoServer {
        url: private.url("postgres"),
        private: Some(private),
    })
}

/// `target/` when outboxctl runs from a build there (`target/release/outboxctl`), else
/// the system's temporary directory.
fn private_server_parent() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            let target = exe.parent()?.parent()?;
            (target.file_name()? == "target").then(|| target.to_path_buf())
        })
        .unwrap_or_else(std::env::temp_dir)
}
