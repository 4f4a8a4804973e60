//! Where sessions and roles live.
//!
//! - [`LiveStore`]: the live session (role, counters, a window of recent messages) with a
//!   sliding TTL — Redis in production. Every update is atomic and conditional on the state
//!   the caller decided from, so concurrent calls on one session never interleave.
//! - [`RecordStore`]: the record — session lifecycle, every switch, conversation turns —
//!   Postgres in production; enough to rebuild a live session Redis lost.
//! - [`RoleStore`]: the expert roles — Postgres in production.
//!
//! Each has an in-memory twin for `switchyard dev`, and one behavioural test suite runs
//! against both implementations.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::{LiveSession, Message, Role, RoleId, SessionKey, SwitchEvent, TenantId};

pub mod memory;
pub mod postgres;
pub mod redis;

pub use switchyard_kit::store::StoreError;

/// A conditional update of a live session, made from the state the caller read.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnUpdate {
    /// Applies only while the session still has this role and this switch count; otherwise
    /// the outcome is [`TurnOutcome::Conflict`] and the caller re-reads and decides again.
    pub expected_role: RoleId,
    pub expected_switch_count: u64,
    /// Switch to this role (incrementing the switch count), or keep the role.
    pub new_role: Option<RoleId>,
    /// Count a query turn (ProcessQuery does; a manual SwitchContext does not).
    pub count_turn: bool,
    pub now: DateTime<Utc>,
}

/// What a conditional update did.
#[derive(Debug, Clone, PartialEq)]
#[allow(
    clippy::large_enum_variant,
    reason = "one outcome per call, matched and moved out at once: a box would only add an allocation"
)]
pub enum TurnOutcome {
    /// Applied; the session after the update (without `recent` messages).
    Applied(LiveSession),
    /// The session changed role or switch count since it was read.
    Conflict,
    /// No live copy (expired, evicted, never created here, or another tenant's).
    Missing,
    /// The session is closed; nothing was changed.
    Closed,
}

/// The `append_id` of a batch of messages (every message of a batch carries the same), or ""
/// when it has none.
pub fn batch_append_id(messages: &[Message]) -> &str {
    messages.first().map_or("", |m| m.append_id.as_str())
}

/// What appending messages did.
#[derive(Debug, Clone, PartialEq)]
pub enum AppendOutcome {
    /// Appended; the messages as stored, with the `seq` numbers they were given (continuing
    /// from the session's `message_count`), and the session's new `message_count`.
    Applied {
        messages: Vec<Message>,
        message_count: u64,
    },
    /// Nothing appended: a message of the batch's `append_id` is already among the recent
    /// messages (an earlier try of this batch got through). The session's `message_count`.
    Repeated {
        message_count: u64,
    },
    Missing,
    Closed,
}

#[async_trait]
pub trait LiveStore: Send + Sync + 'static {
    /// Creates a live session (with its `recent` messages, usually none) unless one with the
    /// same key exists; `false` when it did. Sets the TTL from `session.ttl`.
    async fn create(&self, session: &LiveSession) -> Result<bool, StoreError>;

    /// Puts back a session rebuilt from the record, unless a live copy appeared meanwhile
    /// (then `false`, and the caller reads that one).
    async fn restore(&self, session: &LiveSession) -> Result<bool, StoreError>;

    /// The live session with its recent messages (oldest first), or `None`. Reading does not
    /// extend the TTL.
    async fn load(&self, key: &SessionKey) -> Result<Option<LiveSession>, StoreError>;

    /// Applies `update` atomically if the session is active and still in the expected state;
    /// extends the TTL (by the session's own `ttl`) and sets `updated_at` to `update.now`.
    async fn apply_turn(&self, key: &SessionKey, update: &TurnUpdate) -> Result<TurnOutcome, StoreError>;

    /// Appends messages atomically (numbering them after the current `message_count`; the
    /// `seq` passed in is ignored), trims the window to the newest `window` messages, extends
    /// the TTL and sets `updated_at` to `now`. When the batch has an `append_id` (every message
    /// of a batch carries the same) that a recent message already has, appends nothing and
    /// answers [`AppendOutcome::Repeated`].
    async fn append_messages(
        &self,
        key: &SessionKey,
        messages: &[Message],
        window: usize,
        now: DateTime<Utc>,
    ) -> Result<AppendOutcome, StoreError>;

    /// Marks the session closed (idempotent) and returns it, or `None` when missing.
    async fn close(&self, key: &SessionKey, now: DateTime<Utc>) -> Result<Option<LiveSession>, StoreError>;

    async fn ping(&self) -> Result<(), StoreError>;
}

