//! Routing analytics (docs/requirements.md#router-monitoring): route distribution, routing
//! latency, satisfaction per route and the false routing rate from user corrections. Every
//! turn's decision is pushed to the kit's record buffer and written in batches off the request
//! path; feedback is written through; the figures are computed in the store over a time window.

mod memory;
mod postgres;
mod postgres_stats;
pub mod rollup;
mod stats;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use switchyard_kit::{
    Identity, TenantId,
    records::{BufferedRecord, RecordBuffer, RecordSink},
    store::StoreError,
};
use switchyard_llm::ModelRef;

pub use memory::MemoryAnalytics;
pub use postgres::PostgresAnalytics;
pub use stats::{KeySpend, RouteFigures, RoutingStats, Spend, percentile};

use crate::{cost::CallCost, outcome::TurnOutcome, route::Route};

/// One turn's routing decision, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRecord {
    pub id: String,
    pub occurred_at: DateTime<Utc>,
    pub tenant: String,
    pub user: Option<String>,
    pub session_id: String,
    pub role_id: String,
    pub route: Route,
    pub reasoning: String,
    pub routing_ms: u64,
    pub execution_ms: u64,
    pub provider: String,
    pub model: String,
    pub routing_model: String,
    pub cache_hit: bool,
    pub fallback_used: bool,
    pub attempts: u32,
    pub model_fallbacks: u32,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub tools_used: Vec<String>,
    pub domains: Vec<String>,
    pub degraded: Vec<String>,
    /// The user's message, kept only when learning from corrections is on (the routing cache).
    pub message: Option<String>,
    /// The turn was cut short by the router's shutdown (its answer is what it had so far).
    pub interrupted: bool,
    /// The request carried the caller's own tools.
    pub client_tools: bool,
    /// The request continued a tool loop (no routing call, no role switch).
    pub continuation: bool,
    /// The role the triggers asked for inside the tool loop, held back until the next user
    /// message.
    pub held_switch_role_id: Option<String>,
    /// The caller's tools the model called.
    pub client_tools_called: Vec<String>,
    /// Of `prompt_tokens`, those read from the vendors' prompt caches.
    pub cached_prompt_tokens: u32,
    /// What the turn cost: the sum of `cost_parts`, in nano-dollars.
    pub cost_nanousd: i64,
    /// Every model call of the turn, priced.
    pub cost_parts: Vec<CallCost>,
    /// The route was decided without a routing call (a cache hit, or the fast router in its
    /// place).
    pub routing_call_avoided: bool,
    /// The API key the turn came with, when the edge named one.
    pub key_id: Option<String>,
}

impl DecisionRecord {
    pub fn of(identity: &Identity, outcome: &TurnOutcome, model: &ModelRef, message: Option<&str>) -> Self {
        let meta = &outcome.metadata;
        Self {
            id: outcome.id.clone(),
            occurred_at: outcome.created,
            tenant: identity.tenant.as_str().to_owned(),
            user: identity.user.as_ref().map(|u| u.as_str().to_owned()),
            session_id: outcome.session_id.clone(),
            role_id: meta.role_id.clone(),
            route: meta.route,
            reasoning: meta.reasoning.clone(),
            routing_ms: meta.routing_ms,
            execution_ms: meta.execution_ms,
            provider: model.provider.clone(),
            model: model.model.clone(),
            routing_model: meta.routing_model.clone(),
            cache_hit: meta.cache_hit,
            fallback_used: meta.fallback_used,
            attempts: meta.attempts,
            model_fallbacks: meta.model_fallbacks,
            prompt_tokens: outcome.usage.prompt_tokens,
            completion_tokens: outcome.usage.completion_tokens,
            tools_used: meta.tools_used.clone(),
            domains: meta.domains.clone(),
            degraded: meta.degraded.clone(),
            message: message.map(str::to_owned),
            interrupted: false,
            client_tools: meta.client_tools,
            continuation: meta.continuation,
            held_switch_role_id: (!meta.held_switch_role_id.is_empty()).then(|| meta.held_switch_role_id.clone()),
            client_tools_called: meta.client_tools_called.clone(),
            cached_prompt_tokens: outcome.usage.cached_prompt_tokens,
            cost_nanousd: meta.cost_nanousd,
            cost_parts: meta.cost_parts.clone(),
            routing_call_avoided: meta.cache_hit || meta.routing_model == crate::turn::FAST_ROUTER,
            key_id: None,
        }
    }
}

impl BufferedRecord for DecisionRecord {
    fn key_fields(&self) -> String {
        format!(
            "tenant={} session={} kind=routing_decision id={} at={}",
            self.tenant, self.session_id, self.id, self.occurred_at
        )
    }
}

/// The user's judgement of one answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Feedback {
    pub response_id: String,
    pub tenant: TenantId,
    pub helpful: bool,
    pub expected_route: Option<Route>,
    pub comment: String,
    pub submitted_at: DateTime<Utc>,
}

/// What a recorded answer says about its turn, for feedback.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedTurn {
    pub route: Route,
    pub user: Option<String>,
    /// Present when the turn was recorded with learning on.
    pub message: Option<String>,
}

/// A user's correction: this message should have taken `route`.
#[derive(Debug, Clone, PartialEq)]
pub struct Correction {
    pub tenant: String,
    /// Empty for callers without a user id.
    pub user: String,
    pub message: String,
    pub route: Route,
    pub response_id: String,
    pub created_at: DateTime<Utc>,
}

/// A correction as stored, with the id replicas page by.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCorrection {
    pub id: i64,
    pub correction: Correction,
}

pub type Recorder = RecordBuffer<DecisionRecord>;

/// Where decisions and feedback live: Postgres, or memory for `switchyard dev`.
#[async_trait]
pub trait AnalyticsStore: Send + Sync + 'static {
    async fn record(&self, decisions: &[DecisionRecord]) -> Result<(), StoreError>;
    /// What a tenant's answer recorded, when it is recorded.
    async fn recorded_turn(&self, tenant: &TenantId, response_id: &str) -> Result<Option<RecordedTurn>, StoreError>;
    async fn put_feedback(&self, feedback: &Feedback) -> Result<(), StoreError>;
    /// Stores a correction (replacing an earlier one from the same answer); returns its id.
    async fn put_correction(&self, correction: &Correction) -> Result<i64, StoreError>;
    /// Corrections with an id above `after`, oldest first, at most `limit`.
    async fn corrections_after(&self, after: i64, limit: i64) -> Result<Vec<StoredCorrection>, StoreError>;
    async fn stats(
        &self,
        tenant: &TenantId,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<RoutingStats, StoreError>;
    /// Removes decisions and feedback older than `before`; returns the decisions removed. In
    /// Postgres, whole days of decisions are dropped and the coming days' partitions made.
    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError>;
    async fn ping(&self) -> Result<(), StoreError>;
}

/// The store as the record buffer's sink.
pub struct DecisionSink(pub Arc<dyn AnalyticsStore>);

#[async_trait]
impl RecordSink<DecisionRecord> for DecisionSink {
    async fn write(&self, records: &[DecisionRecord]) -> Result<(), StoreError> {
        self.0.record(records).await
    }
}
