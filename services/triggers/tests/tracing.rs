//! One request is one trace: a client span's context travels in `traceparent` through the
//! kit's client channel, over real gRPC, and the server's request span continues it.

mod common;

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use switchyard_proto::triggers::v1::{DetectTriggersRequest, trigger_service_client::TriggerServiceClient};
use switchyard_triggers::TriggersConfig;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_span_continues_the_callers_trace() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    // Global, so the server's tasks on other threads report to it too. It can be set once per
    // process: this relies on nextest running each test in a process of its own
    // (.config/nextest.toml); under `cargo test` it holds only while this file has one test.
    tracing::subscriber::set_global_default(subscriber).expect("first subscriber");

    let server = common::spawn(&TriggersConfig::in_memory("127.0.0.1:0".parse().expect("addr"))).await;
    let channel = switchyard_kit::client::connect_lazy(&format!("http://{}", server.addr)).expect("valid url");
    let mut client = TriggerServiceClient::new(channel);

    let caller = tracing::info_span!("caller");
    let caller_context = caller.context().span().span_context().clone();
    assert!(caller_context.is_valid());
    client.detect_triggers(DetectTriggersRequest { query: "hello".into() }).instrument(caller).await.expect("detect");
    server.stop().await;
    provider.force_flush().expect("flush");

    let spans = exporter.get_finished_spans().expect("spans");
    let handled = spans
        .iter()
        .find(|span| span.name == "/switchyard.triggers.v1.TriggerService/DetectTriggers")
        .unwrap_or_else(|| panic!("no server span among {:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>()));
    assert_eq!(handled.span_context.trace_id(), caller_context.trace_id(), "same trace");
    assert_eq!(handled.parent_span_id, caller_context.span_id(), "the caller's span is the parent");
}
