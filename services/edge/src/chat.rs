//! Chat in the shapes the requirements give: the `chat.completion` object of `POST
//! /api/v1/chat` (docs/requirements.md#router-response; also the body of OpenAI's
//! non-streaming answer), and the first event of the streamed processing of a query with
//! context switching (docs/requirements.md#sessions-endpoints).

use serde::{Serialize, Serializer};
use serde_json::{Value, json};
use switchyard_proto::router::v1::{self as router, RouteType};

/// The route names of the answer's `route_type` (docs/requirements.md#router-routing-tools).
pub fn route_name(route: RouteType) -> &'static str {
    match route {
        RouteType::Direct => "direct",
        RouteType::McpAgent => "mcp_agent",
        RouteType::Multiagent => "multiagent",
        RouteType::Unspecified => "unspecified",
    }
}

/// The `_metadata` object, written straight from the router's message: the five fields
/// docs/requirements.md#router-response names first, then everything else the router says
/// about the turn. A borrowing view rather than a `Value` tree: a streamed answer writes it
/// twice, and its chunks built as `Value` trees took 16 % of the edge's CPU (BENCHMARKS.md,
/// the edge per API).
#[derive(Debug, Serialize)]
pub struct MetadataJson<'a> {
    route_type: &'static str,
    execution_time_ms: u64,
    reasoning: Option<&'a str>,
    tools_used: &'a [String],
    domains: &'a [String],
    role_id: &'a str,
    role_switched: bool,
    previous_role_id: &'a str,
    routing_time_ms: u64,
    routing_model: &'a str,
    cache_hit: bool,
    fallback_used: bool,
    attempts: u32,
    degraded: &'a [String],
    expert_role_ids: &'a [String],
    model_fallbacks: u32,
    client_tools: bool,
    continuation: bool,
    held_switch_role_id: Option<&'a str>,
    client_tools_called: &'a [String],
    gateway_tools_offered: &'a [String],
    gateway_tool_calls: &'a [String],
    cost_usd: f64,
    cost_parts: CostPartsJson<'a>,
}

impl<'a> From<&'a router::RouteMetadata> for MetadataJson<'a> {
    fn from(metadata: &'a router::RouteMetadata) -> Self {
        Self {
            route_type: route_name(metadata.route_type()),
            execution_time_ms: metadata.execution_time_ms,
            reasoning: Some(metadata.reasoning.as_str()).filter(|r| !r.is_empty()),
            tools_used: &metadata.tools_used,
            domains: &metadata.domains,
            role_id: &metadata.role_id,
            role_switched: metadata.role_switched,
            previous_role_id: &metadata.previous_role_id,
            routing_time_ms: metadata.routing_time_ms,
            routing_model: &metadata.routing_model,
            cache_hit: metadata.cache_hit,
            fallback_used: metadata.fallback_used,
            attempts: metadata.attempts,
            degraded: &metadata.degraded,
            expert_role_ids: &metadata.expert_role_ids,
            model_fallbacks: metadata.model_fallbacks,
            client_tools: metadata.client_tools,
            continuation: metadata.continuation,
            held_switch_role_id: Some(metadata.held_switch_role_id.as_str()).filter(|r| !r.is_empty()),
            client_tools_called: &metadata.client_tools_called,
            gateway_tools_offered: &metadata.gateway_tools_offered,
            gateway_tool_calls: &metadata.gateway_tool_calls,
            cost_usd: metadata.cost_usd,
            cost_parts: CostPartsJson(&metadata.cost_parts),
        }
    }
}

/// The turn's priced calls, each as an object with the proto's field names.
#[derive(Debug)]
struct CostPartsJson<'a>(&'a [router::CallCost]);

impl Serialize for CostPartsJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Part<'a> {
            kind: &'a str,
            model: &'a str,
            role_id: &'a str,
            prompt_tokens: u32,
            cached_prompt_tokens: u32,
            completion_tokens: u32,
            cost_usd: f64,
            priced: bool,
        }
        serializer.collect_seq(self.0.iter().map(|part| Part {
            kind: &part.kind,
            model: &part.model,
            role_id: &part.role_id,
            prompt_tokens: part.prompt_tokens,
            cached_prompt_tokens: part.cached_prompt_tokens,
            completion_tokens: part.completion_tokens,
            cost_usd: part.cost_usd,
            priced: part.priced,
        }))
    }
}

/// The `_metadata` object as a JSON value, for answers built as one.
pub fn metadata_json(metadata: &router::RouteMetadata) -> Value {
    serde_json::to_value(MetadataJson::from(metadata)).unwrap_or(Value::Null)
}

/// A value as JSON text. `serde_json::to_string` writes into a byte buffer; `Value`'s
/// `Display` goes through the formatter a write at a time, which showed in the edge's profile.
pub fn json_text<T: Serialize + ?Sized>(value: &T) -> String {
    // Writing to memory cannot fail, and every value the edge writes has a JSON form.
    serde_json::to_string(value).unwrap_or_default()
}

/// OpenAI's `usage` object (absent usage counts as zero).
#[derive(Debug, Serialize)]
pub struct UsageJson {
    prompt_tokens: u32,
    completion_tokens: u32,
    total_tokens: u32,
}

