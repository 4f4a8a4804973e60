//! What authorization and per-tool policies cost, by the gateway bench's method (real MCP over
//! streamable HTTP on loopback, 1,000 tools with real descriptions, the MiniLM ranking):
//! `tools/list` with a context set and `tools/call`, for a caller in two groups and a role, in
//! three configurations taken in turn (A/B/C/A/B/C…, so drift hits all alike):
//! - open: `--auth open`, no policies (the baseline);
//! - policies: `--auth open`, 21 policies (globs on tools and servers, hide, allow and deny
//!   lists; two apply to the caller, named by identity headers);
//! - oauth + policies: `--auth oauth` on a second gateway over the same server, every request
//!   carrying an RS256 bearer token (2048-bit key, JWKS file) whose claims name the same groups
//!   and role, and the same 21 policies.
//!
//! Then, in process: verifying one bearer token, building one caller's access to the 1,000 tools
//! (a policy cache miss), and deciding one call.
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
    auth::{AuthMode, Authenticator},
    policy::{AccessMap, Policies, PolicySpec, Subject, validate},
};
use switchyard_models::Embedder;
use switchyard_testkit::{
    catalog::base_tools,
    eventually, free_port,
    latency::{ms, sequential},
    mcp::{Client, FixtureServer, tool},
    oauth::{SigningKey, now},
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

/// A caller named by identity headers (open mode) or by a bearer token (oauth mode).
async fn caller(url: &str, bearer: Option<&str>) -> Client {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    config.custom_headers.insert("x-switchyard-groups".parse().expect("name"), "contractors,staff".parse().expect("v"));
    config.custom_headers.insert("x-switchyard-role".parse().expect("name"), "finance-expert".parse().expect("v"));
    if let Some(token) = bearer {
        config = config.auth_header(token.to_owned());
    }
    rmcp::model::ClientConfig::new(ClientCapabilities::default(), Implementation::new("policies-bench", "0"))
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("client")
}

/// One table row: the baseline's p50/p99, then each configuration's with its difference.
fn row(name: &str, open: &Histogram<u64>, others: &[&Histogram<u64>]) {
    let (p50, p99) = (ms(open.value_at_quantile(0.5)), ms(open.value_at_quantile(0.99)));
    let mut line = format!("| {name} | {p50:.3} / {p99:.3} |");
    for other in others {
        let (o50, o99) = (ms(other.value_at_quantile(0.5)), ms(other.value_at_quantile(0.99)));
        line.push_str(&format!(" {o50:.3} / {o99:.3} ({:+.3} / {:+.3}) |", o50 - p50, o99 - p99));
    }
    println!("{line}");
}

/// The claims of the bench caller's token: the same groups and role as the open caller's headers.
fn claims(issuer: &str, audience: &str) -> serde_json::Value {
    json!({
        "iss": issuer, "aud": audience, "sub": "bench", "scope": "mcp:tools",
        "groups": ["contractors", "staff"], "role": "finance-expert",
        "iat": now(), "exp": now() + 3600,
    })
}

async fn run() {
    let embedder =
        Arc::new(Embedder::load(&switchyard_testkit::model_dir()).expect("model (run scripts/fetch-models.sh)"));
    let big = FixtureServer::start(tools()).await.expect("fixture");
    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let mut config = GatewayConfig::in_memory(loopback, loopback, vec![format!("big={}", big.url())]);
    config.top_k = 8;
    config.model_dir = switchyard_testkit::model_dir();
    let server =
        GatewayServer::bind_with(&config, Stores::in_memory(), Some(Arc::clone(&embedder))).await.expect("gateway");
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

    // The oauth gateway: its audience is its own /mcp URL, its keys a JWKS file.
    let issuer = "https://issuer.bench.example";
    let key = SigningKey::generate("bench-key");
    let dir = tempfile::tempdir().expect("temp dir");
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, key.jwks().to_string()).expect("jwks file");
    let port = free_port();
    let audience = format!("http://127.0.0.1:{port}/mcp");
    let mut oauth_config = config.clone();
    oauth_config.mcp_listen = ([127, 0, 0, 1], port).into();
    oauth_config.auth.mode = AuthMode::Oauth;
    oauth_config.auth.oauth_issuer = Some(issuer.to_owned());
    oauth_config.auth.oauth_audience = Some(audience.clone());
    oauth_config.auth.oauth_jwks_file = Some(jwks);
    let oauth_server = GatewayServer::bind_with(&oauth_config, Stores::in_memory(), Some(Arc::clone(&embedder)))
        .await
        .expect("gateway");
    let oauth_gateway = oauth_server.gateway();
    let (oauth_stop, oauth_stopped) = tokio::sync::oneshot::channel::<()>();
    let oauth_serving = tokio::spawn(oauth_server.serve(async move {
        let _ = oauth_stopped.await;
    }));
    eventually(Duration::from_secs(600), "oauth gateway's catalog ready", || async {
        oauth_gateway.catalog().len() == TOOLS && oauth_gateway.catalog().embedded
    })
    .await;
    let token = key.sign(&claims(issuer, &audience));

    let policies = policies();
    oauth_gateway.set_policies(policies.clone());
    let through = caller(&url, None).await;
    let authorized = caller(&audience, Some(&token)).await;
    for client in [&through, &authorized] {
        let mut params = CallToolRequestParams::new("set_context");
        params.arguments = json!({"query": "Turn this question into a SQL query"}).as_object().cloned();
        client.call_tool(params).await.expect("set_context");
    }
    let tool = gateway.catalog().tools()[1].name.clone();

    // [open, policies, oauth + policies]
    let mut lists = [histogram(), histogram(), histogram()];
    let mut calls = [histogram(), histogram(), histogram()];
    for round in 0..6 {
        let config = round % 3;
        gateway.set_policies(if config == 1 { policies.clone() } else { Policies::default() });
        let through = if config == 2 { &authorized } else { &through };
        let list = sequential(WARMUP, SAMPLES, |_| async move {
            let tools = through.list_tools(None).await.expect("tools/list");
            assert_eq!(tools.tools.len(), 9);
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
        lists[config].add(&list).expect("histogram");
        calls[config].add(&call).expect("histogram");
    }

    // In process: what the oauth gateway's check does for each request (the token's signature,
    // claims and scopes, from the Authorization header).
    let authenticator = Authenticator::from_config(&oauth_config, &[]).await.expect("authenticator");
    let mut headers = axum::http::HeaderMap::new();
    headers.insert(axum::http::header::AUTHORIZATION, format!("Bearer {token}").parse().expect("header"));
    let mut verify = histogram();
    for i in 0..(WARMUP + 2 * SAMPLES) {
        let started = Instant::now();
        let subject = authenticator.authenticate(&headers).await.expect("a valid token");
        let elapsed = started.elapsed();
        assert!(subject.is_some_and(|s| s.role.is_some()));
        if i >= WARMUP {
            let _ = verify.record(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX).max(1));
        }
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
        "| operation (ms, p50 / p99) | open, no policies | open, 21 policies (difference) | oauth token + 21 policies (difference) |"
    );
    println!("| --- | --- | --- | --- |");
    row("tools/list, context set, 1,000 tools", &lists[0], &[&lists[1], &lists[2]]);
    row("tools/call through the gateway", &calls[0], &[&calls[1], &calls[2]]);
    println!(
        "\nverifying one bearer token (RS256, 2048-bit, from the Authorization header): p50 {:.1} µs, p99 {:.1} µs",
        verify.value_at_quantile(0.5) as f64 / 1000.0,
        verify.value_at_quantile(0.99) as f64 / 1000.0,
    );
    println!(
        "access map for one caller over {TOOLS} tools and {} policies (a cache miss): p50 {:.1} µs, p99 {:.1} µs; \
         one call's decision: p50 {:.2} µs, p99 {:.2} µs; the caller may call {callable} of {TOOLS} tools",
        policies.policies.len(),
        build.value_at_quantile(0.5) as f64 / 1000.0,
        build.value_at_quantile(0.99) as f64 / 1000.0,
        decide.value_at_quantile(0.5) as f64 / 1000.0,
        decide.value_at_quantile(0.99) as f64 / 1000.0,
    );
    let _ = through.cancel().await;
    let _ = authorized.cancel().await;
    let _ = stop.send(());
    let _ = oauth_stop.send(());
    let _ = serving.await;
    let _ = oauth_serving.await;
}

fn histogram() -> Histogram<u64> {
    Histogram::new(3).expect("histogram")
}
