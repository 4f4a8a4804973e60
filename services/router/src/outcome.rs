//! What a turn produced: the answer and its routing metadata (the spec's `_metadata`, plus the
//! role, routing latency, cache and fallback flags), and their wire form.

use switchyard_kit::proto_time::timestamp;
use switchyard_llm::{ToolCall, Usage};
use switchyard_proto::router::v1 as pb;

use crate::{
    cost::{CallCost, nanos_to_usd},
    route::{Route, route_to_proto},
};

#[derive(Debug, Clone, PartialEq)]
pub struct Metadata {
    pub route: Route,
    pub execution_ms: u64,
    pub reasoning: String,
    pub tools_used: Vec<String>,
    pub domains: Vec<String>,
    pub role_id: String,
    pub role_switched: bool,
    pub previous_role_id: String,
    pub routing_ms: u64,
    pub cache_hit: bool,
    pub fallback_used: bool,
    pub attempts: u32,
    pub routing_model: String,
    pub degraded: Vec<String>,
    pub expert_role_ids: Vec<String>,
    pub model_fallbacks: u32,
    /// The request carried the caller's own tools.
    pub client_tools: bool,
    /// The request continued a tool loop (no routing call, no role switch).
    pub continuation: bool,
    /// The role the triggers would have switched to inside the tool loop, held back.
    pub held_switch_role_id: String,
    /// The caller's tools the model called on this turn.
    pub client_tools_called: Vec<String>,
    /// The gateway's tools offered beside the caller's (a client-tools turn of a tenant with
    /// `ROUTER_GATEWAY_TOOLS_TENANTS`).
    pub gateway_tools_offered: Vec<String>,
    /// The gateway's tools the model called on such a turn, run by the router.
    pub gateway_tool_calls: Vec<String>,
    /// What the turn's model calls cost: the sum of `cost_parts`, in nano-dollars.
    pub cost_nanousd: i64,
    /// Every model call of the turn, priced, in the order made.
    pub cost_parts: Vec<CallCost>,
}

impl Default for Metadata {
    fn default() -> Self {
        Self {
            route: Route::Direct,
            execution_ms: 0,
            reasoning: String::new(),
            tools_used: Vec::new(),
            domains: Vec::new(),
            role_id: String::new(),
            role_switched: false,
            previous_role_id: String::new(),
            routing_ms: 0,
            cache_hit: false,
            fallback_used: false,
            attempts: 0,
            routing_model: String::new(),
            degraded: Vec::new(),
            expert_role_ids: Vec::new(),
            model_fallbacks: 0,
            client_tools: false,
            continuation: false,
            held_switch_role_id: String::new(),
            client_tools_called: Vec::new(),
            gateway_tools_offered: Vec::new(),
            gateway_tool_calls: Vec::new(),
            cost_nanousd: 0,
            cost_parts: Vec::new(),
        }
    }
}

impl Metadata {
    pub fn to_proto(&self) -> pb::RouteMetadata {
        pb::RouteMetadata {
            route_type: route_to_proto(self.route) as i32,
            execution_time_ms: self.execution_ms,
            reasoning: self.reasoning.clone(),
            tools_used: self.tools_used.clone(),
            domains: self.domains.clone(),
            role_id: self.role_id.clone(),
            routing_time_ms: self.routing_ms,
            cache_hit: self.cache_hit,
            fallback_used: self.fallback_used,
            attempts: self.attempts,
            role_switched: self.role_switched,
            previous_role_id: self.previous_role_id.clone(),
            routing_model: self.routing_model.clone(),
            degraded: self.degraded.clone(),
            expert_role_ids: self.expert_role_ids.clone(),
            model_fallbacks: self.model_fallbacks,
            client_tools: self.client_tools,
            continuation: self.continuation,
            held_switch_role_id: self.held_switch_role_id.clone(),
            client_tools_called: self.client_tools_called.clone(),
            gateway_tools_offered: self.gateway_tools_offered.clone(),
            gateway_tool_calls: self.gateway_tool_calls.clone(),
            cost_usd: nanos_to_usd(self.cost_nanousd),
            cost_parts: self.cost_parts.iter().map(CallCost::to_proto).collect(),
        }
    }
}

/// A finished turn.
#[derive(Debug, Clone)]
pub struct TurnOutcome {
    /// `chat-<uuid>`: pass it to SubmitFeedback.
    pub id: String,
    pub session_id: String,
    pub created: chrono::DateTime<chrono::Utc>,
    /// The model that wrote the answer (`openai/gpt-4o-mini`).
    pub model: String,
    pub content: String,
    pub finish_reason: &'static str,
    /// The model's calls of the caller's tools (a client-tools turn only).
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub metadata: Metadata,
    /// Set when the turn went on past a budget's soft threshold.
    pub budget_warning: Option<String>,
}

fn tool_calls_proto(calls: &[ToolCall]) -> Vec<pb::ToolCall> {
    calls
        .iter()
        .map(|c| pb::ToolCall { id: c.id.clone(), name: c.name.clone(), arguments_json: c.arguments.clone() })
        .collect()
}

pub fn usage_proto(usage: Usage) -> pb::Usage {
    pb::Usage {
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        total_tokens: usage.total(),
        cached_prompt_tokens: usage.cached_prompt_tokens,
    }
}

impl TurnOutcome {
    pub fn to_response(&self) -> pb::ChatResponse {
        pb::ChatResponse {
            id: self.id.clone(),
            created: Some(timestamp(self.created)),
            model: self.model.clone(),
            message: Some(pb::ChatMessage {
                role: pb::ChatRole::Assistant as i32,
                content: self.content.clone(),
                tool_calls: tool_calls_proto(&self.tool_calls),
                ..Default::default()
            }),
            finish_reason: self.finish_reason.to_owned(),
            usage: Some(usage_proto(self.usage)),
            metadata: Some(self.metadata.to_proto()),
            session_id: self.session_id.clone(),
        }
    }

    pub fn to_completed(&self) -> pb::ChatCompleted {
        pb::ChatCompleted {
            finish_reason: self.finish_reason.to_owned(),
            usage: Some(usage_proto(self.usage)),
            metadata: Some(self.metadata.to_proto()),
            model: self.model.clone(),
            tool_calls: tool_calls_proto(&self.tool_calls),
        }
    }
}
