//! The ordered-lanes phase (`bench run --only lanes`), on a database of its own: what
//! ordering per key costs beside not ordering, measured side by side in one run.
//!
//! Three destinations of one tenant: `bench-sink` (does not order) and `bench-per-key`
//! (orders per key) deliver to the run's sink; `bench-one-key` (orders per key) delivers to
//! a sink of its own that answers each delivery after a fixed delay (5 ms). Each round:
//! - N alerts (the run's `n`) over K subjects (10,000: ten alerts a lane) approved in bulk
//!   to `bench-sink` (timed: approvals/s), then drained over HTTP by one dispatcher in
//!   this process (deliveries/s, WAL and row writes per delivery, the WAL by kind of
//!   record where the server has `pg_walinspect`); then the same to `bench-per-key`. Rounds alternate which goes first, so that drift in the machine's
//!   speed (other work, the tables' growth) falls on both alike.
//! - a lane of M alerts of one key to `bench-one-key`, drained: at most one in flight, so
//!   its pace is bound by the destination's delay. The sink's records give each arrival;
//!   the idle time after an answer is the next arrival minus (the arrival plus the
//!   delay), and the attempt rows split it into the answer's recording and the next
//!   claim. The run fails if the lane's alerts arrive out of their lane order or two are
//!   ever at the sink at once.
//!
//! Every drain is also checked as the other phases' are (each alert accepted once, one
//! attempt row each, no duplicate at the sink).

use outbox_dispatcher::Transport;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;
use uuid::Uuid;

use super::run_state::{Approvals, RunState};
use super::settings::{LaneSettings, SuiteSettings};
use crate::dispatchers::Dispatchers;
use crate::drain::DrainReport;
use crate::measure::{ms, quantile};
use crate::own_sink::OwnSink;
use crate::progress;
use crate::scratch::on_own_database;

/// What the ordered-lanes phase measured.
#[derive(Debug, Clone, Serialize)]
pub struct LanesReport {
    /// Alerts per drain.
    pub n: u64,
    /// The phase's settings.
    pub settings: LaneSettings,
    /// The machine: cores, PostgreSQL version, `synchronous_commit`.
    pub host: HashMap<String, String>,
    /// Each round's figures, in order.
    pub rounds: Vec<LanesRound>,
}

/// One round: the unordered and the per-key backlog, and the one-key lane.
#[derive(Debug, Clone, Serialize)]
pub struct LanesRound {
    /// Whether the per-key backlog went first.
    pub per_key_first: bool,
    /// To the destination that does not order.
    pub unordered: LaneDrain,
    /// To the destination that orders per key.
    pub per_key: LaneDrain,
    /// One key against a slow destination.
    pub one_key: OneKey,
}

/// A backlog's approval and its drain.
#[derive(Debug, Clone, Serialize)]
pub struct LaneDrain {
    /// Its bulk approval.
    pub approvals: Approvals,
    /// Its drain.
    pub drain: DrainReport,
}

impl LaneDrain {
    /// WAL bytes per delivery: the benchmark database's own when the server can tell,
    /// else cluster-wide.
    pub fn wal_per_delivery(&self) -> f64 {
        self.drain
            .database_wal_bytes_per_delivery
            .unwrap_or(self.drain.wal_bytes_per_delivery)
    }
}

/// The one-key lane's delivery against a destination that answers after a delay.
#[derive(Debug, Clone, Serialize)]
pub struct OneKey {
    /// Alerts in the lane.
    pub n: u64,
    /// The destination's answer delay, ms.
    pub latency_ms: f64,
    /// The drain (its deliveries/s include the dispatcher's start and the last recording).
    pub drain: DrainReport,
    /// One delivery per delay: 1000 / latency_ms.
    pub ideal_per_sec: f64,
    /// Deliveries/s from the first arrival at the sink to the last.
    pub sink_per_sec: f64,
    /// Idle time of the destination after each answer (the next arrival minus the
    /// arrival and the delay): median, ms.
    pub idle_p50_ms: f64,
    /// 99th percentile of it, ms.
    pub idle_p99_ms: f64,
    /// Longest, ms.
    pub idle_max_ms: f64,
    /// Median time from the answer to the start of the transaction that records it, ms.
    pub answer_to_recording_p50_ms: f64,
    /// Median time from the start of that recording to the next send's start (the rest
    /// of the recording, the claim of the next alert, the task's start), ms.
    pub recording_to_next_send_p50_ms: f64,
}

