//! The router's `/metrics` (on `--metrics-listen`) after real turns: the GenAI client metrics of
//! every model call (tokens by type with the requested and the answering model, call
//! durations) and `switchyard_cost_usd_total`, the turns' cost by route, model and kind of call,
//! priced from a price table given with --model-prices and equal to the cost the turns returned.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;

use common::{Options, RecordedExt, Suite, as_tenant, chat};
use switchyard_kit::telemetry::init_metrics;
use switchyard_router::RouterConfig;
use switchyard_testkit::{
    free_port,
    llm::{Recorded, Reply, ScriptedLlm},
    prometheus,
};

/// USD per million tokens: 1.5 input, 0.5 cached input, 6 output.
const PRICES: &str = "[\"openai/gpt-4o-mini\"]\ninput_per_mtok = 1.5\ncached_input_per_mtok = 0.5\n\
                      output_per_mtok = 6\n";

/// What the vendor says answered.
const ANSWERING_MODEL: &str = "gpt-4o-mini-2024-07-18";

/// A call's cost under [`PRICES`] in USD.
fn usd(prompt: u32, cached: u32, completion: u32) -> f64 {
    f64::from(prompt - cached) * 1.5e-6 + f64::from(cached) * 0.5e-6 + f64::from(completion) * 6e-6
}

