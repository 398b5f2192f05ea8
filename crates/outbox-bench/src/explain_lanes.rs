//! `bench explain-lanes`: the claim's plan over a large backlog in ordered lanes, to show
//! that it never reads the alerts waiting in a lane. For each case, on a database of its
//! own: a backlog of M alerts (1,000,000 by default) for one destination, written by SQL
//! in a few statements ([`crate::db::seed_lane_backlog`]) as approvals leave it, then
//! `VACUUM ANALYZE`, then the product's own claim statement
//! (`outbox_store::dispatch::claim_sql`) for 500 rows under `EXPLAIN (ANALYZE, BUFFERS)`,
//! rolled back: with the parameters' values (the plan of a connection's first five
//! executions) and as a prepared statement's generic plan (which a connection may switch
//! to after that), five times each after a run to warm up; the report shows the run of
//! median execution time and every run's time.
//!
//! Cases: the destination orders per key and the backlog is spread over K keys (100,000
//! and 10 by default: lanes of 10 and of 100,000 alerts), so that K rows are due and
//! M - K wait behind them with `lane_after` set, outside the partial index
//! `outbox_due_idx`; and, for comparison, the same backlog to a destination that does
//! not order, every row due.

use outbox_store::PgPool;
use serde::Serialize;
use std::time::Instant;

use crate::progress;
use crate::scratch::on_own_database;
use crate::workload::{DestinationSettings, Workload};

/// Alerts written per statement.
const SEED_CHUNK: u64 = 250_000;

/// Runs of each plan: the report shows the run of median execution time, and every
/// run's time.
const RUNS: usize = 5;

/// What to explain.
#[derive(Debug, Clone, clap::Args)]
pub struct ExplainSettings {
    /// Alerts in each backlog.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub alerts: u64,
    /// Keys the ordered backlog is spread over, one case each (repeat the flag).
    #[arg(long = "keys", default_values_t = [100_000, 10], value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: Vec<u64>,
    /// Rows per claim.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(i64).range(1..))]
    pub limit: i64,
    /// Leave out the unordered case.
    #[arg(long)]
    pub no_unordered: bool,
}

/// One backlog and the claim's plans over it.
#[derive(Debug, Clone, Serialize)]
pub struct ExplainCase {
    /// Alerts in the backlog.
    pub alerts: u64,
    /// The keys of an ordered backlog (`None`: the destination does not order).
    pub keys: Option<u64>,
    /// Rows due (in `outbox_due_idx`).
    pub due: i64,
    /// Rows waiting in a lane (`lane_after` set).
    pub waiting: i64,
    /// Lanes (`alert_lanes` rows).
    pub lanes: i64,
    /// Seconds to write the backlog and vacuum it.
    pub seeding_secs: f64,
    /// With the parameters' values.
    pub custom: Plan,
    /// The prepared statement's generic plan.
    pub generic: Plan,
}

impl ExplainCase {
    /// The case's name in the report.
    pub fn name(&self) -> String {
        match self.keys {
            Some(keys) => format!(
                "{} alerts, per-key, {keys} keys ({} due, {} waiting)",
                self.alerts, self.due, self.waiting
            ),
            None => format!("{} alerts, unordered ({} due)", self.alerts, self.due),
        }
    }
}

/// One `EXPLAIN (ANALYZE, BUFFERS)` of the claim, and what it says.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The plan as PostgreSQL printed it.
    pub lines: Vec<String>,
    /// Rows the claim took (then given back by the rollback).
    pub claimed: i64,
    /// `Planning Time`, ms.
    pub planning_ms: Option<f64>,
    /// `Execution Time`, ms.
    pub execution_ms: Option<f64>,
    /// The plan's scans of `outbox`, one line each: the access paths.
    pub outbox_scans: Vec<String>,
    /// `Execution Time` of each run of this plan, ms, in run order (this one's is
    /// their median).
    pub runs_ms: Vec<f64>,
}

impl Plan {
    fn of(lines: Vec<String>, claimed: i64) -> Plan {
        Plan {
            planning_ms: timing(&lines, "Planning Time:"),
            execution_ms: timing(&lines, "Execution Time:"),
            outbox_scans: scans_of(&lines, "outbox"),
            lines,
            claimed,
            runs_ms: Vec::new(),
        }
    }

    /// The run of median execution time among `runs`, with every run's time.
    fn median_of(runs: Vec<Plan>) -> anyhow::Result<Plan> {
        let time = |plan: &Plan| plan.execution_ms.unwrap_or(f64::NAN);
        let runs_ms: Vec<f64> = runs.iter().map(time).collect();
        let mut by_time = runs;
        by_time.sort_by(|a, b| time(a).total_cmp(&time(b)));
        let middle = by_time.len().saturating_sub(1) / 2;
        let mut median = by_time
            .into_iter()
            .nth(middle)
            .ok_or_else(|| anyhow::anyhow!("no run to take the median of"))?;
        median.runs_ms = runs_ms;
        Ok(median)
    }

