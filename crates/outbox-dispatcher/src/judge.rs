//! Deciding, apart from doing: what an exchange with a destination means for a claimed
//! alert, as pure functions from (claim, exchange, now) to the completion to record (the
//! attempt row, where the alert goes next, the evidence line). No I/O here: the worker
//! (`work`) sends, looks up and records; these functions only judge, so every row of the
//! outcome table is unit-tested without PostgreSQL or HTTP.
//!
//! - [`judge_send`]: a send's answer (the outcome table, retries, exhaustion, and the
//!   plan for an uncertain send).
//! - [`judge_lookup`]: a lookup's answer while settling an uncertain attempt.
//! - [`settlement`]: how an uncertain attempt can be settled by the destination's
//!   capabilities; [`without_lookup`] and [`resend_refusal`] turn it into a decision.
//!
//! It stays one file, past 600 lines, because it is one decision read in one place: the
//! send, the lookup and the settling order share `Judging` and the outcome table, and each
//! judgement hands on to the others (an uncertain send to its settlement, a lookup to a
//! resend).

use chrono::{DateTime, Utc};
use outbox_core::retry::RetrySchedule;
use outbox_core::{AttemptKind, AttemptOutcome, DestinationKind, LiveStatus, OnUncertain, Outcome};
use outbox_store::dispatch::{AttemptRecord, ClaimedAlert, Completion, LaneHead, Next};
use std::time::Duration;

use crate::classify::{classify, Exchange, Verdict};

/// How long after an uncertain send a lookup's "not found" is believed: longer than the
/// request timeout, so a request still in flight at the destination has landed.
pub(crate) const LOOKUP_GRACE_EXTRA: Duration = Duration::from_secs(1);

/// What a judgement needs besides the exchange: the claim, the clock and the draws.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Judging<'a> {
    /// The claimed row, with the destination's capabilities.
    pub row: &'a ClaimedAlert,
    /// The dispatcher, named in the completion.
    pub worker: &'a str,
    /// Delays between retries.
    pub schedule: &'a RetrySchedule,
    /// The database clock now (estimated from the claim).
    pub now: DateTime<Utc>,
    /// A draw in `[0, 1)` that picks the point inside the full-jitter range.
    pub unit: f64,
}

impl Judging<'_> {
    fn completion(
        &self,
        attempt: Option<AttemptRecord>,
        next: Next,
        line: String,
        disable_destination: Option<String>,
    ) -> Completion {
        let lane = self.row.lane_key.clone().map(|key| LaneHead {
            key,
            skips_failed: self.row.destination.lane_skips_failed,
        });
        let line = match (&lane, &next) {
            (Some(lane), Next::Settle { outcome, .. }) => {
                format!("{line}{}", lane_note(lane, *outcome))
            }
            _ => line,
        };
        Completion {
            alert_id: self.row.alert_id,
            fencing_token: self.row.fencing_token,
            worker: self.worker.to_owned(),
            attempt,
            next,
            line,
            disable_destination,
            lane,
            chain_seen: self.row.chain_seen(),
        }
    }

    /// The end of the alert's retry window: the budget's start plus the destination's.
    fn window_end(&self) -> DateTime<Utc> {
        self.row.budget_since
            + chrono_duration(Duration::from_secs_f64(
                self.row.destination.max_retry_window_secs,
            ))
    }
}

/// What settling an ordered lane's head as `outcome` does to its lane, for the end of the
/// head's evidence line (the key is not quoted: it may be long, and the alert names it).
fn lane_note(lane: &LaneHead, outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Accepted | Outcome::Superseded => "",
        _ if lane.released_by(outcome) => {
            "; its ordered lane moves on without it (the destination skips failed lane heads)"
        }
        _ => "; its ordered lane waits behind it until an operator replays or resolves it",
    }
}

/// The destination's request timeout.
pub(crate) fn timeout(row: &ClaimedAlert) -> Duration {
    Duration::from_millis(u64::try_from(row.destination.timeout_ms).unwrap_or(10_000))
}

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or_default()
}

