//! The evidence chain's cost (`bench run --only evidence`), on a database of its own: the
//! same backlog approved in bulk and drained over HTTP with the chain's triggers switched
//! off and on, side by side in one run, rounds alternating which goes first. After each
//! drain with the chain on, one checkpoint over what it chained is made and timed.
//!
//! Switching the chain off (`db::set_evidence_chain`) takes it off the delivery path:
//! outbox rows are queued without a chain head, so completions link nothing, and the
//! chain's triggers are disabled; attempt rows are written as before, without a hash or
//! a position. An approval's first line is linked by the approving statement itself
//! either way, so both backlogs' approvals are linked (the unchained one also pays for the
//! benchmark's trigger that clears the head): only the deliveries' figures are the
//! chain's cost.

use serde::Serialize;
use std::collections::HashMap;
use std::fmt;

use super::lanes::LaneDrain;
use super::run_state::RunState;
use super::settings::SuiteSettings;
use crate::dispatchers::Dispatchers;
use crate::own_sink::OwnSink;
use crate::progress;
use crate::scratch::on_own_database;
use outbox_dispatcher::Transport;

/// What the phase measured.
#[derive(Debug, Clone, Serialize)]
pub struct EvidenceReport {
    /// Alerts per drain.
    pub n: u64,
    /// The machine: cores, PostgreSQL version, `synchronous_commit`.
    pub host: HashMap<String, String>,
    /// Each round, in order.
    pub rounds: Vec<EvidenceRound>,
}

/// One round: the backlog without the chain and with it, and the checkpoint after it.
#[derive(Debug, Clone, Serialize)]
pub struct EvidenceRound {
    /// Whether the chained backlog went first.
    pub chained_first: bool,
    /// Without the chain.
    pub off: LaneDrain,
    /// With it.
    pub on: LaneDrain,
    /// The checkpoint over the chained backlog: heads in its tree, and milliseconds.
    pub checkpoint_heads: usize,
    /// See `checkpoint_heads`.
    pub checkpoint_ms: f64,
}

/// The phase alone, on a database and a sink of its own.
pub async fn run_evidence(settings: SuiteSettings) -> anyhow::Result<EvidenceReport> {
    let sink = OwnSink::start()?;
    let sink = &sink;
    let settings = &settings;
    on_own_database(&settings.server_url, |url| async move {
        evidence_on(settings, sink, &url).await
    })
    .await
}

async fn evidence_on(
    settings: &SuiteSettings,
    sink: &OwnSink,
    url: &str,
) -> anyhow::Result<EvidenceReport> {
    let mut run = RunState::prepare(settings, sink, url).await?;
    let host = super::host::host_facts(&run.pool).await?;
    let mut rounds = Vec::new();
    for round in 0..settings.lanes.rounds {
        let chained_first = round % 2 == 1;
        let mut off = None;
        let mut on = None;
        let mut checkpoint = (0, 0.0);
        for chained in [chained_first, !chained_first] {
            progress(&format!(
                "evidence, round {}: {} alerts, chain {}",
                round + 1,
                settings.n,
                if chained { "on" } else { "off" }
            ));
            crate::db::set_evidence_chain(&run.pool, chained).await?;
            let drained = backlog(&mut run).await?;
            if chained {
                let started = std::time::Instant::now();
                let made = outbox_evidence::checkpoint::make_checkpoint(
                    &run.pool,
                    None,
                    &mut outbox_evidence::checkpoint::Memory::default(),
                )
                .await?;
                let heads = made.map(|m| m.size).unwrap_or(0);
                checkpoint = (heads, started.elapsed().as_secs_f64() * 1000.0);
                on = Some(drained);
            } else {
                off = Some(drained);
            }
        }
        rounds.push(EvidenceRound {
            chained_first,
            off: off.ok_or_else(|| anyhow::anyhow!("no drain without the chain"))?,
            on: on.ok_or_else(|| anyhow::anyhow!("no drain with the chain"))?,
            checkpoint_heads: checkpoint.0,
            checkpoint_ms: checkpoint.1,
        });
    }
    crate::db::set_evidence_chain(&run.pool, true).await?;
    run.finish().await?;
    Ok(EvidenceReport {
        n: settings.n,
        host,
        rounds,
    })
}

/// N alerts approved in bulk to the run's destination (timed), then drained over HTTP by
/// one dispatcher in this process, and checked.
async fn backlog(run: &mut RunState<'_>) -> anyhow::Result<LaneDrain> {
    let n = run.settings.n;
    let approvals = run
        .approve_in_bulk_as(n, |workload, i| workload.alert(i))
        .await?;
    let drain = run
        .drain_checked(n, Dispatchers::InProcess(Transport::Http))
        .await?;
    Ok(LaneDrain { approvals, drain })
}

impl EvidenceReport {
    /// The report as text.
    pub fn render(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for EvidenceReport {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        super::host::write_host_line(out, &self.host)?;
        writeln!(
            out,
            "evidence chain: {} alerts per backlog, HTTP, 1 dispatcher in process; {} \
             round(s), chain off and on in alternating order",
            self.n,
            self.rounds.len()
        )?;
        writeln!(
            out,
            "{:<6} {:<6} {:>11} {:>11} {:>6} {:>10} {:>10} {:>11} {:>11} {:>6} {:>14}",
            "round",
            "first",
            "off dlv/s",
            "on dlv/s",
            "ratio",
            "off WAL B",
            "on WAL B",
            "off appr/s",
            "on appr/s",
            "ratio",
            "checkpoint ms"
        )?;
        for (i, r) in self.rounds.iter().enumerate() {
            let (off, on) = (&r.off, &r.on);
            writeln!(
                out,
                "{:<6} {:<6} {:>11.0} {:>11.0} {:>6.2} {:>10.0} {:>10.0} {:>11.0} {:>11.0} {:>6.2} {:>14}",
                i + 1,
                if r.chained_first { "on" } else { "off" },
                off.drain.deliveries_per_sec,
                on.drain.deliveries_per_sec,
                on.drain.deliveries_per_sec / off.drain.deliveries_per_sec.max(f64::MIN_POSITIVE),
                off.wal_per_delivery(),
                on.wal_per_delivery(),
                off.approvals.per_sec,
                on.approvals.per_sec,
                on.approvals.per_sec / off.approvals.per_sec.max(f64::MIN_POSITIVE),
                format!("{:.0} ({} heads)", r.checkpoint_ms, r.checkpoint_heads)
            )?;
        }
        if let Some(last) = self.rounds.last() {
            writeln!(
                out,
                "WAL by record, last round, chain on (bytes per delivery):"
            )?;
            let n = last.on.drain.n.max(1) as f64;
            for share in last.on.drain.database_wal_by_record.iter().take(12) {
                writeln!(out, "  {share:?} / {n}")?;
            }
        }
        Ok(())
    }
}
