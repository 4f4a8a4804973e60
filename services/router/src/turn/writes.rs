//! Writes to sessions that may outlive the call that started them: a turn's recording, run as
//! a task of its own so a departing client does not cut it, and the messages of turns the
//! shutdown grace interrupted. The process waits for them before it exits.

use std::{
    future::Future,
    pin::pin,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::{sync::Notify, task::JoinHandle};

/// Counts the writes still running and wakes whoever waits for the last one.
#[derive(Debug, Default)]
pub(crate) struct SessionWrites {
    running: AtomicUsize,
    finished: Notify,
}

/// Held by a running write; its drop counts the write done, panicked or aborted alike.
struct Running(Arc<SessionWrites>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.finished.notify_waiters();
        }
    }
}

impl SessionWrites {
    /// Runs `write` as a task of its own, counted until it ends.
    pub(crate) fn spawn<F>(self: &Arc<Self>, write: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.running.fetch_add(1, Ordering::AcqRel);
        let running = Running(self.clone());
        tokio::spawn(async move {
            let _running = running;
            write.await
        })
    }

    pub(crate) fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Waits until no write is running, at most `timeout`; false when some still were.
    pub(crate) async fn finish(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, async {
            loop {
                // Registered before the count is read, so a last write ending in between
                // still wakes this wait.
                let mut finished = pin!(self.finished.notified());
                finished.as_mut().enable();
                if self.running() == 0 {
                    return;
                }
                finished.await;
            }
        })
        .await
        .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn finishing_waits_for_every_write_and_gives_up_at_the_timeout() {
        let writes = Arc::new(SessionWrites::default());
        assert!(writes.finish(Duration::from_millis(1)).await, "nothing running: finished at once");

        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let slow = writes.spawn(async move {
            let _ = released.await;
        });
        let quick = writes.spawn(async {});
        quick.await.unwrap();
        assert_eq!(writes.running(), 1);
        assert!(!writes.finish(Duration::from_millis(20)).await, "the slow write still runs");

        let waiting = {
            let writes = writes.clone();
            tokio::spawn(async move { writes.finish(Duration::from_secs(30)).await })
        };
        release.send(()).unwrap();
        assert!(waiting.await.unwrap(), "the wait ends once the last write does");
        slow.await.unwrap();
        assert_eq!(writes.running(), 0);
    }

    #[tokio::test]
    async fn a_panicked_write_counts_as_ended() {
        let writes = Arc::new(SessionWrites::default());
        let failed = writes.spawn(async { panic!("write failed") });
        assert!(failed.await.is_err());
        assert_eq!(writes.running(), 0);
        assert!(writes.finish(Duration::from_millis(1)).await);
    }
}