fn short(d: Duration) -> String {
    outbox_core::duration::format(Duration::from_millis(
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
    ))
}

/// A send's exchange, judged: the attempt row, the next state and the evidence line.
///
/// `resending` is set when an earlier attempt's outcome is still unknown: then a failed
/// resend does not make the row an ordinary pending retry, it stays uncertain so that the
/// next try goes through the settling order again (lookup, window, policy) and can never
/// slip past the window. `note` (an email's rendered fingerprint) ends the line.
pub(crate) fn judge_send(
    j: &Judging<'_>,
    attempt: i32,
    resending: bool,
    started_at: DateTime<Utc>,
    exchange: &Exchange,
    note: Option<&str>,
) -> Completion {
    let row = j.row;
    let deduplicates = row.destination.idempotency_retention_secs.is_some();
    let verdict = classify(exchange, deduplicates);
    let record = attempt_record(exchange, &verdict, attempt, started_at);
    let status = record.http_status;
    let prefix = if resending {
        format!("attempt {attempt} (resend)")
    } else {
        format!("attempt {attempt}")
    };
    let (next, line, disable) = match verdict {
        Verdict::Accepted { reference } => (
            Next::Settle {
                outcome: Outcome::Accepted,
                reference: reference.clone(),
            },
            format!(
                "{prefix} accepted by the destination ({}{})",
                status.map_or_else(String::new, |s| format!("HTTP {s}")),
                reference.map_or_else(String::new, |r| format!(", reference {r}"))
            ),
            None,
        ),
        Verdict::Rejected { gone, why } => rejected_send(j, &prefix, gone, &why),
        Verdict::NotProcessed {
            retry_after,
            may_have_acted,
            why,
        } => {
            let (next, plan) =
                retry_or_exhaust(j, attempt, retry_after, resending || may_have_acted);
            (
                next,
                format!("{prefix} not processed ({why}); {plan}"),
                None,
            )
        }
        Verdict::NotSent { why } => {
            let (next, plan) = retry_or_exhaust(j, attempt, None, resending);
            (next, format!("{prefix} not sent ({why}); {plan}"), None)
        }
        Verdict::Blocked { why } => blocked_send(j, &prefix, resending, &why),
        Verdict::Altered { why } => altered_send(&prefix, resending, &why),
        Verdict::Uncertain { why } => {
            let (next, plan) = after_uncertain_send(j, attempt, started_at);
            (
                next,
                format!("{prefix} {why}; destination acceptance unknown; {plan}"),
                None,
            )
        }
    };
    // An email attempt names the exact message it sent: the rendered fingerprint is
    // evidence beside the payload's.
    let line = match note {
        Some(note) => format!("{line}; {note}"),
        None => line,
    };
    j.completion(Some(record), next, line, disable)
}

/// A send the destination rejected: the alert failed; a 410 Gone also disables the
/// destination.
fn rejected_send(
    j: &Judging<'_>,
    prefix: &str,
    gone: bool,
    why: &str,
) -> (Next, String, Option<String>) {
    let line = if gone {
        format!("{prefix} rejected: {why}; the destination is gone, so it was disabled")
    } else {
        format!("{prefix} rejected: {why}")
    };
    (
        Next::Settle {
            outcome: Outcome::Failed,
            reference: None,
        },
        line,
        gone.then(|| format!("answered 410 Gone to alert {}", j.row.alert_id)),
    )
}

/// A send the egress guard refused, a configuration error: retrying cannot help, and
/// every other alert of the destination would meet it too.
fn blocked_send(
    j: &Judging<'_>,
    prefix: &str,
    resending: bool,
    why: &str,
) -> (Next, String, Option<String>) {
    let (next, held) = not_sent_for_good(resending);
    (
        next,
        format!("{prefix} not sent: {why}; a configuration error, so the destination was disabled{held}"),
        Some(format!("{why} (alert {})", j.row.alert_id)),
    )
}