/// A direct turn ("hello": the routing call answers) and a multi-agent one ("experts"), each
/// call with its own usage.
fn script(request: &Recorded) -> Reply {
    let system = request.system_text();
    let reply = if request.tool_names().iter().any(|t| t == "use_mcp_agent") {
        if request.user_text().contains("experts") {
            Reply::tool_call(
                "use_multiagent_orchestration",
                r#"{"domains": ["technical", "finance"], "reasoning": "two views"}"#,
            )
            .usage(300, 15)
        } else {
            Reply::text("Hello there.").usage(100, 20).cached(40)
        }
    } else if system.contains("one of several experts") && system.contains("Technology Expert") {
        Reply::text("TECH view").usage(600, 50)
    } else if system.contains("one of several experts") {
        Reply::text("OTHER view").usage(650, 55)
    } else {
        Reply::text("Synthesis.").usage(700, 60).cached(200)
    };
    reply.model(ANSWERING_MODEL)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_scrape_shows_every_model_calls_tokens_and_what_the_turns_cost() {
    // Before the router makes its instruments, as `main` does; nextest runs each test in its
    // own process, so the meter provider is this test's.
    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let _metrics = init_metrics("router-metrics-test", None, Some(listen)).unwrap();
    let dir = std::env::temp_dir().join(format!("router-metrics-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let prices = dir.join("prices.toml");
    std::fs::write(&prices, PRICES).unwrap();
    let llm = ScriptedLlm::start(script).await;
    let configure = Box::new(move |config: &mut RouterConfig| config.model_prices = Some(prices));
    let suite = Suite::with(llm, Options { configure, ..Options::default() }).await;
    let mut client = suite.client().await;

    let direct = client.chat(as_tenant("acme", chat("hello"))).await.unwrap().into_inner();
    let direct_meta = direct.metadata.unwrap();
    assert_eq!(direct_meta.cost_parts.len(), 1, "{:?}", direct_meta.cost_parts);
    let experts = client.chat(as_tenant("acme", chat("ask the experts"))).await.unwrap().into_inner();
    let experts_meta = experts.metadata.unwrap();
    let kinds: Vec<&str> = experts_meta.cost_parts.iter().map(|p| p.kind.as_str()).collect();
    assert_eq!(kinds, ["routing", "expert", "expert", "synthesis"], "{:?}", experts_meta.cost_parts);

    let (status, text) = prometheus::scrape(listen).await;
    assert_eq!(status, 200, "{text}");
    let metrics = prometheus::parse(&text).unwrap_or_else(|err| panic!("{err}\n{text}"));
    assert_eq!(metrics.types.get("switchyard_cost_usd_total").map(String::as_str), Some("counter"), "{text}");
    assert_eq!(metrics.types.get("gen_ai_client_token_usage").map(String::as_str), Some("histogram"), "{text}");

    // The cost: per route, model and kind of call, as the turns returned it.
    let cost = |route: &str, kind: &str| {
        metrics
            .sum("switchyard_cost_usd_total", &[("route", route), ("model", "openai/gpt-4o-mini"), ("call_kind", kind)])
    };
    let close = |actual: f64, expected: f64| (actual - expected).abs() < 1e-12;
    assert!(close(cost("direct", "routing"), usd(100, 40, 20)), "{text}");
    assert!(close(cost("direct", "routing"), direct_meta.cost_usd), "{text}");
    assert!(close(cost("multiagent", "routing"), usd(300, 0, 15)), "{text}");
    assert!(close(cost("multiagent", "expert"), usd(600, 0, 50) + usd(650, 0, 55)), "{text}");
    assert!(close(cost("multiagent", "synthesis"), usd(700, 200, 60)), "{text}");
    let multiagent: f64 = ["routing", "expert", "synthesis"].iter().map(|kind| cost("multiagent", kind)).sum();
    assert!(close(multiagent, experts_meta.cost_usd), "{multiagent} vs {}\n{text}", experts_meta.cost_usd);
    assert_eq!(metrics.find("switchyard_cost_usd_total", &[("call_kind", "agent_step")]).count(), 0, "{text}");

    // The tokens of the five model calls, by type, with the requested and the answering model.
    let genai = [
        ("gen_ai_operation_name", "chat"),
        ("gen_ai_provider_name", "openai"),
        ("gen_ai_request_model", "gpt-4o-mini"),
        ("gen_ai_response_model", ANSWERING_MODEL),
    ];
    let tokens = |kind: &str, series: &str| {
        let labels: Vec<(&str, &str)> = genai.iter().copied().chain([("gen_ai_token_type", kind)]).collect();
        metrics.sum(&format!("gen_ai_client_token_usage_{series}"), &labels)
    };
    assert_eq!(tokens("input", "count"), 5.0, "{text}");
    assert_eq!(tokens("input", "sum"), f64::from(100 + 300 + 600 + 650 + 700), "{text}");
    assert_eq!(tokens("output", "count"), 5.0, "{text}");
    assert_eq!(tokens("output", "sum"), f64::from(20 + 15 + 50 + 55 + 60), "{text}");
    assert_eq!(metrics.sum("gen_ai_client_operation_duration_seconds_count", &genai), 5.0, "{text}");
    assert_eq!(metrics.sum("router_turns_total", &[("route", "multiagent")]), 1.0, "{text}");
    assert!(!text.contains("acme"), "no tenant becomes a label:\n{text}");
}

/// The default model's vendor answers 500 until it recovers; the fallback model answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_scrape_shows_a_providers_circuit_open_then_closed() {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    };
    use switchyard_testkit::llm::Wire;

    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let _metrics = init_metrics("router-circuit-test", None, Some(listen)).unwrap();
    let recovered = Arc::new(AtomicBool::new(false));
    let vendor_up = recovered.clone();
    let llm = ScriptedLlm::start(move |request| match request.wire {
        Wire::OpenAi if !vendor_up.load(Ordering::SeqCst) => Reply::error(500, "internal error"),
        _ => Reply::text("Hello there."),
    })
    .await;
    let cooldown = std::time::Duration::from_millis(500);
    let configure = Box::new(move |config: &mut RouterConfig| {
        config.circuit_failures = 2;
        config.circuit_cooldown = cooldown;
    });
    let options = Options { fallback_models: vec!["anthropic/claude-test"], configure, ..Options::default() };
    let suite = Suite::with(llm, options).await;
    let mut client = suite.client().await;
    let openai_calls = || suite.llm.requests().iter().filter(|r| r.wire == Wire::OpenAi).count();
    let scrape = || async {
        let (status, text) = prometheus::scrape(listen).await;
        assert_eq!(status, 200, "{text}");
        let metrics = prometheus::parse(&text).unwrap_or_else(|err| panic!("{err}\n{text}"));
        let state = metrics.sum("switchyard_provider_circuit_state", &[("provider", "openai")]);
        let moved = |to: &str| {
            metrics.sum("switchyard_provider_circuit_transitions_total", &[("provider", "openai"), ("to", to)])
        };
        (state, [moved("open"), moved("half_open"), moved("closed")], text)
    };

    let (state, _, text) = scrape().await;
    assert_eq!(state, 0.0, "closed from the start:\n{text}");
    // Two failed calls (each after its retry) open the circuit; the fallback answers each turn.
    for _ in 0..2 {
        let answer = client.chat(as_tenant("acme", chat("hello"))).await.unwrap().into_inner();
        assert_eq!(answer.message.unwrap().content, "Hello there.");
    }
    let (state, moved, text) = scrape().await;
    assert_eq!((state, moved), (2.0, [1.0, 0.0, 0.0]), "{text}");
    let before = openai_calls();
    let answer = client.chat(as_tenant("acme", chat("hello"))).await.unwrap().into_inner();
    assert_eq!(answer.message.unwrap().content, "Hello there.");
    assert_eq!(openai_calls(), before, "no call reaches a provider whose circuit is open");

    recovered.store(true, Ordering::SeqCst);
    tokio::time::sleep(cooldown).await;
    client.chat(as_tenant("acme", chat("hello"))).await.unwrap();
    assert_eq!(openai_calls(), before + 1, "one probe after the cooldown");
    let (state, moved, text) = scrape().await;
    assert_eq!((state, moved), (0.0, [1.0, 1.0, 1.0]), "{text}");
    assert_eq!(metrics_type(&text, "switchyard_provider_circuit_state"), Some("gauge".to_owned()), "{text}");
}

fn metrics_type(text: &str, name: &str) -> Option<String> {
    prometheus::parse(text).ok()?.types.get(name).cloned()
}
