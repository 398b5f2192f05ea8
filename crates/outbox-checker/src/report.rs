//! The verdict of one run: the counts, the offences behind them, and the table they print
//! as.

use std::fmt;
use uuid::Uuid;

/// A broken invariant, with what is needed to understand it.
#[derive(Debug, Clone)]
pub struct Offence {
    /// Which count it adds to.
    pub kind: &'static str,
    /// The alert, when there is one.
    pub alert_id: Option<Uuid>,
    /// What is wrong.
    pub detail: String,
}

/// One ordered destination's lanes at the end of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaneFigures {
    /// The destination's name.
    pub destination: String,
    /// Its lanes (ordering keys) with a committed alert.
    pub lanes: usize,
    /// The alerts in them.
    pub alerts: usize,
    /// The alerts in the longest of them.
    pub deepest: usize,
    /// Those recorded as accepted.
    pub accepted: usize,
    /// Those accepted in the destination's log, whose order was judged.
    pub judged: usize,
    /// Lanes whose head is held, or failed and not skipped: blocked until an operator
    /// acts.
    pub blocked_heads: usize,
    /// Those whose head is held (the rest failed).
    pub held_heads: usize,
    /// Alerts waiting behind those heads.
    pub waiting: usize,
}

/// The counts of one run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The run's seed, printed with the table.
    pub seed: u64,
    /// Committed alerts.
    pub alerts: usize,
    /// Not accepted, failed, held or superseded (nor waiting behind a blocked head).
    pub lost: usize,
    /// Alerts beyond the first per identity and revision.
    pub logical_duplicates: usize,
    /// Alerts whose queue row, outcome or approval evidence is inconsistent.
    pub partial_commits: usize,
    /// Keys seen by a sink that no committed alert has.
    pub unexpected: usize,
    /// Keys seen with a payload other than the committed one.
    pub mutated_retries: usize,
    /// Keys applied more than once, per sink.
    pub effective_duplicates: Vec<(String, usize)>,
    /// Keys absorbed as duplicates, per sink.
    pub wire_duplicates: Vec<(String, usize)>,
    /// Alerts still uncertain.
    pub unresolved_uncertain: usize,
    /// Alerts recorded as accepted that their sink never applied.
    pub phantom_acceptances: usize,
    /// Messages in each SMTP inbox, to show the email destinations were exercised.
    pub inbox_messages: Vec<(String, usize)>,
    /// Alerts of an ordered lane first accepted at their destination before an alert
    /// approved ahead of them in the lane, or that went past one ahead of them that was
    /// never released.
    pub out_of_order: usize,
    /// Alerts waiting in their lane behind a held or failed head that blocks it: correct,
    /// so not lost.
    pub waiting_behind_blocked_heads: usize,
    /// Each ordered destination's lanes, to show they were exercised.
    pub ordered: Vec<LaneFigures>,
    /// Everything that breaks the rules above.
    pub offences: Vec<Offence>,
}

impl Report {
    /// Whether the run passed.
    pub fn passed(&self) -> bool {
        self.offences.is_empty()
    }

    /// Records an offence of `kind` (the caller adds to its count, if it has one).
    pub(crate) fn offend(&mut self, kind: &'static str, alert_id: Option<Uuid>, detail: String) {
        self.offences.push(Offence {
            kind,
            alert_id,
            detail,
        });
    }

    /// A key or message that belongs to no committed alert.
    pub(crate) fn count_unexpected(&mut self, detail: String) {
        self.unexpected += 1;
        self.offend("unexpected", None, detail);
    }

    /// A delivery of `alert` whose bytes differ from the committed ones.
    pub(crate) fn count_mutated_retry(&mut self, alert: Uuid, detail: String) {
        self.mutated_retries += 1;
        self.offend("mutated retry", Some(alert), detail);
    }

    /// `alert` recorded as accepted, but never applied where it was sent.
    pub(crate) fn count_phantom_acceptance(&mut self, alert: Uuid, detail: String) {
        self.phantom_acceptances += 1;
        self.offend("phantom acceptance", Some(alert), detail);
    }

    /// `alert` first accepted before an alert ahead of it in its lane, or sent past one
    /// never released.
    pub(crate) fn count_out_of_order(&mut self, alert: Uuid, detail: String) {
        self.out_of_order += 1;
        self.offend("out of order", Some(alert), detail);
    }

    /// The duplicates one destination showed: `effective` (applied again) and `wire`
    /// (absorbed by the destination).
    pub(crate) fn tally(&mut self, destination: &str, effective: usize, wire: usize) {
        self.effective_duplicates
            .push((destination.to_owned(), effective));
        self.wire_duplicates.push((destination.to_owned(), wire));
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {}: {} committed alerts", self.seed, self.alerts)?;
        let rows: [(&str, usize); 9] = [
            ("lost", self.lost),
            (
                "waiting behind blocked heads",
                self.waiting_behind_blocked_heads,
            ),
            ("logical duplicates", self.logical_duplicates),
            ("partial commits", self.partial_commits),
            ("unexpected", self.unexpected),
            ("mutated retries", self.mutated_retries),
            ("unresolved uncertain", self.unresolved_uncertain),
            ("phantom acceptances", self.phantom_acceptances),
            ("out of order", self.out_of_order),
        ];
        for (name, n) in rows {
            writeln!(f, "  {name:<36} {n}")?;
        }
        for ((sink, effective), (_, wire)) in
            self.effective_duplicates.iter().zip(&self.wire_duplicates)
        {
            writeln!(
                f,
                "  {:<36} {effective}",
                format!("effective duplicates at {sink}")
            )?;
            writeln!(f, "  {:<36} {wire}", format!("wire duplicates at {sink}"))?;
        }
        for (inbox, messages) in &self.inbox_messages {
            writeln!(
                f,
                "  {:<36} {messages}",
                format!("messages in inbox {inbox}")
            )?;
        }
        for lanes in &self.ordered {
            writeln!(
                f,
                "  {:<36} {} keys, {} alerts (up to {} a key): {} accepted ({} judged in order), {} blocked heads ({} held), {} waiting",
                format!("lanes at {}", lanes.destination),
                lanes.lanes,
                lanes.alerts,
                lanes.deepest,
                lanes.accepted,
                lanes.judged,
                lanes.blocked_heads,
                lanes.held_heads,
                lanes.waiting
            )?;
        }
        writeln!(
            f,
            "  {:<36} {}",
            "verdict",
            if self.passed() { "pass" } else { "FAIL" }
        )
    }
}
