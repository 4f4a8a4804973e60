//! What per-tool policies cost, by the gateway bench's method (real MCP over streamable HTTP on
//! loopback, 1,000 tools with real descriptions, the MiniLM ranking): `tools/list` with a
//! context set and `tools/call`, for a caller in two groups and a role, on one gateway with no
//! policies and with 21 policies (globs on tools and servers, hide, allow and deny lists; two of
//! them apply to the caller), alternating A/B/A/B so drift hits both alike. Then, in process,
//! what the cache saves: building one caller's access to the 1,000 tools, and deciding one call.
//!
//! Run: `cargo bench -p switchyard-mcp-gateway --bench policies` (needs models/; see
//! scripts/fetch-models.sh). Prints a table.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use hdrhistogram::Histogram;
use rmcp::{
    ServiceExt,
    model::{CallToolRequestParams, ClientCapabilities, Implementation, ProtocolVersion},
    transport::{StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig},
};
use serde_json::json;
use switchyard_mcp_gateway::{
    GatewayConfig, GatewayServer, Stores,
    policy::{AccessMap, Policies, PolicySpec, Subject, validate},
};
use switchyard_models::Embedder;
use switchyard_testkit::{
    catalogue::base_tools,
    eventually,
    latency::{ms, sequential},
    mcp::{Client, FixtureServer, tool},
};

const TOOLS: usize = 1000;
const WARMUP: usize = 50;
const SAMPLES: usize = 500;

/// The gateway bench's 1,000 tools: MetaTool's 199 (tests/data/README.md), each in five
/// variants, every one taking an `input`.
fn tools() -> Vec<rmcp::model::Tool> {
    let base = base_tools(include_str!("../tests/data/metatool-tools.jsonl"));
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

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(run());
}

/// 21 policies of the kinds a team writes; the caller (groups contractors and staff, role
/// finance-expert) falls under `contractors` and `finance`, and every policy is looked at.
fn policies() -> Policies {
    let mut specs: Vec<PolicySpec> = (0..18)
        .map(|i| PolicySpec {
            name: Some(format!("team-{i}")),
            groups: vec![format!("team-{i}")],
            deny_tools: vec![format!("big__*_{i}?"), format!("big__{}*", char::from(b'A' + i as u8))],
            ..PolicySpec::default()
        })
        .collect();
    specs.push(PolicySpec {
        name: Some("everyone-hidden".into()),
        hide: vec!["big__*_99?".into(), "big__Zillow*".into()],
        ..PolicySpec::default()
    });
    specs.push(PolicySpec {
        name: Some("contractors".into()),
        groups: vec!["contractors".into()],
        deny_servers: vec!["payroll".into(), "admin-*".into()],
        deny_tools: vec!["big__B*".into(), "big__*_42?".into(), "big__*delete*".into(), "big__*_7??".into()],
        ..PolicySpec::default()
    });
    specs.push(PolicySpec {
        name: Some("finance".into()),
        roles: vec!["finance-expert".into()],
        allow_servers: Some(vec!["big".into(), "ledger".into()]),
        ..PolicySpec::default()
    });
    Policies::new(validate(specs).expect("policies"))
}

async fn caller(url: &str) -> Client {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    config.custom_headers.insert("x-switchyard-groups".parse().expect("name"), "contractors,staff".parse().expect("v"));
    config.custom_headers.insert("x-switchyard-role".parse().expect("name"), "finance-expert".parse().expect("v"));
    rmcp::model::ClientConfig::new(ClientCapabilities::default(), Implementation::new("policies-bench", "0"))
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("client")
}

fn row(name: &str, without: &Histogram<u64>, with: &Histogram<u64>) {
    println!(
        "| {name} | {:.3} | {:.3} | {:.3} | {:.3} | {:+.3} | {:+.3} |",
        ms(without.value_at_quantile(0.5)),
        ms(without.value_at_quantile(0.99)),
        ms(with.value_at_quantile(0.5)),
        ms(with.value_at_quantile(0.99)),
        ms(with.value_at_quantile(0.5)) - ms(without.value_at_quantile(0.5)),
        ms(with.value_at_quantile(0.99)) - ms(without.value_at_quantile(0.99)),
    );
}

