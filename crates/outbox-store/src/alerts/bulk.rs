//! The monitors' bulk approval: many alerts of one tenant decided in one statement.

use outbox_core::trace_context::TraceContext;
use outbox_core::Ordering;
use sqlx::{Acquire, PgConnection};
use std::sync::LazyLock;
use uuid::Uuid;

use super::insert::{approval_statement, ApprovalLine};
use crate::sql_names::SqlName;
use crate::StoreError;

/// One alert a monitor decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitorAlert {
    /// Destination.
    pub destination_id: Uuid,
    /// Identity: subject.
    pub subject: String,
    /// Identity: occurrence.
    pub occurrence: String,
    /// Payload JSON text (an object).
    pub payload_json: String,
}

/// The approval statement ([`approval_statement`]) for a monitor's batch: one tenant, one
/// actor (named in each evidence line) and one trace context for every alert, each
/// destination given by id, no ordering key (a lane's key is the subject). Each payload is
/// parsed once (the `jsonb[]` cast) and rendered once (`rendered`, fenced by `OFFSET 0`):
/// the text stored, sent and fingerprinted. A destination that is not the tenant's is left
/// to the alerts' own check, which refuses the statement. Answers with the ids of the
/// alerts created.
static APPROVE_BATCH: LazyLock<String> = LazyLock::new(|| {
    approval_statement(
        &format!(
            "input AS ( \
                 SELECT * FROM unnest($1::uuid[], $3::uuid[], $4::text[], $5::text[], \
                                      $6::jsonb[]) \
                     WITH ORDINALITY AS i(id, destination_id, subject, occurrence, payload, n) \
             ), rendered AS ( \
                 SELECT i.*, i.payload::text AS text FROM input i OFFSET 0 \
             ), given AS ( \
                 SELECT r.n, r.id, $2::uuid AS tenant_id, r.destination_id, \
                        d.ordering = {per_key} AS in_lane, r.subject, r.occurrence, r.text, \
                        sha256(convert_to(r.text, 'UTF8')) AS sha256, $7::text AS actor, \
                        $8::text AS traceparent, $9::text AS tracestate, \
                        NULL::text AS ordering_key \
                 FROM rendered r LEFT JOIN destinations d ON d.id = r.destination_id \
             )",
            per_key = Ordering::PerKey.sql(),
        ),
        ApprovalLine::NamingActor,
        " SELECT id FROM inserted",
    )
});

/// Approves many alerts of one tenant in one statement: each new identity gets its alert,
/// its pending outbox row and its evidence line together; identities that exist already
/// are left exactly as they are (whatever today's payload would say). Alerts for
/// destinations that order per key join their lanes (key: the subject), a lane's new
/// alerts in occurrence order. Rows are inserted in identity order, the order of every
/// approval statement, so concurrent deciders approving overlapping batches wait for each
/// other briefly instead of deadlocking (the lanes' locks, and the identity locks of the
/// alerts that join one, are taken first, in one order too: see [`approval_statement`]).
///
/// Runs in its own transaction (a savepoint inside the caller's), so that a refused batch
/// leaves the caller's transaction usable. Every alert created keeps `trace`, the context
/// of the approval (one per batch: the monitor run's approval span). Returns the ids
/// created.
pub async fn approve_batch(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    alerts: &[MonitorAlert],
    actor: &str,
    trace: Option<&TraceContext>,
) -> Result<Vec<Uuid>, StoreError> {
    if alerts.is_empty() {
        return Ok(Vec::new());
    }
    for alert in alerts {
        StoreError::check_payload(&alert.payload_json)?;
    }
    let mut tx = conn.begin().await?;
    let created = sqlx::query_scalar::<_, Uuid>(&APPROVE_BATCH)
        .bind(alerts.iter().map(|_| Uuid::now_v7()).collect::<Vec<_>>())
        .bind(tenant_id)
        .bind(alerts.iter().map(|a| a.destination_id).collect::<Vec<_>>())
        .bind(
            alerts
                .iter()
                .map(|a| a.subject.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            alerts
                .iter()
                .map(|a| a.occurrence.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            alerts
                .iter()
                .map(|a| a.payload_json.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(actor)
        .bind(trace.map(|t| t.parent.to_string()))
        .bind(trace.and_then(|t| t.state.as_ref()).map(|s| s.as_str()))
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::from_payload_error)?;
    tx.commit().await?;
    Ok(created)
}
