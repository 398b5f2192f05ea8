//! What a dispatcher does with one claimed row: send it, or settle an uncertain attempt
//! by evidence (lookup, de-duplication window, the destination's policy). This is the
//! doing: sending, looking up, committing a resend's start, measuring. What each answer
//! means and where the row goes next is decided by the pure functions of `judge`.

use chrono::{DateTime, Utc};
use outbox_core::{AttemptKind, AttemptOutcome, DestinationKind, LiveStatus};
use outbox_store::dispatch::{AttemptRecord, ClaimedAlert, Completion};
use std::time::{Duration, Instant};

use crate::classify::Exchange;
use crate::judge::{self, AfterLookup, Judging, WithoutLookup};
use crate::{attempt_trace, http, Shared};
use outbox_core::trace_context::TraceContext;
use tracing::Instrument;

/// Safety margin before the end of a lease: a send that might not finish inside the lease
/// is not started.
const LEASE_MARGIN: Duration = Duration::from_secs(1);
const LEASE_TOO_SHORT: &str = "the lease would run out before a request could finish";
/// Why a claim is given back at shutdown. The dispatcher's id is the evidence's actor,
/// never part of its line.
pub(crate) const SHUTTING_DOWN: &str = "the dispatcher is shutting down";

/// What became of a claim.
#[derive(Debug)]
pub(crate) enum Finished {
    /// Record this.
    Done(Box<Completion>),
    /// Nothing was sent: give the claim back, saying why.
    Release(String),
}

/// A claim with the clocks needed to reason about it.
pub(crate) struct Claim {
    pub row: ClaimedAlert,
    /// Local instant of the claim, to measure elapsed time without trusting clock sync.
    pub local_claimed_at: Instant,
    /// Local deadline: the lease as this process must assume it.
    pub local_lease_deadline: Instant,
    /// The trace context this claim's requests send: the approval's trace, this
    /// attempt's span (`attempt_trace`).
    pub outgoing_trace: Option<TraceContext>,
}

impl Claim {
    /// The database clock now, estimated from the claim.
    fn db_now(&self) -> DateTime<Utc> {
        self.row.db_now
            + chrono::Duration::from_std(self.local_claimed_at.elapsed()).unwrap_or_default()
    }

    /// Whether a request started now would end inside the lease.
    fn lease_allows_request(&self) -> bool {
        Instant::now() + judge::timeout(&self.row) + LEASE_MARGIN < self.local_lease_deadline
    }

    /// What the judgement needs, at this moment.
    fn judging<'a>(&'a self, shared: &'a Shared) -> Judging<'a> {
        Judging {
            row: &self.row,
            worker: &shared.config.worker_id,
            schedule: &shared.config.retry_schedule,
            now: self.db_now(),
            unit: rand::random(),
        }
    }
}

/// Works one claimed row to its next state.
pub(crate) async fn work(shared: &Shared, claim: &Claim) -> Finished {
    match claim.row.claimed_from {
        LiveStatus::Uncertain => settle_uncertain(shared, claim).await,
        LiveStatus::Pending | LiveStatus::Sending => {
            if !claim.lease_allows_request() {
                return Finished::Release(LEASE_TOO_SHORT.to_owned());
            }
            send(shared, claim, claim.row.attempts, false, None).await
        }
    }
}

