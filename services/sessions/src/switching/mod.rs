//! The context-switching core (docs/requirements.md#sessions-switching): creates,
//! reads and closes sessions, processes queries with context switching, switches by hand,
//! and records the conversation and the switch history.
//!
//! Every change to a live session is a conditional update made from the state just read
//! (its role and switch count), retried on conflict (see [`retry`]), so counters and history
//! stay consistent however many calls arrive at once. A switch is recorded (in Postgres, or
//! in the outage buffer) before it is acknowledged.

pub mod decision;
mod hints;
pub mod requests;
pub mod retry;
mod turns;

use std::sync::Arc;

use chrono::Utc;
use switchyard_kit::Identity;

use crate::{
    clients::TriggersClient,
    domain::{LiveSession, Role, SessionId, SessionKey, SessionLimits, SessionStatus, SwitchEvent, TenantId},
    error::SessionsError,
    paging::{self, HISTORY_PAGE},
    recorder::{Durability, Recorder},
    roles::RoleCatalog,
    store::{AppendOutcome, LiveStore, Record, RecordStore},
};

use self::{hints::SessionHints, retry::Attempt};
pub use self::{
    requests::{MessageBatch, NewMessage, NewSession, Query, ValidSession},
    turns::Turn,
};

/// The current time at the precision every store keeps (milliseconds), so a session reads
/// back the same from Redis, Postgres or memory.
fn now() -> chrono::DateTime<Utc> {
    chrono::DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap_or_else(Utc::now)
}

pub struct ContextSwitcher {
    live: Arc<dyn LiveStore>,
    records: Arc<dyn RecordStore>,
    recorder: Arc<Recorder>,
    roles: Arc<RoleCatalog>,
    triggers: TriggersClient,
    limits: SessionLimits,
    hints: SessionHints,
}

impl ContextSwitcher {
    pub fn new(
        live: Arc<dyn LiveStore>,
        records: Arc<dyn RecordStore>,
        recorder: Arc<Recorder>,
        roles: Arc<RoleCatalog>,
        triggers: TriggersClient,
        limits: SessionLimits,
    ) -> Self {
        Self { live, records, recorder, roles, triggers, limits, hints: SessionHints::default() }
    }

    pub fn recorder(&self) -> &Arc<Recorder> {
        &self.recorder
    }

    pub fn limits(&self) -> &SessionLimits {
        &self.limits
    }

    fn key(tenant: &TenantId, session_id: &str) -> Result<SessionKey, SessionsError> {
        Ok(SessionKey { tenant: tenant.clone(), id: SessionId::parse(session_id)? })
    }

    /// The session's role, as its tenant sees it. A role deleted while sessions still use it
    /// is stood in for by a bare role with its id, so those sessions can still switch away.
    fn role_of(&self, session: &LiveSession) -> Role {
        self.roles.get(&session.key.tenant, &session.role_id).unwrap_or_else(|| {
            tracing::warn!(session_id = %session.key.id, role_id = %session.role_id, "session's role was deleted");
            Role {
                tenant: Some(session.key.tenant.clone()),
                id: session.role_id.clone(),
                name: session.role_id.to_string(),
                description: String::new(),
                domains: Vec::new(),
                system_prompt: String::new(),
                custom_triggers: Vec::new(),
                preferred_model: None,
                created_at: session.created_at,
                updated_at: session.updated_at,
            }
        })
    }

