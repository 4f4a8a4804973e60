//! The session manager (spec: ContextSwitchingService): creates sessions, processes queries
//! with context switching, switches by hand, records the conversation.
//!
//! Every change to a live session is a conditional update made from the state just read
//! (its role and switch count). Concurrent calls on one session therefore serialise: the
//! loser of a race re-reads, decides again and retries, so counters and history stay
//! consistent however many calls arrive at once. A switch is recorded (in Postgres, or in the
//! outage buffer) before it is acknowledged.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use chrono::Utc;
use switchyard_proto::triggers::v1::{BestRoleReason, RoleMatch};

use crate::{
    domain::{
        LiveSession, Message, MessageRole, Role, RoleId, SessionId, SessionKey, SessionLimits, SessionStatus,
        SwitchEvent, SwitchReason, TenantId, check_query, excerpt, parse_role_id,
    },
    error::SessionsError,
    recorder::{Durability, Recorder},
    roles::RoleCatalog,
    store::{AppendOutcome, LiveStore, Record, RecordStore, TurnOutcome, TurnUpdate},
    transition::{system_prompt, transition_context},
    triggers::{Detection, TriggersClient, TriggersError},
};

/// The current time at the precision every store keeps (milliseconds), so a session reads
/// back the same from Redis, Postgres or memory.
fn now() -> chrono::DateTime<Utc> {
    chrono::DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap_or_else(Utc::now)
}

/// How many times a call re-reads and retries after losing a race on one session.
const MAX_ATTEMPTS: usize = 64;
/// Characters of the query kept with a switch event.
const EXCERPT_CHARS: usize = 200;

/// This replica's last known (role, switch count) per session: a hint that lets a turn that
/// keeps the role skip reading the session first. Bounded: when full it starts over (a
/// missing hint only means one extra read).
#[derive(Default)]
struct SessionHints {
    known: std::sync::Mutex<std::collections::HashMap<SessionKey, (RoleId, u64)>>,
}

impl SessionHints {
    const CAPACITY: usize = 100_000;

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<SessionKey, (RoleId, u64)>> {
        self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn get(&self, key: &SessionKey) -> Option<(RoleId, u64)> {
        self.lock().get(key).cloned()
    }

    fn remember(&self, key: &SessionKey, role: RoleId, switch_count: u64) {
        let mut known = self.lock();
        if known.len() >= Self::CAPACITY && !known.contains_key(key) {
            known.clear();
        }
        known.insert(key.clone(), (role, switch_count));
    }

    fn forget(&self, key: &SessionKey) {
        self.lock().remove(key);
    }
}

/// A new session as a caller asks for it.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    pub session_id: String,
    pub initial_role_id: String,
    pub metadata: BTreeMap<String, String>,
    pub ttl: Option<Duration>,
}

/// The result of processing a query or switching by hand.
#[derive(Debug, Clone)]
pub struct Turn {
    pub session: LiveSession,
    pub role: Role,
    pub switched: bool,
    pub previous_role_id: RoleId,
    pub reason: SwitchReason,
    pub reason_detail: String,
    pub scores: Vec<RoleMatch>,
    pub transition_context: String,
    pub system_prompt: String,
}

/// A message to append, before validation.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub role: Option<MessageRole>,
    pub content: String,
    pub role_id: String,
}

pub struct SessionManager {
    live: Arc<dyn LiveStore>,
    records: Arc<dyn RecordStore>,
    recorder: Arc<Recorder>,
    roles: Arc<RoleCatalog>,
    triggers: TriggersClient,
    limits: SessionLimits,
    hints: SessionHints,
}

/// What the manager decided for one attempt.
struct Decision {
    new_role: Option<Role>,
    reason: SwitchReason,
    detail: String,
    scores: Vec<RoleMatch>,
    from_score: u32,
    to_score: u32,
}

impl SessionManager {
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

