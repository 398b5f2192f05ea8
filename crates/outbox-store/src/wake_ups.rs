//! Wake-ups: an approval tells idle dispatchers that work may be due (`NOTIFY` on
//! [`WAKE_UP_CHANNEL`]), without flooding PostgreSQL under a stream of approvals
//! ([`WakeUpNotifier`], with its adaptive [`WakeUpWindow`]); a dispatcher waits for them
//! ([`listen`], [`WakeUps`]) besides polling.

use sqlx::{PgExecutor, PgPool};
use std::time::Duration;

use crate::StoreError;

/// The channel dispatchers LISTEN on and deciders NOTIFY after approving.
pub const WAKE_UP_CHANNEL: &str = "outbox_due";

/// Wakes listening dispatchers: new work may be due.
pub async fn notify_due(db: impl PgExecutor<'_>) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(WAKE_UP_CHANNEL)
        .execute(db)
        .await?;
    Ok(())
}

/// Sends wake-ups after approvals without flooding PostgreSQL: the first approval of a
/// burst notifies at once, inside its own transaction when it asks first
/// ([`notify_inline`](Self::notify_inline)), so an idle system wakes on the commit; later
/// ones inside the window that follows are folded into one trailing notification at its
/// end. The window adapts ([`WakeUpWindow`]).
#[derive(Debug, Clone)]
pub struct WakeUpNotifier {
    pool: PgPool,
    window: std::sync::Arc<std::sync::Mutex<WakeUpWindow>>,
}

impl WakeUpNotifier {
    /// A notifier on `pool`.
    pub fn new(pool: PgPool) -> Self {
        WakeUpNotifier {
            pool,
            window: std::sync::Arc::new(std::sync::Mutex::new(WakeUpWindow::default())),
        }
    }

    /// Says that new work is due. Never blocks; a failed notification only costs latency
    /// (dispatchers also poll).
    pub fn poke(&self) {
        if self.lock().poke() {
            self.run_window(true);
        }
    }

