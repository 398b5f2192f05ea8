//! `bench hot-claim`: what a claim that is a HOT update would save the database, measured
//! on the claim's and the completion's row work alone, before anyone redesigns the queue
//! for it.
//!
//! A claim sets `status` (and the lease), and `status` is in the predicates of both of
//! `outbox`'s partial indexes, so every claim writes a new row version with new entries in
//! the primary key and the lease index. A layout where no index names a column the claim
//! sets lets PostgreSQL update the row in place on its page (HOT) when the page has room.
//! The price is outside this measurement: the product's claim counts each destination's
//! rows in `sending` and the lease sweep finds expired leases, both through the lease
//! index, which that layout does not have.
//!
//! On a database of its own (migrated, so the copy has `outbox`'s exact columns), for each
//! round and each case (today's layout with pages 70 % full, as `outbox` is; the HOT
//! layout at 70 % and at 50 %), in an order that rotates by round: a backlog of N pending
//! rows with time-ordered ids (as approvals write them), vacuumed; then claims of B rows
//! until the backlog is gone, each followed by the completion (the fenced delete) of the
//! claim before it, so that up to 2 B rows are in `sending` at once, as in a dispatcher's
//! pipeline. Each statement is its own transaction on one connection. Reported per row:
//! the claim's and the completion's time (wall time of the statement, round trip
//! included, on an otherwise idle connection), the server's WAL over the drain, and the
//! share of claims that were HOT updates.

use serde::Serialize;
use std::time::Duration;
use uuid::Uuid;

use crate::db::hot_claim::{self as statements, Layout};
use crate::progress;
use crate::scratch::on_own_database;

/// What to measure.
#[derive(Debug, Clone, clap::Args)]
pub struct HotClaimSettings {
    /// Rows in each backlog.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1_000..))]
    pub rows: u64,
    /// Rows per claim.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(i64).range(1..))]
    pub batch: i64,
    /// Rounds (each drains one backlog per case).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
}

/// One layout at one fill factor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Case {
    /// The indexes.
    pub layout: Layout,
    /// How full `CREATE TABLE` leaves each page, in percent (the rest is room for updates).
    pub fillfactor: u8,
}

impl Case {
    /// The case's name in the report.
    pub fn name(self) -> String {
        format!("{} (pages {} % full)", self.layout.name(), self.fillfactor)
    }
}

/// The cases, today's first.
pub const CASES: [Case; 3] = [
    Case {
        layout: Layout::Today,
        fillfactor: 70,
    },
    Case {
        layout: Layout::Hot,
        fillfactor: 70,
    },
    Case {
        layout: Layout::Hot,
        fillfactor: 50,
    },
];

/// One drain of one case.
#[derive(Debug, Clone, Serialize)]
pub struct Drain {
    /// Which case.
    pub case: Case,
    /// The round it belongs to (1-based).
    pub round: u32,
    /// Rows claimed and completed.
    pub rows: u64,
    /// Claim time per row, in microseconds.
    pub claim_us: f64,
    /// Completion time per row, in microseconds.
    pub complete_us: f64,
    /// The server's WAL per row (claim and completion), in bytes.
    pub wal_bytes: f64,
    /// Claims that were HOT updates, in percent.
    pub hot_pct: f64,
}

/// Runs every round on a database of its own and returns the drains in the order run.
pub async fn run(server_url: &str, settings: &HotClaimSettings) -> anyhow::Result<Vec<Drain>> {
    on_own_database(server_url, |url| async move {
        let pool = outbox_store::connect(&url, "benchmark", 1).await?;
        outbox_store::MIGRATOR.run(&pool).await?;
        let mut conn = pool.acquire().await?;
        let mut drains = Vec::new();
        for round in 1..=settings.rounds {
            for step in 0..CASES.len() {
                let case = CASES[(step + round as usize - 1) % CASES.len()];
                let drain = drain_once(&mut conn, case, round, settings).await?;
                progress(&format!(
                    "round {round}, {}: claim {:.2} µs/row, HOT {:.0} %",
                    case.name(),
                    drain.claim_us,
                    drain.hot_pct
                ));
                drains.push(drain);
            }
        }
        Ok(drains)
    })
    .await
}

