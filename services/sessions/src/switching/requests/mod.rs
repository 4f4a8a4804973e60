//! Requests to the context-switching core as callers send them, and their validated forms.
//! Each check runs before the stores are touched, in the order callers have always seen the
//! errors, and names the field at fault.

use std::{collections::BTreeMap, time::Duration};

use switchyard_kit::text::reject_nul;

use crate::{
    defaults::GENERAL_ASSISTANT,
    domain::{Message, MessageRole, Role, RoleId, SessionId, SessionLimits, check_query, excerpt, parse_role_id},
    error::SessionsError,
};

/// The shortest idle time a session may ask for.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// Bytes of one metadata key (at least one) and of one value.
pub const MAX_METADATA_KEY_BYTES: usize = 128;
pub const MAX_METADATA_VALUE_BYTES: usize = 1024;
/// Characters of a manual switch's reason kept with the switch event.
pub const MAX_MANUAL_REASON_CHARS: usize = 500;
/// The reason recorded for a manual switch that gives none (docs/requirements.md#sessions-switching).
pub const DEFAULT_MANUAL_REASON: &str = "Manual switch by user";

/// A new session as a caller asks for it.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    pub session_id: String,
    pub initial_role_id: String,
    pub metadata: BTreeMap<String, String>,
    pub ttl: Option<Duration>,
}

/// A new session request that passed validation.
#[derive(Debug, Clone)]
pub struct ValidSession {
    pub id: SessionId,
    /// The caller chose the id (rather than leaving it to be generated).
    pub chosen_id: bool,
    pub role: Role,
    pub ttl: Duration,
    pub metadata: BTreeMap<String, String>,
}

impl NewSession {
    /// `role` looks up the initial role by the id the caller wrote (the general assistant's
    /// when none), naming `initial_role_id` in its errors.
    pub fn validate(
        self,
        limits: &SessionLimits,
        role: impl FnOnce(&str) -> Result<Role, SessionsError>,
    ) -> Result<ValidSession, SessionsError> {
        let chosen_id = !self.session_id.is_empty();
        let id = if chosen_id { SessionId::parse(&self.session_id)? } else { SessionId::generate() };
        let role = role(if self.initial_role_id.is_empty() { GENERAL_ASSISTANT } else { &self.initial_role_id })?;
        let ttl = match self.ttl {
            None => limits.default_ttl,
            Some(ttl) if ttl < MIN_TTL || ttl > limits.max_ttl => {
                return Err(SessionsError::invalid(
                    "ttl",
                    format!(
                        "must be between {}s and {}s, got {}s",
                        MIN_TTL.as_secs(),
                        limits.max_ttl.as_secs(),
                        ttl.as_secs()
                    ),
                ));
            }
            Some(ttl) => ttl,
        };
        if self.metadata.len() > limits.max_metadata_entries {
            return Err(SessionsError::invalid(
                "metadata",
                format!("{} entries, over the limit of {}", self.metadata.len(), limits.max_metadata_entries),
            ));
        }
        let oversized = |(key, value): &(&String, &String)| {
            key.is_empty() || key.len() > MAX_METADATA_KEY_BYTES || value.len() > MAX_METADATA_VALUE_BYTES
        };
        if let Some((name, _)) = self.metadata.iter().find(oversized) {
            return Err(SessionsError::invalid(
                format!("metadata[{name}]"),
                format!(
                    "keys must be 1 to {MAX_METADATA_KEY_BYTES} bytes and values at most {MAX_METADATA_VALUE_BYTES}"
                ),
            ));
        }
        // Metadata is stored and handed back as it was given: a NUL is refused, not replaced.
        for (key, value) in &self.metadata {
            reject_nul("metadata", key)?;
            reject_nul(&format!("metadata[{key}]"), value)?;
        }
        Ok(ValidSession { id, chosen_id, role, ttl, metadata: self.metadata })
    }
}

/// A query to process with context switching, validated.
#[derive(Debug, Clone)]
pub struct Query<'a> {
    pub text: &'a str,
    pub custom_instructions: Option<&'a str>,
    /// The role the caller forced, if any (an empty `force_role_id` forces none).
    pub forced: Option<Role>,
}

