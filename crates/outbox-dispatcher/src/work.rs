//! What a dispatcher does with one claimed row: send it, or settle an uncertain attempt
//! by evidence (lookup, de-duplication window, the destination's policy), then say where
//! the row goes next and why, in words an operator can act on.

use chrono::{DateTime, Utc};
use outbox_core::retry::RetrySchedule;
use outbox_store::dispatch::{AttemptRecord, ClaimedAlert, Completion, Next};
use std::time::{Duration, Instant};

use crate::classify::{classify, Exchange, Verdict};
use crate::http;
use crate::Shared;

/// How long after an uncertain send a lookup's "not found" is believed: longer than the
/// request timeout, so a request still in flight at the destination has landed.
const LOOKUP_GRACE_EXTRA: Duration = Duration::from_secs(1);
/// Safety margin before the end of a lease: a send that might not finish inside the lease
/// is not started.
const LEASE_MARGIN: Duration = Duration::from_secs(1);
const LEASE_TOO_SHORT: &str = "the lease would run out before a request could finish";

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
}

impl Claim {
    /// The database clock now, estimated from the claim.
    fn db_now(&self) -> DateTime<Utc> {
        self.row.db_now
            + chrono::Duration::from_std(self.local_claimed_at.elapsed()).unwrap_or_default()
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.row.timeout_ms).unwrap_or(10_000))
    }

    /// Whether a request started now would end inside the lease.
    fn lease_allows_request(&self) -> bool {
        Instant::now() + self.timeout() + LEASE_MARGIN < self.local_lease_deadline
    }
}

/// Works one claimed row to its next state.
pub(crate) async fn work(shared: &Shared, claim: &Claim) -> Finished {
    if claim.row.claimed_from == "uncertain" {
        return settle_uncertain(shared, claim).await;
    }
    if !claim.lease_allows_request() {
        return Finished::Release(LEASE_TOO_SHORT.to_owned());
    }
    send_and_judge(shared, claim, claim.row.attempts, false, None).await
}

