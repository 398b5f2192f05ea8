//! The machine a run measured: its facts, read on the phase's database, and the line
//! every report opens with.

use outbox_store::PgPool;
use std::collections::HashMap;
use std::fmt;

/// The machine the figures come from: its cores, and the server's version and the
/// settings that move them (`synchronous_commit`, `shared_buffers`).
pub(super) async fn host_facts(pool: &PgPool) -> anyhow::Result<HashMap<String, String>> {
    let mut host = HashMap::new();
    host.insert(
        "cpus".to_owned(),
        std::thread::available_parallelism()
            .map(|n| n.get().to_string())
            .unwrap_or_default(),
    );
    for (name, value) in crate::db::server_settings(pool).await? {
        host.insert(name, value);
    }
    Ok(host)
}

/// The machine a run measured, as [`host_facts`] read it: one line.
pub(super) fn write_host_line(
    out: &mut fmt::Formatter<'_>,
    facts: &HashMap<String, String>,
) -> fmt::Result {
    let host = |k: &str| facts.get(k).cloned().unwrap_or_default();
    writeln!(
        out,
        "host: {} cpus, PostgreSQL {}, synchronous_commit={}, shared_buffers={} (8kB pages)",
        host("cpus"),
        host("server_version"),
        host("synchronous_commit"),
        host("shared_buffers")
    )
}
