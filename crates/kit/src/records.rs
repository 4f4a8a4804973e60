//! Writing the record (Postgres) without making serving depend on it.
//!
//! A [`RecordBuffer`] takes records from the request path and writes them in batches in the
//! background, oldest first. While the sink fails (Postgres down or slow) records are held, up
//! to a bound; past it they are dropped, counted, and logged at most once per interval so an
//! outage cannot flood the logs. Records with a coalescing key (a session's latest turn count)
//! keep only their newest value while they wait. On shutdown, [`RecordBuffer::drain`] writes
//! what is held within a deadline.
//!
//! Facts that must be durable before they are acknowledged use [`RecordBuffer::write_through`]:
//! written at once unless earlier records are still waiting (so the record never goes out of
//! order), and buffered when the write fails.
//!
//! A record the store refuses for its content ([`StoreError::is_refused_content`]: it will
//! never be written, however often it is retried) must not hold every later record behind it:
//! the batch is written again one record at a time, each refused record is set aside — logged
//! once at error level with its key fields ([`BufferedRecord::key_fields`], never its text),
//! counted in [`RecordBuffer::set_aside`] and the `records.set_aside` metric — and the others
//! are written in order.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex, MutexGuard, PoisonError, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use opentelemetry::{
    KeyValue,
    metrics::{Counter, ObservableGauge},
};
use tokio::sync::Notify;

use crate::{backoff::Backoff, log::Throttle, store::StoreError};

/// Write-through failures, per buffer: logged once per interval while the store is away.
static WRITE_FAILED: Throttle = Throttle::new();

/// Where records go: a service's Postgres record store, usually.
#[async_trait]
pub trait RecordSink<R>: Send + Sync + 'static {
    /// Writes `records` in order, all or nothing.
    async fn write(&self, records: &[R]) -> Result<(), StoreError>;
}

/// A record the buffer can hold.
pub trait BufferedRecord: Clone + Send + Sync + 'static {
    /// Records with the same key are coalesced while they wait: only one is kept, see
    /// [`BufferedRecord::supersedes`]. Coalesced records are written after the queued ones.
    fn coalesce_key(&self) -> Option<String> {
        None
    }

    /// Whether this record replaces `waiting`, which has the same coalescing key.
    fn supersedes(&self, waiting: &Self) -> bool {
        let _ = waiting;
        true
    }

    /// What identifies the record in a log line when it is set aside — tenant, session, kind,
    /// time — as `name=value` pairs; never its free text, which may be private (and is what
    /// the store refused).
    fn key_fields(&self) -> String {
        String::new()
    }
}

/// Where a record went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Written to the sink.
    Written,
    /// Held, to be written when the sink answers.
    Buffered,
    /// The buffer was full: lost (counted).
    Dropped,
    /// The store refused (some of) them for their content: those were set aside (logged and
    /// counted) and the others written or held.
    SetAside,
}

#[derive(Debug, Clone)]
pub struct RecordBufferConfig {
    /// What the records are, for logs (`"session records"`, `"usage records"`).
    pub name: &'static str,
    /// Records held (queued plus coalesced) before new ones are dropped.
    pub capacity: usize,
    /// How long a write-through may take before its records are buffered instead.
    pub write_timeout: Duration,
    /// Records per background write.
    pub batch: usize,
    /// How often the background writer writes coalesced records (queued ones go at once,
    /// after `linger`).
    pub flush_interval: Duration,
    /// How long the background writer waits, once woken by a queued record, for more to join
    /// its batch. Zero writes each record as it comes (a transaction per few records under
    /// load); a few milliseconds turn a thousand records a second into a few dozen writes,
    /// which is most of the store's cost per record. Only for records nothing waits on:
    /// a `write_through` finds the queue busy for longer, and is buffered instead.
    pub linger: Duration,
    /// At most one "records dropped" log line per interval.
    pub drop_log_interval: Duration,
}

impl Default for RecordBufferConfig {
    fn default() -> Self {
        Self {
            name: "records",
            capacity: 10_000,
            write_timeout: Duration::from_millis(500),
            batch: 256,
            flush_interval: Duration::from_millis(500),
            linger: Duration::ZERO,
            drop_log_interval: Duration::from_secs(10),
        }
    }
}