/// Sends attempt `attempt` and turns the answer into a completion. `resending` is set when
/// an earlier attempt's outcome is still unknown: then a failed resend does not make the
/// row an ordinary pending retry, it stays uncertain so that the next try goes through the
/// settling order again (lookup, window, policy) and can never slip past the window.
async fn send_and_judge(
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
    let mut message_note = None;
    let exchange = match shared.config.transport {
        crate::Transport::Http if row.kind == "email" => {
            let (exchange, note) = crate::smtp::send(shared, row).await;
            message_note = note;
            exchange
        }
        crate::Transport::Http if row.body_template.is_some() => {
            match crate::email_api::stored_body(shared, row).await {
                Ok((body, note)) => {
                    message_note = Some(note);
                    http::send(
                        &shared.http,
                        &shared.config.egress,
                        row,
                        &shared.config.secret_keys,
                        body,
                    )
                    .await
                }
                Err(exchange) => exchange,
            }
        }
        crate::Transport::Http => {
            http::send(
                &shared.http,
                &shared.config.egress,
                row,
                &shared.config.secret_keys,
                row.payload.clone().into_bytes(),
            )
            .await
        }
        crate::Transport::Discard => Exchange::Answered {
            status: 200,
            retry_after: None,
            reference: None,
            location: None,
            excerpt: String::new(),
        },
    };
    shared
        .metrics
        .send_latency(&row.destination, started.elapsed());
    fail_point_after_send();
    let deduplicates = row.idempotency_retention_secs.is_some();
    let verdict = classify(&exchange, deduplicates);
    let (outcome, status, reference, error_class, excerpt) = describe(&exchange, &verdict);
    shared.metrics.attempt(&row.destination, outcome);
    let record = AttemptRecord {
        kind: "send",
        attempt,
        started_at,
        outcome,
        http_status: status,
        destination_reference: reference.clone(),
        error_class,
        response_excerpt: excerpt,
    };
    let now = claim.db_now();
    let prefix = if resending {
        format!("attempt {attempt} (resend)")
    } else {
        format!("attempt {attempt}")
    };
    // A server error may come after the destination acted; the de-duplication window
    // must still cover the retry, so it is settled like an uncertain attempt.
    let server_error = matches!(
        exchange,
        Exchange::Answered {
            status: 500..=599,
            ..
        }
    ) && !matches!(exchange, Exchange::Answered { status: 503, .. });
    let unresolved = resending || server_error;
    let (next, line, disable) = match verdict {
        Verdict::Accepted { reference } => (
            Next::Settle {
                outcome: "accepted",
                reference: reference.clone(),
            },
            format!(
                "{prefix} accepted by the destination ({}{})",
                status.map_or_else(String::new, |s| format!("HTTP {s}")),
                reference.map_or_else(String::new, |r| format!(", reference {r}"))
            ),
            None,
        ),
        Verdict::Rejected { gone, why } => {
            let line = if gone {
                format!("{prefix} rejected: {why}; the destination is gone, so it was disabled")
            } else {
                format!("{prefix} rejected: {why}")
            };
            (
                Next::Settle {
                    outcome: "failed",
                    reference: None,
                },
                line,
                gone.then(|| format!("answered 410 Gone to alert {}", row.alert_id)),
            )
        }
        Verdict::NotProcessed { retry_after, why } => {
            let (next, plan) =
                retry_or_exhaust(shared, claim, attempt, retry_after, now, unresolved);
            (
                next,
                format!("{prefix} not processed ({why}); {plan}"),
                None,
            )
        }
        Verdict::NotSent { why } => {
            let (next, plan) = retry_or_exhaust(shared, claim, attempt, None, now, unresolved);
            (next, format!("{prefix} not sent ({why}); {plan}"), None)
        }
        // A configuration error: retrying cannot help, and every other alert of the
        // destination would meet it too. When an earlier attempt's outcome is unknown,
        // "failed" could be false: the alert is held instead.
        Verdict::Blocked { why } => (
            Next::Settle {
                outcome: if unresolved { "held" } else { "failed" },
                reference: None,
            },
            format!(
                "{prefix} not sent: {why}; a configuration error, so the destination was disabled{}",
                if unresolved {
                    "; held for reconciliation, an earlier attempt's outcome is unknown"
                } else {
                    ""
                }
            ),
            Some(format!("{why} (alert {})", row.alert_id)),
        ),
        Verdict::Uncertain { why } => {
            let first_send = row.first_send_started_at.unwrap_or(started_at);
            let backoff =
                shared
                    .config
                    .retry_schedule
                    .delay(attempt.unsigned_abs(), rand::random(), None);
            let (wait, plan) = match settlement(row, first_send, now) {
                Settlement::Lookup => (
                    backoff.max(claim.timeout() + LOOKUP_GRACE_EXTRA),
                    "will look it up at the destination".to_owned(),
                ),
                Settlement::Resend { why, .. } => (backoff, format!("will resend: {why}")),
                Settlement::Hold => (
                    Duration::ZERO,
                    "no lookup and no de-duplication window: retry held for reconciliation"
                        .to_owned(),
                ),
            };
            (
                Next::Requeue {
                    status: "uncertain",
                    at: now + chrono::Duration::from_std(wait).unwrap_or_default(),
                },
                format!("{prefix} {why}; destination acceptance unknown; {plan}"),
                None,
            )
        }
    };
    // An email attempt (or an email API's) names the exact message it sent: the rendered
    // fingerprint is evidence beside the payload's.
    let line = match message_note {
        Some(note) => format!("{line}; {note}"),
        None => line,
    };
    Finished::Done(Box::new(Completion {
        alert_id: row.alert_id,
        fencing_token: row.fencing_token,
        worker: shared.config.worker_id.clone(),
        attempt: Some(record),
        next,
        line,
        disable_destination: disable,
    }))
}

/// Schedules a retry, or ends the alert when its attempts or retry window are used up:
/// `failed` when nothing can have arrived, `held` when an attempt's outcome is unknown
/// (`unresolved`), since then "failed" could be false.
fn retry_or_exhaust(
    shared: &Shared,
    claim: &Claim,
    attempt: i32,
    retry_after: Option<Duration>,
    now: DateTime<Utc>,
    unresolved: bool,
) -> (Next, String) {
    let row = &claim.row;
    let unit: f64 = rand::random();
    let schedule: &RetrySchedule = &shared.config.retry_schedule;
    let delay = schedule.delay(attempt.unsigned_abs(), unit, retry_after);
    let at = now + chrono::Duration::from_std(delay).unwrap_or_default();
    let window_end = row.approved_at
        + chrono::Duration::from_std(Duration::from_secs_f64(row.max_retry_window_secs))
            .unwrap_or_default();
    let used = attempt - row.budget_base_attempts;
    if used >= row.max_attempts || at > window_end {
        let why = if used >= row.max_attempts {
            format!("exhausted: {used} of {} attempts used", row.max_attempts)
        } else {
            "exhausted: the retry window has closed".to_owned()
        };
        if unresolved {
            return (
                Next::Settle {
                    outcome: "held",
                    reference: None,
                },
                format!(
                    "held for reconciliation: {why}, and an earlier attempt's outcome is unknown"
                ),
            );
        }
        return (
            Next::Settle {
                outcome: "failed",
                reference: None,
            },
            why,
        );
    }
    let honoured = retry_after.map_or_else(String::new, |_| {
        " (as Retry-After asked, capped)".to_owned()
    });
    (
        Next::Requeue {
            status: if unresolved { "uncertain" } else { "pending" },
            at,
        },
        format!(
            "retry in {}{honoured}",
            outbox_core::duration::format(Duration::from_millis(delay.as_millis() as u64))
        ),
    )
}