/// Sends attempt `attempt` and has its answer judged (`judge::judge_send`). `resending`
/// is set when an earlier attempt's outcome is still unknown; `window_closes`, when the
/// resend is safe only inside the destination's de-duplication window.
async fn send(
    shared: &Shared,
    claim: &Claim,
    attempt: i32,
    resending: bool,
    window_closes: Option<Instant>,
) -> Finished {
    fail_point_after_claim();
    // Checked again at the last moment: a process paused between deciding and sending
    // (a stall, SIGSTOP) must not send once its lease, or the de-duplication window that
    // made a resend safe, has run out.
    if !claim.lease_allows_request() {
        return Finished::Release(LEASE_TOO_SHORT.to_owned());
    }
    if window_closes.is_some_and(|closes| Instant::now() >= closes) {
        return Finished::Release(
            "the de-duplication window closed before the resend could go out".to_owned(),
        );
    }
    let row = &claim.row;
    let started_at = Utc::now();
    let started = Instant::now();
    let (exchange, note) = exchange(shared, row, claim.outgoing_trace.as_ref()).await;
    shared
        .metrics
        .send_latency(&row.destination.name, started.elapsed());
    fail_point_after_send();
    let completion = judge::judge_send(
        &claim.judging(shared),
        attempt,
        resending,
        started_at,
        &exchange,
        note.as_deref(),
    );
    if let Some(record) = &completion.attempt {
        attempt_trace::record_attempt(record);
        shared
            .metrics
            .attempt(&row.destination.name, record.outcome.as_str());
        shared
            .tallies
            .count(row.destination.id, &row.destination.name, record);
    }
    Finished::Done(Box::new(completion))
}

/// The exchange with the destination, by its kind and the configured transport, with an
/// email's note on the exact message it sent.
async fn exchange(
    shared: &Shared,
    row: &ClaimedAlert,
    trace: Option<&TraceContext>,
) -> (Exchange, Option<String>) {
    if shared.config.transport == crate::Transport::Http {
        if let Some(altered) = altered_payload(row) {
            return (altered, None);
        }
    }
    match (shared.config.transport, row.destination.kind) {
        (crate::Transport::Http, DestinationKind::Email) => {
            crate::smtp::send(shared, row, trace).await
        }
        (crate::Transport::Http, DestinationKind::Webhook)
            if row.destination.body_template.is_some() =>
        {
            // An email API: the request body rendered once and stored, sent as stored.
            match crate::email_api::stored_body(shared, row).await {
                Ok((body, note)) => (
                    http::send(&shared.http, &shared.prepared_of(row), row, body, trace).await,
                    Some(note),
                ),
                Err(exchange) => (exchange, None),
            }
        }
        (crate::Transport::Http, DestinationKind::Webhook) => (
            http::send(
                &shared.http,
                &shared.prepared_of(row),
                row,
                row.payload.clone().into_bytes(),
                trace,
            )
            .await,
            None,
        ),
        (crate::Transport::Discard, _) => (
            Exchange::Answered {
                status: 200,
                retry_after: None,
                reference: None,
                location: None,
                excerpt: String::new(),
            },
            None,
        ),
    }
}

/// The payload, checked against the fingerprint approved with it before anything is made
/// of it (a webhook's body, an email's first rendering): the payload column is outside
/// every hash of the evidence chain, and the fingerprint is inside it, so bytes changed
/// in the database after approval are caught here and never sent under the approved
/// fingerprint. About a microsecond for a 0.5 kB payload.
fn altered_payload(row: &ClaimedAlert) -> Option<Exchange> {
    use sha2::{Digest, Sha256};
    let actual = Sha256::digest(row.payload.as_bytes());
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    (actual.as_slice() != row.payload_sha256.as_slice()).then(|| {
        Exchange::Altered(format!(
            "the stored payload's SHA-256 is {}, not the {} approved: it was changed after \
             approval",
            hex(&actual),
            hex(&row.payload_sha256)
        ))
    })
}