/// Fills the queue copy for `case` and drains it.
async fn drain_once(
    conn: &mut sqlx::PgConnection,
    case: Case,
    round: u32,
    settings: &HotClaimSettings,
) -> anyhow::Result<Drain> {
    let ids: Vec<Uuid> = (0..settings.rows).map(|_| Uuid::now_v7()).collect();
    statements::create_queue(conn, case.layout, case.fillfactor, &ids).await?;
    let wal_before = crate::db::server_counters(&mut *conn).await?.wal_lsn;
    let (mut claiming, mut completing) = (Duration::ZERO, Duration::ZERO);
    let mut rows = 0u64;
    let mut in_flight: Option<(Vec<Uuid>, Vec<i64>)> = None;
    loop {
        let (ids, tokens, took) = statements::claim(conn, settings.batch).await?;
        claiming += took;
        rows += ids.len() as u64;
        if let Some((done, done_tokens)) = in_flight.take() {
            completing += statements::complete(conn, &done, &done_tokens).await?;
        }
        if ids.is_empty() {
            break;
        }
        in_flight = Some((ids, tokens));
    }
    let wal = crate::db::server_counters(&mut *conn).await?.wal_lsn - wal_before;
    let (updates, hot) = statements::updates(conn).await?;
    anyhow::ensure!(
        rows == settings.rows,
        "{}: claimed {rows} of {} rows",
        case.name(),
        settings.rows
    );
    let per_row = |total: Duration| total.as_secs_f64() * 1e6 / rows as f64;
    Ok(Drain {
        case,
        round,
        rows,
        claim_us: per_row(claiming),
        complete_us: per_row(completing),
        wal_bytes: wal as f64 / rows as f64,
        hot_pct: if updates > 0 {
            100.0 * hot as f64 / updates as f64
        } else {
            0.0
        },
    })
}

/// The report: each case's median over the rounds, then every drain.
pub fn render(drains: &[Drain]) -> String {
    let mut out = String::from(
        "claim and completion row work, per row (median of the rounds; every round below)\n\n\
         | case | claim µs | completion µs | WAL B | HOT claims |\n\
         | --- | ---: | ---: | ---: | ---: |\n",
    );
    for case in CASES {
        let of_case: Vec<&Drain> = drains.iter().filter(|d| d.case == case).collect();
        let median = |pick: fn(&Drain) -> f64| {
            let mut values: Vec<f64> = of_case.iter().map(|d| pick(d)).collect();
            values.sort_by(f64::total_cmp);
            values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
        };
        out.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.0} | {:.0} % |\n",
            case.name(),
            median(|d| d.claim_us),
            median(|d| d.complete_us),
            median(|d| d.wal_bytes),
            median(|d| d.hot_pct),
        ));
    }
    out.push_str("\n| round | case | claim µs | completion µs | WAL B | HOT claims |\n");
    out.push_str("| ---: | --- | ---: | ---: | ---: | ---: |\n");
    for d in drains {
        out.push_str(&format!(
            "| {} | {} | {:.2} | {:.2} | {:.0} | {:.0} % |\n",
            d.round,
            d.case.name(),
            d.claim_us,
            d.complete_us,
            d.wal_bytes,
            d.hot_pct
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(case: Case, round: u32, claim_us: f64) -> Drain {
        Drain {
            case,
            round,
            rows: 1_000,
            claim_us,
            complete_us: 1.0,
            wal_bytes: 400.0,
            hot_pct: 0.0,
        }
    }

    #[test]
    fn the_report_shows_each_cases_median_over_the_rounds() {
        let drains = vec![
            drain(CASES[0], 1, 9.0),
            drain(CASES[0], 2, 5.0),
            drain(CASES[0], 3, 7.0),
            drain(CASES[1], 1, 3.0),
        ];
        let report = render(&drains);
        assert!(
            report.contains("| today (pages 70 % full) | 7.00 |"),
            "{report}"
        );
        assert!(
            report.contains("| hot (pages 70 % full) | 3.00 |"),
            "{report}"
        );
        assert!(
            report.contains("| hot (pages 50 % full) | NaN |"),
            "{report}"
        );
        assert!(
            report.contains("| 2 | today (pages 70 % full) | 5.00 |"),
            "{report}"
        );
    }
}
