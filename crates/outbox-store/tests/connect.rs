//! The product's sessions run without JIT compilation, whatever the server's default, and
//! plan their statements as their pool says ([`Plans`]).

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use outbox_store::Plans;
use outbox_testkit::TestDb;
use sqlx::PgConnection;
use std::time::Duration;

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

/// How often the claim statement on `pool`'s one connection has been planned for its
/// values and generically, after `claims` claims (`pg_prepared_statements` counts both
/// for each statement a session has prepared).
async fn claim_plans(pool: &sqlx::PgPool, claims: usize) -> (i64, i64) {
    for _ in 0..claims {
        outbox_store::dispatch::claim(pool, "w", 10, Duration::from_secs(60), &[])
            .await
            .unwrap();
    }
    sqlx::query_as(
        "SELECT custom_plans, generic_plans FROM pg_prepared_statements \
         WHERE statement LIKE 'WITH unclaimable AS%'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_generic_pool_plans_the_claim_once_and_a_chosen_one_for_each_first_execution() {
    let db = TestDb::new().await;
    let generic = outbox_store::connect_planned(&db.url, "test", 1, Plans::Generic)
        .await
        .unwrap();
    let (custom, planned_once) = claim_plans(&generic, 3).await;
    assert_eq!(custom, 0, "a generic pool planned the claim for its values");
    assert!(planned_once >= 1, "{planned_once} generic plans");
    generic.close().await;

    // PostgreSQL's own choice plans at least the first five executions for their values.
    let chosen = outbox_store::connect(&db.url, "test", 1).await.unwrap();
    let (custom, _) = claim_plans(&chosen, 3).await;
    assert_eq!(custom, 3);
    chosen.close().await;
}