    /// Creates a session of the caller's tenant, owned by the caller's user (if any).
    pub async fn create(&self, caller: &Identity, request: NewSession) -> Result<(LiveSession, Role), SessionsError> {
        let tenant = &caller.tenant;
        let ValidSession { id, chosen_id, role, ttl, metadata } =
            request.validate(&self.limits, |id| self.roles.require(tenant, id, "initial_role_id"))?;
        let key = SessionKey { tenant: tenant.clone(), id };
        // A caller-chosen id that exists only in the record (its live copy expired) is taken.
        if chosen_id && self.load(&key).await.is_ok() {
            return Err(SessionsError::SessionExists(key.id.to_string()));
        }
        let now = now();
        let session = LiveSession {
            key: key.clone(),
            owner: caller.user.clone(),
            role_id: role.id.clone(),
            status: SessionStatus::Active,
            turn_count: 0,
            switch_count: 0,
            message_count: 0,
            created_at: now,
            updated_at: now,
            ttl,
            metadata,
            recent: Vec::new(),
        };
        let created =
            self.live.create(&session).await.map_err(|err| SessionsError::unavailable("creating the session", err))?;
        if !created {
            return Err(SessionsError::SessionExists(key.id.to_string()));
        }
        self.durable(
            self.recorder.write_through(vec![Record::SessionCreated(session.clone())]).await,
            "session creation",
        );
        tracing::info!(tenant = %tenant, session_id = %key.id, role_id = %role.id, "session created");
        Ok((session, role))
    }

    /// The live session, rebuilt from the record when the live copy is gone.
    async fn load(&self, key: &SessionKey) -> Result<LiveSession, SessionsError> {
        if let Some(session) =
            self.live.load(key).await.map_err(|err| SessionsError::unavailable("reading the session", err))?
        {
            return Ok(session);
        }
        let rebuilt = self
            .records
            .load_session(key, self.limits.message_window)
            .await
            .map_err(|err| SessionsError::unavailable("the session is not live and the record is unreachable", err))?
            .ok_or_else(|| SessionsError::SessionNotFound(key.id.to_string()))?;
        if self.live.restore(&rebuilt).await.map_err(|err| SessionsError::unavailable("restoring the session", err))? {
            tracing::info!(session_id = %key.id, role_id = %rebuilt.role_id, "live session rebuilt from the record");
            return Ok(rebuilt);
        }
        // Another call restored it first; use that copy.
        self.live
            .load(key)
            .await
            .map_err(|err| SessionsError::unavailable("reading the session", err))?
            .ok_or_else(|| SessionsError::SessionNotFound(key.id.to_string()))
    }

    /// The live session, if `caller` may read it: another user's session is not found, as
    /// one that does not exist (unless the caller administers the tenant).
    async fn load_readable(&self, caller: &Identity, key: &SessionKey) -> Result<LiveSession, SessionsError> {
        let session = self.load(key).await?;
        if !caller.may_read(session.owner.as_ref()) {
            return Err(SessionsError::SessionNotFound(key.id.to_string()));
        }
        Ok(session)
    }

    /// The live session, if `caller` may use and change it: another user's session is not
    /// found, even for an administrator of the tenant (who may only read it).
    async fn load_changeable(&self, caller: &Identity, key: &SessionKey) -> Result<LiveSession, SessionsError> {
        let session = self.load(key).await?;
        if !caller.may_change(session.owner.as_ref()) {
            return Err(SessionsError::SessionNotFound(key.id.to_string()));
        }
        Ok(session)
    }

    /// The live session, if `caller` may change it and it is still open.
    async fn load_open_changeable(&self, caller: &Identity, key: &SessionKey) -> Result<LiveSession, SessionsError> {
        let session = self.load_changeable(caller, key).await?;
        if session.status == SessionStatus::Closed {
            return Err(SessionsError::SessionClosed(key.id.to_string()));
        }
        Ok(session)
    }

    pub async fn get(&self, caller: &Identity, session_id: &str) -> Result<(LiveSession, Role), SessionsError> {
        let session = self.load_readable(caller, &Self::key(&caller.tenant, session_id)?).await?;
        let role = self.role_of(&session);
        Ok((session, role))
    }

    pub async fn close(&self, caller: &Identity, session_id: &str) -> Result<LiveSession, SessionsError> {
        let key = Self::key(&caller.tenant, session_id)?;
        self.load_changeable(caller, &key).await?;
        let now = now();
        let session = self
            .live
            .close(&key, now)
            .await
            .map_err(|err| SessionsError::unavailable("closing the session", err))?
            .ok_or_else(|| SessionsError::SessionNotFound(key.id.to_string()))?;
        self.durable(
            self.recorder.write_through(vec![Record::Closed { key: key.clone(), at: now }]).await,
            "session close",
        );
        tracing::info!(session_id = %key.id, "session closed");
        Ok(session)
    }

