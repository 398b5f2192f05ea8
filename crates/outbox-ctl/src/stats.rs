//! `stats`: the figures operators look at (alerts by tenant, destination and state, what
//! is stuck, the last hour), as a table or one JSON object.

use outbox_store::PgPool;
use std::time::Duration;

use crate::table::Table;

pub(crate) async fn stats(pool: &PgPool, json: bool) -> anyhow::Result<()> {
    let stats = outbox_store::stats::stats(pool).await?;
    if json {
        println!("{}", outbox_core::untrusted::to_json_line(&stats)?);
        return Ok(());
    }
    let mut table = Table::new(["TENANT", "DESTINATION", "STATE", "ALERTS"]);
    for row in &stats.by_state {
        table.row([
            row.tenant.clone(),
            row.destination.clone(),
            row.state.to_string(),
            row.count.to_string(),
        ]);
    }
    print!("{table}");
    let rate = if stats.attempts_last_hour > 0 {
        format!(
            "{:.1}%",
            100.0 * stats.accepted_last_hour as f64 / stats.attempts_last_hour as f64
        )
    } else {
        "n/a".to_owned()
    };
    println!();
    println!("uncertain now          {}", stats.uncertain);
    println!("held now               {}", stats.held);
    println!(
        "oldest due             {}",
        outbox_core::duration::format(Duration::from_secs(stats.oldest_due_age_secs as u64))
    );
    println!(
        "last hour              {} attempt(s), {} accepted ({rate})",
        stats.attempts_last_hour, stats.accepted_last_hour
    );
    Ok(())
}