/// What a drain at shutdown achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainReport {
    pub written: usize,
    /// Records still held when the deadline passed: lost with the process.
    pub lost: usize,
}

pub struct RecordBuffer<R> {
    sink: Arc<dyn RecordSink<R>>,
    config: RecordBufferConfig,
    pending: Mutex<Pending<R>>,
    /// One flush at a time: a batch stays queued while it is written, so two writers would
    /// write it twice.
    flushing: tokio::sync::Mutex<()>,
    wake: Notify,
    dropped: AtomicU64,
    drop_log: Mutex<DropLog>,
    set_aside: AtomicU64,
    set_aside_metric: Counter<u64>,
    dropped_metric: Counter<u64>,
    /// Reports the backlog at each metrics collection (through a weak reference: the meter
    /// keeps its callback after the buffer is gone).
    _backlog_gauge: ObservableGauge<u64>,
}

struct Pending<R> {
    /// Waiting records, oldest first; kept in place while written, removed on success.
    queue: VecDeque<R>,
    coalesced: HashMap<String, R>,
}

/// Room an emptied queue keeps for the next burst. An outage can fill the buffer to its
/// capacity (tens of thousands of records); once written, that room is given back, so one
/// outage does not raise the process's resident memory for good.
const SPARE_ROOM: usize = 256;

impl<R> Pending<R> {
    /// Gives back the room a backlog grew to, once it is written.
    fn release_spare_room(&mut self) {
        if self.queue.is_empty() && self.queue.capacity() > SPARE_ROOM {
            self.queue.shrink_to(SPARE_ROOM);
        }
        if self.coalesced.is_empty() && self.coalesced.capacity() > SPARE_ROOM {
            self.coalesced.shrink_to(SPARE_ROOM);
        }
    }
}

#[derive(Default)]
struct DropLog {
    last: Option<Instant>,
    since_last: u64,
}

impl<R: BufferedRecord> RecordBuffer<R> {
    /// Creates the buffer and starts its background writer, which stops when the buffer is
    /// dropped.
    pub fn start(sink: Arc<dyn RecordSink<R>>, config: RecordBufferConfig) -> Arc<Self> {
        let meter = opentelemetry::global::meter("switchyard-kit");
        let labels = [KeyValue::new("records", config.name)];
        let buffer = Arc::new_cyclic(|weak: &Weak<Self>| {
            let weak = weak.clone();
            Self {
                sink,
                config,
                pending: Mutex::new(Pending { queue: VecDeque::new(), coalesced: HashMap::new() }),
                flushing: tokio::sync::Mutex::new(()),
                wake: Notify::new(),
                dropped: AtomicU64::new(0),
                drop_log: Mutex::new(DropLog::default()),
                set_aside: AtomicU64::new(0),
                set_aside_metric: meter
                    .u64_counter("records.set_aside")
                    .with_description(
                        "Records the store refused for their content, set aside so the others are written",
                    )
                    .build(),
                dropped_metric: meter
                    .u64_counter("records.dropped")
                    .with_description("Records lost because the record buffer was full (the store away or slow)")
                    .build(),
                _backlog_gauge: meter
                    .u64_observable_gauge("records.backlog")
                    .with_description("Records held in the record buffer, waiting to be written")
                    .with_callback(move |observer| {
                        if let Some(buffer) = weak.upgrade() {
                            observer.observe(buffer.backlog() as u64, &labels);
                        }
                    })
                    .build(),
            }
        });
        tokio::spawn(background_writer(Arc::downgrade(&buffer)));
        buffer
    }

    fn pending(&self) -> MutexGuard<'_, Pending<R>> {
        // Only pushes and pops happen under the lock; a poisoned lock still holds whole records.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records held, waiting to be written.
    pub fn backlog(&self) -> usize {
        let pending = self.pending();
        pending.queue.len() + pending.coalesced.len()
    }

    /// Records lost because the buffer was full, since start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Records the store refused for their content and that were set aside, since start.
    pub fn set_aside(&self) -> u64 {
        self.set_aside.load(Ordering::Relaxed)
    }