    /// For an approval about to be written: whether its own transaction should carry the
    /// wake-up, delivered on its commit with no round trip of its own. True when no
    /// notification went out in the last window, which this then opens; false when one
    /// did, and the caller then [`poke`](Self::poke)s after its commit, which folds into
    /// the window's trailing notification. PostgreSQL serialises the commits of notifying
    /// transactions, so under load most approvals must not carry one.
    pub fn notify_inline(&self) -> bool {
        let opened = self.lock().open_inline();
        if opened {
            self.run_window(false);
        }
        opened
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WakeUpWindow> {
        self.window.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notifies (at once when `notify_first`), then at the end of each window again while
    /// pokes came in during it.
    fn run_window(&self, notify_first: bool) {
        let notifier = self.clone();
        tokio::spawn(async move {
            let mut notify = notify_first;
            let mut window = notifier.lock().length();
            loop {
                if notify {
                    if let Err(err) = notify_due(&notifier.pool).await {
                        tracing::debug!(error = %err, "wake-up notification failed");
                    }
                }
                tokio::time::sleep(window).await;
                match notifier.lock().close() {
                    Some(next) => {
                        window = next;
                        notify = true;
                    }
                    None => return,
                }
            }
        });
    }
}

/// When [`WakeUpNotifier`] notifies: the state of its window, apart from the clock and
/// the database.
///
/// The window starts at [`MIN`](Self::MIN), so a trickle of approvals a few milliseconds
/// apart is woken for at once, and doubles after each window that folded approvals, up to
/// [`MAX`](Self::MAX), so a steady stream sends at most one notification per 10 ms; a
/// window without approvals ends the burst and the length starts over. PostgreSQL
/// serialises the commits of notifying transactions, which is why there is a window at
/// all. With a fixed 10 ms window, a trickle waited up to 10 ms for its wake-up (idle
/// approval-to-claim p50 8.4 ms in `bench run`; 2.4 ms with this).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeUpWindow {
    phase: WindowPhase,
    length: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WindowPhase {
    /// No window open: the next approval notifies at once.
    Idle,
    /// A window is open and nothing has been folded into it yet.
    Open,
    /// A window is open and owes a trailing notification at its end.
    Owed,
}

impl Default for WakeUpWindow {
    fn default() -> Self {
        WakeUpWindow {
            phase: WindowPhase::Idle,
            length: Self::MIN,
        }
    }
}

impl WakeUpWindow {
    /// The first window of a burst.
    pub const MIN: Duration = Duration::from_millis(1);
    /// The longest window, reached under a steady stream of approvals.
    pub const MAX: Duration = Duration::from_millis(10);

    /// The length of the window open now (or of the next one).
    pub fn length(&self) -> Duration {
        self.length
    }

    /// An approval asks to carry the notification in its own transaction: granted (and a
    /// window opened) only when no window is open.
    pub fn open_inline(&mut self) -> bool {
        if self.phase != WindowPhase::Idle {
            return false;
        }
        self.phase = WindowPhase::Open;
        true
    }

    /// New work is due: true when this opens a window, whose opener notifies at once;
    /// false when it folds into the open window's trailing notification.
    pub fn poke(&mut self) -> bool {
        if self.phase == WindowPhase::Idle {
            self.phase = WindowPhase::Open;
            true
        } else {
            self.phase = WindowPhase::Owed;
            false
        }
    }

    /// The open window has ended. `Some(next)`: notify now and keep a window of `next`
    /// open; `None`: nothing was folded into it, the burst is over.
    pub fn close(&mut self) -> Option<Duration> {
        if self.phase == WindowPhase::Owed {
            self.phase = WindowPhase::Open;
            self.length = (self.length * 2).min(Self::MAX);
            Some(self.length)
        } else {
            self.phase = WindowPhase::Idle;
            self.length = Self::MIN;
            None
        }
    }
}

/// A subscription to wake-ups on [`WAKE_UP_CHANNEL`].
#[derive(Debug)]
pub struct WakeUps(sqlx::postgres::PgListener);

/// Subscribes to wake-ups.
pub async fn listen(pool: &PgPool) -> Result<WakeUps, StoreError> {
    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
    listener.listen(WAKE_UP_CHANNEL).await?;
    Ok(WakeUps(listener))
}

impl WakeUps {
    /// Waits for the next wake-up.
    pub async fn recv(&mut self) -> Result<(), StoreError> {
        self.0.recv().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::WakeUpWindow;
    use std::time::Duration;

    #[test]
    fn a_lone_approval_notifies_inline_and_the_window_ends_quietly() {
        let mut window = WakeUpWindow::default();
        assert!(window.open_inline());
        assert_eq!(window.length(), WakeUpWindow::MIN);
        assert_eq!(window.close(), None);
        // The next approval, however soon after the window, notifies at once again.
        assert!(window.open_inline());
    }

    #[test]
    fn approvals_inside_a_window_fold_into_one_trailing_notification() {
        let mut window = WakeUpWindow::default();
        assert!(window.poke());
        assert!(!window.open_inline());
        assert!(!window.poke());
        assert!(!window.poke());
        assert_eq!(window.close(), Some(Duration::from_millis(2)));
        assert_eq!(window.close(), None);
    }

    #[test]
    fn a_steady_stream_doubles_the_window_up_to_the_longest_and_a_pause_resets_it() {
        let mut window = WakeUpWindow::default();
        assert!(window.open_inline());
        let mut lengths = Vec::new();
        for _ in 0..6 {
            assert!(!window.poke());
            lengths.push(window.close().expect("a poke owes a notification"));
        }
        let ms: Vec<u128> = lengths.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [2, 4, 8, 10, 10, 10]);
        assert_eq!(window.close(), None);
        assert_eq!(window.length(), WakeUpWindow::MIN);
        assert!(window.poke());
    }
}