impl From<Option<&router::Usage>> for UsageJson {
    fn from(usage: Option<&router::Usage>) -> Self {
        let usage = usage.cloned().unwrap_or_default();
        Self {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            total_tokens: usage.total_tokens,
        }
    }
}

pub fn usage_json(usage: Option<&router::Usage>) -> Value {
    serde_json::to_value(UsageJson::from(usage)).unwrap_or(Value::Null)
}

/// Seconds since the epoch of a wire timestamp (now when absent).
pub fn unix_seconds(timestamp: Option<&prost_types::Timestamp>) -> i64 {
    timestamp.map_or_else(|| chrono::Utc::now().timestamp(), |t| t.seconds)
}

/// `finish_reason` as OpenAI clients know it: the router's "error" (a turn that degraded to
/// nothing) is still a stop for them.
pub fn finish_reason(reason: &str) -> &str {
    match reason {
        "length" | "tool_calls" | "content_filter" => reason,
        _ => "stop",
    }
}

/// The calls of the caller's tools in OpenAI's shape.
pub fn tool_calls_json(calls: &[router::ToolCall]) -> Value {
    let calls = calls.iter().map(|call| {
        json!({"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments_json}})
    });
    Value::Array(calls.collect())
}

/// The answer object (docs/requirements.md#router-response) for a ChatResponse; an answer
/// that calls the caller's tools has them in `message.tool_calls`, as OpenAI's does (its
/// content null when there is no text).
pub fn completion_json(response: &router::ChatResponse, model: Option<&str>) -> Value {
    let content = response.message.as_ref().map(|m| m.content.as_str()).unwrap_or_default();
    let calls = response.message.as_ref().map(|m| m.tool_calls.as_slice()).unwrap_or_default();
    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        if content.is_empty() {
            message["content"] = Value::Null;
        }
        message["tool_calls"] = tool_calls_json(calls);
    }
    json!({
        "id": response.id,
        "object": "chat.completion",
        "created": unix_seconds(response.created.as_ref()),
        "model": model.unwrap_or(&response.model),
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": finish_reason(&response.finish_reason),
        }],
        "usage": usage_json(response.usage.as_ref()),
        "_metadata": response.metadata.as_ref().map(metadata_json).unwrap_or(Value::Null),
        "session_id": response.session_id,
    })
}

/// The first event of `POST /api/context/process/stream`: the session's role after context
/// switching, from the router's route decision (a `RouteDecided` as proto3 JSON, the form the
/// stream's own `route` event carries).
pub fn context_json(route: &Value) -> Value {
    let metadata = &route["metadata"];
    let role_id = metadata["role_id"].as_str().unwrap_or_default();
    let previous_role_id = metadata["previous_role_id"].as_str().filter(|id| !id.is_empty()).unwrap_or(role_id);
    json!({
        "session_id": route["session_id"].as_str().unwrap_or_default(),
        "role_id": role_id,
        "switched": metadata["role_switched"].as_bool().unwrap_or(false),
        "previous_role_id": previous_role_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_response_has_the_required_chat_completion_shape() {
        let response = router::ChatResponse {
            id: "chat-1".into(),
            created: Some(prost_types::Timestamp { seconds: 1_700_000_000, nanos: 0 }),
            model: "openai/gpt-4o-mini".into(),
            message: Some(router::ChatMessage {
                role: router::ChatRole::Assistant as i32,
                content: "Hi!".into(),
                ..Default::default()
            }),
            finish_reason: "stop".into(),
            usage: Some(router::Usage {
                prompt_tokens: 3,
                completion_tokens: 2,
                total_tokens: 5,
                ..Default::default()
            }),
            metadata: Some(router::RouteMetadata {
                route_type: RouteType::McpAgent as i32,
                execution_time_ms: 42,
                tools_used: vec!["everything__echo".into()],
                cost_usd: 0.000_012,
                cost_parts: vec![router::CallCost {
                    kind: "routing".into(),
                    model: "openai/gpt-4o-mini".into(),
                    prompt_tokens: 3,
                    completion_tokens: 2,
                    cost_usd: 0.000_012,
                    priced: true,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            session_id: "s-1".into(),
        };
        let json = completion_json(&response, None);
        assert_eq!(json["object"], "chat.completion");
        assert_eq!(json["created"], 1_700_000_000);
        assert_eq!(json["choices"][0]["message"]["content"], "Hi!");
        assert_eq!(json["choices"][0]["message"]["role"], "assistant");
        assert_eq!(json["choices"][0]["finish_reason"], "stop");
        assert_eq!(json["usage"]["total_tokens"], 5);
        assert_eq!(json["_metadata"]["route_type"], "mcp_agent");
        assert_eq!(json["_metadata"]["execution_time_ms"], 42);
        assert_eq!(json["_metadata"]["reasoning"], Value::Null);
        assert_eq!(json["_metadata"]["tools_used"][0], "everything__echo");
        assert_eq!(json["_metadata"]["cost_usd"], 0.000_012);
        assert_eq!(json["_metadata"]["cost_parts"][0]["kind"], "routing");
        assert_eq!(json["_metadata"]["cost_parts"][0]["priced"], true);
    }
}
