//! Start-up errors: when a process cannot use the database it was given, it says so in one
//! line with the cause and the next step, once, and exits non-zero without writing.

use outbox_testkit::cluster::{Replication, Server};
use outbox_testkit::TestDb;

/// Runs `binary` with `args` and `DATABASE_URL=url`; asserts it fails with exactly one
/// line, `error: {expected}`, on stderr, and returns nothing else.
async fn refuses(binary: &str, args: &[&str], url: &str, expected: &str) {
    let output = outbox_testkit::process::Run::new(binary)
        .args(args)
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "off")
        .output()
        .await;
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success(), "{binary} {args:?} succeeded");
    assert_eq!(
        stderr.trim_end(),
        format!("error: {expected}"),
        "{binary} {args:?}"
    );
}

const OUTBOXCTL: &str = env!("CARGO_BIN_EXE_outboxctl");

#[tokio::test]
async fn nothing_listening_is_said_with_the_server_and_what_to_do() {
    // A port bound and closed again: nothing listens there now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    refuses(
        OUTBOXCTL,
        &["outbox", "list"],
        &format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        &format!(
            "cannot reach PostgreSQL at 127.0.0.1:{port} (connection refused): start it, or \
             point DATABASE_URL (--database-url) at a server that runs"
        ),
    )
    .await;
}

#[tokio::test]
async fn a_missing_database_or_role_is_named_with_the_command_that_makes_it() {
    let db = TestDb::new().await;
    let (before_db, after_db) = db.url.rsplit_once('/').unwrap();
    let server = before_db.split_once('@').unwrap().1;
    refuses(
        OUTBOXCTL,
        &["outbox", "list"],
        &format!("{before_db}/outbox_nowhere"),
        &format!(
            "PostgreSQL at {server} has no database `outbox_nowhere`: create it (createdb \
             outbox_nowhere) or name another in DATABASE_URL"
        ),
    )
    .await;
    refuses(
        OUTBOXCTL,
        &["outbox", "list"],
        &format!("postgres://outbox_nobody@{server}/{after_db}"),
        &format!(
            "PostgreSQL at {server} has no role `outbox_nobody`: create it (createuser \
             outbox_nobody) or name another user in DATABASE_URL"
        ),
    )
    .await;
}

#[tokio::test]
async fn a_wrong_password_is_said_with_where_the_right_one_goes() {
    let server = Server::primary(Replication::Asynchronous);
    server.require_password("right");
    let address = format!("127.0.0.1:{}", server.port);
    refuses(
        OUTBOXCTL,
        &["outbox", "list"],
        &format!("postgres://postgres:wrong@{address}/postgres"),
        &format!(
            "PostgreSQL at {address} refused the password of user `postgres`: put the right \
             one in DATABASE_URL (postgres://postgres:PASSWORD@{address}/postgres) or in a \
             pgpass file (PGPASSFILE)"
        ),
    )
    .await;
}

#[tokio::test]
async fn an_unmigrated_database_asks_for_outboxctl_migrate_in_every_binary() {
    let server_url = outbox_testkit::server_url();
    let (url, name) = outbox_store::connect::create_database(&server_url, "outbox_test")
        .await
        .unwrap();
    let expected = format!("the database `{name}` has no outbox schema: run `outboxctl migrate`");
    refuses(OUTBOXCTL, &["outbox", "list"], &url, &expected).await;
    refuses(
        env!("CARGO_BIN_EXE_decider"),
        &["run-once"],
        &url,
        &expected,
    )
    .await;
    refuses(
        env!("CARGO_BIN_EXE_dispatcher"),
        &["--drain"],
        &url,
        &expected,
    )
    .await;
    // Nothing was written: the database is still empty.
    let pool = outbox_store::connect(&url, "check", 1).await.unwrap();
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_tables \
         WHERE schemaname NOT IN ('pg_catalog', 'information_schema')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    outbox_store::connect::drop_database(&server_url, &name)
        .await
        .unwrap();
    assert_eq!(tables, 0);
}
