//! The judgement, row by row of the outcome table (docs/delivery.md, "What an answer means"),
//! with no database and no network: a claim, an exchange and a clock go in, the
//! completion to record comes out.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use super::*;
use outbox_store::dispatch::ClaimedDestination;
use std::sync::Arc;
use uuid::Uuid;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .unwrap()
}

/// The clock of every judgement here.
fn now() -> DateTime<Utc> {
    at("2027-01-31T10:00:00Z")
}

/// A plain webhook claim of a pending alert's first attempt: no lookup, no
/// de-duplication window, policy `hold`, 12 attempts over a 3-day window.
pub(crate) fn claim() -> ClaimedAlert {
    ClaimedAlert {
        alert_id: Uuid::nil(),
        fencing_token: 7,
        attempts: 1,
        claimed_from: LiveStatus::Pending,
        lease_expires_at: now() + chrono::Duration::seconds(60),
        db_now: now(),
        payload: "{}".to_owned(),
        budget_since: now() - chrono::Duration::minutes(1),
        budget_base_attempts: 0,
        alert_created_at: now() - chrono::Duration::minutes(1),
        first_send_started_at: None,
        last_send_started_at: None,
        failed_lookups: 0,
        first_failed_lookup_at: None,
        tenant_id: Uuid::nil(),
        traceparent: None,
        tracestate: None,
        chain_head: None,
        payload_sha256: vec![0; 32],
        destination: Arc::new(ClaimedDestination {
            id: Uuid::nil(),
            name: "ops".to_owned(),
            kind: DestinationKind::Webhook,
            url: Some("https://hooks.example/x".to_owned()),
            signing_secrets: vec![],
            idempotency_header: "Idempotency-Key".to_owned(),
            idempotency_retention_secs: None,
            lookup_url_template: None,
            reference_header: None,
            on_uncertain: OnUncertain::Hold,
            timeout_ms: 1000,
            max_in_flight: 16,
            max_attempts: 12,
            max_retry_window_secs: 3.0 * 86_400.0,
            body_template: None,
            bearer_token: None,
            lane_skips_failed: false,
        }),
        lane_key: None,
    }
}