    /// Switch events, oldest first, a page at a time (the token is the last sequence seen).
    pub async fn history(
        &self,
        caller: &Identity,
        session_id: &str,
        page_size: u32,
        page_token: &str,
    ) -> Result<(Vec<SwitchEvent>, Option<String>), SessionsError> {
        let key = Self::key(&caller.tenant, session_id)?;
        let page_size = HISTORY_PAGE.size(page_size)?;
        let after = paging::after(page_token, paging::sequence)?.unwrap_or(0);
        self.load_readable(caller, &key).await?;
        let events = self
            .records
            .history(&key, after, page_size + 1)
            .await
            .map_err(|err| SessionsError::unavailable("reading the switch history", err))?;
        Ok(paging::page(events, page_size as usize, |event| event.sequence.to_string()))
    }

    /// Records conversation turns (the router calls this for each user/assistant turn).
    pub async fn append_messages(
        &self,
        caller: &Identity,
        session_id: &str,
        messages: Vec<NewMessage>,
        append_id: String,
    ) -> Result<LiveSession, SessionsError> {
        let key = Self::key(&caller.tenant, session_id)?;
        let batch = MessageBatch::new(messages, &self.limits)?.named(append_id)?;
        let session = self.load_open_changeable(caller, &key).await?;
        let now = now();
        let messages = batch.into_messages(&session.role_id, &self.limits, now.timestamp_millis())?;
        let (key, messages, before) = (&key, &messages, &session);
        retry::on_conflict(&key.id, move || async move {
            let outcome = self
                .live
                .append_messages(key, messages, self.limits.message_window, now)
                .await
                .map_err(|err| SessionsError::unavailable("appending messages", err))?;
            match outcome {
                AppendOutcome::Applied { messages, message_count } => {
                    let record = Record::MessagesAppended { key: key.clone(), messages };
                    self.durable(self.recorder.write_through(vec![record]).await, "messages");
                    Ok(Attempt::Done(self.appended(key, before, message_count).await))
                }
                AppendOutcome::Repeated { message_count } => {
                    // An earlier try of this batch was appended (and recorded then): its
                    // retry answers as that one would have.
                    tracing::debug!(session_id = %key.id, "batch already appended; not appending it again");
                    Ok(Attempt::Done(self.appended(key, before, message_count).await))
                }
                AppendOutcome::Missing => {
                    // The live copy expired since it was read: rebuild it from the record.
                    self.load(key).await?;
                    Ok(Attempt::Conflict)
                }
                AppendOutcome::Closed => Err(SessionsError::SessionClosed(key.id.to_string())),
            }
        })
        .await
    }

    /// The session after its messages were appended (and recorded): read back, or, when that
    /// fails (its Redis gone this instant), the copy read `before` with the new count. The
    /// call has done its work by then, and failing it would make the caller's retry append
    /// the messages a second time.
    async fn appended(&self, key: &SessionKey, before: &LiveSession, message_count: u64) -> LiveSession {
        match self.load(key).await {
            Ok(session) => session,
            Err(err) => {
                tracing::warn!(session_id = %key.id, error = %err, "messages appended; the session could not be read back, answering from the copy read before");
                LiveSession { message_count, ..before.clone() }
            }
        }
    }

    fn durable(&self, durability: Durability, what: &str) {
        match durability {
            Durability::Written => {}
            Durability::Buffered => tracing::debug!(what, "record buffered until the record store answers"),
            // The buffer counts every drop (and logs them per interval); this names what was lost.
            Durability::Dropped => {
                switchyard_kit::error_throttled!(what, what, "record dropped: the outage buffer is full")
            }
            // The buffer logged the refused record with its key fields.
            Durability::SetAside => tracing::debug!(what, "record refused by the record store, set aside"),
        }
    }
}