/// Settles an uncertain attempt by evidence, in order: lookup at the destination; a resend
/// the destination de-duplicates inside its retention window; the destination's policy.
async fn settle_uncertain(shared: &Shared, claim: &Claim) -> Finished {
    let row = &claim.row;
    let lookup_template = row
        .destination
        .lookup_url_template
        .as_ref()
        .filter(|_| row.destination.kind != DestinationKind::Email);
    if let Some(template) = lookup_template {
        if !claim.lease_allows_request() {
            return Finished::Release(LEASE_TOO_SHORT.to_owned());
        }
        let started_at = Utc::now();
        let exchange = http::lookup(
            &shared.http,
            &shared.config.egress,
            row,
            template,
            claim.outgoing_trace.as_ref(),
        )
        .instrument(attempt_trace::step_span("lookup"))
        .await;
        return match judge::judge_lookup(&claim.judging(shared), started_at, &exchange) {
            AfterLookup::Done(completion) => {
                if let Some(record) = &completion.attempt {
                    attempt_trace::record_attempt(record);
                    shared
                        .metrics
                        .attempt(&row.destination.name, lookup_metric(record));
                }
                Finished::Done(completion)
            }
            AfterLookup::Resend { lookup, why } => {
                shared
                    .metrics
                    .attempt(&row.destination.name, lookup_metric(&lookup));
                resend(shared, claim, Some(lookup), &why, false, None).await
            }
        };
    }
    match judge::without_lookup(&claim.judging(shared)) {
        WithoutLookup::Resend {
            why,
            possible_duplicate,
            window_left,
        } => {
            let closes = window_left.map(|left| Instant::now() + left);
            resend(shared, claim, None, &why, possible_duplicate, closes).await
        }
        WithoutLookup::Held(held) => Finished::Done(held),
    }
}

/// The metric label of a lookup: found, not found, or a lookup that settled nothing.
fn lookup_metric(record: &AttemptRecord) -> &'static str {
    match (record.kind, record.outcome) {
        (AttemptKind::Lookup, AttemptOutcome::Found | AttemptOutcome::NotFound) => {
            record.outcome.as_str()
        }
        _ => judge::FAILED_LOOKUP,
    }
}

/// Commits "attempt N+1 started" (fenced), then sends. A lookup that led here is
/// recorded by that commit's evidence line; its attempt row is recorded with the send.
async fn resend(
    shared: &Shared,
    claim: &Claim,
    lookup: Option<AttemptRecord>,
    why: &str,
    possible_duplicate: bool,
    window_closes: Option<Instant>,
) -> Finished {
    let row = &claim.row;
    if shared.stopping() {
        return Finished::Release(SHUTTING_DOWN.to_owned());
    }
    if !claim.lease_allows_request() {
        return Finished::Release(LEASE_TOO_SHORT.to_owned());
    }
    if let Some(held) = judge::resend_refusal(&claim.judging(shared), lookup.clone()) {
        return Finished::Done(Box::new(held));
    }
    let attempt = match outbox_store::dispatch::begin_resend(
        &shared.pool,
        row.alert_id,
        row.fencing_token,
        &shared.config.worker_id,
        why,
        possible_duplicate,
    )
    .await
    {
        Ok(Some(attempt)) => attempt,
        Ok(None) => {
            tracing::warn!(alert_id = %row.alert_id, "claim lost before resending; nothing sent");
            return Finished::Release("the claim was taken over before the resend".to_owned());
        }
        Err(err) => {
            tracing::error!(alert_id = %row.alert_id, error = %err, "could not record the resend; nothing sent");
            return Finished::Release("the resend could not be recorded".to_owned());
        }
    };
    if let Some(lookup) = lookup {
        // The lookup's finding is evidence too; record it as its own row.
        let _ = outbox_store::dispatch::record_attempt(
            &shared.pool,
            row.alert_id,
            row.fencing_token,
            &shared.config.worker_id,
            &lookup,
        )
        .await;
    }
    send(shared, claim, attempt, true, window_closes).await
}

/// Crash point: the claim is committed, nothing is sent yet.
fn fail_point_after_claim() {
    // `return` ends the process on the spot, as a crash would; `panic` only this claim.
    fail::fail_point!("dispatch-after-claim", |_| std::process::abort());
}

/// Crash point: the destination has the request; nothing is recorded yet.
fn fail_point_after_send() {
    fail::fail_point!("dispatch-after-send", |_| std::process::abort());
}
