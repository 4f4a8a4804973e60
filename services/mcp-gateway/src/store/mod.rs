//! The gateway's two stores:
//!
//! - [`ContextStore`] (Redis, or memory in `switchyard dev`): what is live and shared by all
//!   replicas — each MCP session's context (spec "Context Store": query, intent, tools used
//!   this session, last updated), the tool list it was last shown, the MCP transport's
//!   session state (so a session continues on any replica), and the verification counters.
//! - [`UsageStore`] (Postgres, or memory): the record of every `set_context` and every tool
//!   call with the context current at the time — spec "Record (context, tool) pair" — which is
//!   also what the usage prior learns from.

pub mod memory;
pub mod postgres;
pub mod redis;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("store timed out")]
    Timeout,
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
}

/// Whose session: contexts of one tenant are invisible to another.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    pub tenant: String,
    pub session_id: String,
}

impl SessionKey {
    /// Longest session id accepted.
    pub const MAX_SESSION_ID: usize = 128;

    /// A tenant is 1 to 64 characters of `[A-Za-z0-9._-]`: no `:`, which joins tenant and
    /// session in store keys, so two tenants' sessions can never share a key.
    pub fn valid_tenant(tenant: &str) -> bool {
        !tenant.is_empty()
            && tenant.len() <= 64
            && tenant.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    }

    /// A session id is 1 to 128 characters of `[A-Za-z0-9._:-]`.
    pub fn valid_session_id(session_id: &str) -> bool {
        !session_id.is_empty()
            && session_id.len() <= Self::MAX_SESSION_ID
            && session_id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'))
    }
}

/// The spec's `SessionContext`, plus what the gateway needs to rank and to measure.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionContext {
    pub current_query: Option<String>,
    pub current_intent: Option<String>,
    /// Gateway tool names, in first-use order, each once.
    pub tools_used: Vec<String>,
    pub last_updated: Option<DateTime<Utc>>,
    /// The embedding of the context text, computed once by `set_context`, so any replica can
    /// rank without the model.
    pub embedding: Option<Vec<f32>>,
    /// The filtered tool list this session was last shown.
    pub shown: Option<Vec<String>>,
}

impl SessionContext {
    /// The text tools are ranked against: the query, and the intent when given.
    pub fn text(&self) -> Option<String> {
        Some(context_text(self.current_query.as_deref()?, self.current_intent.as_deref()))
    }
}

/// What a tool call was, against the list shown before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShownMatch {
    /// No filtered list had been shown in this session.
    NoList,
    InList,
    NotInList,
}

/// The spec's verification counters, across every replica.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub sessions: u64,
    pub sessions_with_context: u64,
    pub tool_calls: u64,
    /// Tool calls made after a filtered list was shown…
    pub calls_after_filtered_list: u64,
    /// …and of those, the calls of a tool that was in it.
    pub filtered_hits: u64,
}

#[async_trait]
pub trait ContextStore: Send + Sync + 'static {
    async fn get(&self, key: &SessionKey) -> Result<Option<SessionContext>, StoreError>;
    /// Counts a session the first time it is seen.
    async fn touch(&self, key: &SessionKey) -> Result<(), StoreError>;
    /// Replaces the session's query and intent (and embedding); keeps the tools used.
    async fn set_context(
        &self,
        key: &SessionKey,
        query: &str,
        intent: Option<&str>,
        embedding: Option<&[f32]>,
        at: DateTime<Utc>,
    ) -> Result<SessionContext, StoreError>;
    /// Remembers the filtered list shown to the session.
    async fn record_shown(&self, key: &SessionKey, tools: &[String]) -> Result<(), StoreError>;
    /// Adds a called tool to the session's tools used, and counts it against the list shown.
    /// Returns that, and the context the call was made in (one round trip for both).
    async fn record_call(&self, key: &SessionKey, tool: &str) -> Result<(ShownMatch, SessionContext), StoreError>;
    async fn counters(&self) -> Result<Counters, StoreError>;
    async fn ping(&self) -> Result<(), StoreError>;

    /// The MCP transport's state of a session (its `initialize` parameters, as JSON).
    async fn load_transport(&self, session_id: &str) -> Result<Option<String>, StoreError>;
    async fn store_transport(&self, session_id: &str, state: &str) -> Result<(), StoreError>;
    async fn delete_transport(&self, session_id: &str) -> Result<(), StoreError>;
}

/// One record for Postgres.
#[derive(Debug, Clone, PartialEq)]
pub enum UsageRecord {
    SetContext {
        key: SessionKey,
        query: String,
        intent: Option<String>,
        at: DateTime<Utc>,
    },
    ToolCall {
        key: SessionKey,
        tool: String,
        server: String,
        upstream_tool: String,
        context_query: Option<String>,
        context_intent: Option<String>,
        context_embedding: Option<Vec<f32>>,
        shown: ShownMatch,
        is_error: bool,
        duration_ms: u64,
        at: DateTime<Utc>,
    },
}

/// One past (context, tool) pair the usage prior learns from.
#[derive(Debug, Clone, PartialEq)]
pub struct UsagePair {
    pub context: String,
    pub tool: String,
    pub embedding: Option<Vec<f32>>,
}

#[async_trait]
pub trait UsageStore: Send + Sync + 'static {
    /// Writes records (one batch, all or none).
    async fn record(&self, records: &[UsageRecord]) -> Result<(), StoreError>;
    /// The newest `limit` successful tool calls that had a context, newest first.
    async fn history(&self, limit: usize) -> Result<Vec<UsagePair>, StoreError>;
    /// Recent records of one session, newest first (for inspection and tests).
    async fn session_records(&self, key: &SessionKey, limit: usize) -> Result<Vec<UsageRecord>, StoreError>;
    async fn ping(&self) -> Result<(), StoreError>;
}

/// The context text a tool call is learned under: the same text tools are ranked against.
pub fn context_text(query: &str, intent: Option<&str>) -> String {
    match intent {
        Some(intent) if !intent.is_empty() => format!("{query} ({intent})"),
        _ => query.to_owned(),
    }
}

/// Embeddings travel as little-endian f32 bytes (Redis values, Postgres `bytea`).
pub fn embedding_to_bytes(embedding: &[f32]) -> Vec<u8> {
    embedding.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub fn embedding_from_bytes(bytes: &[u8]) -> Result<Vec<f32>, StoreError> {
    if !bytes.len().is_multiple_of(4) {
        return Err(StoreError::Corrupt(format!("embedding of {} bytes", bytes.len())));
    }
    Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}
