//! The schema's version: the migrations this build carries (embedded in [`MIGRATOR`]) and
//! which of them a database has applied.

use crate::connect::MIGRATOR;
use crate::StoreError;
use chrono::{DateTime, Utc};
use std::sync::OnceLock;

/// The version of the newest migration this build carries: the schema it expects.
pub fn expected_version() -> i64 {
    MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
}

/// `0.1.0 (schema 20261205000001)`: the binaries' `--version`, so an operator can match a
/// build to the schema it needs.
pub fn version_line() -> &'static str {
    static LINE: OnceLock<String> = OnceLock::new();
    LINE.get_or_init(|| {
        format!(
            "{} (schema {})",
            env!("CARGO_PKG_VERSION"),
            expected_version()
        )
    })
}

/// Checks that the database's schema is the one this build expects: migrated, and not by
/// an older build. A newer schema passes (an upgrade migrates first, then replaces the
/// processes one by one, and the older ones keep running meanwhile). The database is at
/// the newest migration it applied, read from [`migration_status`].
pub async fn check_current(db: impl sqlx::PgExecutor<'_> + Copy) -> Result<(), StoreError> {
    let applied = migration_status(db)
        .await?
        .into_iter()
        .filter(|m| {
            matches!(
                m.state,
                MigrationState::Applied(_) | MigrationState::Unknown(_)
            )
        })
        .map(|m| m.version)
        .max();
    let expected = expected_version();
    match applied {
        None => not_current(db, "has no outbox schema").await,
        Some(version) if version < expected => {
            let why = format!("is at schema version {version} and this build expects {expected}");
            not_current(db, &why).await
        }
        Some(_) => Ok(()),
    }
}

/// The refusal of a database whose schema is not current: `why`, with the database's name
/// and the command that fixes it.
async fn not_current(db: impl sqlx::PgExecutor<'_>, why: &str) -> Result<(), StoreError> {
    let database: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(db)
        .await?;
    Err(StoreError::SchemaNotCurrent(format!(
        "the database `{database}` {why}: run `outboxctl migrate`"
    )))
}

/// One migration as a database sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationStatus {
    pub version: i64,
    pub description: String,
    pub state: MigrationState,
}

/// Whether a database has applied a migration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrationState {
    /// Applied at this time.
    Applied(DateTime<Utc>),
    /// Started and not finished (a failed migration): `outboxctl migrate` stops at it.
    Failed,
    /// Not applied yet: `outboxctl migrate` applies it.
    Pending,
    /// Applied, but this build does not carry it (the database is newer than the build).
    Unknown(DateTime<Utc>),
}

/// Every migration this build carries, and any the database applied that it does not,
/// in version order.
pub async fn migration_status(
    db: impl sqlx::PgExecutor<'_> + Copy,
) -> Result<Vec<MigrationStatus>, StoreError> {
    // sqlx's own bookkeeping table; absent on a database never migrated.
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(db)
        .await?;
    let applied: Vec<(i64, String, bool, DateTime<Utc>)> = if exists {
        sqlx::query_as(
            "SELECT version, description, success, installed_on FROM _sqlx_migrations \
             ORDER BY version",
        )
        .fetch_all(db)
        .await?
    } else {
        Vec::new()
    };
    let mut status: Vec<MigrationStatus> = MIGRATOR
        .iter()
        .filter(|m| m.migration_type.is_up_migration())
        .map(|m| {
            let state = match applied.iter().find(|(version, ..)| *version == m.version) {
                Some((_, _, true, at)) => MigrationState::Applied(*at),
                Some((_, _, false, _)) => MigrationState::Failed,
                None => MigrationState::Pending,
            };
            MigrationStatus {
                version: m.version,
                description: m.description.to_string(),
                state,
            }
        })
        .collect();
    for (version, description, _, at) in applied {
        if !status.iter().any(|m| m.version == version) {
            status.push(MigrationStatus {
                version,
                description,
                state: MigrationState::Unknown(at),
            });
        }
    }
    status.sort_by_key(|m| m.version);
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expected_version_is_the_newest_migration_file() {
        let newest = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../migrations"))
            .unwrap()
            .filter_map(|entry| {
                let name = entry.unwrap().file_name().into_string().unwrap();
                name.split('_').next()?.parse::<i64>().ok()
            })
            .max()
            .unwrap();
        assert_eq!(expected_version(), newest);
        assert_eq!(
            version_line(),
            format!("{} (schema {newest})", env!("CARGO_PKG_VERSION"))
        );
    }
}
