//! The product's sessions run without JIT compilation, whatever the server's default.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use outbox_testkit::TestDb;
use sqlx::PgConnection;

/// The plan of a statement that passes any cost threshold, as `EXPLAIN ANALYZE` prints
/// it, one line per row. A compiled statement has a `JIT:` section (which `COSTS OFF`
/// would hide).
async fn executed_plan(conn: &mut PgConnection) -> Vec<String> {
    sqlx::query("SET jit_above_cost = 0")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query_scalar("EXPLAIN ANALYZE SELECT sum(g) FROM generate_series(1, 1000) g")
        .fetch_all(&mut *conn)
        .await
        .unwrap()
}

fn compiled(plan: &[String]) -> bool {
    plan.iter()
        .any(|line| line.trim_start().starts_with("JIT:"))
}

#[tokio::test]
async fn statements_run_uncompiled_even_past_the_servers_jit_threshold() {
    let db = TestDb::new().await;
    let pool = outbox_store::connect(&db.url, "test", 1).await.unwrap();
    let mut ours = pool.acquire().await.unwrap();
    let plan = executed_plan(&mut ours).await;
    assert!(
        !compiled(&plan),
        "compiled on the product's session: {plan:#?}"
    );
    drop(ours);
    pool.close().await;

    // The same statement on a plain session of the same server is compiled, where the
    // server can compile at all: the check above is not passing for want of JIT.
    let mut plain = db.pool.acquire().await.unwrap();
    let available: bool = sqlx::query_scalar("SELECT pg_jit_available()")
        .fetch_one(&mut *plain)
        .await
        .unwrap();
    let jit_on: String = sqlx::query_scalar("SHOW jit")
        .fetch_one(&mut *plain)
        .await
        .unwrap();
    if available && jit_on == "on" {
        let plan = executed_plan(&mut plain).await;
        assert!(
            compiled(&plan),
            "not compiled on a plain session: {plan:#?}"
        );
    }
}
