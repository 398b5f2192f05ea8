//! The offences of a failed run, each with the alert's evidence trail and the sinks'
//! records for it: what a reader needs to see why the run broke.

use outbox_store::PgPool;

use crate::recorded::Sink;
use crate::report::Report;

/// Prints each offence with the alert's evidence trail and the sinks' records for it.
pub async fn explain(
    pool: &PgPool,
    report: &Report,
    sinks: &[Sink],
) -> Result<String, outbox_store::StoreError> {
    let mut out = String::new();
    for offence in &report.offences {
        out.push_str(&format!("{}: {}\n", offence.kind, offence.detail));
        if let Some(id) = offence.alert_id {
            out.push_str(&format!("  alert {id}\n"));
            for line in outbox_store::checker_reads::evidence_lines(pool, id).await? {
                out.push_str(&format!("    {line}\n"));
            }
            for sink in sinks {
                for record in sink
                    .records
                    .iter()
                    .filter(|r| r.key.as_deref() == Some(&id.to_string()))
                {
                    out.push_str(&format!(
                        "    sink `{}`: {} (payload {})\n",
                        sink.destination,
                        record.outcome,
                        record.payload_sha256.as_deref().unwrap_or("?")
                    ));
                }
            }
        }
    }
    Ok(out)
}
