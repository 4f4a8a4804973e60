//! Domain types of the sessions service, validated on construction: tenants, session and role
//! ids, roles, live sessions, conversation messages and context switch events.

use std::{collections::BTreeMap, time::Duration};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use switchyard_kit::{
    FieldError,
    identity::{SessionId, SessionKey, TenantId, UserId},
};

fn field_error(field: &str, reason: impl Into<String>) -> FieldError {
    FieldError::new(field, reason)
}

pub use switchyard_kit::RoleId;

/// A role id from a request; errors name `field`.
pub fn parse_role_id(text: &str, field: &str) -> Result<RoleId, FieldError> {
    RoleId::parse(text).map_err(|reason| field_error(field, reason))
}

/// How a custom trigger matches (validated by the triggers service, which owns matching).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TriggerKind {
    Keyword,
    Phrase,
    Regex,
}

/// A role's own trigger pattern.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomTrigger {
    pub pattern: String,
    pub kind: TriggerKind,
    pub priority: u32,
}

/// An expert role.
#[derive(Debug, Clone, PartialEq)]
pub struct Role {
    /// The tenant whose role it is, seen by that tenant alone; `None` for a built-in role,
    /// shared by every tenant and read-only. A tenant's role may have a built-in's id: it is
    /// that tenant's own copy (an override) and hides the built-in from that tenant only.
    pub tenant: Option<TenantId>,
    pub id: RoleId,
    pub name: String,
    pub description: String,
    /// Built-in trigger domains the role draws from.
    pub domains: Vec<String>,
    pub system_prompt: String,
    pub custom_triggers: Vec<CustomTrigger>,
    pub preferred_model: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionStatus {
    Active,
    Closed,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Closed => "closed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "active" => Some(Self::Active),
            "closed" => Some(Self::Closed),
            _ => None,
        }
    }
}

/// Who wrote a conversation message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageRole {
    User,
    Assistant,
    System,
    Tool,
}

impl MessageRole {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::System => "system",
            Self::Tool => "tool",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "user" => Some(Self::User),
            "assistant" => Some(Self::Assistant),
            "system" => Some(Self::System),
            "tool" => Some(Self::Tool),
            _ => None,
        }
    }
}

/// One conversation turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Position in the session's conversation, from 1.
    pub seq: u64,
    pub role: MessageRole,
    pub content: String,
    /// The expert role that was active when it was written.
    pub role_id: String,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// The caller's id for the batch the message came in (`AppendMessagesRequest.append_id`);
    /// empty when it gave none. Kept so a retried batch is recognised, also after a rebuild.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub append_id: String,
}

/// A live session: what Redis holds (and Postgres can rebuild).
#[derive(Debug, Clone, PartialEq)]
pub struct LiveSession {
    pub key: SessionKey,
    /// The user who created it: only that user uses it, and an administrator of the tenant
    /// may read it. `None` when a caller without a user created it: then it is the tenant's.
    pub owner: Option<UserId>,
    pub role_id: RoleId,
    pub status: SessionStatus,
    pub turn_count: u64,
    pub switch_count: u64,
    pub message_count: u64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Idle time after which the live copy expires; every update restarts it.
    pub ttl: Duration,
    pub metadata: BTreeMap<String, String>,
    /// The most recent messages (oldest first), at most the configured window.
    pub recent: Vec<Message>,
}

/// Why a session has the role it has after a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SwitchReason {
    Triggered,
    Forced,
    KeptByHysteresis,
    NoTriggerMatched,
    CurrentIsBest,
    Manual,
    /// Trigger detection was unreachable; the current role stays.
    DetectionUnavailable,
    /// The triggers service's semantic signal chose the role (no trigger matched, or a near
    /// tie of trigger scores).
    Semantic,
}

impl SwitchReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Triggered => "triggered",
            Self::Forced => "forced",
            Self::KeptByHysteresis => "kept_by_hysteresis",
            Self::NoTriggerMatched => "no_trigger_matched",
            Self::CurrentIsBest => "current_is_best",
            Self::Manual => "manual",
            Self::DetectionUnavailable => "detection_unavailable",
            Self::Semantic => "semantic",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "triggered" => Self::Triggered,
            "forced" => Self::Forced,
            "kept_by_hysteresis" => Self::KeptByHysteresis,
            "no_trigger_matched" => Self::NoTriggerMatched,
            "current_is_best" => Self::CurrentIsBest,
            "manual" => Self::Manual,
            "detection_unavailable" => Self::DetectionUnavailable,
            "semantic" => Self::Semantic,
            _ => return None,
        })
    }
}