/// A payload changed after approval: sending it would deliver what nobody approved under
/// the approved fingerprint, so nothing is sent, and no retry can help. The destination is
/// not at fault and stays enabled.
fn altered_send(prefix: &str, resending: bool, why: &str) -> (Next, String, Option<String>) {
    let (next, held) = not_sent_for_good(resending);
    (next, format!("{prefix} not sent: {why}{held}"), None)
}

/// Where an attempt that was not sent, and never can be, leaves the alert: failed; or,
/// when an earlier attempt's outcome is unknown (so "failed" could be false), held for
/// reconciliation, with the words that end its line.
fn not_sent_for_good(resending: bool) -> (Next, &'static str) {
    if resending {
        (
            Next::Settle {
                outcome: Outcome::Held,
                reference: None,
            },
            "; held for reconciliation, an earlier attempt's outcome is unknown",
        )
    } else {
        (
            Next::Settle {
                outcome: Outcome::Failed,
                reference: None,
            },
            "",
        )
    }
}

/// Where an uncertain send goes next, by how it can be settled: looked up once the
/// request has surely landed, resent after the backoff, or held for reconciliation.
fn after_uncertain_send(
    j: &Judging<'_>,
    attempt: i32,
    started_at: DateTime<Utc>,
) -> (Next, String) {
    let row = j.row;
    let first_send = row.first_send_started_at.unwrap_or(started_at);
    let backoff = j.schedule.delay(attempt.unsigned_abs(), j.unit, None);
    let (wait, plan) = match settlement(row, first_send, j.now) {
        Settlement::Lookup => (
            backoff.max(timeout(row) + LOOKUP_GRACE_EXTRA),
            "will look it up at the destination".to_owned(),
        ),
        Settlement::Resend { why, .. } => (backoff, format!("will resend: {why}")),
        Settlement::Hold => (
            Duration::ZERO,
            "no lookup and no de-duplication window: retry held for reconciliation".to_owned(),
        ),
    };
    (
        Next::Requeue {
            status: LiveStatus::Uncertain,
            at: j.now + chrono_duration(wait),
        },
        plan,
    )
}

