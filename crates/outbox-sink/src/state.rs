//! The sink's memory: its configuration and, behind one lock, the faults, the records, the
//! counters and the seeded random generator of the fault draws. What a delivery gets is
//! decided in `deliveries`, what a message received over SMTP gets in `inbox`; both run
//! synchronously under the one lock, so the fault draws happen in the order requests
//! arrive and a seed reproduces a run.

pub(crate) mod deliveries;
pub(crate) mod inbox;

use hyper::header::HeaderName;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use crate::config::SinkArgs;
use crate::faults::{FaultPatch, FaultSettings};
use crate::records::{MailRecord, Record, SmtpStats, Stats};

/// The sink: its configuration and, behind one lock, faults, records, counters and the
/// seeded random generator of the fault draws.
#[derive(Debug)]
pub struct Sink {
    idempotency_header: HeaderName,
    retention: Option<Duration>,
    lookup: bool,
    keys: Vec<Vec<u8>>,
    timestamp_tolerance: Duration,
    seed: u64,
    smtp: bool,
    eml: bool,
    keep_bodies: bool,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    faults: FaultSettings,
    rng: StdRng,
    records: Vec<Record>,
    stats: Stats,
    /// Latest application of each key.
    applied: HashMap<String, Applied>,
    /// Receipts are never reused, not even after a reset: the outside world stores them.
    last_receipt: u64,
    /// Messages accepted over SMTP, in arrival order.
    messages: Vec<MailRecord>,
    smtp_stats: SmtpStats,
    /// Message-IDs in `messages`.
    message_ids: HashSet<String>,
    /// Queue ids, like receipts, are never reused.
    last_queue_id: u64,
}

#[derive(Debug)]
struct Applied {
    receipt: String,
    at: Instant,
}

impl Sink {
    /// A sink configured by `args`, with nothing recorded yet; its `/stats` count SMTP
    /// messages when `--smtp-listen` is given.
    pub fn new(args: &SinkArgs) -> Self {
        Self::with_smtp(args, args.smtp_listen.is_some())
    }

    /// A sink configured by `args` whose `/stats` count SMTP messages when `smtp` is true
    /// (the caller serves SMTP on a listener of its own).
    pub fn with_smtp(args: &SinkArgs, smtp: bool) -> Self {
        // Without a seed one is drawn anyway, so that it can be logged and a run replayed.
        let seed = args.seed.unwrap_or_else(rand::random);
        Sink {
            idempotency_header: args.idempotency_header.clone(),
            retention: args.retention,
            lookup: args.lookup,
            keys: args.secrets.iter().map(|s| s.key().to_vec()).collect(),
            timestamp_tolerance: args.timestamp_tolerance,
            seed,
            smtp,
            eml: args.eml_dir.is_some(),
            keep_bodies: args.keep_bodies,
            inner: Mutex::new(Inner {
                faults: FaultSettings::from_args(args),
                rng: StdRng::seed_from_u64(seed),
                records: Vec::new(),
                stats: Stats::default(),
                applied: HashMap::new(),
                last_receipt: 0,
                messages: Vec::new(),
                smtp_stats: SmtpStats::default(),
                message_ids: HashSet::new(),
                last_queue_id: 0,
            }),
        }
    }

    /// The seed of the fault draws.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Whether `GET /requests/{key}` is answered.
    pub fn lookup_enabled(&self) -> bool {
        self.lookup
    }

    /// Counters since start or the last reset.
    pub fn stats(&self) -> Stats {
        let inner = self.lock();
        Stats {
            distinct_keys: inner.applied.len() as u64,
            smtp: self.smtp.then(|| SmtpStats {
                distinct_message_ids: inner.message_ids.len() as u64,
                ..inner.smtp_stats.clone()
            }),
            ..inner.stats.clone()
        }
    }

    /// Records in arrival order, only those with idempotency key `key` when given.
    pub fn records(&self, key: Option<&str>) -> Vec<Record> {
        self.lock()
            .records
            .iter()
            .filter(|r| key.is_none_or(|k| r.key.as_deref() == Some(k)))
            .cloned()
            .collect()
    }

    /// The receipt of the latest application of `key`, if it was ever applied.
    pub fn receipt_of(&self, key: &str) -> Option<String> {
        self.lock().applied.get(key).map(|a| a.receipt.clone())
    }

    /// The current faults.
    pub fn faults(&self) -> FaultSettings {
        self.lock().faults.clone()
    }

    /// Changes the faults; on error nothing changes.
    pub(crate) fn patch_faults(&self, patch: FaultPatch) -> Result<FaultSettings, String> {
        let mut inner = self.lock();
        inner.faults.apply(patch)?;
        Ok(inner.faults.clone())
    }

    /// Turns every fault off.
    pub fn clear_faults(&self) -> FaultSettings {
        let mut inner = self.lock();
        inner.faults.clear();
        inner.faults.clone()
    }

    /// Forgets records, messages, counters and applied keys. Faults, the random sequence,
    /// the receipt and queue id numbering carry on.
    pub fn reset(&self) {
        let mut inner = self.lock();
        inner.records.clear();
        inner.stats = Stats::default();
        inner.applied.clear();
        inner.messages.clear();
        inner.smtp_stats = SmtpStats::default();
        inner.message_ids.clear();
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind, still worth serving.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// True with probability `rate`. A zero rate draws nothing, so turning a fault off does not
/// shift the sequence of the others.
fn draw(rng: &mut StdRng, rate: f64) -> bool {
    rate > 0.0 && rng.random::<f64>() < rate
}

/// The time now, RFC 3339 with microseconds, as records show it.
fn now_rfc3339() -> String {
    humantime::format_rfc3339_micros(SystemTime::now()).to_string()
}

/// Hex SHA-256 of `body`.
pub(crate) fn sha256_hex(body: &[u8]) -> String {
    use std::fmt::Write;
    Sha256::digest(body)
        .iter()
        .fold(String::with_capacity(64), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// A sink configured by these flags.
    pub(super) fn sink(flags: &[&str]) -> Sink {
        Sink::new(&SinkArgs::parse_from(
            std::iter::once("sink").chain(flags.iter().copied()),
        ))
    }

    #[test]
    fn smtp_stats_appear_only_with_smtp() {
        assert_eq!(sink(&[]).stats().smtp, None);
        assert!(sink(&["--smtp-listen", "127.0.0.1:2525"])
            .stats()
            .smtp
            .is_some());
    }

    #[test]
    fn hashes_bodies_in_hex() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