/// One fact for the record. Writing is idempotent: a record written twice (say, retried after
/// an ambiguous failure) is stored once.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A session was created (`recent` is ignored).
    SessionCreated(LiveSession),
    /// Query turns were counted; only the latest count matters.
    Turns {
        key: SessionKey,
        turn_count: u64,
        at: DateTime<Utc>,
    },
    /// A switch; also sets the session's current role, switch count and turn count.
    Switched {
        key: SessionKey,
        event: SwitchEvent,
        turn_count: u64,
    },
    /// Messages appended, each with its `seq`; also sets the session's message count.
    MessagesAppended {
        key: SessionKey,
        messages: Vec<Message>,
    },
    Closed {
        key: SessionKey,
        at: DateTime<Utc>,
    },
}

impl Record {
    pub fn key(&self) -> &SessionKey {
        match self {
            Self::SessionCreated(session) => &session.key,
            Self::Turns { key, .. }
            | Self::Switched { key, .. }
            | Self::MessagesAppended { key, .. }
            | Self::Closed { key, .. } => key,
        }
    }
}

#[async_trait]
pub trait RecordStore: Send + Sync + 'static {
    /// Writes records in order, all or nothing (one transaction).
    async fn write(&self, records: &[Record]) -> Result<(), StoreError>;

    /// Rebuilds a live session: its row (role, counters, status, times, TTL, metadata) and its
    /// newest `recent` messages, oldest first. `None` when there is no record of it for that
    /// tenant.
    async fn load_session(&self, key: &SessionKey, recent: usize) -> Result<Option<LiveSession>, StoreError>;

    /// Switch events with `sequence > after`, oldest first, at most `limit`.
    async fn history(&self, key: &SessionKey, after: u64, limit: u32) -> Result<Vec<SwitchEvent>, StoreError>;

    async fn ping(&self) -> Result<(), StoreError>;

    /// The history's upkeep, run at start and hourly: the coming months' partitions made and,
    /// with a `cut`, the switches and messages of the whole months before the month the cut
    /// falls in removed (the month of the cut is kept whole). Returns the rows removed. The
    /// in-memory record keeps everything.
    async fn keep_history(&self, _cut: Option<DateTime<Utc>>) -> Result<u64, StoreError> {
        Ok(0)
    }
}

/// Roles are kept by tenant and id: the built-in roles (`Role::tenant` `None`) and each
/// tenant's own, which may reuse a built-in's id (that tenant's override) or another tenant's.
#[async_trait]
pub trait RoleStore: Send + Sync + 'static {
    /// Every role, the built-in ones first, then by tenant, each ordered by id.
    async fn list(&self) -> Result<Vec<Role>, StoreError>;

    /// Inserts a role under its tenant; `false` when that tenant (or the built-ins) has the id.
    async fn insert(&self, role: &Role) -> Result<bool, StoreError>;

    /// Replaces a role of its tenant (keeping `created_at` as stored); `false` when it does
    /// not exist there.
    async fn update(&self, role: &Role) -> Result<bool, StoreError>;

    /// Deletes a role of `tenant` (`None`: a built-in); `false` when it does not exist there.
    async fn delete(&self, tenant: Option<&TenantId>, id: &RoleId) -> Result<bool, StoreError>;

    async fn ping(&self) -> Result<(), StoreError>;
}