fn with(change: impl FnOnce(&mut ClaimedAlert)) -> ClaimedAlert {
    let mut row = claim();
    change(&mut row);
    row
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

fn judging<'a>(row: &'a ClaimedAlert, schedule: &'a RetrySchedule) -> Judging<'a> {
    Judging {
        row,
        worker: "w",
        schedule,
        now: now(),
        unit: 1.0,
    }
}

/// The send of attempt `row.attempts` answered with `exchange`, judged.
fn send(row: &ClaimedAlert, exchange: &Exchange) -> Completion {
    let schedule = schedule();
    judge_send(
        &judging(row, &schedule),
        row.attempts,
        false,
        now(),
        exchange,
        None,
    )
}

fn answered(status: u16) -> Exchange {
    Exchange::Answered {
        status,
        retry_after: None,
        reference: Some("r-1".into()),
        location: None,
        excerpt: String::new(),
    }
}

fn settled(outcome: Outcome) -> impl Fn(&Completion) -> bool {
    move |c| matches!(c.next, Next::Settle { outcome: o, .. } if o == outcome)
}

fn requeued(status: LiveStatus) -> impl Fn(&Completion) -> bool {
    move |c| matches!(c.next, Next::Requeue { status: s, .. } if s == status)
}

fn attempt_outcome(c: &Completion) -> AttemptOutcome {
    c.attempt.as_ref().unwrap().outcome
}

#[test]
fn a_2xx_is_accepted_with_the_destination_reference() {
    let done = send(&claim(), &answered(202));
    assert_eq!(
        done.next,
        Next::Settle {
            outcome: Outcome::Accepted,
            reference: Some("r-1".into())
        }
    );
    assert_eq!(attempt_outcome(&done), AttemptOutcome::Accepted);
    assert_eq!(done.attempt.as_ref().unwrap().http_status, Some(202));
    assert_eq!(
        done.line,
        "attempt 1 accepted by the destination (HTTP 202, reference r-1)"
    );
    assert_eq!(done.disable_destination, None);
}

#[test]
fn a_409_in_progress_is_retried_later_as_pending() {
    let done = send(&claim(), &answered(409));
    assert!(requeued(LiveStatus::Pending)(&done), "{done:?}");
    assert_eq!(attempt_outcome(&done), AttemptOutcome::NotProcessed);
    let Next::Requeue { at, .. } = done.next else {
        unreachable!()
    };
    assert_eq!(at - now(), chrono::Duration::milliseconds(100));
    assert_line_has(&done, "not processed (HTTP 409)");
}

#[test]
fn a_410_fails_the_alert_and_disables_the_destination() {
    let done = send(&claim(), &answered(410));
    assert!(settled(Outcome::Failed)(&done), "{done:?}");
    assert_eq!(attempt_outcome(&done), AttemptOutcome::Rejected);
    assert!(done.disable_destination.is_some());
    assert_line_has(&done, "the destination is gone");
}

#[test]
fn another_4xx_fails_the_alert_with_its_answer() {
    let done = send(&claim(), &answered(422));
    assert!(settled(Outcome::Failed)(&done), "{done:?}");
    assert_eq!(attempt_outcome(&done), AttemptOutcome::Rejected);
    assert_eq!(done.disable_destination, None);
}

#[test]
fn a_5xx_without_key_deduplication_is_uncertain() {
    let done = send(&claim(), &answered(500));
    assert!(requeued(LiveStatus::Uncertain)(&done), "{done:?}");
    assert_eq!(attempt_outcome(&done), AttemptOutcome::Uncertain);
    assert_line_has(&done, "retry held for reconciliation");
}

#[test]
fn a_5xx_at_a_deduplicating_destination_is_retried_through_the_settling_order() {
    let row =
        with(|r| Arc::make_mut(&mut r.destination).idempotency_retention_secs = Some(86_400.0));
    let done = send(&row, &answered(500));
    // Not processed, but the destination may have acted: the retry stays uncertain, so
    // the next claim checks the de-duplication window before resending.
    assert_eq!(attempt_outcome(&done), AttemptOutcome::NotProcessed);
    assert!(requeued(LiveStatus::Uncertain)(&done), "{done:?}");
    // A 503 says it did nothing: an ordinary retry.
    assert!(requeued(LiveStatus::Pending)(&send(&row, &answered(503))));
}

#[test]
fn nothing_sent_is_retried_and_a_lost_answer_is_uncertain() {
    let refused = send(
        &claim(),
        &Exchange::NotConnected("connection refused".into()),
    );
    assert!(requeued(LiveStatus::Pending)(&refused), "{refused:?}");
    assert_eq!(attempt_outcome(&refused), AttemptOutcome::NotSent);
    assert_eq!(
        refused.attempt.as_ref().unwrap().error_class.as_deref(),
        Some("connect")
    );
    for lost in [
        Exchange::TimedOut("no answer in 1s".into()),
        Exchange::Broken("reset after write".into()),
    ] {
        let done = send(&claim(), &lost);
        assert!(requeued(LiveStatus::Uncertain)(&done), "{done:?}");
        assert_eq!(attempt_outcome(&done), AttemptOutcome::Uncertain);
    }
}

#[test]
fn a_lost_answer_is_planned_by_the_destination_capabilities() {
    let timed_out = Exchange::TimedOut("no answer in 1s".into());
    let lookup = with(|r| {
        Arc::make_mut(&mut r.destination).lookup_url_template =
            Some("https://hooks.example/k/{key}".into())
    });
    let done = send(&lookup, &timed_out);
    assert!(
        done.line.ends_with("will look it up at the destination"),
        "{}",
        done.line
    );
    // The lookup waits out the request timeout and a grace second.
    let Next::Requeue { at, .. } = done.next else {
        unreachable!()
    };
    assert_eq!(at - now(), chrono::Duration::seconds(2));
    let retry = with(|r| Arc::make_mut(&mut r.destination).on_uncertain = OnUncertain::Retry);
    let done = send(&retry, &timed_out);
    assert!(done.line.contains("will resend"), "{}", done.line);
    let hold = send(&claim(), &timed_out);
    assert_line_has(&hold, "retry held for reconciliation");
}

/// An uncertain claim of attempt 1, sent a minute ago.
fn uncertain(change: impl FnOnce(&mut ClaimedAlert)) -> ClaimedAlert {
    with(|r| {
        r.claimed_from = LiveStatus::Uncertain;
        r.first_send_started_at = Some(now() - chrono::Duration::minutes(1));
        r.last_send_started_at = r.first_send_started_at;
        change(r);
    })
}

#[test]
fn an_uncertain_send_without_lookup_follows_the_policy() {
    let schedule = schedule();
    let hold = uncertain(|_| {});
    let WithoutLookup::Held(held) = without_lookup(&judging(&hold, &schedule)) else {
        panic!("policy hold holds");
    };
    assert!(settled(Outcome::Held)(&held));
    let retry = uncertain(|r| Arc::make_mut(&mut r.destination).on_uncertain = OnUncertain::Retry);
    assert!(matches!(
        without_lookup(&judging(&retry, &schedule)),
        WithoutLookup::Resend {
            possible_duplicate: true,
            window_left: None,
            ..
        }
    ));
}

#[test]
fn an_uncertain_send_inside_the_deduplication_window_is_resent_safely() {
    let schedule = schedule();
    let inside =
        uncertain(|r| Arc::make_mut(&mut r.destination).idempotency_retention_secs = Some(3600.0));
    let WithoutLookup::Resend {
        possible_duplicate,
        window_left,
        ..
    } = without_lookup(&judging(&inside, &schedule))
    else {
        panic!("resent inside the window");
    };
    assert!(!possible_duplicate);
    // One hour minus a margin (a tenth, at most five minutes), from a minute ago.
    assert_eq!(window_left, Some(Duration::from_secs(3600 - 300 - 60)));
    // Past the window (minus its margin), the policy decides.
    let outside =
        uncertain(|r| Arc::make_mut(&mut r.destination).idempotency_retention_secs = Some(60.0));
    assert!(matches!(
        without_lookup(&judging(&outside, &schedule)),
        WithoutLookup::Held(_)
    ));
}

#[test]
fn email_is_settled_by_policy_alone() {
    let schedule = schedule();
    let email = uncertain(|r| {
        Arc::make_mut(&mut r.destination).kind = DestinationKind::Email;
        Arc::make_mut(&mut r.destination).idempotency_retention_secs = Some(3600.0);
        Arc::make_mut(&mut r.destination).lookup_url_template =
            Some("https://hooks.example/k/{key}".into());
    });
    assert_eq!(
        settlement(&email, now(), now()),
        Settlement::Hold,
        "no lookup, no key window over SMTP"
    );
    assert!(matches!(
        without_lookup(&judging(&email, &schedule)),
        WithoutLookup::Held(_)
    ));
}

#[test]
fn email_classes_follow_the_relay() {
    let row = with(|r| Arc::make_mut(&mut r.destination).kind = DestinationKind::Email);
    let accepted = send(
        &row,
        &Exchange::SmtpAccepted {
            reference: Some("Q1".into()),
            reply: "250 queued as Q1".into(),
        },
    );
    assert_eq!(
        accepted.next,
        Next::Settle {
            outcome: Outcome::Accepted,
            reference: Some("Q1".into())
        }
    );
    let refused = |code| Exchange::SmtpRefused {
        phase: "RCPT TO",
        code,
        reply: format!("{code} no"),
    };
    let later = send(&row, &refused(451));
    assert!(requeued(LiveStatus::Pending)(&later), "{later:?}");
    assert_eq!(
        later.attempt.as_ref().unwrap().error_class.as_deref(),
        Some("smtp_4xx")
    );
    let never = send(&row, &refused(550));
    assert!(settled(Outcome::Failed)(&never), "{never:?}");
    // The final reply lost after the data: the message may have been taken.
    let lost = send(
        &row,
        &Exchange::TimedOut("no reply to the final dot".into()),
    );
    assert!(requeued(LiveStatus::Uncertain)(&lost), "{lost:?}");
}

#[test]
fn a_spent_budget_fails_the_alert_or_holds_it_when_an_attempt_is_unknown() {
    let last = with(|r| r.attempts = 12);
    let failed = send(&last, &Exchange::NotConnected("connection refused".into()));
    assert!(settled(Outcome::Failed)(&failed), "{failed:?}");
    assert_line_has(&failed, "exhausted: 12 of 12 attempts used");
    // A resend after an unknown attempt: "failed" could be false, so it is held.
    let schedule = schedule();
    let held = judge_send(
        &judging(&last, &schedule),
        12,
        true,
        now(),
        &Exchange::NotConnected("connection refused".into()),
        None,
    );
    assert!(settled(Outcome::Held)(&held), "{held:?}");
    // The retry window counts from the budget's start (a replay starts a new one).
    let closing = with(|r| Arc::make_mut(&mut r.destination).max_retry_window_secs = 60.05);
    let window = send(&closing, &answered(429));
    assert!(settled(Outcome::Failed)(&window), "{window:?}");
    assert_line_has(&window, "retry window has closed");
    // Resends stop at the same limits.
    let spent = uncertain(|r| r.attempts = 12);
    let refusal = resend_refusal(&judging(&spent, &schedule), None).unwrap();
    assert!(settled(Outcome::Held)(&refusal), "{refusal:?}");
    assert!(resend_refusal(&judging(&uncertain(|_| {}), &schedule), None).is_none());
}

#[test]
fn a_blocked_address_fails_and_disables_or_holds_a_resend() {
    let blocked = Exchange::Blocked("loopback is not allowed".into());
    let done = send(&claim(), &blocked);
    assert!(settled(Outcome::Failed)(&done), "{done:?}");
    assert!(done.disable_destination.is_some());
    let schedule = schedule();
    let resend = judge_send(
        &judging(&claim(), &schedule),
        2,
        true,
        now(),
        &blocked,
        None,
    );
    assert!(settled(Outcome::Held)(&resend), "{resend:?}");
}

#[test]
fn an_altered_payload_fails_without_disabling_or_holds_a_resend() {
    let altered =
        Exchange::Altered("the stored payload's SHA-256 is 00, not the 11 approved".into());
    let done = send(&claim(), &altered);
    assert!(settled(Outcome::Failed)(&done), "{done:?}");
    assert_eq!(attempt_outcome(&done), AttemptOutcome::NotSent);
    assert_eq!(
        done.attempt.as_ref().and_then(|a| a.error_class.as_deref()),
        Some("altered")
    );
    // The destination did nothing wrong.
    assert!(done.disable_destination.is_none());
    let schedule = schedule();
    let resend = judge_send(
        &judging(&claim(), &schedule),
        2,
        true,
        now(),
        &altered,
        None,
    );
    assert!(settled(Outcome::Held)(&resend), "{resend:?}");
}

fn lookup(row: &ClaimedAlert, exchange: &Exchange) -> AfterLookup {
    let schedule = schedule();
    judge_lookup(&judging(row, &schedule), now(), exchange)
}

#[test]
fn lookup_outcomes() {
    let row = uncertain(|r| {
        Arc::make_mut(&mut r.destination).lookup_url_template =
            Some("https://hooks.example/k/{key}".into())
    });
    // Found: accepted, with the lookup's reference.
    let AfterLookup::Done(found) = lookup(&row, &answered(200)) else {
        panic!("found settles");
    };
    assert!(settled(Outcome::Accepted)(&found));
    assert_eq!(found.attempt.as_ref().unwrap().kind, AttemptKind::Lookup);
    assert_eq!(attempt_outcome(&found), AttemptOutcome::Found);
    // Not found after the grace period (the send started a minute ago): resend.
    let AfterLookup::Resend { lookup: record, .. } = lookup(&row, &answered(404)) else {
        panic!("not found after the grace period resends");
    };
    assert_eq!(record.outcome, AttemptOutcome::NotFound);
    // Not found within the grace period: ask again once it is over.
    let recent = uncertain(|r| {
        Arc::make_mut(&mut r.destination).lookup_url_template =
            Some("https://hooks.example/k/{key}".into());
        r.last_send_started_at = Some(now() - chrono::Duration::milliseconds(500));
    });
    let AfterLookup::Done(early) = lookup(&recent, &answered(404)) else {
        panic!("asks again");
    };
    assert_eq!(
        early.next,
        Next::Requeue {
            status: LiveStatus::Uncertain,
            at: now() + chrono::Duration::milliseconds(1500)
        }
    );
    // A failing lookup is asked again; a blocked one holds and disables.
    let AfterLookup::Done(failing) = lookup(&row, &answered(500)) else {
        panic!("asks again");
    };
    assert!(requeued(LiveStatus::Uncertain)(&failing), "{failing:?}");
    assert_eq!(
        failing.attempt.as_ref().unwrap().error_class.as_deref(),
        Some(FAILED_LOOKUP)
    );
    let AfterLookup::Done(blocked) = lookup(&row, &Exchange::Blocked("private".into())) else {
        panic!("held");
    };
    assert!(settled(Outcome::Held)(&blocked));
    assert!(blocked.disable_destination.is_some());
}

#[test]
fn an_email_note_ends_the_line() {
    let schedule = schedule();
    let done = judge_send(
        &judging(&claim(), &schedule),
        1,
        false,
        now(),
        &answered(200),
        Some("message sha256 abc"),
    );
    assert!(done.line.ends_with("; message sha256 abc"), "{}", done.line);
}

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

#[test]
fn a_failing_lookup_is_asked_again_later_each_time() {
    let mut planned = Vec::new();
    for failed_before in 0..5 {
        let (budget, now) = budget(failed_before, 12);
        // `unit` 1.0 is the top of the jitter range: the ceiling itself.
        let (next, line) = after_failed_lookup(&schedule(), &budget, now, "HTTP 500", None, 1.0);
        let Next::Requeue { status, at } = next else {
            panic!("requeued while the budget lasts: {line}");
        };
        assert_eq!(status, LiveStatus::Uncertain);
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
                outcome: Outcome::Held,
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
                outcome: Outcome::Held,
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

/// Asserts that the completion's evidence line says `part`.
fn assert_line_has(done: &Completion, part: &str) {
    assert!(done.line.contains(part), "{}", done.line);
}
