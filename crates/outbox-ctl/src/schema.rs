//! `outboxctl migrate`: the schema brought up to date, or with `--status` which migrations
//! the database has applied and which this build would apply.

use outbox_store::schema::{migration_status, MigrationState};
use std::time::Duration;

use crate::table::Table;

/// Applies migrations, waiting up to a minute for a database that is still starting.
pub(crate) async fn migrate(database_url: &str) -> anyhow::Result<()> {
    let pool = outbox_store::connect_with_retry(
        database_url,
        "outboxctl",
        2,
        outbox_store::Plans::Chosen,
        Duration::from_secs(60),
    )
    .await?;
    outbox_store::MIGRATOR.run(&pool).await?;
    pool.close().await;
    eprintln!("schema is up to date");
    Ok(())
}

/// Prints one line per migration, in version order, and says whether the database is at
/// the schema this build expects. Applies nothing.
pub(crate) async fn status(database_url: &str) -> anyhow::Result<()> {
    let pool = outbox_store::connect(database_url, "outboxctl", 1).await?;
    let migrations = migration_status(&pool).await?;
    pool.close().await;
    let mut table = Table::new(["VERSION", "STATE", "APPLIED", "DESCRIPTION"]);
    let (mut pending, mut failed, mut unknown) = (0, 0, 0);
    for migration in &migrations {
        let (state, at) = match &migration.state {
            MigrationState::Applied(at) => ("applied", at.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
            MigrationState::Failed => {
                failed += 1;
                ("failed", String::new())
            }
            MigrationState::Pending => {
                pending += 1;
                ("pending", String::new())
            }
            MigrationState::Unknown(at) => {
                unknown += 1;
                (
                    "not in this build",
                    at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
                )
            }
        };
        table.row([
            migration.version.to_string(),
            state.to_owned(),
            at,
            migration.description.clone(),
        ]);
    }
    print!("{table}");
    let expected = outbox_store::schema::expected_version();
    match (pending, failed, unknown) {
        (0, 0, 0) => eprintln!("schema is up to date (version {expected})"),
        (_, 0, 0) => eprintln!("{pending} pending: run `outboxctl migrate`"),
        (_, 0, _) => eprintln!(
            "the database has {unknown} migration(s) this build does not carry: it was \
             migrated by a newer build (this one expects version {expected})"
        ),
        _ => eprintln!(
            "a migration failed part-way: read the server's log, fix the cause, then run \
             `outboxctl migrate` again"
        ),
    }
    Ok(())
}