    /// Logs (once, here) and counts a record the store refused for its content.
    fn set_record_aside(&self, record: &R, err: &StoreError) {
        let total = self.set_aside.fetch_add(1, Ordering::Relaxed) + 1;
        self.set_aside_metric.add(1, &[KeyValue::new("records", self.config.name)]);
        tracing::error!(
            records = self.config.name,
            record = %record.key_fields(),
            %err,
            set_aside_total = total,
            "record refused by the store for its content, set aside"
        );
    }

    /// Writes `records` now — unless earlier records are waiting, so none overtakes them — and
    /// buffers them when that write fails or takes longer than the write timeout. Returns once
    /// they are written or held.
    pub async fn write_through(&self, records: Vec<R>) -> Durability {
        if self.pending().queue.is_empty() {
            let write = tokio::time::timeout(self.config.write_timeout, self.sink.write(&records)).await;
            match write {
                Ok(Ok(())) => return Durability::Written,
                Ok(Err(err)) if err.is_refused_content() => return self.write_through_one_by_one(records).await,
                // Every request's write fails the same way while the store is away: one line
                // per buffer per interval (the backlog gauge and the writer's log say the rest).
                Ok(Err(err)) => {
                    if let Some(suppressed) = WRITE_FAILED.admit(self.config.name) {
                        tracing::warn!(records = self.config.name, %err, suppressed, "record write failed, buffering");
                    }
                }
                Err(_) => {
                    if let Some(suppressed) = WRITE_FAILED.admit(self.config.name) {
                        tracing::warn!(
                            records = self.config.name,
                            timeout = ?self.config.write_timeout,
                            suppressed,
                            "record write timed out, buffering"
                        );
                    }
                }
            }
        }
        self.push_all(records)
    }

    /// After a write-through refused for content: each record alone, the refused ones set
    /// aside; from the first that fails for another reason on, the rest are held in order.
    async fn write_through_one_by_one(&self, records: Vec<R>) -> Durability {
        let mut set_aside = false;
        let mut records = records.into_iter();
        while let Some(record) = records.next() {
            let write = tokio::time::timeout(self.config.write_timeout, self.sink.write(std::slice::from_ref(&record)));
            match write.await {
                Ok(Ok(())) => {}
                Ok(Err(err)) if err.is_refused_content() => {
                    self.set_record_aside(&record, &err);
                    set_aside = true;
                }
                failed => {
                    if let Ok(Err(err)) = failed
                        && let Some(suppressed) = WRITE_FAILED.admit(self.config.name)
                    {
                        tracing::warn!(records = self.config.name, %err, suppressed, "record write failed, buffering");
                    }
                    let held = self.push_all(std::iter::once(record).chain(records).collect());
                    return if set_aside && held != Durability::Dropped { Durability::SetAside } else { held };
                }
            }
        }
        if set_aside { Durability::SetAside } else { Durability::Written }
    }

    /// Holds one record for the background writer (off the request path).
    pub fn push(&self, record: R) -> Durability {
        self.push_all(vec![record])
    }

    /// Holds `records` for the background writer, all or none.
    pub fn push_all(&self, records: Vec<R>) -> Durability {
        let count = records.len();
        // Keys are computed once, outside the lock.
        let keyed: Vec<(Option<String>, R)> = records.into_iter().map(|r| (r.coalesce_key(), r)).collect();
        // Coalesced records wait for the flush interval (that is what coalescing is for); only
        // queued ones wake the writer.
        let wake = keyed.iter().any(|(key, _)| key.is_none());
        let accepted = {
            let mut pending = self.pending();
            let new =
                keyed.iter().filter(|(key, _)| key.as_ref().is_none_or(|k| !pending.coalesced.contains_key(k))).count();
            if pending.queue.len() + pending.coalesced.len() + new > self.config.capacity {
                false
            } else {
                for (key, record) in keyed {
                    let Some(key) = key else {
                        pending.queue.push_back(record);
                        continue;
                    };
                    match pending.coalesced.get_mut(&key) {
                        Some(waiting) if record.supersedes(waiting) => *waiting = record,
                        Some(_) => {}
                        None => {
                            pending.coalesced.insert(key, record);
                        }
                    }
                }
                true
            }
        };
        if accepted {
            if wake {
                self.wake.notify_one();
            }
            Durability::Buffered
        } else {
            self.count_dropped(count as u64);
            Durability::Dropped
        }
    }