/// Settles an uncertain attempt by evidence, in order: lookup at the destination; a resend
/// the destination de-duplicates inside its retention window; the destination's policy.
async fn settle_uncertain(shared: &Shared, claim: &Claim) -> Finished {
    let row = &claim.row;
    let now = claim.db_now();
    let attempt = row.attempts;
    if let Some(template) = row
        .lookup_url_template
        .as_ref()
        .filter(|_| row.kind != "email")
    {
        if !claim.lease_allows_request() {
            return Finished::Release(LEASE_TOO_SHORT.to_owned());
        }
        let started_at = Utc::now();
        let exchange = http::lookup(&shared.http, &shared.config.egress, row, template).await;
        let grace_end = row.last_send_started_at.unwrap_or(now)
            + chrono::Duration::from_std(claim.timeout() + LOOKUP_GRACE_EXTRA).unwrap_or_default();
        let lookup = |outcome: &'static str,
                      status: Option<u16>,
                      reference: Option<String>,
                      error: Option<String>| AttemptRecord {
            kind: "lookup",
            attempt,
            started_at,
            outcome,
            http_status: status,
            destination_reference: reference,
            error_class: error,
            response_excerpt: None,
        };
        match exchange {
            Exchange::Answered {
                status: found @ 200..=299,
                reference,
                ..
            } => {
                shared.metrics.attempt(&row.destination, "found");
                return done(
                    shared,
                    claim,
                    Some(lookup("found", Some(found), reference.clone(), None)),
                    Next::Settle {
                        outcome: "accepted",
                        reference: reference.clone(),
                    },
                    format!(
                        "confirmed by lookup: the destination has attempt {attempt}'s alert{}",
                        reference.map_or_else(String::new, |r| format!(" (reference {r})"))
                    ),
                );
            }
            Exchange::Answered { status: 404, .. } if now >= grace_end => {
                shared.metrics.attempt(&row.destination, "not_found");
                return resend(shared, claim, Some(lookup("not_found", Some(404), None, None)),
                    "the destination's lookup does not have it after the grace period; resending with the same key",
                    false, None).await;
            }
            Exchange::Blocked(why) => {
                // The lookup URL is a configuration error; the attempt's outcome stays
                // unknown, so the alert waits for an operator rather than "failed".
                shared.metrics.attempt(&row.destination, "lookup_failed");
                let mut finished = done(
                    shared,
                    claim,
                    Some(lookup("uncertain", None, None, Some("blocked".into()))),
                    Next::Settle { outcome: "held", reference: None },
                    format!("lookup not sent: {why}; a configuration error, so the destination was disabled; held for reconciliation: attempt {attempt}'s acceptance is unknown"),
                );
                if let Finished::Done(completion) = &mut finished {
                    completion.disable_destination =
                        Some(format!("lookup URL: {why} (alert {})", row.alert_id));
                }
                return finished;
            }
            Exchange::Answered { status: 404, .. } => {
                shared.metrics.attempt(&row.destination, "not_found");
                return done(shared, claim, Some(lookup("not_found", Some(404), None, None)),
                    Next::Requeue { status: "uncertain", at: grace_end },
                    format!("lookup does not have attempt {attempt} yet; asking again after the grace period"));
            }
            other => {
                let (why, status, retry_after) = match &other {
                    Exchange::Answered {
                        status,
                        retry_after,
                        ..
                    } => (format!("HTTP {status}"), Some(*status), *retry_after),
                    Exchange::SmtpAccepted { reply: w, .. }
                    | Exchange::SmtpRefused { reply: w, .. }
                    | Exchange::NotConnected(w)
                    | Exchange::TimedOut(w)
                    | Exchange::Broken(w)
                    | Exchange::Unsendable(w)
                    | Exchange::Blocked(w) => (w.clone(), None, None),
                };
                shared.metrics.attempt(&row.destination, "lookup_failed");
                let budget = LookupBudget {
                    failed_before: row.failed_lookups,
                    first_failed_at: row.first_failed_lookup_at.unwrap_or(started_at),
                    max_failures: row.max_attempts,
                    window_end: retry_window_end(row),
                };
                let (next, line) = after_failed_lookup(
                    &shared.config.retry_schedule,
                    &budget,
                    now,
                    &why,
                    retry_after,
                    rand::random(),
                );
                return done(
                    shared,
                    claim,
                    Some(lookup(
                        "uncertain",
                        status,
                        None,
                        Some("lookup_failed".into()),
                    )),
                    next,
                    line,
                );
            }
        }
    }
    match settlement(row, row.first_send_started_at.unwrap_or(now), now) {
        Settlement::Resend {
            why,
            possible_duplicate,
            window_left,
        } => {
            let closes = window_left.map(|left| Instant::now() + left);
            resend(shared, claim, None, &why, possible_duplicate, closes).await
        }
        Settlement::Lookup | Settlement::Hold => done(
            shared,
            claim,
            None,
            Next::Settle { outcome: "held", reference: None },
            format!("retry held for reconciliation: attempt {attempt}'s acceptance is unknown, and the destination offers no lookup and no de-duplication window"),
        ),
    }
}

