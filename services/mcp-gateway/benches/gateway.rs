//! The gateway's latency targets, each measured over real MCP (streamable HTTP on loopback)
//! against a baseline taken in the same run:
//!
//! - `tools/list` for a session with a context, over 1,000 tools, through the gateway —
//!   against `tools/list` of a server with 8 tools (the HTTP + JSON-RPC floor);
//! - `set_context` through the gateway — against an MCP `ping` on the same session (the
//!   call's floor: the target is set_context − ping) and against embedding the same text alone;
//! - `tools/call` through the gateway — against the same call made directly to the server;
//! - `set_context` again with a recorded usage history (the prior ranks), and while the
//!   catalog is rebuilt without pause (the prior retraining), each against `ping`.
//!
//! Run: `cargo bench -p switchyard-mcp-gateway --bench gateway` (needs models/; see
//! scripts/fetch-models.sh). `SWITCHYARD_ENCODER` / `SWITCHYARD_SIMD` choose the query
//! encoder's kernels and `SWITCHYARD_QUERY_THREADS` its threads (see switchyard-models). Prints a table; BENCHMARKS.md records it.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use hdrhistogram::Histogram;
use rmcp::model::{CallToolRequestParams, ClientRequest, PingRequest};
use serde_json::{Value, json};
use switchyard_mcp_gateway::{GatewayConfig, GatewayServer, Stores};
use switchyard_models::Embedder;
use switchyard_testkit::{
    eventually,
    latency::{ms, sequential},
    mcp::{Client, FixtureServer, client, tool},
};

const TOOLS: usize = 1000;
const WARMUP: usize = 50;
const SAMPLES: usize = 1000;

/// 1,000 tools with real descriptions: MetaTool's 199 (tests/data/README.md), each in five
/// variants.
fn tools() -> Vec<rmcp::model::Tool> {
    let base: Vec<(String, String)> = include_str!("../tests/data/metatool-tools.jsonl")
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("json"))
        .map(|v| (v["name"].as_str().unwrap_or("").to_owned(), v["description"].as_str().unwrap_or("").to_owned()))
        .collect();
    let variants = ["", " Works offline.", " For teams.", " Free tier available.", " Supports exports."];
    (0..TOOLS)
        .map(|i| {
            let (name, description) = &base[i % base.len()];
            tool(
                &format!("{name}_{i}"),
                &format!("{description}{}", variants[(i / base.len()) % variants.len()]),
                &["input"],
            )
        })
        .collect()
}

fn row(name: &str, subject: &Histogram<u64>, baseline_name: &str, baseline: &Histogram<u64>) {
    println!(
        "| {name} | {:.2} | {:.2} | {baseline_name} | {:.2} | {:.2} | {:.2}× / +{:.2} ms |",
        ms(subject.value_at_quantile(0.5)),
        ms(subject.value_at_quantile(0.99)),
        ms(baseline.value_at_quantile(0.5)),
        ms(baseline.value_at_quantile(0.99)),
        subject.value_at_quantile(0.5) as f64 / baseline.value_at_quantile(0.5).max(1) as f64,
        ms(subject.value_at_quantile(0.5)) - ms(baseline.value_at_quantile(0.5)),
    );
}