    fn count_dropped(&self, count: u64) {
        let total = self.dropped.fetch_add(count, Ordering::Relaxed) + count;
        self.dropped_metric.add(count, &[KeyValue::new("records", self.config.name)]);
        let mut log = self.drop_log.lock().unwrap_or_else(PoisonError::into_inner);
        log.since_last += count;
        let due = log.last.is_none_or(|last| last.elapsed() >= self.config.drop_log_interval);
        if due {
            tracing::error!(
                records = self.config.name,
                dropped = log.since_last,
                dropped_total = total,
                capacity = self.config.capacity,
                "record buffer full, records dropped"
            );
            log.last = Some(Instant::now());
            log.since_last = 0;
        }
    }

    /// One background write, bounded so a connection that stops answering cannot stall the
    /// writer for long.
    async fn bounded_write(&self, records: &[R]) -> Result<(), StoreError> {
        let limit = self.config.write_timeout.max(Duration::from_secs(5));
        tokio::time::timeout(limit, self.sink.write(records)).await.map_err(|_| StoreError::Timeout)?
    }

    /// Writes everything held, oldest first; returns how many records were written. On a
    /// failure the unwritten records stay held.
    pub async fn flush(&self) -> Result<usize, StoreError> {
        self.write_held(usize::MAX).await
    }

    /// Writes up to `queued` of the queued records, oldest first, then the coalesced ones. The
    /// background writer passes what was queued when it started, so records that arrive during
    /// a write wait for the next round (and its linger) instead of going out a few at a time.
    async fn write_held(&self, queued: usize) -> Result<usize, StoreError> {
        let _one_at_a_time = self.flushing.lock().await;
        let mut written = 0;
        loop {
            let take = self.config.batch.max(1).min(queued.saturating_sub(written));
            let batch: Vec<R> = self.pending().queue.iter().take(take).cloned().collect();
            if batch.is_empty() {
                break;
            }
            match self.bounded_write(&batch).await {
                Ok(()) => {
                    self.pending().queue.drain(..batch.len());
                    written += batch.len();
                }
                Err(err) if err.is_refused_content() => self.isolate_refused(&batch, &mut written).await?,
                Err(err) => return Err(err),
            }
        }
        let coalesced: Vec<(String, R)> = {
            let mut pending = self.pending();
            let coalesced = pending.coalesced.drain().collect();
            pending.release_spare_room();
            coalesced
        };
        if coalesced.is_empty() {
            return Ok(written);
        }
        let records: Vec<R> = coalesced.iter().map(|(_, record)| record.clone()).collect();
        let mut failed = match self.bounded_write(&records).await {
            Ok(()) => return Ok(written + records.len()),
            Err(err) if err.is_refused_content() => None,
            Err(err) => Some(err),
        };
        // Refused for content: each alone, the refused ones set aside. What fails for another
        // reason goes back, unless a newer value arrived meanwhile.
        let mut back = Vec::new();
        for (key, record) in coalesced {
            if failed.is_some() {
                back.push((key, record));
                continue;
            }
            match self.bounded_write(std::slice::from_ref(&record)).await {
                Ok(()) => written += 1,
                Err(err) if err.is_refused_content() => self.set_record_aside(&record, &err),
                Err(err) => {
                    failed = Some(err);
                    back.push((key, record));
                }
            }
        }
        let mut pending = self.pending();
        for (key, record) in back {
            pending.coalesced.entry(key).or_insert(record);
        }
        drop(pending);
        failed.map_or(Ok(written), Err)
    }

    /// After `batch` (the head of the queue) was refused for its content: writes its records
    /// one at a time, up to and including the first refused one, which is set aside; each is
    /// taken off the queue as it is done (and counted in `written`), so the next batch starts
    /// after it. A failure of another kind leaves the rest queued.
    async fn isolate_refused(&self, batch: &[R], written: &mut usize) -> Result<(), StoreError> {
        for record in batch {
            match self.bounded_write(std::slice::from_ref(record)).await {
                Ok(()) => *written += 1,
                Err(err) if err.is_refused_content() => {
                    self.set_record_aside(record, &err);
                    self.pending().queue.pop_front();
                    break;
                }
                Err(err) => return Err(err),
            }
            self.pending().queue.pop_front();
        }
        Ok(())
    }