async fn run() {
    let embedder =
        Arc::new(Embedder::load(&switchyard_testkit::model_dir()).expect("model (run scripts/fetch-models.sh)"));
    let big = FixtureServer::start(tools()).await.expect("fixture");
    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let mut config = GatewayConfig::in_memory(loopback, loopback, vec![format!("big={}", big.url())]);
    config.top_k = 8;
    config.model_dir = switchyard_testkit::model_dir();
    let server = GatewayServer::bind_with(&config, Stores::in_memory(), Some(embedder)).await.expect("gateway");
    let gateway = server.gateway();
    let url = format!("http://{}/mcp", server.mcp_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    eventually(Duration::from_secs(600), "catalog ready", || async {
        gateway.catalog().len() == TOOLS && gateway.catalog().embedded
    })
    .await;

    let through = caller(&url).await;
    let mut params = CallToolRequestParams::new("set_context");
    params.arguments = json!({"query": "Turn this question into a SQL query"}).as_object().cloned();
    through.call_tool(params).await.expect("set_context");
    let tool = gateway.catalog().tools()[1].name.clone();

    let policies = policies();
    let (mut list_without, mut list_with, mut call_without, mut call_with) =
        (histogram(), histogram(), histogram(), histogram());
    for round in 0..4 {
        let with = round % 2 == 1;
        gateway.set_policies(if with { policies.clone() } else { Policies::default() });
        let list = sequential(WARMUP, SAMPLES, |_| {
            let through = &through;
            async move {
                let tools = through.list_tools(None).await.expect("tools/list");
                assert_eq!(tools.tools.len(), 9);
            }
        })
        .await;
        let call = sequential(WARMUP, SAMPLES, |i| {
            let mut params = CallToolRequestParams::new(tool.clone());
            params.arguments = json!({"input": format!("q{i}")}).as_object().cloned();
            let through = &through;
            async move {
                let result = through.call_tool(params).await.expect("call");
                assert_ne!(result.is_error, Some(true));
            }
        })
        .await;
        let (list_into, call_into) =
            if with { (&mut list_with, &mut call_with) } else { (&mut list_without, &mut call_without) };
        list_into.add(&list).expect("histogram");
        call_into.add(&call).expect("histogram");
    }

    // In process: one caller's access to every tool (what a cache miss costs: after a policy
    // reload or a catalog change), and one call's decision (made on every call).
    let subject = Subject {
        role: Some(switchyard_kit::RoleId::parse("finance-expert").expect("role")),
        groups: vec!["contractors".into(), "staff".into()],
        ..Subject::default()
    };
    let catalog = gateway.catalog();
    let mut build = histogram();
    let mut decide = histogram();
    for _ in 0..200 {
        let started = Instant::now();
        let map =
            AccessMap::build(&policies, &subject, catalog.tools().iter().map(|t| (t.server.as_str(), t.name.as_str())));
        let _ = build.record(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1));
        std::hint::black_box(map);
        let started = Instant::now();
        let decided = Policies::decide(&policies.applying(&subject), "big", &tool);
        let _ = decide.record(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1));
        std::hint::black_box(decided.is_ok());
    }
    let callable = (0..catalog.len())
        .filter(|&i| {
            let tool = catalog.tool(i);
            Policies::decide(&policies.applying(&subject), &tool.server, &tool.name).is_ok()
        })
        .count();

    println!(
        "| operation | without p50 ms | without p99 ms | with policies p50 ms | with p99 ms | p50 difference | p99 difference |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    row("tools/list, context set, 1,000 tools", &list_without, &list_with);
    row("tools/call through the gateway", &call_without, &call_with);
    println!(
        "\naccess map for one caller over {TOOLS} tools and {} policies (a cache miss): p50 {:.1} µs, p99 {:.1} µs; \
         one call's decision: p50 {:.2} µs, p99 {:.2} µs; the caller may call {callable} of {TOOLS} tools",
        policies.policies.len(),
        build.value_at_quantile(0.5) as f64 / 1000.0,
        build.value_at_quantile(0.99) as f64 / 1000.0,
        decide.value_at_quantile(0.5) as f64 / 1000.0,
        decide.value_at_quantile(0.99) as f64 / 1000.0,
    );
    let _ = through.cancel().await;
    let _ = stop.send(());
    let _ = serving.await;
}

fn histogram() -> Histogram<u64> {
    Histogram::new(3).expect("histogram")
}
