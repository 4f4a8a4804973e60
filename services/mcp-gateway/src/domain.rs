//! What the gateway knows about sessions and calls, apart from where it is kept: a session's
//! context, the verification counters, and the usage records the ranking learns from. The
//! stores persist these; the gateway core and the fronts read them.

use chrono::{DateTime, Utc};

use crate::store::SessionKey;

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

/// The context text a tool call is learned under: the same text tools are ranked against.
pub fn context_text(query: &str, intent: Option<&str>) -> String {
    match intent {
        Some(intent) if !intent.is_empty() => format!("{query} ({intent})"),
        _ => query.to_owned(),
    }
}