    /// At shutdown: writes what is held, retrying while the sink fails, until `deadline`.
    /// What is still held then is lost with the process, and logged as such.
    pub async fn drain(&self, deadline: Duration) -> DrainReport {
        let started = Instant::now();
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
        let mut written = 0;
        loop {
            let remaining = deadline.saturating_sub(started.elapsed());
            match tokio::time::timeout(remaining, self.flush()).await {
                Ok(Ok(count)) => {
                    written += count;
                    if self.backlog() == 0 {
                        break;
                    }
                }
                Ok(Err(err)) => tracing::warn!(records = self.config.name, %err, "draining records failed, retrying"),
                Err(_) => break,
            }
            let pause = backoff.next_delay().min(deadline.saturating_sub(started.elapsed()));
            if pause.is_zero() {
                break;
            }
            tokio::time::sleep(pause).await;
        }
        let lost = self.backlog();
        // Set aside since start: each was logged with its key fields when it was refused.
        let set_aside = self.set_aside();
        if lost > 0 {
            tracing::error!(
                records = self.config.name,
                written,
                lost,
                set_aside,
                ?deadline,
                "records not written before exit"
            );
        } else if written > 0 {
            tracing::info!(records = self.config.name, written, set_aside, "records drained at shutdown");
        }
        DrainReport { written, lost }
    }
}

