//! Writing the record without making serving depend on Postgres.
//!
//! Facts that must be durable before they are acknowledged (a switch, appended messages, a
//! new or closed session) are written at once — unless earlier records are still waiting, so
//! the record never goes out of order. When the write fails (Postgres down or slow), the
//! record joins a bounded buffer that a background writer drains, in order, as soon as
//! Postgres answers again. Turn counters are coalesced per session and written by the
//! background writer only. What does not fit in the buffer is dropped, counted and logged.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use chrono::{DateTime, Utc};

use crate::{
    domain::SessionKey,
    store::{Record, RecordStore},
};

/// Where a record went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// In Postgres.
    Written,
    /// In the buffer, to be written when Postgres answers.
    Buffered,
    /// The buffer was full: lost (counted).
    Dropped,
}

#[derive(Debug, Clone)]
pub struct RecorderConfig {
    /// Records (and sessions with pending turn counts) held while Postgres is unreachable.
    pub capacity: usize,
    /// How long a synchronous write may take before the record is buffered instead.
    pub write_timeout: Duration,
    /// Records per background write.
    pub batch: usize,
    /// How often pending turn counts are written.
    pub flush_interval: Duration,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        Self {
            capacity: 10_000,
            write_timeout: Duration::from_millis(500),
            batch: 256,
            flush_interval: Duration::from_millis(500),
        }
    }
}

pub struct Recorder {
    store: Arc<dyn RecordStore>,
    config: RecorderConfig,
    state: Mutex<Pending>,
    dropped: AtomicU64,
    wake: Arc<tokio::sync::Notify>,
}

#[derive(Default)]
struct Pending {
    /// Records waiting, oldest first. Kept in place while being written, removed on success.
    queue: VecDeque<Record>,
    /// Latest turn count per session not yet written.
    turns: HashMap<SessionKey, (u64, DateTime<Utc>)>,
}

