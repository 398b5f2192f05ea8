//! The ordered lanes' verdicts. A destination that orders per key promises that the
//! alerts of one lane (destination and ordering key) arrive in the order their approvals
//! committed (`lane_seq`), and that alert n+1 is not sent until alert n is released:
//! accepted, superseded, or failed where the destination skips failed heads. Held, or
//! failed where it does not, an alert blocks its lane until an operator acts.
//!
//! Judged by the destination's own log (a webhook sink's records, an inbox's messages,
//! each in arrival order), never by the dispatchers' account:
//! - **out of order**: an alert whose first acceptance in that log came before the first
//!   acceptance of an alert approved ahead of it in its lane; or that went past an alert
//!   ahead of it that was never released (held, failed and not skipped, or still queued),
//!   which nothing behind it may pass: it was accepted in the log, or its state shows it
//!   was claimed and sent (accepted, held, failed, uncertain, sending);
//! - **waiting behind blocked heads**: alerts still pending and waiting in their lane
//!   (`lane_after` set) behind a head that is held or failed and not skipped. Such a lane
//!   stays blocked until an operator resolves its head, which is correct, so these are
//!   not lost; a pending alert of a lane whose head does not block is (see `tables`).
//!
//! Each ordered destination's lanes are tallied ([`LaneFigures`]); a lane whose
//! destination has no log among those given is tallied, but its order is not judged.

use outbox_core::AlertState;
use outbox_store::checker_reads::{CommittedAlert, LanePlace};
use std::collections::{BTreeMap, HashMap, HashSet};
use uuid::Uuid;

use crate::recorded::{Inbox, Sink};
use crate::report::{LaneFigures, Report};

/// One ordered lane: its alerts in lane order, and its head.
struct Lane<'a> {
    /// The destination's name.
    destination: &'a str,
    /// The lane's ordering key.
    key: &'a str,
    /// Its alerts by position (`lane_seq`).
    alerts: Vec<(&'a CommittedAlert, &'a LanePlace)>,
    /// The first alert not released, if any: the one the lane waits for.
    head: Option<usize>,
}

impl Lane<'_> {
    /// The head, when it blocks the lane until an operator acts.
    fn blocked_head(&self) -> Option<&CommittedAlert> {
        let (alert, place) = self.alerts[self.head?];
        blocks(alert.state, place).then_some(alert)
    }
}

/// The committed alerts of every ordered lane.
pub(crate) struct Lanes<'a> {
    /// By destination and key.
    lanes: BTreeMap<(Uuid, &'a str), Lane<'a>>,
}

impl<'a> Lanes<'a> {
    /// Groups the alerts that have a place in an ordered lane.
    pub(crate) fn of(alerts: &'a [CommittedAlert]) -> Self {
        let mut lanes: BTreeMap<(Uuid, &str), Lane<'a>> = BTreeMap::new();
        for alert in alerts {
            let Some(place) = &alert.lane else {
                continue;
            };
            lanes
                .entry((place.destination_id, place.key.as_str()))
                .or_insert_with(|| Lane {
                    destination: &alert.destination,
                    key: &place.key,
                    alerts: Vec::new(),
                    head: None,
                })
                .alerts
                .push((alert, place));
        }
        for lane in lanes.values_mut() {
            lane.alerts.sort_by_key(|(_, place)| place.seq);
            lane.head = lane
                .alerts
                .iter()
                .position(|(alert, place)| !released(alert.state, place));
        }
        Lanes { lanes }
    }

    /// The alerts waiting in their lane (pending, `lane_after` set) behind a head that
    /// blocks it: not lost.
    pub(crate) fn waiting_behind_blocked_heads(&self) -> HashSet<Uuid> {
        let mut waiting = HashSet::new();
        for lane in self.lanes.values() {
            let (Some(head), Some(_)) = (lane.head, lane.blocked_head()) else {
                continue;
            };
            waiting.extend(
                lane.alerts[head + 1..]
                    .iter()
                    .filter(|(alert, place)| {
                        alert.state == Some(AlertState::Pending) && place.waits_behind.is_some()
                    })
                    .map(|(alert, _)| alert.id),
            );
        }
        waiting
    }
}

/// Whether an alert in `state` has let its lane go on.
fn released(state: Option<AlertState>, place: &LanePlace) -> bool {
    match state {
        Some(AlertState::Accepted | AlertState::Superseded) => true,
        Some(AlertState::Failed) => place.skips_failed,
        _ => false,
    }
}

/// Whether an alert in `state` has come to rest holding its lane up: only an operator
/// moves the lane on.
fn blocks(state: Option<AlertState>, place: &LanePlace) -> bool {
    match state {
        Some(AlertState::Held) => true,
        Some(AlertState::Failed) => !place.skips_failed,
        _ => false,
    }
}

/// Where each key was first accepted in a destination's log: its index there.
type FirstAcceptances<'a> = HashMap<&'a str, usize>;

