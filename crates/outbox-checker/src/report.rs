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

/// The counts of one run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The run's seed, printed with the table.
    pub seed: u64,
    /// Committed alerts.
    pub alerts: usize,
    /// Not accepted, failed, held or superseded.
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
        let rows: [(&str, usize); 7] = [
            ("lost", self.lost),
            ("logical duplicates", self.logical_duplicates),
            ("partial commits", self.partial_commits),
            ("unexpected", self.unexpected),
            ("mutated retries", self.mutated_retries),
            ("unresolved uncertain", self.unresolved_uncertain),
            ("phantom acceptances", self.phantom_acceptances),
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
        writeln!(
            f,
            "  {:<36} {}",
            "verdict",
            if self.passed() { "pass" } else { "FAIL" }
        )
    }
}
