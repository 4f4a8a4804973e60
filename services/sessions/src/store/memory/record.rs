//! The record and the roles in memory, with the Postgres store's semantics: idempotent writes
//! that never move a session backwards, events and messages kept even without a session row,
//! and times and TTLs held at the precision Postgres stores (microseconds, whole seconds).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use chrono::{DateTime, SubsecRound, Utc};

use crate::{
    domain::{LiveSession, Message, Role, RoleId, SessionKey, SessionStatus, SwitchEvent, TenantId},
    store::{Record, RecordStore, RoleStore, StoreError},
};

/// The record in memory.
///
/// [`set_available`](Self::set_available)`(false)` simulates an outage: until it is set back to
/// `true`, every method returns [`StoreError::Timeout`] and changes nothing.
pub struct MemoryRecordStore {
    available: AtomicBool,
    record: Mutex<SessionRecords>,
}

#[derive(Default)]
struct SessionRecords {
    sessions: HashMap<SessionKey, LiveSession>,
    /// Kept apart from `sessions` because they are stored even when the session row is missing.
    switches: HashMap<SessionKey, BTreeMap<u64, SwitchEvent>>,
    messages: HashMap<SessionKey, BTreeMap<u64, Message>>,
}

impl Default for MemoryRecordStore {
    fn default() -> Self {
        Self { available: AtomicBool::new(true), record: Mutex::default() }
    }
}

impl MemoryRecordStore {
    /// Makes the store reachable again (`true`) or simulates an outage (`false`).
    pub fn set_available(&self, available: bool) {
        self.available.store(available, Ordering::SeqCst);
    }

    fn lock(&self) -> Result<MutexGuard<'_, SessionRecords>, StoreError> {
        if !self.available.load(Ordering::SeqCst) {
            return Err(StoreError::Timeout);
        }
        Ok(self.record.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// What Postgres keeps of a time: microseconds.
fn stored_time(time: DateTime<Utc>) -> DateTime<Utc> {
    time.trunc_subsecs(6)
}

fn check_range(what: &str, value: u64, max: u64) -> Result<(), StoreError> {
    if value <= max {
        Ok(())
    } else {
        Err(StoreError::Corrupt(format!("{what} {value} is out of the range the record can store")))
    }
}

/// Refuses what the Postgres columns could not hold, before anything of the batch is applied.
fn check_storable(record: &Record) -> Result<(), StoreError> {
    const BIGINT: u64 = i64::MAX as u64;
    const INT: u64 = i32::MAX as u64;
    match record {
        Record::SessionCreated(session) => {
            check_range("turn_count", session.turn_count, BIGINT)?;
            check_range("switch_count", session.switch_count, BIGINT)?;
            check_range("message_count", session.message_count, BIGINT)?;
            check_range("ttl_seconds", session.ttl.as_secs(), BIGINT)
        }
        Record::Turns { turn_count, .. } => check_range("turn_count", *turn_count, BIGINT),
        Record::Switched { event, turn_count, .. } => {
            check_range("switch sequence", event.sequence, BIGINT)?;
            check_range("from_score", u64::from(event.from_score), INT)?;
            check_range("to_score", u64::from(event.to_score), INT)?;
            check_range("turn_count", *turn_count, BIGINT)
        }
        Record::MessagesAppended { messages, .. } => messages.iter().try_for_each(|message| {
            check_range("message seq", message.seq, BIGINT)?;
            DateTime::from_timestamp_millis(message.created_at_ms).map(|_| ()).ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "message time (ms) {} is out of the range the record can store",
                    message.created_at_ms
                ))
            })
        }),
        Record::Closed { .. } => Ok(()),
    }
}

