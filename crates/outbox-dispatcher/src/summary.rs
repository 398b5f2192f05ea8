//! What a run did: the [`RunSummary`] it returns, counted from each claim's [`Outcome`].

/// What a run did, for logs and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct RunSummary {
    /// Rows claimed.
    pub claimed: u64,
    /// Completions recorded.
    pub recorded: u64,
    /// Completions refused because the claim had been taken over (fencing).
    pub stale: u64,
    /// Claims given back unsent.
    pub released: u64,
}

/// What became of one claim, for the summary.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome {
    Recorded,
    Stale,
    Released,
    Failed,
}

impl RunSummary {
    pub(crate) fn add(&mut self, joined: Result<Outcome, tokio::task::JoinError>) {
        match joined {
            Ok(Outcome::Recorded) => self.recorded += 1,
            Ok(Outcome::Stale) => self.stale += 1,
            Ok(Outcome::Released) => self.released += 1,
            Ok(Outcome::Failed) | Err(_) => {}
        }
    }
}
