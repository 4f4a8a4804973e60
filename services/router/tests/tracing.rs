//! One chat turn is one trace: the router's turn span continues the caller's trace, and the
//! calls it makes carry it on — router → sessions → triggers, and router → MCP gateway → the
//! MCP server call — over real gRPC between the real services; its span and every MCP tool call
//! the router makes carry the GenAI and Switchyard attributes.

mod common;

use std::collections::HashSet;

use common::{Options, Suite, as_tenant, chat};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::{Value, trace::SpanId};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use switchyard_proto::router::v1::{ChatRequest, ClientTool};
use switchyard_testkit::llm::{Recorded, Reply, ScriptedLlm};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// The agent first calls the sum tool with arguments its schema refuses, then right, then
/// answers.
fn script(request: &Recorded) -> Reply {
    let tools = request.tool_names();
    if tools.iter().any(|t| t == "use_mcp_agent") {
        return Reply::tool_call("use_mcp_agent", r#"{"reasoning": "a calculation"}"#);
    }
    let results = request.messages().iter().filter(|m| m["role"] == "tool").count();
    match (tools.iter().find(|t| t.ends_with("get-sum")), results) {
        (Some(sum), 0) => Reply::tool_call(sum, r#"{"a": "one", "b": 2}"#),
        (Some(sum), 1) => Reply::tool_call(sum, r#"{"a": 1, "b": 2}"#),
        _ => Reply::text("3"),
    }
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| &kv.value)
}

fn text(span: &SpanData, key: &str) -> Option<String> {
    attribute(span, key).map(|value| value.as_str().into_owned())
}

/// Spans of every service of the process, kept in memory.
fn export_spans() -> (InMemorySpanExporter, SdkTracerProvider) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    // Global, so every service's tasks report to it; nextest runs each test in its own process.
    tracing::subscriber::set_global_default(subscriber).expect("first subscriber");
    opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    (exporter, provider)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_turn_is_one_trace_across_the_services() {
    let (exporter, provider) = export_spans();

    let llm = ScriptedLlm::start(script).await;
    let suite = Suite::with(llm, Options { gateway: true, ..Options::default() }).await;
    let channel = switchyard_kit::client::connect_lazy(&suite.router.url()).expect("url");
    let mut client = switchyard_proto::router::v1::router_service_client::RouterServiceClient::new(channel);

    let caller = tracing::info_span!("caller");
    let trace_id = caller.context().span().span_context().trace_id();
    let response =
        client.chat(as_tenant("acme", chat("add 1 and 2"))).instrument(caller).await.expect("chat").into_inner();
    let meta = response.metadata.expect("metadata");
    assert_eq!(meta.tools_used.len(), 1);
    provider.force_flush().expect("flush");

    let spans = exporter.get_finished_spans().expect("spans");
    let in_trace: HashSet<&str> =
        spans.iter().filter(|s| s.span_context.trace_id() == trace_id).map(|s| s.name.as_ref()).collect();
    for expected in [
        "/switchyard.router.v1.RouterService/Chat",
        "chat_turn",
        "/switchyard.sessions.v1.SessionService/ProcessQuery",
        "/switchyard.triggers.v1.TriggerService/GetBestRole",
        "/switchyard.mcp.v1.McpGatewayService/SetContext",
        "/switchyard.mcp.v1.McpGatewayService/CallTool",
        "mcp tools/call",
    ] {
        assert!(in_trace.contains(expected), "{expected} is not in the turn's trace: {in_trace:?}");
    }
    let in_turn: Vec<&SpanData> = spans.iter().filter(|s| s.span_context.trace_id() == trace_id).collect();
    let by_id = |id: SpanId| in_turn.iter().copied().find(|s| s.span_context.span_id() == id);
    // Whether `span` runs inside `ancestor`, across the services.
    let within = |span: &SpanData, ancestor: &SpanData| {
        let mut parent = span.parent_span_id;
        while parent != SpanId::INVALID {
            if parent == ancestor.span_context.span_id() {
                return true;
            }
            parent = by_id(parent).map_or(SpanId::INVALID, |s| s.parent_span_id);
        }
        false
    };

    // The turn's span carries Switchyard's own attributes.
    let turn = in_turn.iter().copied().find(|s| s.name == "chat_turn").expect("the turn's span");
    assert_eq!(text(turn, "switchyard.tenant").as_deref(), Some("acme"), "{:?}", turn.attributes);
    assert_eq!(text(turn, "switchyard.route").as_deref(), Some("mcp_agent"), "{:?}", turn.attributes);
    assert_eq!(text(turn, "switchyard.role_id"), Some(meta.role_id.clone()), "{:?}", turn.attributes);
    for (key, expected) in [
        ("switchyard.role_switched", meta.role_switched),
        ("switchyard.cache_hit", false),
        ("switchyard.fallback_used", false),
        ("switchyard.degraded", false),
    ] {
        assert_eq!(attribute(turn, key), Some(&Value::Bool(expected)), "{key}: {:?}", turn.attributes);
    }
    assert!(meta.cost_usd > 0.0, "the default price table prices the default model: {meta:?}");
    assert_eq!(attribute(turn, "switchyard.cost_usd"), Some(&Value::F64(meta.cost_usd)), "{:?}", turn.attributes);

    // Each of the agent's tool calls is an `execute_tool` span inside the turn, in the GenAI
    // conventions: the refused one with its error type, the other without.
    let executions: Vec<&SpanData> = in_turn.iter().copied().filter(|s| s.name.starts_with("execute_tool")).collect();
    assert_eq!(executions.len(), 2, "{:?}", executions.iter().map(|s| &s.name).collect::<Vec<_>>());
    let mut call_ids = HashSet::new();
    for execution in &executions {
        assert!(within(execution, turn), "{} is not inside the turn", execution.name);
        let tool = text(execution, "gen_ai.tool.name").expect("gen_ai.tool.name");
        assert!(tool.ends_with("get-sum"), "the tool called: {tool}");
        assert_eq!(execution.name, format!("execute_tool {tool}"));
        assert_eq!(text(execution, "gen_ai.operation.name").as_deref(), Some("execute_tool"));
        let call_id = text(execution, "gen_ai.tool.call.id").expect("gen_ai.tool.call.id");
        assert!(!call_id.is_empty() && call_ids.insert(call_id), "{:?}", execution.attributes);
    }
    let (failed, succeeded): (Vec<&SpanData>, Vec<&SpanData>) =
        executions.iter().copied().partition(|s| attribute(s, "error.type").is_some());
    assert_eq!((failed.len(), succeeded.len()), (1, 1), "{executions:?}");
    assert!(text(failed[0], "error.type").is_some_and(|t| !t.is_empty()), "{:?}", failed[0].attributes);
    assert!(failed[0].start_time < succeeded[0].start_time, "the refused call came first");

    // The gateway's execution of the call that succeeded is inside the router's span of it, and
    // carries the OpenTelemetry MCP and GenAI attributes.
    let tool_call = in_turn
        .iter()
        .copied()
        .find(|s| s.name == "mcp tools/call" && within(s, succeeded[0]))
        .expect("the gateway's span of the successful call, inside the router's");
    let attribute = |key: &str| text(tool_call, key);
    assert_eq!(attribute("gen_ai.operation.name").as_deref(), Some("execute_tool"), "{:?}", tool_call.attributes);
    assert_eq!(attribute("mcp.method.name").as_deref(), Some("tools/call"), "{:?}", tool_call.attributes);
    let tool = attribute("gen_ai.tool.name").expect("gen_ai.tool.name");
    assert!(tool.ends_with("get-sum"), "the tool called: {tool}");
    assert!(attribute("mcp.session.id").is_some_and(|id| !id.is_empty()), "{:?}", tool_call.attributes);
    assert_eq!(attribute("error.type"), None, "the call succeeded");
}

/// On a client-tools turn of a tenant with the gateway's tools, the gateway's tool the router
/// runs is an `execute_tool` span; the caller's own tool, which the router hands back, is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_tool_beside_the_callers_is_an_execute_tool_span() {
    let (exporter, provider) = export_spans();
    let script = |request: &Recorded| {
        let sum = request.tool_names().into_iter().find(|t| t.ends_with("get-sum"));
        match (sum, request.messages().iter().any(|m| m["role"] == "tool")) {
            (Some(sum), false) => Reply::tool_call(sum, r#"{"a": 1, "b": 2}"#),
            _ => Reply::tool_call("run_shell", r#"{"command": "echo 3 > sum.txt"}"#),
        }
    };
    let configure = Box::new(|config: &mut switchyard_router::RouterConfig| {
        config.gateway_tools_tenants = vec!["acme".to_owned()];
    });
    let suite =
        Suite::with(ScriptedLlm::start(script).await, Options { gateway: true, configure, ..Options::default() }).await;
    let mut client = suite.client().await;
    let shell = ClientTool {
        name: "run_shell".into(),
        description: "Runs a shell command".into(),
        parameters_json: r#"{"type":"object","properties":{"command":{"type":"string"}}}"#.into(),
    };
    let request = ChatRequest { tools: vec![shell], ..chat("add 1 and 2 and save it") };
    let response = client.chat(as_tenant("acme", request)).await.expect("chat").into_inner();
    let meta = response.metadata.expect("metadata");
    assert_eq!(meta.client_tools_called, ["run_shell"], "{meta:?}");
    assert_eq!(meta.gateway_tool_calls.len(), 1, "{meta:?}");
    provider.force_flush().expect("flush");

    let spans = exporter.get_finished_spans().expect("spans");
    let turn = spans.iter().find(|s| s.name == "chat_turn").expect("the turn's span");
    assert_eq!(text(turn, "switchyard.route").as_deref(), Some("direct"), "{:?}", turn.attributes);
    let executions: Vec<&SpanData> = spans.iter().filter(|s| s.name.starts_with("execute_tool")).collect();
    assert_eq!(executions.len(), 1, "{:?}", executions.iter().map(|s| &s.name).collect::<Vec<_>>());
    let execution = executions[0];
    assert_eq!(execution.span_context.trace_id(), turn.span_context.trace_id());
    assert_eq!(text(execution, "gen_ai.tool.name"), Some(meta.gateway_tool_calls[0].clone()));
    assert_eq!(execution.name, format!("execute_tool {}", meta.gateway_tool_calls[0]));
    assert!(text(execution, "gen_ai.tool.call.id").is_some_and(|id| !id.is_empty()), "{:?}", execution.attributes);
    assert_eq!(attribute(execution, "error.type"), None, "{:?}", execution.attributes);
}