impl SessionRecords {
    fn apply(&mut self, record: &Record) {
        match record {
            Record::SessionCreated(session) => {
                self.sessions.entry(session.key.clone()).or_insert_with(|| LiveSession {
                    ttl: Duration::from_secs(session.ttl.as_secs()),
                    created_at: stored_time(session.created_at),
                    updated_at: stored_time(session.updated_at),
                    recent: Vec::new(),
                    ..session.clone()
                });
            }
            Record::Turns { key, turn_count, at } => {
                if let Some(session) = self.sessions.get_mut(key) {
                    session.turn_count = session.turn_count.max(*turn_count);
                    session.updated_at = session.updated_at.max(stored_time(*at));
                }
            }
            Record::Switched { key, event, turn_count } => {
                self.switches
                    .entry(key.clone())
                    .or_default()
                    .entry(event.sequence)
                    .or_insert_with(|| SwitchEvent { occurred_at: stored_time(event.occurred_at), ..event.clone() });
                if let Some(session) = self.sessions.get_mut(key) {
                    // The role moves only with a switch at least as new as the last one applied.
                    if event.sequence >= session.switch_count {
                        session.role_id = event.to_role_id.clone();
                    }
                    session.switch_count = session.switch_count.max(event.sequence);
                    session.turn_count = session.turn_count.max(*turn_count);
                    session.updated_at = session.updated_at.max(stored_time(event.occurred_at));
                }
            }
            Record::MessagesAppended { key, messages } => {
                let stored = self.messages.entry(key.clone()).or_default();
                for message in messages {
                    stored.entry(message.seq).or_insert_with(|| message.clone());
                }
                let last_seq = messages.iter().map(|message| message.seq).max();
                let last_time = messages.iter().filter_map(|m| DateTime::from_timestamp_millis(m.created_at_ms)).max();
                if let (Some(session), Some(last_seq), Some(last_time)) =
                    (self.sessions.get_mut(key), last_seq, last_time)
                {
                    session.message_count = session.message_count.max(last_seq);
                    session.updated_at = session.updated_at.max(last_time);
                }
            }
            Record::Closed { key, at } => {
                if let Some(session) = self.sessions.get_mut(key) {
                    session.status = SessionStatus::Closed;
                    session.updated_at = session.updated_at.max(stored_time(*at));
                }
            }
        }
    }
}

#[async_trait]
impl RecordStore for MemoryRecordStore {
    async fn write(&self, records: &[Record]) -> Result<(), StoreError> {
        let mut record = self.lock()?;
        // Applying cannot fail once every record is known to be storable: all or nothing.
        records.iter().try_for_each(check_storable)?;
        for each in records {
            record.apply(each);
        }
        Ok(())
    }

    async fn load_session(&self, key: &SessionKey, recent: usize) -> Result<Option<LiveSession>, StoreError> {
        let record = self.lock()?;
        let Some(session) = record.sessions.get(key) else {
            return Ok(None);
        };
        let mut newest: Vec<Message> = record
            .messages
            .get(key)
            .map(|messages| messages.values().rev().take(recent).cloned().collect())
            .unwrap_or_default();
        newest.reverse();
        Ok(Some(LiveSession { recent: newest, ..session.clone() }))
    }

    async fn history(&self, key: &SessionKey, after: u64, limit: u32) -> Result<Vec<SwitchEvent>, StoreError> {
        let record = self.lock()?;
        let Some(switches) = record.switches.get(key) else {
            return Ok(Vec::new());
        };
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        Ok(switches
            .range(after.saturating_add(1)..)
            .filter(|(sequence, _)| **sequence > after)
            .take(limit)
            .map(|(_, event)| event.clone())
            .collect())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.lock().map(|_| ())
    }
}

/// Roles in memory, by tenant (`None`, the built-ins, first) and id.
#[derive(Default)]
pub struct MemoryRoleStore {
    roles: Mutex<BTreeMap<(Option<TenantId>, RoleId), Role>>,
}

impl MemoryRoleStore {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<(Option<TenantId>, RoleId), Role>> {
        self.roles.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn role_key(role: &Role) -> (Option<TenantId>, RoleId) {
    (role.tenant.clone(), role.id.clone())
}

#[async_trait]
impl RoleStore for MemoryRoleStore {
    async fn list(&self) -> Result<Vec<Role>, StoreError> {
        Ok(self.lock().values().cloned().collect())
    }

    async fn insert(&self, role: &Role) -> Result<bool, StoreError> {
        let mut roles = self.lock();
        if roles.contains_key(&role_key(role)) {
            return Ok(false);
        }
        let stored =
            Role { created_at: stored_time(role.created_at), updated_at: stored_time(role.updated_at), ..role.clone() };
        roles.insert(role_key(role), stored);
        Ok(true)
    }

    async fn update(&self, role: &Role) -> Result<bool, StoreError> {
        let mut roles = self.lock();
        let Some(stored) = roles.get_mut(&role_key(role)) else {
            return Ok(false);
        };
        *stored = Role { created_at: stored.created_at, updated_at: stored_time(role.updated_at), ..role.clone() };
        Ok(true)
    }

    async fn delete(&self, tenant: Option<&TenantId>, id: &RoleId) -> Result<bool, StoreError> {
        Ok(self.lock().remove(&(tenant.cloned(), id.clone())).is_some())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