/// What a failing lookup may still spend. Failed lookups are counted per attempt (a
/// resend starts a new count) against the destination's own limits: at most
/// `max_attempts` failed lookups, and none planned past the end of the retry window.
/// Reusing the destination's limits keeps one knob for "how long may this alert stay
/// unresolved" instead of a second one that operators would have to keep in step.
#[derive(Debug, Clone)]
struct LookupBudget {
    /// Failed lookups for this attempt before the one just made.
    failed_before: i64,
    /// When the first of them (or, for the first failure, this one) started.
    first_failed_at: DateTime<Utc>,
    /// The destination's most attempts, which is also its most failed lookups.
    max_failures: i32,
    /// The end of the destination's retry window for this alert.
    window_end: DateTime<Utc>,
}

/// The end of the alert's retry window: the budget's start plus the destination's window.
fn retry_window_end(row: &ClaimedAlert) -> DateTime<Utc> {
    row.approved_at
        + chrono::Duration::from_std(Duration::from_secs_f64(row.max_retry_window_secs))
            .unwrap_or_default()
}

/// What follows a failed lookup: the next one after the retry schedule's delay for the
/// number of failures so far (full jitter, `unit` in `[0, 1)` picks the point; a
/// `Retry-After` on the lookup's answer is honoured, capped), so that a broken lookup is
/// asked less and less often; or, once the budget is spent, `held` for an operator, since
/// the attempt's outcome is still unknown and neither "failed" nor a resend would be safe.
fn after_failed_lookup(
    schedule: &RetrySchedule,
    budget: &LookupBudget,
    now: DateTime<Utc>,
    why: &str,
    retry_after: Option<Duration>,
    unit: f64,
) -> (Next, String) {
    let failures = budget.failed_before.saturating_add(1);
    let step = u32::try_from(failures).unwrap_or(u32::MAX);
    let ceiling = retry_after.map_or_else(
        || schedule.ceiling(step),
        |wish| wish.min(schedule.retry_after_cap()),
    );
    let delay = schedule.delay(step, unit, retry_after);
    let at = now + chrono::Duration::from_std(delay).unwrap_or_default();
    let spent = if failures >= i64::from(budget.max_failures) {
        Some(format!(
            "the destination allows {} failed lookups per attempt",
            budget.max_failures
        ))
    } else if at > budget.window_end {
        Some("the retry window closes before the next lookup".to_owned())
    } else {
        None
    };
    if let Some(spent) = spent {
        return (
            Next::Settle {
                outcome: "held",
                reference: None,
            },
            format!(
                "lookup failed {} since {}: {why}; {spent}; held for an operator",
                if failures == 1 {
                    "once".to_owned()
                } else {
                    format!("{failures} times")
                },
                budget
                    .first_failed_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        );
    }
    let short = |d: Duration| {
        outbox_core::duration::format(Duration::from_millis(
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        ))
    };
    (
        Next::Requeue {
            status: "uncertain",
            at,
        },
        format!(
            "lookup failed ({why}), {failures} of {} failed lookups allowed; still uncertain, asking again in {} (at most {})",
            budget.max_failures,
            short(delay),
            short(ceiling)
        ),
    )
}

/// How an uncertain attempt can be settled, by the destination's capabilities.
enum Settlement {
    /// Ask the destination.
    Lookup,
    /// Send again with the same key.
    Resend {
        why: String,
        /// Nothing rules a duplicate out (policy `retry`).
        possible_duplicate: bool,
        /// How long the de-duplication window that makes the resend safe stays open.
        window_left: Option<Duration>,
    },
    /// Wait for an operator.
    Hold,
}

/// The settling order: lookup; a resend inside the de-duplication window (minus a margin
/// of a tenth of it, at most 5 minutes) of the first attempt with this key; the policy.
/// SMTP has neither a lookup nor a key a relay de-duplicates by: an email destination's
/// uncertain send is settled by its policy alone, whatever else its row says.
fn settlement(row: &ClaimedAlert, first_send: DateTime<Utc>, now: DateTime<Utc>) -> Settlement {
    let email = row.kind == "email";
    if row.lookup_url_template.is_some() && !email {
        return Settlement::Lookup;
    }
    if let Some(secs) = row.idempotency_retention_secs.filter(|_| !email) {
        let retention = Duration::from_secs_f64(secs);
        let margin = (retention / 10).min(Duration::from_secs(300));
        let safe_until =
            first_send + chrono::Duration::from_std(retention - margin).unwrap_or_default();
        if now < safe_until {
            return Settlement::Resend {
                window_left: (safe_until - now).to_std().ok(),
                why: format!(
                    "the destination de-duplicates by key for {} and the first attempt is inside that window; resending with the same key",
                    outbox_core::duration::format(retention)
                ),
                possible_duplicate: false,
            };
        }
    }
    if row.on_uncertain == "retry" {
        return Settlement::Resend {
            window_left: None,
            why: "no lookup and no de-duplication window to rule out a duplicate; resending (on_uncertain = retry), possible duplicate".to_owned(),
            possible_duplicate: true,
        };
    }
    Settlement::Hold
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
        return Finished::Release(format!("{} is shutting down", shared.config.worker_id));
    }
    if !claim.lease_allows_request() {
        return Finished::Release(LEASE_TOO_SHORT.to_owned());
    }
    // Resends count against the same limits as retries; past them the outcome stays
    // unknown, which is a case for an operator, not for "failed".
    let window_end = row.approved_at
        + chrono::Duration::from_std(Duration::from_secs_f64(row.max_retry_window_secs))
            .unwrap_or_default();
    if row.attempts - row.budget_base_attempts >= row.max_attempts || claim.db_now() > window_end {
        return done(
            shared,
            claim,
            lookup,
            Next::Settle { outcome: "held", reference: None },
            format!(
                "retry held for reconciliation: attempt {}'s outcome is unknown and the attempts or the retry window are used up",
                row.attempts
            ),
        );
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
    send_and_judge(shared, claim, attempt, true, window_closes).await
}

fn done(
    shared: &Shared,
    claim: &Claim,
    attempt: Option<AttemptRecord>,
    next: Next,
    line: String,
) -> Finished {
    Finished::Done(Box::new(Completion {
        alert_id: claim.row.alert_id,
        fencing_token: claim.row.fencing_token,
        worker: shared.config.worker_id.clone(),
        attempt,
        next,
        line,
        disable_destination: None,
    }))
}

/// Splits an exchange into the attempt record's fields.
fn describe(
    exchange: &Exchange,
    verdict: &Verdict,
) -> (
    &'static str,
    Option<u16>,
    Option<String>,
    Option<String>,
    Option<String>,
) {
    let outcome = match verdict {
        Verdict::Accepted { .. } => "accepted",
        Verdict::Rejected { .. } => "rejected",
        Verdict::NotProcessed { .. } => "not_processed",
        Verdict::NotSent { .. } => "not_sent",
        Verdict::Uncertain { .. } => "uncertain",
        Verdict::Blocked { .. } => "not_sent",
    };
    match exchange {
        Exchange::Answered {
            status,
            reference,
            excerpt,
            ..
        } => (
            outcome,
            Some(*status),
            reference.clone(),
            None,
            (!excerpt.is_empty()).then(|| excerpt.clone()),
        ),
        Exchange::SmtpAccepted { reference, reply } => {
            (outcome, None, reference.clone(), None, Some(reply.clone()))
        }
        Exchange::SmtpRefused { code, reply, .. } => (
            outcome,
            None,
            None,
            Some(format!("smtp_{}xx", code / 100)),
            Some(reply.clone()),
        ),
        Exchange::NotConnected(why) => (
            outcome,
            None,
            None,
            Some("connect".into()),
            Some(why.clone()),
        ),
        Exchange::TimedOut(why) => (
            outcome,
            None,
            None,
            Some("timeout".into()),
            Some(why.clone()),
        ),
        Exchange::Broken(why) => (
            outcome,
            None,
            None,
            Some("connection_broken".into()),
            Some(why.clone()),
        ),
        Exchange::Unsendable(why) => (
            outcome,
            None,
            None,
            Some("configuration".into()),
            Some(why.clone()),
        ),
        Exchange::Blocked(why) => (
            outcome,
            None,
            None,
            Some("blocked".into()),
            Some(why.clone()),
        ),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(failed_before: i64, max_failures: i32) -> (LookupBudget, DateTime<Utc>) {
        let now = DateTime::parse_from_rfc3339("2027-01-31T10:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        let budget = LookupBudget {
            failed_before,
            first_failed_at: now - chrono::Duration::minutes(5),
            max_failures,
            window_end: now + chrono::Duration::days(3),
        };
        (budget, now)
    }

    fn schedule() -> RetrySchedule {
        RetrySchedule::new(vec![
            Duration::from_millis(100),
            Duration::from_millis(200),
            Duration::from_millis(400),
            Duration::from_millis(800),
        ])
        .unwrap_or_default()
    }

    #[test]
    fn a_failing_lookup_is_asked_again_later_each_time() {
        let mut planned = Vec::new();
        for failed_before in 0..5 {
            let (budget, now) = budget(failed_before, 12);
            // `unit` 1.0 is the top of the jitter range: the ceiling itself.
            let (next, line) =
                after_failed_lookup(&schedule(), &budget, now, "HTTP 500", None, 1.0);
            let Next::Requeue { status, at } = next else {
                panic!("requeued while the budget lasts: {line}");
            };
            assert_eq!(status, "uncertain");
            planned.push((at - now).num_milliseconds());
            assert!(
                line.contains(&format!("{} of 12", failed_before + 1)),
                "{line}"
            );
        }
        assert_eq!(planned, [100, 200, 400, 800, 800]);
    }

    #[test]
    fn full_jitter_stays_under_the_ceiling_for_the_failures_so_far() {
        let (budget, now) = budget(2, 12);
        let (next, line) = after_failed_lookup(&schedule(), &budget, now, "HTTP 500", None, 0.5);
        let Next::Requeue { at, .. } = next else {
            panic!("requeued: {line}");
        };
        assert_eq!((at - now).num_milliseconds(), 200);
        assert!(line.contains("at most 400ms"), "{line}");
    }

    #[test]
    fn a_spent_budget_holds_the_alert_with_the_reason() {
        let (budget, now) = budget(5, 6);
        let (next, line) = after_failed_lookup(&schedule(), &budget, now, "HTTP 500", None, 0.3);
        assert!(
            matches!(
                next,
                Next::Settle {
                    outcome: "held",
                    ..
                }
            ),
            "{line}"
        );
        assert_eq!(
            line,
            "lookup failed 6 times since 2027-01-31T09:55:00Z: HTTP 500; the destination allows 6 failed lookups per attempt; held for an operator"
        );
    }

    #[test]
    fn a_lookup_planned_past_the_retry_window_holds_the_alert() {
        let (mut budget, now) = budget(0, 12);
        budget.window_end = now + chrono::Duration::milliseconds(50);
        let (next, line) =
            after_failed_lookup(&schedule(), &budget, now, "connection refused", None, 1.0);
        assert!(
            matches!(
                next,
                Next::Settle {
                    outcome: "held",
                    ..
                }
            ),
            "{line}"
        );
        assert!(line.contains("retry window closes"), "{line}");
        assert!(line.starts_with("lookup failed once since "), "{line}");
        assert!(line.contains(": connection refused;"), "{line}");
    }

    #[test]
    fn a_lookup_answer_asking_for_a_pause_is_honoured() {
        let (budget, now) = budget(0, 12);
        let (next, _) = after_failed_lookup(
            &schedule(),
            &budget,
            now,
            "HTTP 429",
            Some(Duration::from_secs(2)),
            0.1,
        );
        let Next::Requeue { at, .. } = next else {
            panic!("requeued");
        };
        assert_eq!((at - now).num_milliseconds(), 2000);
    }
}
