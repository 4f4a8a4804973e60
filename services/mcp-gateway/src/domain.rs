//! What the gateway knows about sessions and calls, apart from where it is kept: a session's
//! context, the verification counters, and the usage records the ranking learns from. The
//! stores persist these; the gateway core and the fronts read them.

use chrono::{DateTime, Utc};

use switchyard_kit::identity::SessionKey;
use uuid::Uuid;

/// The requirements' `SessionContext` (docs/requirements.md#mcp-context-store), plus what the gateway needs to rank and to measure.
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

/// The verification counters (docs/requirements.md#mcp-verification), across every replica.
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

/// One record for Postgres. Each carries an id given when it is made, so a batch written again
/// (its first write's outcome lost with the connection) is stored once.
#[derive(Debug, Clone, PartialEq)]
pub enum UsageRecord {
    SetContext {
        id: Uuid,
        key: SessionKey,
        query: String,
        intent: Option<String>,
        at: DateTime<Utc>,
    },
    ToolCall {
        id: Uuid,
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
    /// One call in the audit trail ([`crate::audit`]).
    Audit(Box<crate::audit::AuditRecord>),
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

/// The verification figures (docs/requirements.md#mcp-verification): the counters, and the
/// records dropped while Postgres was away.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub counters: Counters,
    pub records_dropped: u64,
}

impl Stats {
    pub fn set_context_session_share(&self) -> f64 {
        ratio(self.counters.sessions_with_context, self.counters.sessions)
    }

    pub fn filtered_hit_rate(&self) -> f64 {
        ratio(self.counters.filtered_hits, self.counters.calls_after_filtered_list)
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}