    /// Whether a scan of `outbox` that ran read the whole table.
    pub fn seq_scans_outbox(&self) -> bool {
        self.outbox_scans
            .iter()
            .any(|s| s.starts_with("Seq Scan") && !s.ends_with("(never executed)"))
    }
}

/// Builds each case's backlog on a database of its own and explains the claim over it;
/// `done` gets each case as it ends.
pub async fn run(
    server_url: &str,
    settings: &ExplainSettings,
    mut done: impl FnMut(&ExplainCase),
) -> anyhow::Result<Vec<ExplainCase>> {
    let mut cases: Vec<Option<u64>> = settings.keys.iter().copied().map(Some).collect();
    if !settings.no_unordered {
        cases.push(None);
    }
    let mut explained = Vec::new();
    for keys in cases {
        let case = on_own_database(server_url, |url| async move {
            explain_case(&url, settings, keys).await
        })
        .await?;
        done(&case);
        explained.push(case);
    }
    Ok(explained)
}

async fn explain_case(
    url: &str,
    settings: &ExplainSettings,
    keys: Option<u64>,
) -> anyhow::Result<ExplainCase> {
    let pool = outbox_store::connect(url, "benchmark", 2).await?;
    let workload = Workload::prepare(
        pool.clone(),
        &DestinationSettings {
            // Never contacted: the claims are rolled back.
            url: "http://127.0.0.1:9/unused".to_owned(),
            // Room for a whole claim: the plan is measured, not the bound.
            max_in_flight: 4_000,
        },
    )
    .await?;
    if keys.is_some() {
        workload.order_per_key(workload.destination_id).await?;
    }
    let started = Instant::now();
    seed(&pool, &workload, settings.alerts, keys).await?;
    crate::db::vacuum_analyze(&pool).await?;
    let seeding_secs = started.elapsed().as_secs_f64();
    let (due, waiting, lanes) = crate::db::backlog_shape(&pool).await?;
    let alerts = settings.alerts as i64;
    let expected_due = keys.map_or(alerts, |k| alerts.min(k as i64));
    anyhow::ensure!(
        due == expected_due && waiting == alerts - expected_due,
        "the backlog has {due} rows due and {waiting} waiting, expected {expected_due} and {}",
        alerts - expected_due
    );
    progress(&format!(
        "explaining the claim (one run to warm up, then {RUNS} with values and {RUNS} generic, alternately)"
    ));
    crate::db::explain_claim(&pool, settings.limit, false).await?;
    let mut custom = Vec::new();
    let mut generic = Vec::new();
    for _ in 0..RUNS {
        let (lines, claimed) = crate::db::explain_claim(&pool, settings.limit, false).await?;
        custom.push(Plan::of(lines, claimed));
        let (lines, claimed) = crate::db::explain_claim(&pool, settings.limit, true).await?;
        generic.push(Plan::of(lines, claimed));
    }
    let (custom, generic) = (Plan::median_of(custom)?, Plan::median_of(generic)?);
    let expected_claim = settings.limit.min(expected_due);
    for plan in [&custom, &generic] {
        anyhow::ensure!(
            plan.claimed == expected_claim,
            "the claim took {} rows, expected {expected_claim}",
            plan.claimed
        );
    }
    pool.close().await;
    Ok(ExplainCase {
        alerts: settings.alerts,
        keys,
        due,
        waiting,
        lanes,
        seeding_secs,
        custom,
        generic,
    })
}

/// Writes the backlog of `alerts` alerts for the workload's destination, over `keys` in
/// ordered lanes (with their lane rows), or unordered over 10,000 subjects.
async fn seed(
    pool: &PgPool,
    workload: &Workload,
    alerts: u64,
    keys: Option<u64>,
) -> anyhow::Result<()> {
    let spread = keys.unwrap_or(10_000) as i64;
    progress(&format!(
        "explain-lanes: writing {alerts} alerts over {spread} keys ({})",
        if keys.is_some() {
            "ordered lanes"
        } else {
            "unordered"
        }
    ));
    // A day ago, so that every row is due.
    let epoch_ms = chrono::Utc::now().timestamp_millis() - 86_400_000;
    let mut from = 0u64;
    while from < alerts {
        let count = SEED_CHUNK.min(alerts - from);
        crate::db::seed_lane_backlog(
            pool,
            workload.tenant_id,
            workload.destination_id,
            from as i64,
            count as i64,
            spread,
            epoch_ms,
            keys.is_some(),
        )
        .await?;
        from += count;
        progress(&format!("  {from} of {alerts}"));
    }
    if keys.is_some() {
        crate::db::seed_lane_rows(
            pool,
            workload.destination_id,
            alerts as i64,
            spread,
            epoch_ms,
        )
        .await?;
    }
    Ok(())
}