/// Schedules a retry, or ends the alert when its attempts or retry window are used up:
/// `failed` when nothing can have arrived, `held` when an attempt's outcome is unknown
/// (`unresolved`), since then "failed" could be false.
fn retry_or_exhaust(
    j: &Judging<'_>,
    attempt: i32,
    retry_after: Option<Duration>,
    unresolved: bool,
) -> (Next, String) {
    let row = j.row;
    let delay = j
        .schedule
        .delay(attempt.unsigned_abs(), j.unit, retry_after);
    let at = j.now + chrono_duration(delay);
    let used = attempt - row.budget_base_attempts;
    if used >= row.destination.max_attempts || at > j.window_end() {
        let why = if used >= row.destination.max_attempts {
            format!(
                "exhausted: {used} of {} attempts used",
                row.destination.max_attempts
            )
        } else {
            "exhausted: the retry window has closed".to_owned()
        };
        if unresolved {
            return (
                Next::Settle {
                    outcome: Outcome::Held,
                    reference: None,
                },
                format!(
                    "held for reconciliation: {why}, and an earlier attempt's outcome is unknown"
                ),
            );
        }
        return (
            Next::Settle {
                outcome: Outcome::Failed,
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
            status: if unresolved {
                LiveStatus::Uncertain
            } else {
                LiveStatus::Pending
            },
            at,
        },
        format!("retry in {}{honoured}", short(delay)),
    )
}

/// The attempt row of a send: the verdict's outcome and the exchange's evidence.
fn attempt_record(
    exchange: &Exchange,
    verdict: &Verdict,
    attempt: i32,
    started_at: DateTime<Utc>,
) -> AttemptRecord {
    let outcome = match verdict {
        Verdict::Accepted { .. } => AttemptOutcome::Accepted,
        Verdict::Rejected { .. } => AttemptOutcome::Rejected,
        Verdict::NotProcessed { .. } => AttemptOutcome::NotProcessed,
        Verdict::NotSent { .. } | Verdict::Blocked { .. } | Verdict::Altered { .. } => {
            AttemptOutcome::NotSent
        }
        Verdict::Uncertain { .. } => AttemptOutcome::Uncertain,
    };
    let (http_status, destination_reference, error_class, response_excerpt) = match exchange {
        Exchange::Answered {
            status,
            reference,
            excerpt,
            ..
        } => (
            Some(*status),
            reference.clone(),
            None,
            (!excerpt.is_empty()).then(|| excerpt.clone()),
        ),
        Exchange::SmtpAccepted { reference, reply } => {
            (None, reference.clone(), None, Some(reply.clone()))
        }
        Exchange::SmtpRefused { code, reply, .. } => (
            None,
            None,
            Some(format!("smtp_{}xx", code / 100)),
            Some(reply.clone()),
        ),
        Exchange::NotConnected(why) => (None, None, Some("connect".into()), Some(why.clone())),
        Exchange::SmtpNotSent { phase, why } => {
            (None, None, Some(phase.class().into()), Some(why.clone()))
        }
        Exchange::TimedOut(why) => (None, None, Some("timeout".into()), Some(why.clone())),
        Exchange::Broken(why) => (
            None,
            None,
            Some("connection_broken".into()),
            Some(why.clone()),
        ),
        Exchange::Unsendable(why) => (None, None, Some("configuration".into()), Some(why.clone())),
        Exchange::Blocked(why) => (None, None, Some("blocked".into()), Some(why.clone())),
        Exchange::Altered(why) => (None, None, Some("altered".into()), Some(why.clone())),
    };
    AttemptRecord {
        kind: AttemptKind::Send,
        attempt,
        started_at,
        outcome,
        http_status,
        destination_reference,
        error_class,
        response_excerpt,
    }
}

/// What a lookup's answer leads to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AfterLookup {
    /// Record this.
    Done(Box<Completion>),
    /// The destination does not have it after the grace period: resend with the same
    /// key; the lookup's row is recorded with the resend.
    Resend {
        /// The lookup, as evidence.
        lookup: AttemptRecord,
        /// Why, for the evidence line of the resend.
        why: String,
    },
}

