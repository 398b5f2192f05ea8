//! The bound on password checks running at once in a process.
//!
//! An argon2id check at the default cost fills 19 MiB of memory and keeps a core busy for
//! tens of milliseconds. The failure limits bound guesses per name and per address, not how
//! many checks run together: sign-ins sent at once from many addresses would each start
//! theirs, growing the process by gigabytes (kept by the allocator afterwards) and taking
//! the cores from the approvals the same process serves. So a check first takes a permit
//! (`max` of them; a sign-in waits at most `wait` for one, then is turned away with 503),
//! runs on a blocking thread with its permit, and hashes in a memory block kept with the
//! permits: the checks' memory is at most `max` blocks, allocated once, never given back
//! and taken again. The figures (checks running, sign-ins turned away) are in `/metrics`.

use argon2::password_hash::{Output, PasswordHash};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use std::fmt::Write as _;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The permits, the memory kept with them, and their figures.
#[derive(Debug)]
pub struct PasswordChecks {
    permits: Arc<Semaphore>,
    max: usize,
    wait: Duration,
    /// Memory blocks of checks that finished, for the next ones (never more than `max`).
    memory: Mutex<Vec<Vec<Block>>>,
    running: AtomicU64,
    turned_away: AtomicU64,
}

impl PasswordChecks {
    /// At most `max` checks at once; a sign-in waits at most `wait` for its turn.
    pub fn new(max: NonZeroUsize, wait: Duration) -> Arc<Self> {
        Arc::new(PasswordChecks {
            permits: Arc::new(Semaphore::new(max.get())),
            max: max.get(),
            wait,
            memory: Mutex::new(Vec::new()),
            running: AtomicU64::new(0),
            turned_away: AtomicU64::new(0),
        })
    }

    /// One check per core (more would only queue for the cores), with a short wait.
    pub fn per_core() -> Arc<Self> {
        let cores = std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN);
        Self::new(cores, DEFAULT_WAIT)
    }

    /// Waits (at most the configured wait) for a turn to check a password; `None` when
    /// every permit stayed taken, which is counted.
    pub(crate) async fn turn(self: &Arc<Self>) -> Option<Turn> {
        let acquired = tokio::time::timeout(self.wait, self.permits.clone().acquire_owned()).await;
        let Ok(Ok(permit)) = acquired else {
            self.turned_away.fetch_add(1, Relaxed);
            return None;
        };
        self.running.fetch_add(1, Relaxed);
        let memory = self
            .memory
            .lock()
            .map(|mut kept| kept.pop())
            .unwrap_or_default()
            .unwrap_or_default();
        Some(Turn {
            checks: Arc::clone(self),
            memory,
            _permit: permit,
        })
    }

    /// Checks running now.
    pub fn running(&self) -> u64 {
        self.running.load(Relaxed)
    }

    /// Sign-ins turned away so far because no check could start within the wait.
    pub fn turned_away(&self) -> u64 {
        self.turned_away.load(Relaxed)
    }
}

/// How long a sign-in waits for a check by default: a few checks' time.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(3);

impl outbox_runtime::prometheus::Figures for PasswordChecks {
    fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP outbox_console_password_checks_running Console password checks running now."
        );
        let _ = writeln!(out, "# TYPE outbox_console_password_checks_running gauge");
        let _ = writeln!(
            out,
            "outbox_console_password_checks_running {}",
            self.running()
        );
        let _ = writeln!(
            out,
            "# HELP outbox_console_password_checks_max Console password checks allowed at once."
        );
        let _ = writeln!(out, "# TYPE outbox_console_password_checks_max gauge");
        let _ = writeln!(out, "outbox_console_password_checks_max {}", self.max);
        let _ = writeln!(
            out,
            "# HELP outbox_console_sign_ins_turned_away_total Console sign-ins answered 503 \
             because no password check could start within the wait."
        );
        let _ = writeln!(
            out,
            "# TYPE outbox_console_sign_ins_turned_away_total counter"
        );
        let _ = writeln!(
            out,
            "outbox_console_sign_ins_turned_away_total {}",
            self.turned_away()
        );
    }
}

