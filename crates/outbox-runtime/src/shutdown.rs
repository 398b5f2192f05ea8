//! One stop signal for a process's listeners and loops: a [`Shutdown`] is set once (by
//! its [`Trigger`], or when the future given to [`Shutdown::on`] resolves) and every clone
//! sees it. Each server and loop gets a clone, passed down as a value, and waits on it
//! alongside its own work; nothing builds a channel of its own.
//!
//! A `Shutdown` whose trigger is gone counts as set: the trigger is dropped only when the
//! process is ending anyway, and a loop must not wait forever for a signal nobody can send.

use std::future::Future;
use tokio::sync::watch;

/// Seen by every listener and loop; set once, never cleared.
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

/// What sets a [`Shutdown`]; whoever owns the process's lifetime holds it.
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

impl Shutdown {
    /// A signal, not yet set, and what sets it.
    pub fn new() -> (Trigger, Shutdown) {
        let (set, seen) = watch::channel(false);
        (Trigger(set), Shutdown(seen))
    }

    /// A signal set when `signal` resolves (SIGTERM, a test's stop), from a task of its own.
    pub fn on(signal: impl Future<Output = ()> + Send + 'static) -> Shutdown {
        let (trigger, shutdown) = Shutdown::new();
        tokio::spawn(async move {
            signal.await;
            trigger.set();
        });
        shutdown
    }

    /// Whether it is set.
    pub fn is_set(&self) -> bool {
        *self.0.borrow() || self.0.has_changed().is_err()
    }

    /// Waits until it is set (at once if it is, or if its trigger is gone).
    pub async fn wait(&mut self) {
        // The guard `wait_for` returns is dropped here, before any other await.
        let _ = self.0.wait_for(|set| *set).await;
    }

    /// Resolves once it is set: for servers that take their stop as a future (it owns its
    /// clone, so the future lives as long as the server needs it).
    pub async fn until_set(mut self) {
        self.wait().await;
    }
}

impl Trigger {
    /// Sets the signal for every clone.
    pub fn set(&self) {
        self.0.send_replace(true);
    }

    /// Another view of the signal this sets.
    pub fn shutdown(&self) -> Shutdown {
        Shutdown(self.0.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_clone_sees_the_signal_once_set() {
        let (trigger, shutdown) = Shutdown::new();
        let mut seen = shutdown.clone();
        assert!(!shutdown.is_set());
        trigger.set();
        seen.wait().await;
        assert!(shutdown.is_set() && trigger.shutdown().is_set());
    }

    #[tokio::test]
    async fn a_signal_whose_trigger_is_gone_counts_as_set() {
        let (trigger, mut shutdown) = Shutdown::new();
        drop(trigger);
        shutdown.wait().await;
        assert!(shutdown.is_set());
    }

    #[tokio::test]
    async fn a_signal_is_set_when_its_future_resolves() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let shutdown = Shutdown::on(async move {
            let _ = rx.await;
        });
        assert!(!shutdown.is_set());
        tx.send(()).ok();
        shutdown.clone().until_set().await;
        assert!(shutdown.is_set());
    }
}