/// A lookup's answer about the alert's current attempt, judged: found settles it as
/// accepted; not found after the grace period allows a resend, before it asks again
/// later; a blocked lookup URL holds the alert and disables the destination; any other
/// answer is a failed lookup, asked again with backoff until the budget is spent.
pub(crate) fn judge_lookup(
    j: &Judging<'_>,
    started_at: DateTime<Utc>,
    exchange: &Exchange,
) -> AfterLookup {
    let row = j.row;
    let attempt = row.attempts;
    let grace_end = row.last_send_started_at.unwrap_or(j.now)
        + chrono_duration(timeout(row) + LOOKUP_GRACE_EXTRA);
    let lookup = |outcome, status, reference, error| {
        lookup_record(attempt, started_at, outcome, status, reference, error)
    };
    let done = |record, next, line, disable| {
        AfterLookup::Done(Box::new(j.completion(Some(record), next, line, disable)))
    };
    match exchange {
        Exchange::Answered {
            status: found @ 200..=299,
            reference,
            ..
        } => done(
            lookup(AttemptOutcome::Found, Some(*found), reference.clone(), None),
            Next::Settle {
                outcome: Outcome::Accepted,
                reference: reference.clone(),
            },
            format!(
                "confirmed by lookup: the destination has attempt {attempt}'s alert{}",
                reference
                    .as_ref()
                    .map_or_else(String::new, |r| format!(" (reference {r})"))
            ),
            None,
        ),
        Exchange::Answered { status: 404, .. } if j.now >= grace_end => AfterLookup::Resend {
            lookup: lookup(AttemptOutcome::NotFound, Some(404), None, None),
            why: "the destination's lookup does not have it after the grace period; resending with the same key".to_owned(),
        },
        Exchange::Answered { status: 404, .. } => done(
            lookup(AttemptOutcome::NotFound, Some(404), None, None),
            Next::Requeue {
                status: LiveStatus::Uncertain,
                at: grace_end,
            },
            format!("lookup does not have attempt {attempt} yet; asking again after the grace period"),
            None,
        ),
        // The lookup URL is a configuration error; the attempt's outcome stays unknown,
        // so the alert waits for an operator rather than "failed".
        Exchange::Blocked(why) => done(
            lookup(AttemptOutcome::Uncertain, None, None, Some("blocked")),
            Next::Settle {
                outcome: Outcome::Held,
                reference: None,
            },
            format!("lookup not sent: {why}; a configuration error, so the destination was disabled; held for reconciliation: attempt {attempt}'s acceptance is unknown"),
            Some(format!("lookup URL: {why} (alert {})", row.alert_id)),
        ),
        other => {
            let (why, status, retry_after) = failed_lookup_answer(other);
            let budget = LookupBudget {
                failed_before: row.failed_lookups,
                first_failed_at: row.first_failed_lookup_at.unwrap_or(started_at),
                max_failures: row.destination.max_attempts,
                window_end: j.window_end(),
            };
            let (next, line) =
                after_failed_lookup(j.schedule, &budget, j.now, &why, retry_after, j.unit);
            done(
                lookup(AttemptOutcome::Uncertain, status, None, Some(FAILED_LOOKUP)),
                next,
                line,
                None,
            )
        }
    }
}

/// A lookup's attempt row.
fn lookup_record(
    attempt: i32,
    started_at: DateTime<Utc>,
    outcome: AttemptOutcome,
    status: Option<u16>,
    reference: Option<String>,
    error: Option<&str>,
) -> AttemptRecord {
    AttemptRecord {
        kind: AttemptKind::Lookup,
        attempt,
        started_at,
        outcome,
        http_status: status,
        destination_reference: reference,
        error_class: error.map(str::to_owned),
        response_excerpt: None,
    }
}

/// What a lookup that settled nothing answered, for its evidence and its retry: why, the
/// HTTP status if any, and the `Retry-After` it asked for.
fn failed_lookup_answer(exchange: &Exchange) -> (String, Option<u16>, Option<Duration>) {
    match exchange {
        Exchange::Answered {
            status,
            retry_after,
            ..
        } => (format!("HTTP {status}"), Some(*status), *retry_after),
        Exchange::SmtpAccepted { reply: w, .. }
        | Exchange::SmtpRefused { reply: w, .. }
        | Exchange::NotConnected(w)
        | Exchange::SmtpNotSent { why: w, .. }
        | Exchange::TimedOut(w)
        | Exchange::Broken(w)
        | Exchange::Unsendable(w)
        | Exchange::Blocked(w)
        | Exchange::Altered(w) => (w.clone(), None, None),
    }
}

/// The error class of a lookup that settled nothing; the claim counts these (the store
/// reads them back by this name).
pub(crate) const FAILED_LOOKUP: &str = outbox_store::dispatch::FAILED_LOOKUP;

/// What a failing lookup may still spend. Failed lookups are counted per attempt (a
/// resend starts a new count) against the destination's own limits: at most
/// `max_attempts` failed lookups, and none planned past the end of the retry window.
/// Reusing the destination's limits keeps one knob for "how long may this alert stay
/// unresolved" instead of a second one that operators would have to keep in step.
#[derive(Debug, Clone)]
pub(crate) struct LookupBudget {
    /// Failed lookups for this attempt before the one just made.
    pub failed_before: i64,
    /// When the first of them (or, for the first failure, this one) started.
    pub first_failed_at: DateTime<Utc>,
    /// The destination's most attempts, which is also its most failed lookups.
    pub max_failures: i32,
    /// The end of the destination's retry window for this alert.
    pub window_end: DateTime<Utc>,
}