/// A turn to check one password: a permit and a memory block, both given back when the
/// check ends (also when the sign-in that asked for it went away meanwhile: the check
/// holds them, not the request).
#[derive(Debug)]
pub(crate) struct Turn {
    checks: Arc<PasswordChecks>,
    memory: Vec<Block>,
    _permit: OwnedSemaphorePermit,
}

impl Turn {
    /// Whether `password` matches `stored` (an argon2 PHC string; anything else matches
    /// nothing), checked on a blocking thread.
    pub(crate) async fn check(mut self, password: String, stored: String) -> bool {
        tokio::task::spawn_blocking(move || matches_in(&mut self.memory, &password, &stored))
            .await
            .unwrap_or(false)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.checks.running.fetch_sub(1, Relaxed);
        let memory = std::mem::take(&mut self.memory);
        if !memory.is_empty() {
            if let Ok(mut kept) = self.checks.memory.lock() {
                kept.push(memory);
            }
        }
    }
}

/// Most memory blocks (1 KiB each) a stored hash may ask for: 64 MiB, above the 19 MiB of
/// the hashes `hash_password` makes. A hash asking for more matches nothing, so a row
/// written by other means cannot make every permit's memory grow without bound.
const MAX_BLOCKS: usize = 64 * 1024;

/// `argon2`'s own verification, with the memory given instead of allocated.
pub(crate) fn matches_in(memory: &mut Vec<Block>, password: &str, stored: &str) -> bool {
    let Ok(hash) = PasswordHash::new(stored) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (hash.salt, hash.hash) else {
        return false;
    };
    let (Ok(algorithm), Ok(params)) =
        (Algorithm::try_from(hash.algorithm), Params::try_from(&hash))
    else {
        return false;
    };
    let version = match hash.version.map(Version::try_from).transpose() {
        Ok(version) => version.unwrap_or_default(),
        Err(_) => return false,
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    let blocks = params.block_count();
    if blocks > MAX_BLOCKS {
        return false;
    }
    if memory.len() < blocks {
        memory.resize(blocks, Block::default());
    }
    let mut computed = vec![0u8; expected.len()];
    let hashed = Argon2::new(algorithm, version, params).hash_password_into_with_memory(
        password.as_bytes(),
        salt,
        &mut computed,
        &mut memory[..blocks],
    );
    // `Output`'s comparison is in constant time.
    hashed.is_ok() && Output::new(&computed).is_ok_and(|computed| computed == expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_in_kept_memory_agrees_with_argon2s_own() {
        let password = outbox_core::password::new_password();
        let hash = outbox_core::password::hash_password(&password).expect("hash");
        let mut memory = Vec::new();
        assert!(matches_in(&mut memory, &password, &hash));
        let size = memory.len();
        assert_eq!(size, 19 * 1024, "one block per KiB of the default cost");
        // Memory used before (filled with another check's state) gives the same answers.
        assert!(!matches_in(&mut memory, "wrong", &hash));
        assert!(matches_in(&mut memory, &password, &hash));
        assert_eq!(memory.len(), size, "the memory does not grow");
        assert!(!matches_in(&mut memory, &password, "not a hash"));
        let greedy = hash.replace("m=19456", "m=1048576");
        assert!(!matches_in(&mut memory, &password, &greedy));
        assert_eq!(memory.len(), size);
    }

    #[tokio::test]
    async fn turns_are_bounded_and_a_sign_in_past_the_wait_is_counted() {
        let checks = PasswordChecks::new(NonZeroUsize::MIN, Duration::from_millis(50));
        let first = checks.turn().await.expect("a free permit");
        assert_eq!(checks.running(), 1);
        assert!(checks.turn().await.is_none(), "the only permit is taken");
        assert_eq!(checks.turned_away(), 1);
        drop(first);
        assert_eq!(checks.running(), 0);
        let again = checks.turn().await.expect("the permit came back");
        let hash = outbox_core::password::hash_password("pw").expect("hash");
        assert!(again.check("pw".into(), hash).await);
        let mut figures = String::new();
        outbox_runtime::prometheus::Figures::render(&*checks, &mut figures);
        assert!(figures.contains("outbox_console_password_checks_running 0"));
        assert!(figures.contains("outbox_console_sign_ins_turned_away_total 1"));
        assert_eq!(
            checks.memory.lock().expect("lock").len(),
            1,
            "the block is kept"
        );
    }
}