/// `set_context` with a new context each time, then an MCP `ping` on the same session: its
/// floor, measured right after it under the same conditions.
async fn set_context_against_ping(
    through: &Client,
    next_context: &mut impl FnMut() -> String,
) -> (Histogram<u64>, Histogram<u64>) {
    let set_context = sequential(WARMUP, SAMPLES, |_| {
        let params = call_params("set_context", json!({"query": next_context()}));
        async move {
            through.call_tool(params).await.expect("set_context");
        }
    })
    .await;
    let ping = sequential(WARMUP, SAMPLES, |_| async move {
        through.send_request(ClientRequest::PingRequest(PingRequest::default())).await.expect("ping");
    })
    .await;
    (set_context, ping)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let embedder =
        Arc::new(Embedder::load(&switchyard_testkit::model_dir()).expect("model (run scripts/fetch-models.sh)"));
    let big = FixtureServer::start(tools()).await.expect("fixture");
    let small = FixtureServer::start((0..8).map(|i| tool(&format!("t{i}"), "A tool.", &["input"])).collect())
        .await
        .expect("fixture");

    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let mut config = GatewayConfig::in_memory(loopback, loopback, vec![format!("big={}", big.url())]);
    config.top_k = 8;
    // The model's files decide whether the shipped base query adapter fits (it does for MiniLM).
    config.model_dir = switchyard_testkit::model_dir();
    let server = GatewayServer::bind_with(&config, Stores::in_memory(), Some(embedder.clone())).await.expect("gateway");
    let gateway = server.gateway();
    let url = format!("http://{}/mcp", server.mcp_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    let started = Instant::now();
    eventually(Duration::from_secs(600), "catalog ready", || async {
        gateway.catalog().len() == TOOLS && gateway.catalog().embedded
    })
    .await;
    eprintln!("catalog of {TOOLS} tools embedded in {:?}", started.elapsed());
    eprintln!(
        "single-text kernels: {}, {} thread(s); base query adapter: {}",
        embedder.kernels().name(),
        embedder.query_threads(),
        if gateway.settings().base_adapter.is_some() { "shipped" } else { "none" }
    );

    let through = client(&url).await;
    let direct = client(&big.url()).await;
    let floor = client(&small.url()).await;

    // set_context, and the embedding alone as its baseline.
    let queries = [
        "Turn this question into a SQL query",
        "What should I wear today?",
        "plan a trip to Lisbon in May",
        "find recent research papers on protein folding",
        "convert 300 dollars to euros",
    ];
    // Each request's context is new (numbered, warm-up included), so every one is embedded: the
    // gateway keeps recent contexts' embeddings, and a repeated text would measure that lookup.
    let mut sent = 0usize;
    let mut next_context = move || {
        sent += 1;
        format!("{} (request {sent})", queries[sent % queries.len()])
    };
    let (set_context, ping) = set_context_against_ping(&through, &mut next_context).await;
    let embed_only = sequential(WARMUP, SAMPLES, |_| {
        let embedder = embedder.clone();
        let query = next_context();
        async move {
            tokio::task::spawn_blocking(move || embedder.embed(&[query.as_str()]).expect("embed")).await.expect("task");
        }
    })
    .await;

    // tools/list with a context set (ranking 1,000 tools), against an 8-tool server's list.
    let list = sequential(WARMUP, SAMPLES, |_| {
        let through = &through;
        async move {
            let tools = through.list_tools(None).await.expect("tools/list");
            assert_eq!(tools.tools.len(), 9);
        }
    })
    .await;
    let list_floor = sequential(WARMUP, SAMPLES, |_| {
        let floor = &floor;
        async move {
            floor.list_tools(None).await.expect("tools/list");
        }
    })
    .await;

    // tools/call through the gateway against the same call made directly.
    let call_through = sequential(WARMUP, SAMPLES, |i| {
        let params = call_params("big__AI2sql_1", json!({"input": format!("q{i}")}));
        let through = &through;
        async move {
            through.call_tool(params).await.expect("call");
        }
    })
    .await;
    let call_direct = sequential(WARMUP, SAMPLES, |i| {
        let params = call_params("AI2sql_1", json!({"input": format!("q{i}")}));
        let direct = &direct;
        async move {
            direct.call_tool(params).await.expect("call");
        }
    })
    .await;

    println!("| operation | p50 ms | p99 ms | baseline | baseline p50 ms | baseline p99 ms | p50 ratio / difference |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    row("set_context (embed + store + rank)", &set_context, "ping, same session", &ping);
    row("set_context (embed + store + rank)", &set_context, "embedding alone", &embed_only);
    row("tools/list, context set, 1,000 tools", &list, "tools/list of an 8-tool server", &list_floor);
    row("tools/call through the gateway", &call_through, "same call direct", &call_direct);

    // With a recorded history: ten past contexts for each of MetaTool's 199 tools, each set and
    // then used as a session would (with the calls above, which were recorded too), so the
    // usage prior (neighbours, usage adapter, word classifier) ranks every set_context. Then
    // the same while the catalog is rebuilt without pause, each rebuild training the prior
    // again: the worst case of a gateway whose history keeps changing (it rebuilds at most
    // once per --history-refresh).
    let mut recorded = 0;
    let tenant = switchyard_kit::TenantId::parse("default").expect("tenant");
    let catalog = gateway.catalog();
    for (i, tool) in catalog.tools().iter().take(199).enumerate() {
        let description = tool.tool.description.as_deref().unwrap_or_default();
        let words: Vec<&str> = description.split_whitespace().take(8).collect();
        for k in 0..10 {
            let tenant = tenant.clone();
            let id = switchyard_kit::SessionId::parse(&format!("history-{i}-{k}")).expect("session id");
            let key = switchyard_mcp_gateway::store::SessionKey::new(tenant, id);
            let context = format!("{} (past request {k})", words.join(" "));
            gateway.set_context(&key, &context, None).await.expect("set_context");
            let arguments = json!({"input": context}).as_object().cloned();
            gateway.call_tool(Some(&key), &tool.name, arguments).await.expect("call");
            recorded += 1;
        }
    }
    eventually(Duration::from_secs(60), "the calls recorded", || async {
        gateway.usage().history(recorded + 1).await.map(|h| h.len()).unwrap_or(0) >= recorded
    })
    .await;
    let started = Instant::now();
    gateway.refresh_history().await.expect("history");
    let catalog = gateway.catalog();
    eprintln!(
        "history of {} pairs learned in {:?}: usage adapter {}, {} word features",
        catalog.learned_pairs,
        started.elapsed(),
        catalog.adapted,
        catalog.word_features
    );
    let (set_with_history, ping_with_history) = set_context_against_ping(&through, &mut next_context).await;
    let retraining = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let rebuilds = tokio::spawn({
        let (gateway, retraining) = (gateway.clone(), retraining.clone());
        async move {
            let (started, mut count) = (Instant::now(), 0u32);
            while retraining.load(std::sync::atomic::Ordering::Relaxed) {
                gateway.rebuild_catalog().await;
                count += 1;
            }
            (count, started.elapsed())
        }
    });
    let (set_retraining, ping_retraining) = set_context_against_ping(&through, &mut next_context).await;
    retraining.store(false, std::sync::atomic::Ordering::Relaxed);
    let (count, spent) = rebuilds.await.expect("rebuilds");
    eprintln!("{count} catalog rebuilds while measuring, {:?} each", spent / count.max(1));
    let with_history = format!("set_context, {}-pair history", catalog.learned_pairs);
    row(&with_history, &set_with_history, "ping, same session", &ping_with_history);
    row("set_context while the prior retrains", &set_retraining, "ping, same session", &ping_retraining);

    for client in [through, direct, floor] {
        let _ = client.cancel().await;
    }
    let _ = stop.send(());
    let _ = serving.await;
}

fn call_params(name: &str, arguments: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = arguments.as_object().cloned();
    params
}