/// What follows a failed lookup: the next one after the retry schedule's delay for the
/// number of failures so far (full jitter, `unit` in `[0, 1)` picks the point; a
/// `Retry-After` on the lookup's answer is honoured, capped), so that a broken lookup is
/// asked less and less often; or, once the budget is spent, `held` for an operator, since
/// the attempt's outcome is still unknown and neither "failed" nor a resend would be safe.
pub(crate) fn after_failed_lookup(
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
    let at = now + chrono_duration(delay);
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
                outcome: Outcome::Held,
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
    (
        Next::Requeue {
            status: LiveStatus::Uncertain,
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
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Settlement {
    /// Ask the destination.
    Lookup,
    /// Send again with the same key.
    Resend {
        /// Why, for the evidence line.
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
pub(crate) fn settlement(
    row: &ClaimedAlert,
    first_send: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Settlement {
    let email = row.destination.kind == DestinationKind::Email;
    if row.destination.lookup_url_template.is_some() && !email {
        return Settlement::Lookup;
    }
    if let Some(secs) = row
        .destination
        .idempotency_retention_secs
        .filter(|_| !email)
    {
        let retention = Duration::from_secs_f64(secs);
        let margin = (retention / 10).min(Duration::from_secs(300));
        let safe_until = first_send + chrono_duration(retention - margin);
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
    match row.destination.on_uncertain {
        OnUncertain::Retry => Settlement::Resend {
            window_left: None,
            why: "no lookup and no de-duplication window to rule out a duplicate; resending (on_uncertain = retry), possible duplicate".to_owned(),
            possible_duplicate: true,
        },
        OnUncertain::Hold => Settlement::Hold,
    }
}

/// What an uncertain claim comes to when no lookup settles it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum WithoutLookup {
    /// Send again with the same key.
    Resend {
        /// Why, for the evidence line.
        why: String,
        /// Nothing rules a duplicate out (policy `retry`).
        possible_duplicate: bool,
        /// How long the de-duplication window that makes the resend safe stays open.
        window_left: Option<Duration>,
    },
    /// Record this: held for an operator.
    Held(Box<Completion>),
}

/// An uncertain claim that no lookup settles (none offered, or an email destination):
/// a resend inside the de-duplication window or by policy, or held.
pub(crate) fn without_lookup(j: &Judging<'_>) -> WithoutLookup {
    let row = j.row;
    match settlement(row, row.first_send_started_at.unwrap_or(j.now), j.now) {
        Settlement::Resend {
            why,
            possible_duplicate,
            window_left,
        } => WithoutLookup::Resend {
            why,
            possible_duplicate,
            window_left,
        },
        Settlement::Lookup | Settlement::Hold => WithoutLookup::Held(Box::new(j.completion(
            None,
            Next::Settle {
                outcome: Outcome::Held,
                reference: None,
            },
            format!("retry held for reconciliation: attempt {}'s acceptance is unknown, and the destination offers no lookup and no de-duplication window", row.attempts),
            None,
        ))),
    }
}

/// Resends count against the same limits as retries; past them the outcome stays
/// unknown, which is a case for an operator, not for "failed": the completion that holds
/// the alert, or `None` when a resend may start.
pub(crate) fn resend_refusal(j: &Judging<'_>, lookup: Option<AttemptRecord>) -> Option<Completion> {
    let row = j.row;
    if row.attempts - row.budget_base_attempts >= row.destination.max_attempts
        || j.now > j.window_end()
    {
        return Some(j.completion(
            lookup,
            Next::Settle {
                outcome: Outcome::Held,
                reference: None,
            },
            format!(
                "retry held for reconciliation: attempt {}'s outcome is unknown and the attempts or the retry window are used up",
                row.attempts
            ),
            None,
        ));
    }
    None
}

#[cfg(test)]
pub(crate) mod tests;