/// One recorded context switch.
#[derive(Debug, Clone, PartialEq)]
pub struct SwitchEvent {
    /// The session's switch count after this switch (1 for the first).
    pub sequence: u64,
    pub from_role_id: RoleId,
    pub to_role_id: RoleId,
    pub reason: SwitchReason,
    pub reason_detail: String,
    pub from_score: u32,
    pub to_score: u32,
    pub query_excerpt: String,
    pub occurred_at: DateTime<Utc>,
}

/// Limits on requests and on what a session keeps live.
#[derive(Debug, Clone)]
pub struct SessionLimits {
    pub max_query_bytes: usize,
    /// Recent messages kept in the live session (and loaded on rebuild).
    pub message_window: usize,
    pub max_message_bytes: usize,
    pub max_messages_per_append: usize,
    pub max_metadata_entries: usize,
    pub default_ttl: Duration,
    pub max_ttl: Duration,
}

impl SessionLimits {
    /// Limits no flag sets.
    pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
    pub const MAX_MESSAGES_PER_APPEND: usize = 100;
    pub const MAX_METADATA_ENTRIES: usize = 32;
}

impl Default for SessionLimits {
    /// The flags' defaults.
    fn default() -> Self {
        crate::config::SessionsConfig::defaults().limits()
    }
}

/// Validates a query: not blank, within the size limit.
pub fn check_query(query: &str, limits: &SessionLimits) -> Result<(), FieldError> {
    if query.trim().is_empty() {
        return Err(field_error("query", "must not be empty"));
    }
    if query.len() > limits.max_query_bytes {
        return Err(field_error(
            "query",
            format!("is {} bytes, over the limit of {} bytes", query.len(), limits.max_query_bytes),
        ));
    }
    Ok(())
}

/// The first `max_chars` characters of `text`, with an ellipsis when cut.
pub fn excerpt(text: &str, max_chars: usize) -> String {
    let mut out: String = text.chars().take(max_chars).collect();
    if text.chars().nth(max_chars).is_some() {
        out.push('…');
    }
    out
}

/// A role with nothing but its id, for unit tests of the code that decides between roles.
#[cfg(test)]
pub(crate) fn test_role(id: &str) -> Role {
    let epoch = DateTime::from_timestamp_millis(0).unwrap_or_default();
    Role {
        tenant: None,
        id: RoleId::parse(id).unwrap_or_else(|err| panic!("test role id `{id}`: {err}")),
        name: id.to_owned(),
        description: String::new(),
        domains: Vec::new(),
        system_prompt: String::new(),
        custom_triggers: Vec::new(),
        preferred_model: None,
        created_at: epoch,
        updated_at: epoch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_validate() {
        assert!(TenantId::parse("acme-1").is_ok());
        assert_eq!(TenantId::parse("").unwrap_err().field, "x-tenant-id");
        assert!(SessionId::parse("3fa85f64-5717-4562-b3fc-2c963f66afa6").is_ok());
        assert!(SessionId::parse("a b").is_err());
        assert_eq!(SessionId::parse("").unwrap_err().field, "session_id");
        assert!(parse_role_id("finance-expert", "role.id").is_ok());
        assert_eq!(parse_role_id("Finance", "role.id").unwrap_err().field, "role.id");
    }

    #[test]
    fn queries_are_checked_and_excerpts_cut() {
        let limits = SessionLimits { max_query_bytes: 5, ..SessionLimits::default() };
        assert!(check_query("hi", &limits).is_ok());
        assert_eq!(check_query(" ", &limits).unwrap_err().reason, "must not be empty");
        assert!(check_query("too long", &limits).unwrap_err().reason.contains("limit of 5 bytes"));
        assert_eq!(excerpt("hello world", 5), "hello…");
        assert_eq!(excerpt("hello", 5), "hello");
    }

    #[test]
    fn enums_round_trip_their_names() {
        for reason in [
            SwitchReason::Triggered,
            SwitchReason::Forced,
            SwitchReason::KeptByHysteresis,
            SwitchReason::NoTriggerMatched,
            SwitchReason::CurrentIsBest,
            SwitchReason::Manual,
            SwitchReason::DetectionUnavailable,
            SwitchReason::Semantic,
        ] {
            assert_eq!(SwitchReason::parse(reason.as_str()), Some(reason));
        }
        for role in [MessageRole::User, MessageRole::Assistant, MessageRole::System, MessageRole::Tool] {
            assert_eq!(MessageRole::parse(role.as_str()), Some(role));
        }
        assert_eq!(SessionStatus::parse("closed"), Some(SessionStatus::Closed));
    }
}
