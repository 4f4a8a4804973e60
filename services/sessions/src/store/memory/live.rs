//! The in-memory twin of the Redis live store, with the same semantics: sliding TTL expiry,
//! window trimming, conditional turns, and times and TTLs kept at the precision Redis keeps
//! (milliseconds, whole seconds).

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::{
    domain::{LiveSession, Message, SessionKey, SessionStatus},
    store::{AppendOutcome, LiveStore, StoreError, TurnOutcome, TurnUpdate, batch_append_id},
};

struct Entry {
    /// The session with its recent messages.
    session: LiveSession,
    expires_at: Instant,
}

/// Live sessions in a map; an expired entry behaves as missing (and is dropped when next seen).
#[derive(Default)]
pub struct MemoryLiveStore {
    sessions: Mutex<HashMap<SessionKey, Entry>>,
}

impl std::fmt::Debug for MemoryLiveStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryLiveStore").field("sessions", &self.lock().len()).finish()
    }
}

impl MemoryLiveStore {
    /// The map stays consistent even if a holder panicked: every update is made in one step.
    fn lock(&self) -> MutexGuard<'_, HashMap<SessionKey, Entry>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the live (unexpired) entry for `key`, or returns `None`.
    fn with_live<T>(&self, key: &SessionKey, f: impl FnOnce(&mut Entry) -> T) -> Option<T> {
        let mut sessions = self.lock();
        let now = Instant::now();
        match sessions.get_mut(key) {
            Some(entry) if entry.expires_at > now => Some(f(entry)),
            Some(_) => {
                sessions.remove(key);
                None
            }
            None => None,
        }
    }

    fn put_unless_exists(&self, session: &LiveSession) -> bool {
        let mut sessions = self.lock();
        let now = Instant::now();
        if sessions.get(&session.key).is_some_and(|entry| entry.expires_at > now) {
            return false;
        }
        let session = LiveSession {
            created_at: to_millis(session.created_at),
            updated_at: to_millis(session.updated_at),
            ttl: whole_seconds(session.ttl),
            ..session.clone()
        };
        let expires_at = now + session.ttl;
        sessions.insert(session.key.clone(), Entry { session, expires_at });
        true
    }
}

#[async_trait]
impl LiveStore for MemoryLiveStore {
    async fn create(&self, session: &LiveSession) -> Result<bool, StoreError> {
        Ok(self.put_unless_exists(session))
    }

    async fn restore(&self, session: &LiveSession) -> Result<bool, StoreError> {
        Ok(self.put_unless_exists(session))
    }

    async fn load(&self, key: &SessionKey) -> Result<Option<LiveSession>, StoreError> {
        Ok(self.with_live(key, |entry| entry.session.clone()))
    }

    async fn apply_turn(&self, key: &SessionKey, update: &TurnUpdate) -> Result<TurnOutcome, StoreError> {
        let outcome = self.with_live(key, |entry| {
            let session = &mut entry.session;
            if session.status == SessionStatus::Closed {
                return TurnOutcome::Closed;
            }
            if session.role_id != update.expected_role || session.switch_count != update.expected_switch_count {
                return TurnOutcome::Conflict;
            }
            if let Some(role) = &update.new_role {
                session.role_id = role.clone();
                session.switch_count += 1;
            }
            if update.count_turn {
                session.turn_count += 1;
            }
            session.updated_at = to_millis(update.now);
            entry.expires_at = Instant::now() + session.ttl;
            // The outcome carries no messages: the recent window is set aside while the rest is
            // copied, rather than copied with it and dropped.
            let recent = std::mem::take(&mut session.recent);
            let applied = session.clone();
            session.recent = recent;
            TurnOutcome::Applied(applied)
        });
        Ok(outcome.unwrap_or(TurnOutcome::Missing))
    }

    async fn append_messages(
        &self,
        key: &SessionKey,
        messages: &[Message],
        window: usize,
        now: DateTime<Utc>,
    ) -> Result<AppendOutcome, StoreError> {
        let outcome = self.with_live(key, |entry| {
            let session = &mut entry.session;
            if session.status == SessionStatus::Closed {
                return AppendOutcome::Closed;
            }
            let batch_id = batch_append_id(messages);
            if !batch_id.is_empty() && session.recent.iter().any(|m| m.append_id == batch_id) {
                return AppendOutcome::Repeated { message_count: session.message_count };
            }
            let first_seq = session.message_count + 1;
            let stored: Vec<Message> =
                (first_seq..).zip(messages).map(|(seq, message)| Message { seq, ..message.clone() }).collect();
            session.recent.extend(stored.iter().cloned());
            let excess = session.recent.len().saturating_sub(window);
            session.recent.drain(..excess);
            session.message_count += stored.len() as u64;
            session.updated_at = to_millis(now);
            entry.expires_at = Instant::now() + session.ttl;
            AppendOutcome::Applied { messages: stored, message_count: session.message_count }
        });
        Ok(outcome.unwrap_or(AppendOutcome::Missing))
    }

    async fn close(&self, key: &SessionKey, now: DateTime<Utc>) -> Result<Option<LiveSession>, StoreError> {
        Ok(self.with_live(key, |entry| {
            let session = &mut entry.session;
            if session.status != SessionStatus::Closed {
                session.status = SessionStatus::Closed;
                session.updated_at = to_millis(now);
            }
            session.clone()
        }))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Redis keeps times as milliseconds since the epoch.
fn to_millis(time: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(time.timestamp_millis()).unwrap_or(time)
}

/// Redis keeps TTLs as whole seconds, rounded up, at least 1.
fn whole_seconds(ttl: Duration) -> Duration {
    Duration::from_secs((ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).max(1))
}