    pub fn roles(&self) -> &Arc<RoleCatalog> {
        &self.roles
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

    /// The session's role. A role deleted while sessions still use it is stood in for by a
    /// bare role with its id, so those sessions can still switch away from it.
    fn role_of(&self, session: &LiveSession) -> Result<Role, SessionsError> {
        Ok(self.roles.get(&session.role_id).unwrap_or_else(|| {
            tracing::warn!(session_id = %session.key.id, role_id = %session.role_id, "session's role was deleted");
            Role {
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
        }))
    }

    pub async fn create(&self, tenant: &TenantId, request: NewSession) -> Result<(LiveSession, Role), SessionsError> {
        let id =
            if request.session_id.is_empty() { SessionId::generate() } else { SessionId::parse(&request.session_id)? };
        let role_id = if request.initial_role_id.is_empty() {
            crate::defaults::GENERAL_ASSISTANT
        } else {
            &request.initial_role_id
        };
        let role = self.roles.require(role_id, "initial_role_id")?;
        let ttl = match request.ttl {
            None => self.limits.default_ttl,
            Some(ttl) if ttl < Duration::from_secs(1) || ttl > self.limits.max_ttl => {
                return Err(SessionsError::invalid(
                    "ttl",
                    format!("must be between 1s and {}s, got {}s", self.limits.max_ttl.as_secs(), ttl.as_secs()),
                ));
            }
            Some(ttl) => ttl,
        };
        if request.metadata.len() > self.limits.max_metadata_entries {
            return Err(SessionsError::invalid(
                "metadata",
                format!("{} entries, over the limit of {}", request.metadata.len(), self.limits.max_metadata_entries),
            ));
        }
        if let Some((name, _)) = request.metadata.iter().find(|(k, v)| k.is_empty() || k.len() > 128 || v.len() > 1024)
        {
            return Err(SessionsError::invalid(
                format!("metadata[{name}]"),
                "keys must be 1 to 128 bytes and values at most 1024",
            ));
        }
        let key = SessionKey { tenant: tenant.clone(), id };
        // A caller-chosen id that exists only in the record (its live copy expired) is taken.
        if !request.session_id.is_empty() && self.load(&key).await.is_ok() {
            return Err(SessionsError::SessionExists(key.id.to_string()));
        }
        let now = now();
        let session = LiveSession {
            key: key.clone(),
            role_id: role.id.clone(),
            status: SessionStatus::Active,
            turn_count: 0,
            switch_count: 0,
            message_count: 0,
            created_at: now,
            updated_at: now,
            ttl,
            metadata: request.metadata,
            recent: Vec::new(),
        };
        let created =
            self.live.create(&session).await.map_err(|err| SessionsError::unavailable("creating the session", err))?;
        if !created {
            return Err(SessionsError::SessionExists(key.id.to_string()));
        }
        self.durable(self.recorder.record(vec![Record::SessionCreated(session.clone())]).await, "session creation");
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

    pub async fn get(&self, tenant: &TenantId, session_id: &str) -> Result<(LiveSession, Role), SessionsError> {
        let session = self.load(&Self::key(tenant, session_id)?).await?;
        let role = self.role_of(&session)?;
        Ok((session, role))
    }

    pub async fn close(&self, tenant: &TenantId, session_id: &str) -> Result<LiveSession, SessionsError> {
        let key = Self::key(tenant, session_id)?;
        self.load(&key).await?;
        let now = now();
        let session = self
            .live
            .close(&key, now)
            .await
            .map_err(|err| SessionsError::unavailable("closing the session", err))?
            .ok_or_else(|| SessionsError::SessionNotFound(key.id.to_string()))?;
        self.durable(self.recorder.record(vec![Record::Closed { key: key.clone(), at: now }]).await, "session close");
        tracing::info!(session_id = %key.id, "session closed");
        Ok(session)
    }

    /// Processes a query with context switching (spec: process_query_with_context_switching).
    pub async fn process_query(
        &self,
        tenant: &TenantId,
        session_id: &str,
        query: &str,
        custom_instructions: Option<&str>,
        force_role_id: Option<&str>,
    ) -> Result<Turn, SessionsError> {
        let key = Self::key(tenant, session_id)?;
        check_query(query, &self.limits)?;
        if let Some(extra) = custom_instructions
            && extra.len() > self.limits.max_query_bytes
        {
            return Err(SessionsError::invalid(
                "custom_instructions",
                format!("over the limit of {} bytes", self.limits.max_query_bytes),
            ));
        }
        let forced = match force_role_id.filter(|id| !id.is_empty()) {
            Some(id) => Some(self.roles.require(id, "force_role_id")?),
            None => None,
        };
        // Fast path: from this replica's last known state of the session, decide and apply a
        // turn that keeps the role in one conditional update — no read first. A stale hint
        // only costs a Conflict and the full path below.
        if let Some((role_id, switch_count)) = self.hints.get(&key) {
            let current = self.roles.get(&role_id);
            if let Some(current) = current {
                let decision = self.decision(query, &current, forced.as_ref()).await?;
                if decision.new_role.is_none() {
                    let update = TurnUpdate {
                        expected_role: role_id,
                        expected_switch_count: switch_count,
                        new_role: None,
                        count_turn: true,
                        now: now(),
                    };
                    match self.apply(&key, &update).await? {
                        TurnOutcome::Applied(updated) => {
                            return Ok(self
                                .finish(Vec::new(), updated, current, decision, Some(query), custom_instructions)
                                .await);
                        }
                        TurnOutcome::Closed => return Err(SessionsError::SessionClosed(key.id.to_string())),
                        TurnOutcome::Conflict | TurnOutcome::Missing => self.hints.forget(&key),
                    }
                }
            }
        }
        for _ in 0..MAX_ATTEMPTS {
            let session = self.load(&key).await?;
            if session.status == SessionStatus::Closed {
                return Err(SessionsError::SessionClosed(key.id.to_string()));
            }
            let current = self.role_of(&session)?;
            let decision = self.decision(query, &current, forced.as_ref()).await?;
            let update = TurnUpdate {
                expected_role: session.role_id.clone(),
                expected_switch_count: session.switch_count,
                new_role: decision.new_role.as_ref().map(|r| r.id.clone()),
                count_turn: true,
                now: now(),
            };
            match self.apply(&key, &update).await? {
                TurnOutcome::Applied(updated) => {
                    return Ok(self
                        .finish(session.recent, updated, current, decision, Some(query), custom_instructions)
                        .await);
                }
                TurnOutcome::Conflict | TurnOutcome::Missing => continue,
                TurnOutcome::Closed => return Err(SessionsError::SessionClosed(key.id.to_string())),
            }
        }
        Err(SessionsError::Unavailable(format!("session `{}` is too busy: retry", key.id)))
    }

    /// A conditional update; an applied one refreshes this replica's hint for the session.
    async fn apply(&self, key: &SessionKey, update: &TurnUpdate) -> Result<TurnOutcome, SessionsError> {
        let outcome = self
            .live
            .apply_turn(key, update)
            .await
            .map_err(|err| SessionsError::unavailable("updating the session", err))?;
        if let TurnOutcome::Applied(session) = &outcome {
            self.hints.remember(key, session.role_id.clone(), session.switch_count);
        }
        Ok(outcome)
    }

    /// What to do with `query` while `current` is active: the forced role, or detection.
    async fn decision(&self, query: &str, current: &Role, forced: Option<&Role>) -> Result<Decision, SessionsError> {
        Ok(match forced {
            Some(role) if role.id != current.id => Decision {
                new_role: Some(role.clone()),
                reason: SwitchReason::Forced,
                detail: format!("forced to {}", role.id),
                scores: Vec::new(),
                from_score: 0,
                to_score: 0,
            },
            Some(_) => Decision {
                new_role: None,
                reason: SwitchReason::Forced,
                detail: format!("forced to {}, which is already active", current.id),
                scores: Vec::new(),
                from_score: 0,
                to_score: 0,
            },
            None => self.decide(query, current).await?,
        })
    }

    /// Asks the triggers service for the best role, re-registering the current role if the
    /// triggers service forgot it. Detection being down degrades to keeping the role.
    async fn decide(&self, query: &str, current: &Role) -> Result<Decision, SessionsError> {
        let mut detection = self.triggers.best_role(query, Some(&current.id)).await;
        if let Err(TriggersError::UnknownRole(_)) = detection {
            detection = match self.roles.ensure_registered(&current.id).await {
                Ok(()) => self.triggers.best_role(query, Some(&current.id)).await,
                // The role itself was deleted: decide with no role to hold on to.
                Err(SessionsError::RoleNotFound(_)) => self.triggers.best_role(query, None).await,
                Err(err) => return Err(err),
            };
        }
        let detection: Detection = match detection {
            Ok(detection) => detection,
            Err(TriggersError::Rejected(message)) => {
                return Err(match message.split_once(": ") {
                    Some((field, reason)) => SessionsError::invalid(field, reason),
                    None => SessionsError::invalid("query", message),
                });
            }
            Err(err) => {
                tracing::warn!(%err, role_id = %current.id, "trigger detection unavailable, keeping the current role");
                return Ok(Decision {
                    new_role: None,
                    reason: SwitchReason::DetectionUnavailable,
                    detail: format!("trigger detection unavailable ({err}); kept {}", current.id),
                    scores: Vec::new(),
                    from_score: 0,
                    to_score: 0,
                });
            }
        };
        let chosen = detection.role_id.as_deref().filter(|id| *id != current.id.as_str());
        let target = chosen.and_then(|id| RoleId::parse(id).ok()).and_then(|id| self.roles.get(&id));
        if chosen.is_some() && target.is_none() {
            tracing::warn!(role_id = ?chosen, "triggers chose a role this service does not know; keeping the current role");
        }
        let (reason, new_role) = match (target, detection.reason) {
            (Some(role), _) => (SwitchReason::Triggered, Some(role)),
            (None, BestRoleReason::KeptByHysteresis) => (SwitchReason::KeptByHysteresis, None),
            (None, BestRoleReason::CurrentIsTop) => (SwitchReason::CurrentIsBest, None),
            (None, _) => (SwitchReason::NoTriggerMatched, None),
        };
        Ok(Decision {
            new_role,
            reason,
            detail: detection.explanation,
            scores: detection.matches,
            from_score: detection.current_score,
            to_score: detection.top_score,
        })
    }

    /// Records the outcome of an applied update and builds the answer.
    async fn finish(
        &self,
        recent: Vec<Message>,
        after: LiveSession,
        previous: Role,
        decision: Decision,
        // The query that caused the turn; `None` for a manual switch, which has none to quote.
        query: Option<&str>,
        custom_instructions: Option<&str>,
    ) -> Turn {
        let Decision { new_role, reason, detail, scores, from_score, to_score } = decision;
        let (role, transition) = match new_role {
            Some(next) => {
                let event = SwitchEvent {
                    sequence: after.switch_count,
                    from_role_id: previous.id.clone(),
                    to_role_id: next.id.clone(),
                    reason,
                    reason_detail: detail.clone(),
                    from_score,
                    to_score,
                    query_excerpt: excerpt(query.unwrap_or_default(), EXCERPT_CHARS),
                    occurred_at: after.updated_at,
                };
                let record = Record::Switched { key: after.key.clone(), event, turn_count: after.turn_count };
                self.durable(self.recorder.record(vec![record]).await, "context switch");
                tracing::info!(session_id = %after.key.id, from = %previous.id, to = %next.id, reason = reason.as_str(), "context switched");
                let transition = transition_context(&previous, &next, reason, &detail, &recent, query);
                (next, transition)
            }
            None => {
                self.recorder.record_turns(&after.key, after.turn_count, after.updated_at);
                (previous.clone(), String::new())
            }
        };
        let switched = role.id != previous.id;
        let prompt = system_prompt(&role, &transition, custom_instructions);
        let mut session = after;
        session.recent = recent;
        Turn {
            session,
            role,
            switched,
            previous_role_id: previous.id,
            reason,
            reason_detail: detail,
            scores,
            transition_context: transition,
            system_prompt: prompt,
        }
    }

    fn durable(&self, durability: Durability, what: &str) {
        match durability {
            Durability::Written => {}
            Durability::Buffered => tracing::debug!(what, "record buffered until the record store answers"),
            Durability::Dropped => tracing::error!(what, "record dropped: the outage buffer is full"),
        }
    }

    /// Switches by hand (spec: manually_switch_context).
    pub async fn switch(
        &self,
        tenant: &TenantId,
        session_id: &str,
        new_role_id: &str,
        reason: &str,
    ) -> Result<Turn, SessionsError> {
        let key = Self::key(tenant, session_id)?;
        let target = self.roles.require(new_role_id, "new_role_id")?;
        let detail =
            if reason.trim().is_empty() { "Manual switch by user".to_owned() } else { excerpt(reason.trim(), 500) };
        for _ in 0..MAX_ATTEMPTS {
            let session = self.load(&key).await?;
            if session.status == SessionStatus::Closed {
                return Err(SessionsError::SessionClosed(key.id.to_string()));
            }
            let current = self.role_of(&session)?;
            let switching = target.id != current.id;
            let decision = Decision {
                new_role: switching.then(|| target.clone()),
                reason: SwitchReason::Manual,
                detail: detail.clone(),
                scores: Vec::new(),
                from_score: 0,
                to_score: 0,
            };
            let update = TurnUpdate {
                expected_role: session.role_id.clone(),
                expected_switch_count: session.switch_count,
                new_role: decision.new_role.as_ref().map(|r| r.id.clone()),
                count_turn: false,
                now: now(),
            };
            match self.apply(&key, &update).await? {
                TurnOutcome::Applied(updated) => {
                    return Ok(self.finish(session.recent, updated, current, decision, None, None).await);
                }
                TurnOutcome::Conflict | TurnOutcome::Missing => continue,
                TurnOutcome::Closed => return Err(SessionsError::SessionClosed(key.id.to_string())),
            }
        }
        Err(SessionsError::Unavailable(format!("session `{}` is too busy: retry", key.id)))
    }

    /// Switch events, oldest first, a page at a time (the token is the last sequence seen).
    pub async fn history(
        &self,
        tenant: &TenantId,
        session_id: &str,
        page_size: u32,
        page_token: &str,
    ) -> Result<(Vec<SwitchEvent>, Option<String>), SessionsError> {
        const DEFAULT_PAGE: u32 = 50;
        const MAX_PAGE: u32 = 500;
        let key = Self::key(tenant, session_id)?;
        if page_size > MAX_PAGE {
            return Err(SessionsError::invalid("page_size", format!("must be at most {MAX_PAGE}, got {page_size}")));
        }
        let page_size = if page_size == 0 { DEFAULT_PAGE } else { page_size };
        let after = if page_token.is_empty() {
            0
        } else {
            page_token
                .parse()
                .map_err(|_| SessionsError::invalid("page_token", "is not a token this service issued"))?
        };
        self.load(&key).await?;
        let mut events = self
            .records
            .history(&key, after, page_size + 1)
            .await
            .map_err(|err| SessionsError::unavailable("reading the switch history", err))?;
        let next = if events.len() > page_size as usize {
            events.truncate(page_size as usize);
            events.last().map(|e| e.sequence.to_string())
        } else {
            None
        };
        Ok((events, next))
    }

    /// Records conversation turns (the router calls this for each user/assistant turn).
    pub async fn append_messages(
        &self,
        tenant: &TenantId,
        session_id: &str,
        messages: Vec<NewMessage>,
    ) -> Result<LiveSession, SessionsError> {
        let key = Self::key(tenant, session_id)?;
        if messages.is_empty() {
            return Err(SessionsError::invalid("messages", "must not be empty"));
        }
        if messages.len() > self.limits.max_messages_per_append {
            return Err(SessionsError::invalid(
                "messages",
                format!("{} given, over the limit of {} per call", messages.len(), self.limits.max_messages_per_append),
            ));
        }
        let session = self.load(&key).await?;
        if session.status == SessionStatus::Closed {
            return Err(SessionsError::SessionClosed(key.id.to_string()));
        }
        let now = now();
        let mut checked = Vec::with_capacity(messages.len());
        for (index, message) in messages.into_iter().enumerate() {
            let role = message.role.ok_or_else(|| {
                SessionsError::invalid(format!("messages[{index}].role"), "must be USER, ASSISTANT, SYSTEM or TOOL")
            })?;
            if message.content.trim().is_empty() {
                return Err(SessionsError::invalid(format!("messages[{index}].content"), "must not be empty"));
            }
            if message.content.len() > self.limits.max_message_bytes {
                return Err(SessionsError::invalid(
                    format!("messages[{index}].content"),
                    format!("is {} bytes, over the limit of {}", message.content.len(), self.limits.max_message_bytes),
                ));
            }
            let role_id = if message.role_id.is_empty() {
                session.role_id.to_string()
            } else {
                parse_role_id(&message.role_id, &format!("messages[{index}].role_id"))?.to_string()
            };
            checked.push(Message {
                seq: 0,
                role,
                content: message.content,
                role_id,
                created_at_ms: now.timestamp_millis(),
            });
        }
        for _ in 0..MAX_ATTEMPTS {
            let outcome = self
                .live
                .append_messages(&key, &checked, self.limits.message_window, now)
                .await
                .map_err(|err| SessionsError::unavailable("appending messages", err))?;
            match outcome {
                AppendOutcome::Applied { messages, .. } => {
                    let record = Record::MessagesAppended { key: key.clone(), messages };
                    self.durable(self.recorder.record(vec![record]).await, "messages");
                    return self.load(&key).await;
                }
                AppendOutcome::Missing => {
                    self.load(&key).await?;
                }
                AppendOutcome::Closed => return Err(SessionsError::SessionClosed(key.id.to_string())),
            }
        }
        Err(SessionsError::Unavailable(format!("session `{}` is too busy: retry", key.id)))
    }
}
