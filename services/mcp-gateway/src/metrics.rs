//! The gateway's OpenTelemetry metrics (exported over OTLP when the kit's telemetry has an
//! endpoint; no-ops otherwise): the verification figures (docs/requirements.md#mcp-verification) as gauges,
//! and tool-call latency and set_context calls as they happen.

use std::sync::{Arc, Mutex};

use opentelemetry::{
    KeyValue,
    metrics::{Counter, Histogram, ObservableGauge},
};

use crate::domain::Stats;

pub struct Metrics {
    latest: Arc<Mutex<Stats>>,
    tool_call_ms: Histogram<f64>,
    set_context_calls: Counter<u64>,
    tools_embedded: Counter<u64>,
    tool_calls_denied: Counter<u64>,
    _gauges: Vec<ObservableGauge<f64>>,
}

impl Metrics {
    pub fn new() -> Self {
        let meter = opentelemetry::global::meter("switchyard-mcp-gateway");
        let latest = Arc::new(Mutex::new(Stats::default()));
        let gauge = |name: &'static str, description: &'static str, read: fn(&Stats) -> f64| {
            let latest = latest.clone();
            meter
                .f64_observable_gauge(name)
                .with_description(description)
                .with_callback(move |observer| {
                    let stats = *latest.lock().unwrap_or_else(|p| p.into_inner());
                    observer.observe(read(&stats), &[]);
                })
                .build()
        };
        let gauges = vec![
            gauge(
                "mcp_gateway.set_context_session_share",
                "Share of MCP sessions in which set_context was called (docs/requirements.md#mcp-verification, criterion 1)",
                Stats::set_context_session_share,
            ),
            gauge(
                "mcp_gateway.filtered_hit_rate",
                "Share of tool calls whose tool was in the filtered list shown before (docs/requirements.md#mcp-verification, criteria 2-3)",
                Stats::filtered_hit_rate,
            ),
            gauge("mcp_gateway.sessions", "MCP sessions seen", |s| s.counters.sessions as f64),
            gauge("mcp_gateway.tool_calls", "Tool calls made", |s| s.counters.tool_calls as f64),
            gauge("mcp_gateway.records_dropped", "Usage records dropped while Postgres was away", |s| {
                s.records_dropped as f64
            }),
        ];
        Self {
            latest,
            tool_call_ms: meter
                .f64_histogram("mcp_gateway.tool_call.duration")
                .with_unit("ms")
                .with_description("Tool-call latency through the gateway, by server")
                .build(),
            set_context_calls: meter.u64_counter("mcp_gateway.set_context.calls").build(),
            tools_embedded: meter
                .u64_counter("mcp_gateway.tools_embedded")
                .with_description(
                    "Tool descriptions run through the embedding model (not found in the embedding cache)",
                )
                .build(),
            tool_calls_denied: meter
                .u64_counter("mcp_gateway.tool_calls.denied")
                .with_description("Tool calls a policy refused, by server")
                .build(),
            _gauges: gauges,
        }
    }

    /// The figures the gauges report (refreshed from the shared store periodically).
    pub fn update(&self, stats: Stats) {
        *self.latest.lock().unwrap_or_else(|p| p.into_inner()) = stats;
    }

    pub fn tool_call(&self, server: &str, millis: f64, is_error: bool) {
        self.tool_call_ms
            .record(millis, &[KeyValue::new("server", server.to_owned()), KeyValue::new("error", is_error)]);
    }

    pub fn tool_call_denied(&self, server: &str) {
        self.tool_calls_denied.add(1, &[KeyValue::new("server", server.to_owned())]);
    }

    pub fn set_context(&self) {
        self.set_context_calls.add(1, &[]);
    }

    pub fn tools_embedded(&self, count: u64) {
        self.tools_embedded.add(count, &[]);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