impl<'a> Query<'a> {
    /// `role` looks up the forced role, naming `force_role_id` in its errors.
    pub fn new(
        text: &'a str,
        custom_instructions: Option<&'a str>,
        force_role_id: Option<&str>,
        limits: &SessionLimits,
        role: impl FnOnce(&str) -> Result<Role, SessionsError>,
    ) -> Result<Self, SessionsError> {
        check_query(text, limits)?;
        if let Some(extra) = custom_instructions
            && extra.len() > limits.max_query_bytes
        {
            return Err(SessionsError::invalid(
                "custom_instructions",
                format!("over the limit of {} bytes", limits.max_query_bytes),
            ));
        }
        let forced = force_role_id.filter(|id| !id.is_empty()).map(role).transpose()?;
        Ok(Self { text, custom_instructions, forced })
    }
}

/// The detail recorded with a manual switch: the caller's reason, trimmed and cut.
pub fn manual_reason(reason: &str) -> String {
    let reason = reason.trim();
    if reason.is_empty() { DEFAULT_MANUAL_REASON.to_owned() } else { excerpt(reason, MAX_MANUAL_REASON_CHARS) }
}

/// A message to append, before validation.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub role: Option<MessageRole>,
    pub content: String,
    pub role_id: String,
}

/// Messages to append in one call, their number checked. The messages themselves are checked
/// by [`MessageBatch::into_messages`], once the session they go to has been found.
#[derive(Debug, Clone)]
pub struct MessageBatch {
    messages: Vec<NewMessage>,
    append_id: String,
}

/// The longest `append_id` a caller may give.
pub const MAX_APPEND_ID_CHARS: usize = 128;

impl MessageBatch {
    pub fn new(messages: Vec<NewMessage>, limits: &SessionLimits) -> Result<Self, SessionsError> {
        if messages.is_empty() {
            return Err(SessionsError::invalid("messages", "must not be empty"));
        }
        if messages.len() > limits.max_messages_per_append {
            return Err(SessionsError::invalid(
                "messages",
                format!("{} given, over the limit of {} per call", messages.len(), limits.max_messages_per_append),
            ));
        }
        Ok(Self { messages, append_id: String::new() })
    }

    /// The batch under the caller's id for it (`append_id`), which makes its retry safe; an
    /// empty id leaves it unnamed. The characters are limited so the id is its own JSON
    /// encoding (the Redis store looks for it as text).
    pub fn named(self, append_id: String) -> Result<Self, SessionsError> {
        if append_id.len() > MAX_APPEND_ID_CHARS {
            return Err(SessionsError::invalid(
                "append_id",
                format!("is {} characters, over the limit of {MAX_APPEND_ID_CHARS}", append_id.len()),
            ));
        }
        if let Some(bad) =
            append_id.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
        {
            return Err(SessionsError::invalid(
                "append_id",
                format!("contains {bad:?}; only A-Z a-z 0-9 . _ : - are allowed"),
            ));
        }
        Ok(Self { append_id, ..self })
    }

    /// The messages as stored, written at `at_ms`; a message without a role id is the
    /// session's current role's.
    pub fn into_messages(
        self,
        session_role: &RoleId,
        limits: &SessionLimits,
        at_ms: i64,
    ) -> Result<Vec<Message>, SessionsError> {
        let mut checked = Vec::with_capacity(self.messages.len());
        for (index, message) in self.messages.into_iter().enumerate() {
            let role = message.role.ok_or_else(|| {
                SessionsError::invalid(format!("messages[{index}].role"), "must be USER, ASSISTANT, SYSTEM or TOOL")
            })?;
            if message.content.trim().is_empty() {
                return Err(SessionsError::invalid(format!("messages[{index}].content"), "must not be empty"));
            }
            if message.content.len() > limits.max_message_bytes {
                return Err(SessionsError::invalid(
                    format!("messages[{index}].content"),
                    format!("is {} bytes, over the limit of {}", message.content.len(), limits.max_message_bytes),
                ));
            }
            let role_id = if message.role_id.is_empty() {
                session_role.to_string()
            } else {
                parse_role_id(&message.role_id, &format!("messages[{index}].role_id"))?.to_string()
            };
            checked.push(Message {
                seq: 0,
                role,
                content: message.content,
                role_id,
                created_at_ms: at_ms,
                append_id: self.append_id.clone(),
            });
        }
        Ok(checked)
    }
}

#[cfg(test)]
mod tests;
