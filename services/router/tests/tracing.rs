//! One chat turn is one trace: the router's turn span continues the caller's trace, and the
//! calls it makes carry it on — router → sessions → triggers, and router → MCP gateway → the
//! MCP server call — over real gRPC between the real services.

mod common;

use std::collections::HashSet;

use common::{Options, Suite, chat};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use switchyard_testkit::llm::{Recorded, Reply, ScriptedLlm};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

fn script(request: &Recorded) -> Reply {
    let tools = request.tool_names();
    if tools.iter().any(|t| t == "use_mcp_agent") {
        return Reply::tool_call("use_mcp_agent", r#"{"reasoning": "a calculation"}"#);
    }
    match (tools.iter().find(|t| t.ends_with("get-sum")), request.messages().iter().any(|m| m["role"] == "tool")) {
        (Some(sum), false) => Reply::tool_call(sum, r#"{"a": 1, "b": 2}"#),
        _ => Reply::text("3"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_turn_is_one_trace_across_the_services() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    // Global, so every service's tasks report to it; nextest runs each test in its own process.
    tracing::subscriber::set_global_default(subscriber).expect("first subscriber");
    opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());

    let llm = ScriptedLlm::start(script).await;
    let suite = Suite::with(llm, Options { gateway: true, ..Options::default() }).await;
    let channel = switchyard_kit::client::connect_lazy(&suite.router.url()).expect("url");
    let mut client = switchyard_proto::router::v1::router_service_client::RouterServiceClient::new(channel);

    let caller = tracing::info_span!("caller");
    let trace_id = caller.context().span().span_context().trace_id();
    let response = client.chat(chat("add 1 and 2")).instrument(caller).await.expect("chat").into_inner();
    assert_eq!(response.metadata.expect("metadata").tools_used.len(), 1);
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
    // The gateway's tool execution carries the OpenTelemetry MCP and GenAI attributes.
    let tool_call = spans
        .iter()
        .find(|s| s.span_context.trace_id() == trace_id && s.name == "mcp tools/call")
        .expect("the gateway's tool call span");
    let attribute = |key: &str| {
        tool_call.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.as_str().into_owned())
    };
    assert_eq!(attribute("gen_ai.operation.name").as_deref(), Some("execute_tool"), "{:?}", tool_call.attributes);
    assert_eq!(attribute("mcp.method.name").as_deref(), Some("tools/call"), "{:?}", tool_call.attributes);
    let tool = attribute("gen_ai.tool.name").expect("gen_ai.tool.name");
    assert!(tool.ends_with("get-sum"), "the tool called: {tool}");
    assert!(attribute("mcp.session.id").is_some_and(|id| !id.is_empty()), "{:?}", tool_call.attributes);
    assert_eq!(attribute("error.type"), None, "the call succeeded");
}