/// The phase, on a database of its own; `sink` is the run's (the slow one is started
/// here).
pub(super) async fn lanes(settings: &SuiteSettings, sink: &OwnSink) -> anyhow::Result<LanesReport> {
    let latency = format!("{}ms", settings.lanes.sink_latency_ms);
    let slow_sink = OwnSink::start_with(&["--latency", &latency])?;
    let slow_sink = &slow_sink;
    on_own_database(&settings.server_url, |url| async move {
        lanes_on(settings, sink, slow_sink, &url).await
    })
    .await
}

async fn lanes_on(
    settings: &SuiteSettings,
    sink: &OwnSink,
    slow_sink: &OwnSink,
    url: &str,
) -> anyhow::Result<LanesReport> {
    let mut run = RunState::prepare(settings, sink, url).await?;
    let host = super::host::host_facts(&run.pool).await?;
    let lanes = &settings.lanes;
    let unordered = run.workload.destination_id;
    let per_key = per_key_destination(&run, "bench-per-key", sink).await?;
    let one_key = per_key_destination(&run, "bench-one-key", slow_sink).await?;
    let mut rounds = Vec::new();
    for round in 0..lanes.rounds {
        let per_key_first = round % 2 == 1;
        let mut unordered_drain = None;
        let mut per_key_drain = None;
        for ordered in [per_key_first, !per_key_first] {
            let (destination, name) = if ordered {
                (per_key, "per-key")
            } else {
                (unordered, "unordered")
            };
            progress(&format!(
                "lanes, round {}: {} alerts over {} keys, {name}",
                round + 1,
                settings.n,
                lanes.keys
            ));
            let drained = backlog(&mut run, destination, lanes.keys).await?;
            if ordered {
                per_key_drain = Some(drained);
            } else {
                unordered_drain = Some(drained);
            }
        }
        progress(&format!(
            "lanes, round {}: one key, {} alerts, the sink answering after {} ms",
            round + 1,
            lanes.one_key_n,
            lanes.sink_latency_ms
        ));
        let one_key = one_key_lane(&mut run, slow_sink, one_key, lanes).await?;
        rounds.push(LanesRound {
            per_key_first,
            unordered: unordered_drain.ok_or_else(|| anyhow::anyhow!("no unordered drain"))?,
            per_key: per_key_drain.ok_or_else(|| anyhow::anyhow!("no per-key drain"))?,
            one_key,
        });
    }
    run.finish().await?;
    Ok(LanesReport {
        n: settings.n,
        settings: lanes.clone(),
        host,
        rounds,
    })
}

/// A destination of the run's tenant delivering to `sink`, ordering per key (set as an
/// operator sets it).
async fn per_key_destination(
    run: &RunState<'_>,
    name: &str,
    sink: &OwnSink,
) -> anyhow::Result<Uuid> {
    let destination = run
        .workload
        .add_destination(name, &sink.destination())
        .await?;
    run.workload.order_per_key(destination).await?;
    Ok(destination)
}

/// N alerts over `keys` subjects approved in bulk to `destination` (timed), then drained
/// over HTTP and checked.
async fn backlog(
    run: &mut RunState<'_>,
    destination: Uuid,
    keys: u64,
) -> anyhow::Result<LaneDrain> {
    let n = run.settings.n;
    let approvals = run
        .approve_in_bulk_as(n, |workload, i| workload.keyed_alert(destination, i, keys))
        .await?;
    let drain = run
        .drain_checked(n, Dispatchers::InProcess(Transport::Http))
        .await?;
    Ok(LaneDrain { approvals, drain })
}

/// One delivery as the slow sink recorded it (`GET /_sink/records`).
#[derive(Debug, Clone, Deserialize)]
struct SinkRecord {
    /// Arrival time, RFC 3339.
    at: chrono::DateTime<chrono::Utc>,
    /// The idempotency key: the alert's id.
    key: Option<String>,
}