impl Recorder {
    /// Creates the recorder and starts its background writer.
    pub fn start(store: Arc<dyn RecordStore>, config: RecorderConfig) -> Arc<Self> {
        let recorder = Arc::new(Self {
            store,
            config,
            state: Mutex::new(Pending::default()),
            dropped: AtomicU64::new(0),
            wake: Arc::new(tokio::sync::Notify::new()),
        });
        let interval = recorder.config.flush_interval;
        tokio::spawn(background_writer(Arc::downgrade(&recorder), recorder.wake.clone(), interval));
        recorder
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        // Only pushes and pops happen under the lock; a poisoned lock still holds whole records.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records waiting to be written (buffered records plus sessions with pending turns).
    pub fn backlog(&self) -> usize {
        let pending = self.pending();
        pending.queue.len() + pending.turns.len()
    }

    /// Records lost because the buffer was full, since start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Writes `records` now, or buffers them when earlier records are waiting or the write
    /// fails. Returns once they are written or buffered.
    pub async fn record(&self, records: Vec<Record>) -> Durability {
        if self.pending().queue.is_empty() {
            let write = tokio::time::timeout(self.config.write_timeout, self.store.write(&records)).await;
            match write {
                Ok(Ok(())) => return Durability::Written,
                Ok(Err(err)) => tracing::warn!(%err, "record write failed, buffering"),
                Err(_) => tracing::warn!(timeout = ?self.config.write_timeout, "record write timed out, buffering"),
            }
        }
        self.buffer(records)
    }

    fn buffer(&self, records: Vec<Record>) -> Durability {
        let outcome = {
            let mut pending = self.pending();
            if pending.queue.len() + pending.turns.len() + records.len() > self.config.capacity {
                None
            } else {
                pending.queue.extend(records.iter().cloned());
                Some(())
            }
        };
        match outcome {
            Some(()) => {
                self.wake.notify_one();
                Durability::Buffered
            }
            None => {
                self.count_dropped(records.len() as u64);
                Durability::Dropped
            }
        }
    }

    fn count_dropped(&self, count: u64) {
        let total = self.dropped.fetch_add(count, Ordering::Relaxed) + count;
        // Log the first drop and then at each power of two, so an outage does not flood logs.
        if (total - count).checked_ilog2() != total.checked_ilog2() || total == count {
            tracing::error!(
                dropped_total = total,
                capacity = self.config.capacity,
                "record buffer full, records dropped"
            );
        }
    }

    /// Notes a session's turn count, written in the background (coalesced per session).
    pub fn record_turns(&self, key: &SessionKey, turn_count: u64, at: DateTime<Utc>) {
        let mut pending = self.pending();
        let full = pending.queue.len() + pending.turns.len() >= self.config.capacity;
        match pending.turns.get_mut(key) {
            Some(entry) => {
                if turn_count > entry.0 {
                    *entry = (turn_count, at);
                }
            }
            None if full => {
                drop(pending);
                self.count_dropped(1);
            }
            None => {
                pending.turns.insert(key.clone(), (turn_count, at));
            }
        }
    }

    /// A background write, bounded so a connection that stops answering cannot stall the drain.
    async fn bounded_write(&self, records: &[Record]) -> Result<(), crate::store::StoreError> {
        let limit = self.config.write_timeout.max(std::time::Duration::from_secs(5));
        tokio::time::timeout(limit, self.store.write(records)).await.map_err(|_| crate::store::StoreError::Timeout)?
    }

    /// Writes what is waiting, oldest first; returns how many records were written.
    pub async fn flush(&self) -> Result<usize, crate::store::StoreError> {
        let mut written = 0;
        loop {
            let batch: Vec<Record> = self.pending().queue.iter().take(self.config.batch).cloned().collect();
            if batch.is_empty() {
                break;
            }
            self.bounded_write(&batch).await?;
            let mut pending = self.pending();
            for _ in 0..batch.len() {
                pending.queue.pop_front();
            }
            written += batch.len();
        }
        let turns: Vec<Record> = {
            let mut pending = self.pending();
            pending.turns.drain().map(|(key, (turn_count, at))| Record::Turns { key, turn_count, at }).collect()
        };
        if turns.is_empty() {
            return Ok(written);
        }
        if let Err(err) = self.bounded_write(&turns).await {
            let mut pending = self.pending();
            for record in turns {
                if let Record::Turns { key, turn_count, at } = record {
                    let entry = pending.turns.entry(key).or_insert((turn_count, at));
                    if turn_count > entry.0 {
                        *entry = (turn_count, at);
                    }
                }
            }
            return Err(err);
        }
        Ok(written + turns.len())
    }
}

/// Drains the buffer: on a wake-up or every flush interval, and while Postgres is down, after
/// a backoff (200 ms doubling to 5 s) so a stream of new records does not hammer it.
async fn background_writer(recorder: std::sync::Weak<Recorder>, wake: Arc<tokio::sync::Notify>, interval: Duration) {
    let mut backoff = Duration::ZERO;
    loop {
        if backoff.is_zero() {
            let _ = tokio::time::timeout(interval, wake.notified()).await;
        } else {
            tokio::time::sleep(backoff).await;
        }
        let Some(this) = recorder.upgrade() else { return };
        let backlog = this.backlog();
        match this.flush().await {
            Ok(written) => {
                if !backoff.is_zero() {
                    tracing::info!(written, "record store reachable again, buffered records written");
                }
                backoff = Duration::ZERO;
            }
            Err(err) => {
                backoff = (backoff * 2).clamp(Duration::from_millis(200), Duration::from_secs(5));
                tracing::warn!(%err, backlog, retry_in = ?backoff, "writing buffered records failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        domain::{SessionId, TenantId},
        store::memory::MemoryRecordStore,
    };

    fn key(id: &str) -> SessionKey {
        SessionKey { tenant: TenantId::default_tenant(), id: SessionId::parse(id).expect("id") }
    }

    fn closed(id: &str) -> Record {
        Record::Closed { key: key(id), at: Utc::now() }
    }

    #[tokio::test]
    async fn writes_at_once_buffers_during_an_outage_and_drains_in_order_after() {
        let store = Arc::new(MemoryRecordStore::default());
        let recorder = Recorder::start(
            store.clone(),
            RecorderConfig { capacity: 3, flush_interval: Duration::from_millis(20), ..RecorderConfig::default() },
        );
        assert_eq!(recorder.record(vec![closed("a")]).await, Durability::Written);

        store.set_available(false);
        assert_eq!(recorder.record(vec![closed("b")]).await, Durability::Buffered);
        store.set_available(true);
        // Earlier records are waiting: a new one queues behind them rather than overtaking.
        assert_eq!(recorder.record(vec![closed("c")]).await, Durability::Buffered);
        store.set_available(false);
        assert_eq!(recorder.record(vec![closed("d")]).await, Durability::Buffered);
        assert_eq!(recorder.record(vec![closed("e")]).await, Durability::Dropped);
        recorder.record_turns(&key("f"), 3, Utc::now());
        assert_eq!(recorder.dropped(), 2, "the buffer holds 3; two more were dropped");
        assert_eq!(recorder.backlog(), 3);

        store.set_available(true);
        tokio::time::timeout(Duration::from_secs(5), async {
            while recorder.backlog() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("buffer drained after the store came back");
        assert_eq!(recorder.record(vec![closed("g")]).await, Durability::Written);
    }
}
