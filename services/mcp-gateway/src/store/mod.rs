//! The gateway's two stores (what they keep is defined in [`crate::domain`]):
//!
//! - [`ContextStore`] (Redis, or memory in `switchyard dev`): what is live and shared by all
//!   replicas — each MCP session's context (query, intent, tools used this session, last
//!   updated: docs/requirements.md#mcp-context-store), the tool list it was last shown, the MCP transport's
//!   session state (so a session continues on any replica), and the verification counters.
//! - [`UsageStore`] (Postgres, or memory): the record of every `set_context` and every tool
//!   call with the context current at the time — the (context, tool) pairs of
//!   docs/requirements.md#mcp-usage-records — which is also what the usage prior learns from —
//!   and the audit trail of every tool call ([`crate::audit`]).

pub mod memory;
pub mod postgres;
pub mod redis;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::{
    audit::{AuditQuery, AuditRecord},
    domain::{Counters, SessionContext, ShownMatch, UsagePair, UsageRecord},
};

pub use switchyard_kit::{identity::SessionKey, store::StoreError};

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
    /// Forgets an ended session's context and the list it was last shown (its usage records
    /// stay: they are history).
    async fn end_session(&self, key: &SessionKey) -> Result<(), StoreError>;
}

#[async_trait]
pub trait UsageStore: Send + Sync + 'static {
    /// Writes records (one batch, all or none). A store whose writes can fail after landing
    /// (Postgres: the connection lost between COMMIT and its answer) skips a record already
    /// stored under the same id, since the record buffer then writes the batch again.
    async fn record(&self, records: &[UsageRecord]) -> Result<(), StoreError>;
    /// The newest `limit` successful tool calls that had a context, newest first.
    async fn history(&self, limit: usize) -> Result<Vec<UsagePair>, StoreError>;
    /// [`Self::history`] handed to `each` pair by pair, as read: a store that streams its
    /// rows never holds every pair's f32 embedding at once (the gateway quantises each as it
    /// comes).
    async fn each_history_pair(
        &self,
        limit: usize,
        each: &mut (dyn FnMut(UsagePair) + Send),
    ) -> Result<(), StoreError> {
        self.history(limit).await?.into_iter().for_each(each);
        Ok(())
    }
    /// Recent records of one session, newest first (for inspection and tests).
    async fn session_records(&self, key: &SessionKey, limit: usize) -> Result<Vec<UsageRecord>, StoreError>;
    async fn ping(&self) -> Result<(), StoreError>;
    /// Audit records matching `query`, newest first, at most `query.limit`.
    async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError>;
    /// Removes audit records older than `before`; returns how many.
    async fn prune_audit(&self, before: DateTime<Utc>) -> Result<u64, StoreError>;
    /// The usage record's upkeep, run at start and hourly: the coming months' partitions made
    /// and, with a `cut`, the set_context and tool call records of the whole months (UTC)
    /// before the month the cut falls in removed — the cut's month is kept whole. Returns the
    /// records removed.
    async fn keep_usage(&self, cut: Option<DateTime<Utc>>) -> Result<u64, StoreError>;
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