/// Each judged destination's first acceptances by key: a sink's first `applied` record of
/// the key, an inbox's first message for the alert.
fn first_acceptances<'a>(
    sinks: &'a [Sink],
    inboxes: &'a [Inbox],
) -> HashMap<&'a str, FirstAcceptances<'a>> {
    let mut logs: HashMap<&str, FirstAcceptances<'_>> = HashMap::new();
    for sink in sinks {
        let log = logs.entry(sink.destination.as_str()).or_default();
        for (at, record) in sink.records.iter().enumerate() {
            if let (Some(key), "applied") = (record.key.as_deref(), record.outcome.as_str()) {
                log.entry(key).or_insert(at);
            }
        }
    }
    for inbox in inboxes {
        let log = logs.entry(inbox.destination.as_str()).or_default();
        for (at, message) in inbox.messages.iter().enumerate() {
            if let Some(key) = message.alert_id.as_deref() {
                log.entry(key).or_insert(at);
            }
        }
    }
    logs
}

/// Judges every lane against its destination's log (when one is given), and tallies
/// each ordered destination's figures.
pub(crate) fn judge_lanes(
    report: &mut Report,
    lanes: &Lanes<'_>,
    sinks: &[Sink],
    inboxes: &[Inbox],
) {
    let logs = first_acceptances(sinks, inboxes);
    let waiting = lanes.waiting_behind_blocked_heads();
    let mut figures: BTreeMap<&str, LaneFigures> = BTreeMap::new();
    for lane in lanes.lanes.values() {
        let tally = figures
            .entry(lane.destination)
            .or_insert_with(|| LaneFigures {
                destination: lane.destination.to_owned(),
                ..LaneFigures::default()
            });
        tally.lanes += 1;
        tally.alerts += lane.alerts.len();
        tally.deepest = tally.deepest.max(lane.alerts.len());
        for (alert, _) in &lane.alerts {
            tally.accepted += usize::from(alert.state == Some(AlertState::Accepted));
            tally.waiting += usize::from(waiting.contains(&alert.id));
        }
        if let Some(head) = lane.blocked_head() {
            tally.blocked_heads += 1;
            tally.held_heads += usize::from(head.state == Some(AlertState::Held));
        }
        if let Some(log) = logs.get(lane.destination) {
            tally.judged += judge_order(report, lane, log);
        }
    }
    report.ordered.extend(figures.into_values());
}

/// What a later alert of the lane must not go past: the alert first accepted latest so
/// far (`at`, where it was), or one never released (`at: None`), which nothing behind it
/// may pass at all.
struct Ahead<'a> {
    alert: &'a CommittedAlert,
    place: &'a LanePlace,
    at: Option<usize>,
}

/// Whether an alert in `state` was claimed and sent (or is being sent): it left its place
/// in the queue, which an alert behind an unreleased one never may.
fn went(state: Option<AlertState>) -> bool {
    matches!(
        state,
        Some(
            AlertState::Accepted
                | AlertState::Held
                | AlertState::Failed
                | AlertState::Uncertain
                | AlertState::Sending
        )
    )
}

/// Walks `lane` in lane order against `log`, recording as out of order each alert first
/// accepted before one ahead of it, or that went (accepted in the log, or claimed and sent
/// by its state) past one ahead of it that was never released. Returns how many of the
/// lane's alerts were accepted in the log.
fn judge_order(report: &mut Report, lane: &Lane<'_>, log: &FirstAcceptances<'_>) -> usize {
    let mut ahead: Option<Ahead<'_>> = None;
    let mut judged = 0;
    for &(alert, place) in &lane.alerts {
        let id = alert.id.to_string();
        let at = log.get(id.as_str()).copied();
        judged += usize::from(at.is_some());
        let overtaken = ahead.as_ref().filter(|before| match (before.at, at) {
            (None, _) => at.is_some() || went(alert.state),
            (Some(q), Some(at)) => q > at,
            (Some(_), None) => false,
        });
        if let Some(before) = overtaken {
            let how = match at {
                Some(at) => format!("was first accepted at record {} of its log", at + 1),
                None => format!(
                    "is {} without being accepted in its log",
                    state_name(alert.state)
                ),
            };
            let whereas = match before.at {
                Some(q) => format!(
                    "before position {} ({}), first accepted later, at record {}",
                    before.place.seq,
                    before.alert.id,
                    q + 1
                ),
                None => format!(
                    "past position {} ({}), which never let the lane go on (it is {})",
                    before.place.seq,
                    before.alert.id,
                    state_name(before.alert.state)
                ),
            };
            report.count_out_of_order(
                alert.id,
                format!(
                    "lane `{}` at `{}`: position {} {how}, {whereas}",
                    lane.key, lane.destination, place.seq
                ),
            );
        }
        let barrier = ahead.as_ref().is_some_and(|before| before.at.is_none());
        if barrier {
            continue;
        }
        if !released(alert.state, place) {
            ahead = Some(Ahead {
                alert,
                place,
                at: None,
            });
        } else if let Some(at) =
            at.filter(|&at| ahead.as_ref().and_then(|a| a.at).is_none_or(|q| q < at))
        {
            ahead = Some(Ahead {
                alert,
                place,
                at: Some(at),
            });
        }
    }
    judged
}

/// A state as the report names it.
fn state_name(state: Option<AlertState>) -> &'static str {
    state.map_or("in no state", AlertState::as_str)
}
