//! The router's OpenTelemetry metrics (exported over OTLP when the kit's telemetry has an
//! endpoint; no-ops otherwise): the figures docs/requirements.md#router-monitoring asks for,
//! as they happen — route distribution, routing latency, execution time, cache hits,
//! fallbacks, degradations, tool calls, the caller's own tool loops and the role switches
//! held back inside them, and what the turns cost (priced where the turn is priced; the
//! tokens are the GenAI client metrics the LLM crate records per model call).
//! GetRoutingStats gives the same figures from Postgres over any window.

use opentelemetry::{
    KeyValue,
    metrics::{Counter, Histogram},
};
use switchyard_llm::ModelRef;

use crate::outcome::Metadata;

#[derive(Clone)]
pub struct Metrics {
    turns: Counter<u64>,
    routing_ms: Histogram<f64>,
    execution_ms: Histogram<f64>,
    tool_call_ms: Histogram<f64>,
    feedback: Counter<u64>,
    held_switches: Counter<u64>,
    switches: Counter<u64>,
    gateway_tools_unavailable: Counter<u64>,
    cost_usd: Counter<f64>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let meter = opentelemetry::global::meter("switchyard-router");
        Self {
            turns: meter
                .u64_counter("router.turns")
                .with_description("Chat turns answered, by route, provider, cache hit, fallback and degradation")
                .build(),
            routing_ms: meter
                .f64_histogram("router.routing.duration")
                .with_unit("ms")
                .with_description("Time to the routing decision, by route")
                .build(),
            execution_ms: meter
                .f64_histogram("router.turn.duration")
                .with_unit("ms")
                .with_description("Whole-turn execution time, by route")
                .build(),
            tool_call_ms: meter
                .f64_histogram("router.tool_call.duration")
                .with_unit("ms")
                .with_description("MCP tool calls made by the agent")
                .build(),
            feedback: meter
                .u64_counter("router.feedback")
                .with_description("Feedback received, by route, helpfulness and whether another route was right")
                .build(),
            switches: meter
                .u64_counter("router.switches")
                .with_description("Role switches made, by the role switched to")
                .build(),
            held_switches: meter
                .u64_counter("router.switches.held")
                .with_description(
                    "Role switches the triggers asked for inside a tool loop, held back until the next user message",
                )
                .build(),
            gateway_tools_unavailable: meter
                .u64_counter("router.gateway_tools.unavailable")
                .with_description(
                    "Client-tools turns of a tenant with the gateway's tools that went on with the caller's tools only, \
                     the gateway being unreachable",
                )
                .build(),
            cost_usd: meter
                .f64_counter("switchyard.cost")
                .with_unit("USD")
                .with_description(
                    "What the turns' model calls cost (the model price table), by route, model and kind of call \
                     (routing, answer, agent_step, expert, synthesis)",
                )
                .build(),
        }
    }

    pub fn turn(&self, meta: &Metadata, model: &ModelRef) {
        let route = KeyValue::new("route", meta.route.as_str());
        self.turns.add(
            1,
            &[
                route.clone(),
                KeyValue::new("provider", model.provider.clone()),
                KeyValue::new("cache_hit", meta.cache_hit),
                KeyValue::new("fallback_used", meta.fallback_used),
                KeyValue::new("degraded", !meta.degraded.is_empty()),
                KeyValue::new("client_tools", meta.client_tools),
                KeyValue::new("continuation", meta.continuation),
            ],
        );
        if meta.role_switched {
            self.switches.add(1, &[KeyValue::new("role_id", meta.role_id.clone())]);
        }
        if !meta.held_switch_role_id.is_empty() {
            self.held_switches.add(1, &[KeyValue::new("role_id", meta.held_switch_role_id.clone())]);
        }
        self.routing_ms.record(meta.routing_ms as f64, std::slice::from_ref(&route));
        self.execution_ms.record(meta.execution_ms as f64, std::slice::from_ref(&route));
        for part in &meta.cost_parts {
            // A model without a price counts as nothing spent, as in the turn's `cost_usd`.
            self.cost_usd.add(
                crate::cost::nanos_to_usd(part.cost_nanousd),
                &[
                    route.clone(),
                    KeyValue::new("model", part.model.clone()),
                    KeyValue::new("call_kind", part.kind.as_str()),
                ],
            );
        }
    }

    pub fn tool_call(&self, tool: &str, duration_ms: u64, is_error: bool) {
        self.tool_call_ms
            .record(duration_ms as f64, &[KeyValue::new("tool", tool.to_owned()), KeyValue::new("is_error", is_error)]);
    }

    pub fn gateway_tools_unavailable(&self) {
        self.gateway_tools_unavailable.add(1, &[]);
    }

    pub fn feedback(&self, route: &str, helpful: bool, misrouted: bool) {
        self.feedback.add(
            1,
            &[
                KeyValue::new("route", route.to_owned()),
                KeyValue::new("helpful", helpful),
                KeyValue::new("misrouted", misrouted),
            ],
        );
    }
}
