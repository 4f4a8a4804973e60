//! Writing the sessions record through the kit's [`RecordBuffer`]: facts that must be durable
//! before they are acknowledged (a switch, appended messages, a new or closed session) are
//! written through at once, and held when Postgres does not answer; turn counts are coalesced
//! per session and written in the background. What is held at shutdown is drained.

use std::sync::Arc;

use async_trait::async_trait;
use switchyard_kit::records::{BufferedRecord, RecordBuffer, RecordSink};
pub use switchyard_kit::records::{Durability, RecordBufferConfig};

use crate::store::{Record, RecordStore, StoreError};

/// The sessions service's record buffer.
pub type Recorder = RecordBuffer<Record>;

impl BufferedRecord for Record {
    /// Only a session's latest turn count matters.
    fn coalesce_key(&self) -> Option<String> {
        match self {
            Record::Turns { key, .. } => Some(key.store_key()),
            _ => None,
        }
    }

    fn supersedes(&self, waiting: &Self) -> bool {
        match (self, waiting) {
            (Record::Turns { turn_count, .. }, Record::Turns { turn_count: waiting, .. }) => turn_count > waiting,
            _ => true,
        }
    }

    fn key_fields(&self) -> String {
        let key = self.key();
        let (kind, detail) = match self {
            Record::SessionCreated(session) => ("session_created", format!("at={}", session.created_at)),
            Record::Turns { turn_count, at, .. } => ("turns", format!("turn_count={turn_count} at={at}")),
            Record::Switched { event, .. } => {
                ("switched", format!("sequence={} at={}", event.sequence, event.occurred_at))
            }
            Record::MessagesAppended { messages, .. } => {
                let seqs = messages.iter().map(|m| m.seq.to_string()).collect::<Vec<_>>().join(",");
                ("messages_appended", format!("seqs={seqs}"))
            }
            Record::Closed { at, .. } => ("closed", format!("at={at}")),
        };
        format!("tenant={} session={} kind={kind} {detail}", key.tenant, key.id)
    }
}

/// The record store as the buffer's sink.
struct Sink(Arc<dyn RecordStore>);

#[async_trait]
impl RecordSink<Record> for Sink {
    async fn write(&self, records: &[Record]) -> Result<(), StoreError> {
        self.0.write(records).await
    }
}

/// Starts the buffer writing to `store`.
pub fn start(store: Arc<dyn RecordStore>, config: RecordBufferConfig) -> Arc<Recorder> {
    RecordBuffer::start(Arc::new(Sink(store)), config)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::Utc;

    use super::*;
    use crate::{
        domain::{SessionId, SessionKey, TenantId},
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
        let recorder = start(
            store.clone(),
            RecordBufferConfig {
                capacity: 3,
                flush_interval: Duration::from_millis(20),
                ..RecordBufferConfig::default()
            },
        );
        assert_eq!(recorder.write_through(vec![closed("a")]).await, Durability::Written);

        store.set_available(false);
        assert_eq!(recorder.write_through(vec![closed("b")]).await, Durability::Buffered);
        store.set_available(true);
        // Earlier records are waiting: a new one queues behind them rather than overtaking.
        assert_eq!(recorder.write_through(vec![closed("c")]).await, Durability::Buffered);
        store.set_available(false);
        assert_eq!(recorder.write_through(vec![closed("d")]).await, Durability::Buffered);
        assert_eq!(recorder.write_through(vec![closed("e")]).await, Durability::Dropped);
        recorder.push(Record::Turns { key: key("f"), turn_count: 3, at: Utc::now() });
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
        assert_eq!(recorder.write_through(vec![closed("g")]).await, Durability::Written);
    }

    #[tokio::test]
    async fn turn_counts_are_coalesced_per_session_keeping_the_highest() {
        let store = Arc::new(MemoryRecordStore::default());
        store.set_available(false);
        let recorder = start(store.clone(), RecordBufferConfig::default());
        for count in [1, 3, 2] {
            recorder.push(Record::Turns { key: key("a"), turn_count: count, at: Utc::now() });
        }
        recorder.push(Record::Turns { key: key("b"), turn_count: 1, at: Utc::now() });
        assert_eq!(recorder.backlog(), 2);
    }
}