/// The report: each case's plans in full, then a summary line each.
pub fn render(cases: &[ExplainCase], limit: i64) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for case in cases {
        let _ = writeln!(out, "== {} ==", case.name());
        for (name, plan) in [
            ("with the values", &case.custom),
            ("generic", &case.generic),
        ] {
            let _ = writeln!(out, "-- claim of {limit}, {name} (the run of median time):");
            for line in &plan.lines {
                let _ = writeln!(out, "{line}");
            }
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out, "summary (claim of {limit}):");
    for case in cases {
        let _ = writeln!(
            out,
            "{} (written in {:.0}s):",
            case.name(),
            case.seeding_secs
        );
        for (name, plan) in [("with values", &case.custom), ("generic", &case.generic)] {
            let ms = |t: Option<f64>| t.map_or("?".to_owned(), |t| format!("{t:.3} ms"));
            let runs: Vec<String> = plan.runs_ms.iter().map(|t| format!("{t:.2}")).collect();
            let _ = writeln!(
                out,
                "  {name}: {} claimed, execution {} (median; runs {} ms), planning {}; outbox read by: {}{}",
                plan.claimed,
                ms(plan.execution_ms),
                runs.join(", "),
                ms(plan.planning_ms),
                plan.outbox_scans.join(" | "),
                if plan.seq_scans_outbox() {
                    " (SEQUENTIAL SCAN)"
                } else {
                    ""
                }
            );
        }
    }
    out
}

/// The value of a plan's `label` line (`Execution Time: 1.234 ms`), in ms.
fn timing(lines: &[String], label: &str) -> Option<f64> {
    lines.iter().find_map(|line| {
        let rest = line.trim().strip_prefix(label)?;
        rest.trim().strip_suffix("ms")?.trim().parse().ok()
    })
}

/// The plan lines that scan `table` (`Index Scan using outbox_due_idx on outbox o_1`,
/// `Seq Scan on outbox o`), from the node's name to the end of its actual figures (or
/// `(never executed)`), costs left out.
fn scans_of(lines: &[String], table: &str) -> Vec<String> {
    let on_table = format!(" on {table}");
    lines
        .iter()
        .filter_map(|line| {
            let node = line.trim_start().trim_start_matches("->").trim_start();
            let head = node.split("  (").next().unwrap_or(node);
            let scans_table = head.contains("Scan")
                && head
                    .split_once(&on_table)
                    .is_some_and(|(_, after)| after.is_empty() || after.starts_with(' '));
            if !scans_table {
                return None;
            }
            let actual = node
                .find("(actual")
                .or_else(|| node.find("(never executed)"))
                .map(|at| &node[at..])
                .unwrap_or_default();
            Some(format!("{head} {actual}").trim_end().to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn a_plan_gives_its_times_and_its_scans_of_a_table() {
        let plan = lines(
            "Nested Loop  (cost=1.00..2.00 rows=1 width=8) (actual time=0.1..0.2 rows=10 loops=1)\n\
             \x20 ->  Index Scan using outbox_due_idx on outbox o_1  (cost=0.42..8.44 rows=1 width=8) (actual time=0.010..0.020 rows=10 loops=1)\n\
             \x20       Index Cond: (next_attempt_at <= now())\n\
             \x20 ->  Seq Scan on outbox_archive a  (cost=0.00..1.00 rows=1 width=8) (actual time=0.001..0.001 rows=0 loops=1)\n\
             \x20 ->  Seq Scan on outbox p  (cost=0.00..1.00 rows=1 width=8) (never executed)\n\
             \x20 ->  Seq Scan on outbox  (cost=0.00..1.00 rows=1 width=8) (actual time=0.001..0.001 rows=0 loops=1)\n\
             \x20 ->  Index Scan using alerts_pkey on alerts a  (cost=0.42..8.44 rows=1 width=8) (actual time=0.003..0.003 rows=1 loops=10)\n\
             Planning Time: 1.250 ms\n\
             Execution Time: 3.5 ms",
        );
        assert_eq!(timing(&plan, "Planning Time:"), Some(1.25));
        assert_eq!(timing(&plan, "Execution Time:"), Some(3.5));
        let scans = scans_of(&plan, "outbox");
        assert_eq!(
            scans,
            vec![
                "Index Scan using outbox_due_idx on outbox o_1 (actual time=0.010..0.020 rows=10 loops=1)",
                "Seq Scan on outbox p (never executed)",
                "Seq Scan on outbox (actual time=0.001..0.001 rows=0 loops=1)",
            ]
        );
        assert!(Plan::of(plan.clone(), 10).seq_scans_outbox());
        let unexecuted: Vec<String> = plan
            .into_iter()
            .filter(|line| !line.contains("Seq Scan on outbox  "))
            .collect();
        assert!(!Plan::of(unexecuted, 10).seq_scans_outbox());
    }
}