/// Writes held records: queued ones as soon as they arrive (after the linger), coalesced ones
/// every flush interval; while the sink fails, after a backoff (200 ms doubling to 5 s) so a stream of new
/// records does not hammer it. Ends once the buffer is dropped (within one interval).
async fn background_writer<R: BufferedRecord>(buffer: Weak<RecordBuffer<R>>) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let mut retry_in: Option<Duration> = None;
    loop {
        let Some(this) = buffer.upgrade() else { return };
        match retry_in {
            Some(delay) => tokio::time::sleep(delay).await,
            None => {
                let woken = tokio::time::timeout(this.config.flush_interval, this.wake.notified()).await.is_ok();
                if woken && !this.config.linger.is_zero() && this.pending().queue.len() < this.config.batch {
                    tokio::time::sleep(this.config.linger).await;
                }
            }
        }
        let backlog = this.backlog();
        if backlog == 0 {
            continue;
        }
        // With a linger, only what was queued by now: later records wait for the next round.
        let queued = if this.config.linger.is_zero() { usize::MAX } else { this.pending().queue.len() };
        match this.write_held(queued).await {
            Ok(written) => {
                if retry_in.is_some() {
                    tracing::info!(
                        records = this.config.name,
                        written,
                        "record store reachable again, held records written"
                    );
                }
                backoff.reset();
                retry_in = None;
            }
            Err(err) => {
                let delay = backoff.next_delay();
                tracing::warn!(records = this.config.name, %err, backlog, retry_in = ?delay, "writing held records failed");
                retry_in = Some(delay);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    enum Rec {
        Event(u32),
        Turns {
            session: &'static str,
            count: u64,
        },
        /// Refused by the sink for its content, as Postgres refuses a NUL.
        Poisoned(u32),
    }

    impl BufferedRecord for Rec {
        fn coalesce_key(&self) -> Option<String> {
            match self {
                Rec::Event(_) => None,
                Rec::Turns { session, .. } => Some((*session).to_owned()),
                Rec::Poisoned(_) => None,
            }
        }

        fn key_fields(&self) -> String {
            format!("{self:?}")
        }

        fn supersedes(&self, waiting: &Self) -> bool {
            match (self, waiting) {
                (Rec::Turns { count, .. }, Rec::Turns { count: old, .. }) => count > old,
                _ => true,
            }
        }
    }

    #[derive(Default)]
    struct Sink {
        written: Mutex<Vec<Rec>>,
        /// The size of each successful write, in order.
        batches: Mutex<Vec<usize>>,
        down: AtomicBool,
        /// How long each write takes, in milliseconds.
        delay_ms: AtomicU64,
    }

    impl Sink {
        fn written(&self) -> Vec<Rec> {
            self.written.lock().expect("lock").clone()
        }
    }

    #[async_trait]
    impl RecordSink<Rec> for Sink {
        async fn write(&self, records: &[Rec]) -> Result<(), StoreError> {
            // Only when asked: a zero sleep still yields, and the other tests expect a write
            // to finish in the poll that starts it.
            let delay = self.delay_ms.load(Ordering::SeqCst);
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            if self.down.load(Ordering::SeqCst) {
                return Err(StoreError::Unavailable("down".into()));
            }
            if records.iter().any(|r| matches!(r, Rec::Poisoned(_))) {
                // All or nothing, like a transaction.
                return Err(StoreError::Database(sqlx::Error::Encode("invalid byte sequence: 0x00".into())));
            }
            self.written.lock().expect("lock").extend_from_slice(records);
            self.batches.lock().expect("lock").push(records.len());
            Ok(())
        }
    }

    fn config(capacity: usize) -> RecordBufferConfig {
        RecordBufferConfig {
            capacity,
            flush_interval: Duration::from_millis(20),
            // Every drop is logged in tests, so the rate limit itself is exercised below.
            drop_log_interval: Duration::from_secs(3600),
            ..RecordBufferConfig::default()
        }
    }

    async fn until_empty(buffer: &RecordBuffer<Rec>) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while buffer.backlog() > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("buffer emptied");
    }

    #[tokio::test]
    async fn lingering_gathers_records_that_come_apart_into_one_write() {
        let run = |linger: Duration| async move {
            let sink = Arc::new(Sink::default());
            let buffer = RecordBuffer::start(sink.clone(), RecordBufferConfig { linger, ..config(100) });
            for n in 0..4 {
                buffer.push(Rec::Event(n));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            until_empty(&buffer).await;
            assert_eq!(sink.written(), (0..4).map(Rec::Event).collect::<Vec<_>>());
            sink.batches.lock().expect("lock").clone()
        };
        // Without a linger the writer takes each record as it comes.
        assert!(run(Duration::ZERO).await.len() > 1);
        // With one longer than the records' spread, they go in a single write.
        assert_eq!(run(Duration::from_millis(500)).await, [4]);
    }

    #[tokio::test]
    async fn records_that_come_during_a_write_wait_for_the_next_linger() {
        let sink = Arc::new(Sink::default());
        sink.delay_ms.store(100, Ordering::SeqCst);
        let linger = Duration::from_millis(200);
        let buffer = RecordBuffer::start(sink.clone(), RecordBufferConfig { linger, ..config(100) });
        buffer.push(Rec::Event(0));
        // Record 0 is written from about 200 ms to 300 ms; 1 comes during that write, 2 after it.
        tokio::time::sleep(Duration::from_millis(250)).await;
        buffer.push(Rec::Event(1));
        tokio::time::sleep(Duration::from_millis(100)).await;
        buffer.push(Rec::Event(2));
        until_empty(&buffer).await;
        assert_eq!(sink.written(), (0..3).map(Rec::Event).collect::<Vec<_>>());
        // Without waiting, 1 would have gone alone right after 0's write.
        assert_eq!(*sink.batches.lock().expect("lock"), [1, 2]);
    }

    #[tokio::test]
    async fn writes_through_buffers_during_an_outage_and_keeps_order_after() {
        let sink = Arc::new(Sink::default());
        let buffer = RecordBuffer::start(sink.clone(), config(10));
        assert_eq!(buffer.write_through(vec![Rec::Event(1)]).await, Durability::Written);
        sink.down.store(true, Ordering::SeqCst);
        assert_eq!(buffer.write_through(vec![Rec::Event(2)]).await, Durability::Buffered);
        sink.down.store(false, Ordering::SeqCst);
        // Record 2 is still held: 3 queues behind it rather than overtaking.
        let third = buffer.write_through(vec![Rec::Event(3)]).await;
        assert!(matches!(third, Durability::Buffered | Durability::Written));
        until_empty(&buffer).await;
        assert_eq!(sink.written(), [Rec::Event(1), Rec::Event(2), Rec::Event(3)]);
    }

    #[tokio::test]
    async fn overfilled_drops_are_counted_and_nothing_else_is_lost() {
        let sink = Arc::new(Sink::default());
        sink.down.store(true, Ordering::SeqCst);
        let buffer = RecordBuffer::start(sink.clone(), config(3));
        let outcomes: Vec<Durability> = (1..=5).map(|n| buffer.push(Rec::Event(n))).collect();
        assert_eq!(outcomes[..3], [Durability::Buffered; 3]);
        assert_eq!(outcomes[3..], [Durability::Dropped; 2]);
        // A batch that does not fit is refused whole, never half-kept.
        assert_eq!(buffer.push_all(vec![Rec::Event(6), Rec::Event(7)]), Durability::Dropped);
        assert_eq!(buffer.dropped(), 4);
        assert_eq!(buffer.backlog(), 3);

        sink.down.store(false, Ordering::SeqCst);
        until_empty(&buffer).await;
        assert_eq!(sink.written(), [Rec::Event(1), Rec::Event(2), Rec::Event(3)]);
        assert_eq!(buffer.dropped(), 4);
    }

    #[tokio::test]
    async fn the_room_an_outage_took_is_given_back_once_written() {
        let sink = Arc::new(Sink::default());
        sink.down.store(true, Ordering::SeqCst);
        let buffer = RecordBuffer::start(sink.clone(), config(20_000));
        for n in 0..10_000 {
            assert_eq!(buffer.push(Rec::Event(n)), Durability::Buffered);
        }
        for n in 0..5_000 {
            buffer.push(Rec::Turns { session: if n % 2 == 0 { "a" } else { "b" }, count: n });
        }
        let grown = buffer.pending().queue.capacity();
        assert!(grown >= 10_000, "the backlog grew the queue: {grown}");
        sink.down.store(false, Ordering::SeqCst);
        until_empty(&buffer).await;
        // The room is given back by the flush that emptied the queue, just after.
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let (queue, coalesced) = {
                    let pending = buffer.pending();
                    (pending.queue.capacity(), pending.coalesced.capacity())
                };
                if queue <= SPARE_ROOM && coalesced <= SPARE_ROOM * 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the queue's room given back");
        assert_eq!(sink.written().len(), 10_002, "every record written: 10,000 events and two sessions' counts");
    }

    #[tokio::test]
    async fn coalesced_records_keep_only_the_newest_value() {
        let sink = Arc::new(Sink::default());
        sink.down.store(true, Ordering::SeqCst);
        let buffer = RecordBuffer::start(sink.clone(), config(2));
        buffer.push(Rec::Turns { session: "a", count: 1 });
        buffer.push(Rec::Turns { session: "a", count: 3 });
        buffer.push(Rec::Turns { session: "a", count: 2 });
        // Updating a waiting key takes no new room.
        assert_eq!(buffer.push(Rec::Turns { session: "b", count: 1 }), Durability::Buffered);
        assert_eq!(buffer.push(Rec::Turns { session: "a", count: 4 }), Durability::Buffered);
        assert_eq!(buffer.backlog(), 2);
        sink.down.store(false, Ordering::SeqCst);
        until_empty(&buffer).await;
        let mut written = sink.written();
        written.sort_by_key(|r| format!("{r:?}"));
        assert_eq!(written, [Rec::Turns { session: "a", count: 4 }, Rec::Turns { session: "b", count: 1 }]);
    }

    #[tokio::test]
    async fn coalesced_records_wait_for_the_flush_interval() {
        let sink = Arc::new(Sink::default());
        let buffer = RecordBuffer::start(
            sink.clone(),
            RecordBufferConfig { flush_interval: Duration::from_secs(2), ..config(10) },
        );
        // Let the writer start waiting out its first interval.
        tokio::time::sleep(Duration::from_millis(50)).await;
        buffer.push(Rec::Turns { session: "a", count: 1 });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(sink.written().is_empty(), "a turn count alone does not wake the writer");
        until_empty(&buffer).await;
        assert_eq!(sink.written(), [Rec::Turns { session: "a", count: 1 }]);
    }

    #[tokio::test]
    async fn drain_writes_what_is_held_or_reports_it_lost_at_the_deadline() {
        let sink = Arc::new(Sink::default());
        let buffer = RecordBuffer::start(
            sink.clone(),
            RecordBufferConfig { flush_interval: Duration::from_secs(3600), ..config(10) },
        );
        buffer.push(Rec::Turns { session: "a", count: 7 });
        let report = buffer.drain(Duration::from_secs(5)).await;
        assert_eq!(report, DrainReport { written: 1, lost: 0 });
        assert_eq!(sink.written(), [Rec::Turns { session: "a", count: 7 }]);

        sink.down.store(true, Ordering::SeqCst);
        buffer.push(Rec::Event(9));
        let report = buffer.drain(Duration::from_millis(200)).await;
        assert_eq!(report, DrainReport { written: 0, lost: 1 });
    }

    #[tokio::test]
    async fn a_refused_record_is_set_aside_and_every_other_one_lands_in_order() {
        let sink = Arc::new(Sink::default());
        sink.down.store(true, Ordering::SeqCst);
        let buffer = RecordBuffer::start(sink.clone(), RecordBufferConfig { batch: 3, ..config(100) });
        // Queued during an outage, then written in batches of 3 with the poisoned one inside
        // the first.
        buffer.push_all(vec![Rec::Event(1), Rec::Poisoned(2), Rec::Event(3), Rec::Event(4)]);
        buffer.push_all(vec![Rec::Event(5), Rec::Poisoned(6), Rec::Event(7)]);
        sink.down.store(false, Ordering::SeqCst);
        until_empty(&buffer).await;
        assert_eq!(sink.written(), [1, 3, 4, 5, 7].map(Rec::Event));
        assert_eq!(buffer.set_aside(), 2);
        assert_eq!(buffer.dropped(), 0);
        // And nothing waits behind them.
        assert_eq!(buffer.write_through(vec![Rec::Event(8)]).await, Durability::Written);
    }

    #[tokio::test]
    async fn a_refused_write_through_is_set_aside_never_buffered() {
        let sink = Arc::new(Sink::default());
        let buffer = RecordBuffer::start(sink.clone(), config(10));
        let outcome = buffer.write_through(vec![Rec::Event(1), Rec::Poisoned(2), Rec::Event(3)]).await;
        assert_eq!(outcome, Durability::SetAside);
        assert_eq!(buffer.backlog(), 0, "nothing held to block later records");
        assert_eq!(buffer.write_through(vec![Rec::Event(4)]).await, Durability::Written);
        assert_eq!(sink.written(), [1, 3, 4].map(Rec::Event));
        assert_eq!(buffer.set_aside(), 1);
    }

    #[tokio::test]
    async fn a_refused_coalesced_record_does_not_hold_the_others() {
        #[derive(Default)]
        struct RefusesSession(Sink);
        #[async_trait]
        impl RecordSink<Rec> for RefusesSession {
            async fn write(&self, records: &[Rec]) -> Result<(), StoreError> {
                if records.iter().any(|r| matches!(r, Rec::Turns { session: "bad", .. })) {
                    return Err(StoreError::Corrupt("turn count out of range".into()));
                }
                self.0.write(records).await
            }
        }
        let sink = Arc::new(RefusesSession::default());
        let buffer = RecordBuffer::start(sink.clone(), config(10));
        buffer.push(Rec::Turns { session: "bad", count: 1 });
        buffer.push(Rec::Turns { session: "good", count: 2 });
        until_empty(&buffer).await;
        assert_eq!(sink.0.written(), [Rec::Turns { session: "good", count: 2 }]);
        assert_eq!(buffer.set_aside(), 1);
    }

    #[tokio::test]
    async fn drain_sets_a_refused_record_aside_and_writes_everything_else() {
        let sink = Arc::new(Sink::default());
        let buffer = RecordBuffer::start(
            sink.clone(),
            RecordBufferConfig { flush_interval: Duration::from_secs(3600), batch: 2, ..config(10) },
        );
        sink.down.store(true, Ordering::SeqCst);
        buffer.push_all(vec![Rec::Event(1), Rec::Poisoned(2), Rec::Event(3)]);
        buffer.push(Rec::Turns { session: "a", count: 5 });
        sink.down.store(false, Ordering::SeqCst);
        let report = buffer.drain(Duration::from_secs(5)).await;
        assert_eq!(report, DrainReport { written: 3, lost: 0 });
        assert_eq!(sink.written(), [Rec::Event(1), Rec::Event(3), Rec::Turns { session: "a", count: 5 }]);
        assert_eq!(buffer.set_aside(), 1);
    }
}