/// The lane of one key at `destination` (delivering to `slow_sink`): approved, drained
/// and read back from the sink's records and the attempt rows.
async fn one_key_lane(
    run: &mut RunState<'_>,
    slow_sink: &OwnSink,
    destination: Uuid,
    lanes: &LaneSettings,
) -> anyhow::Result<OneKey> {
    let n = lanes.one_key_n;
    let http = reqwest::Client::new();
    http.post(slow_sink.reset_url())
        .send()
        .await?
        .error_for_status()?;
    run.approve_in_bulk_as(n, |workload, i| workload.keyed_alert(destination, i, 1))
        .await?;
    let drain = run
        .drain_checked_at(n, Dispatchers::InProcess(Transport::Http), slow_sink)
        .await?;
    let records: Vec<SinkRecord> = http
        .get(slow_sink.records_url())
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let ids = records
        .iter()
        .map(|r| {
            r.key
                .as_deref()
                .and_then(|key| key.parse::<Uuid>().ok())
                .ok_or_else(|| anyhow::anyhow!("a delivery without an alert id as its key"))
        })
        .collect::<anyhow::Result<Vec<Uuid>>>()?;
    anyhow::ensure!(
        ids.len() as u64 == n,
        "the slow sink recorded {} deliveries for {n} alerts",
        ids.len()
    );
    // In arrival order, the lane positions must rise.
    let places: HashMap<Uuid, Option<i64>> = crate::db::lane_positions(&run.pool, &ids)
        .await?
        .into_iter()
        .collect();
    let in_order = ids
        .iter()
        .map(|id| places.get(id).copied().flatten())
        .collect::<Option<Vec<i64>>>()
        .is_some_and(|seqs| seqs.windows(2).all(|w| w[0] < w[1]));
    anyhow::ensure!(
        in_order,
        "the one-key lane arrived out of its lane order (or an alert had no lane place)"
    );
    let latency = Duration::from_millis(lanes.sink_latency_ms);
    let arrivals: Vec<_> = records.iter().map(|r| r.at).collect();
    let idle = idle_after_answers(&arrivals, latency);
    let overlapping = idle.iter().filter(|gap| gap.is_none()).count();
    anyhow::ensure!(
        overlapping == 0,
        "{overlapping} deliveries of the one-key lane reached the sink before the one \
         before them was answered"
    );
    let idle: Vec<Duration> = idle.into_iter().flatten().collect();
    let times: HashMap<Uuid, (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)> =
        crate::db::send_times(&run.pool, &ids)
            .await?
            .into_iter()
            .map(|(id, started, finished)| (id, (started, finished)))
            .collect();
    let (to_recording, to_next_send) = recording_split(&ids, &arrivals, &times, latency);
    let span = arrivals
        .last()
        .zip(arrivals.first())
        .map(|(last, first)| (*last - *first).to_std().unwrap_or_default())
        .unwrap_or_default();
    let p = |values: &[Duration], q: f64| quantile(values, q).map(ms).unwrap_or_default();
    Ok(OneKey {
        n,
        latency_ms: ms(latency),
        drain,
        ideal_per_sec: 1.0 / latency.as_secs_f64(),
        sink_per_sec: (n.saturating_sub(1)) as f64 / span.as_secs_f64().max(f64::MIN_POSITIVE),
        idle_p50_ms: p(&idle, 0.5),
        idle_p99_ms: p(&idle, 0.99),
        idle_max_ms: p(&idle, 1.0),
        answer_to_recording_p50_ms: p(&to_recording, 0.5),
        recording_to_next_send_p50_ms: p(&to_next_send, 0.5),
    })
}

/// The destination's idle time after each answer of a lane delivered one at a time: for
/// each arrival but the last, the next arrival minus (this arrival plus the answer
/// delay). `None` where the next arrived before this one was answered (two in flight).
fn idle_after_answers(
    arrivals: &[chrono::DateTime<chrono::Utc>],
    latency: Duration,
) -> Vec<Option<Duration>> {
    arrivals
        .windows(2)
        .map(|w| (w[1] - w[0]).to_std().ok()?.checked_sub(latency))
        .collect()
}

/// For each delivery but the last (ids and arrivals in arrival order): the time from its
/// answer (arrival plus delay) to the start of the transaction that recorded it, and from
/// that start to the next send's start (the dispatcher's clock), as far as the clocks
/// (one machine's) put them in that order.
fn recording_split(
    ids: &[Uuid],
    arrivals: &[chrono::DateTime<chrono::Utc>],
    times: &HashMap<Uuid, (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)>,
    latency: Duration,
) -> (Vec<Duration>, Vec<Duration>) {
    let latency = chrono::Duration::from_std(latency).unwrap_or_default();
    let mut to_recording = Vec::new();
    let mut to_next_send = Vec::new();
    for (i, pair) in ids.windows(2).enumerate() {
        let (Some((_, recorded)), Some((next_started, _))) =
            (times.get(&pair[0]), times.get(&pair[1]))
        else {
            continue;
        };
        if let Ok(d) = (*recorded - (arrivals[i] + latency)).to_std() {
            to_recording.push(d);
        }
        if let Ok(d) = (*next_started - *recorded).to_std() {
            to_next_send.push(d);
        }
    }
    (to_recording, to_next_send)
}

/// The median of `values` (nearest rank; 0 when empty).
fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[values.len().div_ceil(2) - 1]
}

