//! One MCP agent turn through the router, against a direct turn on the same stack in the same
//! run: triggers and sessions in memory, the real MCP gateway (in memory, MiniLM loaded) with a
//! 200-tool MCP server behind it, the router (analytics in memory, no fast router) and the
//! scripted vendor, each on loopback in this process.
//!
//! - `direct turn`: `Chat` forced to the direct route — ProcessQuery, the vendor call,
//!   AppendMessages (the baseline);
//! - `agent turn`: `Chat` forced to the MCP agent on the same session — the same, plus the
//!   gateway's context and ranked tools before the vendor call (the vendor answers without
//!   calling a tool, so the figure is the agent's own cost, not a tool's).
//!
//! Rounds alternate, so both see the same machine. Run: `cargo bench -p switchyard-router
//! --bench agent_turn` (needs models/). Prints a table; BENCHMARKS.md records it.

use std::{net::SocketAddr, time::Duration};

use hdrhistogram::Histogram;
use switchyard_kit::Secret;
use switchyard_llm::ProviderArgs;
use switchyard_mcp_gateway::{GatewayConfig, GatewayServer};
use switchyard_proto::{
    router::v1::{ChatRequest, RouteType, router_service_client::RouterServiceClient},
    sessions::v1::{CreateSessionRequest, session_service_client::SessionServiceClient},
};
use switchyard_router::{RouterConfig, RouterServer};
use switchyard_sessions::{SessionsConfig, SessionsServer};
use switchyard_testkit::{
    Served, catalog, eventually,
    latency::{histogram, ms, sequential},
    llm::{Reply, ScriptedLlm},
    mcp::FixtureServer,
    wait_serving,
};
use switchyard_triggers::{TriggersConfig, TriggersServer};
use tonic::transport::Channel;

const WARMUP: usize = 100;
const SAMPLES: usize = 1000;
const ROUNDS: usize = 3;
const MESSAGE: &str = "What will the weather be in Paris tomorrow?";

/// A few real-looking tools; the test kit makes a catalog of 200 variants of them.
const BASE_TOOLS: [(&str, &str); 8] = [
    ("weather_forecast", "Gets the weather forecast for a city and a date."),
    ("search_notes", "Searches the user's notes for a word or phrase."),
    ("send_email", "Sends an email to a recipient with a subject and a body."),
    ("convert_currency", "Converts an amount from one currency to another at today's rate."),
    ("translate_text", "Translates a text into another language."),
    ("book_flight", "Books a flight between two airports on a date."),
    ("run_sql", "Runs a read-only SQL query against the analytics database."),
    ("create_invoice", "Creates an invoice for a customer with line items."),
];

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn row(name: &str, h: &Histogram<u64>) {
    println!(
        "| {name} | {:.3} | {:.3} | {:.3} | {} |",
        ms(h.value_at_quantile(0.5)),
        ms(h.value_at_quantile(0.9)),
        ms(h.value_at_quantile(0.99)),
        h.len()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let llm = ScriptedLlm::start(|_| Reply::text("It will be sunny in Paris tomorrow, 21 degrees.")).await;

    let triggers = TriggersServer::bind(&TriggersConfig::in_memory(loopback())).await.expect("triggers binds");
    let triggers = Served::spawn(triggers.local_addr(), |stop| triggers.serve(stop));
    let sessions =
        SessionsServer::bind(&SessionsConfig::in_memory(loopback(), &triggers.url())).await.expect("sessions binds");
    let sessions = Served::spawn(sessions.local_addr(), |stop| sessions.serve(stop));
    wait_serving(&sessions.url(), "switchyard.sessions.v1.SessionService").await;

    let base: Vec<(String, String)> = BASE_TOOLS.iter().map(|(n, d)| ((*n).to_owned(), (*d).to_owned())).collect();
    let fixture = FixtureServer::start(catalog::varied_tools(&base, 200)).await.expect("MCP server starts");
    let mut config = GatewayConfig::in_memory(loopback(), loopback(), vec![format!("tools={}", fixture.url())]);
    config.model_dir = switchyard_testkit::model_dir();
    let server = GatewayServer::bind(&config).await.expect("gateway binds");
    let gateway = server.gateway();
    let gateway_served = Served::spawn(server.local_addr(), |stop| server.serve(stop));
    eventually(Duration::from_secs(120), "the 200 tools embedded in the gateway", || async {
        let count = gateway.catalog().tools().len();
        if count == 200 && (gateway.catalog().embedded || !gateway.has_embedder()) {
            Ok(())
        } else {
            Err(format!("{count} tools so far"))
        }
    })
    .await;
    assert!(gateway.has_embedder(), "the gateway ranks with MiniLM (scripts/fetch-models.sh)");

    let mut config = RouterConfig::in_memory(loopback(), &sessions.url(), &gateway_served.url());
    config.providers = ProviderArgs {
        openai_base_url: Some(llm.openai_base_url()),
        openai_api_key: Some(Secret::new("sk-bench")),
        ..ProviderArgs::default()
    };
    config.no_fast_router = true;
    let router = RouterServer::bind(&config).await.expect("router binds");
    let router = Served::spawn(router.local_addr(), |stop| router.serve(stop));
    let channel = Channel::from_shared(router.url()).expect("url").connect().await.expect("router reachable");
    let client = RouterServiceClient::new(channel);

    let mut sessions_client = SessionServiceClient::connect(sessions.url()).await.expect("sessions reachable");
    let session_id = sessions_client
        .create_session(CreateSessionRequest::default())
        .await
        .expect("session")
        .into_inner()
        .session
        .expect("session")
        .session_id;

    let turn = |route: RouteType| {
        let client = client.clone();
        let session_id = session_id.clone();
        move |_| {
            let mut client = client.clone();
            let request = ChatRequest {
                message: MESSAGE.to_owned(),
                session_id: session_id.clone(),
                force_route: route as i32,
                ..Default::default()
            };
            async move {
                let response = client.chat(request).await.expect("chat").into_inner();
                let metadata = response.metadata.expect("metadata");
                assert_eq!(metadata.route_type(), route, "{metadata:?}");
                // The gateway answered (it would degrade the turn to a direct answer otherwise).
                assert!(!metadata.degraded.iter().any(|d| d.contains("gateway")), "{metadata:?}");
            }
        }
    };
    // The agent's turn reaches the gateway (a turn the gateway failed would degrade to direct).
    let probe = turn(RouteType::McpAgent);
    probe(0).await;

    let (mut direct, mut agent) = (histogram(), histogram());
    for _ in 0..ROUNDS {
        direct.add(sequential(WARMUP, SAMPLES, turn(RouteType::Direct)).await).expect("same bounds");
        agent.add(sequential(WARMUP, SAMPLES, turn(RouteType::McpAgent)).await).expect("same bounds");
    }
    println!("| turn | p50 ms | p90 ms | p99 ms | samples |");
    println!("| --- | --- | --- | --- | --- |");
    row("direct turn (baseline)", &direct);
    row("MCP agent turn", &agent);
    println!(
        "agent - direct: p50 +{:.3} ms, p99 +{:.3} ms",
        ms(agent.value_at_quantile(0.5)) - ms(direct.value_at_quantile(0.5)),
        ms(agent.value_at_quantile(0.99)) - ms(direct.value_at_quantile(0.99)),
    );
    let _ = (router, gateway_served, sessions, triggers);
}