impl LanesReport {
    /// The figures as a plain-text table.
    pub fn render(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for LanesReport {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.settings;
        super::host::write_host_line(out, &self.host)?;
        writeln!(
            out,
            "ordered lanes: {} alerts per backlog over {} keys ({:.0} a lane), HTTP, 1 dispatcher in \
             process; {} round(s), unordered and per-key in alternating order",
            self.n,
            s.keys,
            self.n as f64 / s.keys.max(1) as f64,
            s.rounds
        )?;
        writeln!(
            out,
            "{:<7} {:<10} {:>13} {:>13} {:>6} {:>11} {:>11} {:>9} {:>9} {:>12} {:>12} {:>6}",
            "round",
            "first",
            "unord dlv/s",
            "per-key dlv/s",
            "ratio",
            "unord WAL B",
            "p-key WAL B",
            "unord rw",
            "p-key rw",
            "unord appr/s",
            "p-key appr/s",
            "ratio"
        )?;
        let row = |out: &mut fmt::Formatter<'_>,
                   name: &str,
                   first: &str,
                   u: [f64; 4],
                   p: [f64; 4]| {
            writeln!(
                out,
                "{:<7} {:<10} {:>13.0} {:>13.0} {:>6.2} {:>11.0} {:>11.0} {:>9.2} {:>9.2} {:>12.0} {:>12.0} {:>6.2}",
                name,
                first,
                u[0],
                p[0],
                p[0] / u[0].max(f64::MIN_POSITIVE),
                u[1],
                p[1],
                u[2],
                p[2],
                u[3],
                p[3],
                p[3] / u[3].max(f64::MIN_POSITIVE)
            )
        };
        let figures = |d: &LaneDrain| {
            [
                d.drain.deliveries_per_sec,
                d.wal_per_delivery(),
                d.drain.row_writes.total,
                d.approvals.per_sec,
            ]
        };
        for (i, r) in self.rounds.iter().enumerate() {
            let first = if r.per_key_first {
                "per-key"
            } else {
                "unordered"
            };
            row(
                out,
                &(i + 1).to_string(),
                first,
                figures(&r.unordered),
                figures(&r.per_key),
            )?;
        }
        if self.rounds.len() > 1 {
            let med =
                |pick: &dyn Fn(&LanesRound) -> f64| median(self.rounds.iter().map(pick).collect());
            let u: [f64; 4] = std::array::from_fn(|k| med(&|r| figures(&r.unordered)[k]));
            let p: [f64; 4] = std::array::from_fn(|k| med(&|r| figures(&r.per_key)[k]));
            row(out, "median", "", u, p)?;
            let ratio = |pick: &dyn Fn(&LanesRound) -> (f64, f64)| {
                median(
                    self.rounds
                        .iter()
                        .map(|r| {
                            let (a, b) = pick(r);
                            b / a.max(f64::MIN_POSITIVE)
                        })
                        .collect(),
                )
            };
            writeln!(
                out,
                "median of the rounds' ratios: deliveries {:.2}, approvals {:.2}",
                ratio(&|r| (
                    r.unordered.drain.deliveries_per_sec,
                    r.per_key.drain.deliveries_per_sec
                )),
                ratio(&|r| (r.unordered.approvals.per_sec, r.per_key.approvals.per_sec)),
            )?;
        }
        let wal_kind = match self.rounds.first() {
            Some(r) if r.per_key.drain.database_wal_bytes_per_delivery.is_some() => {
                "the benchmark database's own (pg_walinspect)"
            }
            _ => "cluster-wide",
        };
        writeln!(
            out,
            "WAL B: per delivery, {wal_kind}; rw: row writes per delivery; appr/s: bulk \
             approvals (5,000 per statement, two in flight)"
        )?;
        if let Some(last) = self.rounds.last() {
            writeln!(
                out,
                "row writes per delivery, last round: unordered {}; per-key {}",
                last.unordered.drain.row_writes.summary(),
                last.per_key.drain.row_writes.summary()
            )?;
            writeln!(
                out,
                "most rows in sending, last round: unordered {} / {}, per-key {} / {}",
                last.unordered.drain.max_sending,
                last.unordered.drain.sending_bound,
                last.per_key.drain.max_sending,
                last.per_key.drain.sending_bound
            )?;
        }
        if let Some(last) = self.rounds.last() {
            write_wal_by_record(out, &last.unordered.drain, &last.per_key.drain)?;
        }
        writeln!(
            out,
            "one key, sink answering after {} ms (ideal {:.0}/s): idle = destination idle after an answer until the next arrival",
            s.sink_latency_ms,
            1000.0 / s.sink_latency_ms.max(1) as f64
        )?;
        writeln!(
            out,
            "{:<7} {:>7} {:>11} {:>11} {:>9} {:>10} {:>10} {:>10} {:>14} {:>16} {:>12}",
            "round",
            "alerts",
            "drain dlv/s",
            "sink dlv/s",
            "of ideal",
            "idle p50",
            "idle p99",
            "idle max",
            "answer->rec",
            "rec->next send",
            "max sending"
        )?;
        for (i, r) in self.rounds.iter().enumerate() {
            let k = &r.one_key;
            writeln!(
                out,
                "{:<7} {:>7} {:>11.1} {:>11.1} {:>8.0}% {:>7.2} ms {:>7.2} ms {:>7.2} ms {:>11.2} ms {:>13.2} ms {:>12}",
                i + 1,
                k.n,
                k.drain.deliveries_per_sec,
                k.sink_per_sec,
                100.0 * k.sink_per_sec / k.ideal_per_sec.max(f64::MIN_POSITIVE),
                k.idle_p50_ms,
                k.idle_p99_ms,
                k.idle_max_ms,
                k.answer_to_recording_p50_ms,
                k.recording_to_next_send_p50_ms,
                k.drain.max_sending
            )?;
        }
        Ok(())
    }
}

/// The two drains' own WAL per delivery by kind of record and relation, side by side
/// (kinds under 5 B per delivery in both summed as `other`); nothing without
/// `pg_walinspect`.
fn write_wal_by_record(
    out: &mut fmt::Formatter<'_>,
    unordered: &DrainReport,
    per_key: &DrainReport,
) -> fmt::Result {
    if unordered.database_wal_by_record.is_empty() || per_key.database_wal_by_record.is_empty() {
        return Ok(());
    }
    // (record, relation) -> (unordered, per-key): (bytes, records) per delivery.
    let mut kinds: HashMap<(&str, &str), [(f64, f64); 2]> = HashMap::new();
    for (side, drain) in [unordered, per_key].into_iter().enumerate() {
        let n = drain.n.max(1) as f64;
        for share in &drain.database_wal_by_record {
            let entry = kinds
                .entry((share.record.as_str(), share.relation.as_str()))
                .or_default();
            entry[side] = (share.bytes as f64 / n, share.records as f64 / n);
        }
    }
    let mut kinds: Vec<_> = kinds.into_iter().collect();
    kinds.sort_by(|a, b| {
        (b.1[1].0 + b.1[0].0)
            .total_cmp(&(a.1[1].0 + a.1[0].0))
            .then(a.0.cmp(&b.0))
    });
    writeln!(
        out,
        "WAL per delivery by kind of record, last round: bytes (records) per delivery"
    )?;
    writeln!(
        out,
        "  {:<24} {:<30} {:>16} {:>16}",
        "record", "relation", "unordered", "per-key"
    )?;
    let mut other = [0.0_f64; 2];
    for ((record, relation), sides) in &kinds {
        if sides[0].0 < 5.0 && sides[1].0 < 5.0 {
            other[0] += sides[0].0;
            other[1] += sides[1].0;
            continue;
        }
        writeln!(
            out,
            "  {:<24} {:<30} {:>8.0} ({:>5.2}) {:>8.0} ({:>5.2})",
            record, relation, sides[0].0, sides[0].1, sides[1].0, sides[1].1
        )?;
    }
    writeln!(
        out,
        "  {:<24} {:<30} {:>8.0}         {:>8.0}",
        "other", "", other[0], other[1]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::<Utc>::UNIX_EPOCH + chrono::Duration::microseconds(ms * 1000)
    }

    #[test]
    fn idle_time_is_what_follows_each_answer() {
        let arrivals = [at(0), at(7), at(12), at(15)];
        let idle = idle_after_answers(&arrivals, Duration::from_millis(5));
        assert_eq!(
            idle,
            vec![
                Some(Duration::from_millis(2)),
                Some(Duration::ZERO),
                // Arrived 3 ms after the one before, which was answered after 5: two in
                // flight.
                None,
            ]
        );
    }

    #[test]
    fn the_idle_time_splits_at_the_recording() {
        let ids = [Uuid::from_u128(1), Uuid::from_u128(2)];
        let arrivals = [at(0), at(9)];
        let times = HashMap::from([(ids[0], (at(-1), at(6))), (ids[1], (at(8), at(15)))]);
        let (to_recording, to_next_send) =
            recording_split(&ids, &arrivals, &times, Duration::from_millis(5));
        assert_eq!(to_recording, vec![Duration::from_millis(1)]);
        assert_eq!(to_next_send, vec![Duration::from_millis(2)]);
    }

    #[test]
    fn the_median_is_the_nearest_rank() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.0);
        assert_eq!(median(Vec::new()), 0.0);
    }
}
