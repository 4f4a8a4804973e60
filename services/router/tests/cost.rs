//! What every turn costs: each model call of a direct, an MCP-agent (two steps) and a
//! multi-agent turn (two experts and a synthesis) priced from the usage the scripted vendor
//! reported and a price table given with --model-prices, cached prompt tokens at the cached
//! rate; the sum in the response metadata and in the decision row; GetRoutingStats summing the
//! same per route, model, role and kind of call. Bad price tables stop the start, naming the
//! model and the field.

mod common;

use std::{sync::Arc, time::Duration};

use common::{Options, RecordedExt, Suite, as_tenant, chat, loopback};
use switchyard_proto::router::v1::{
    CallCost, ChatResponse, CostFigures, GetRoutingStatsRequest, GetRoutingStatsResponse, RouteType,
};
use switchyard_router::{RouterConfig, RouterServer, analytics::MemoryAnalytics};
use switchyard_testkit::{
    database_url, eventually,
    llm::{Recorded, Reply, ScriptedLlm},
};

/// USD per million tokens: 1.5 input, 0.5 cached input, 6 output.
const PRICES: &str = "[\"openai/gpt-4o-mini\"]\ninput_per_mtok = 1.5\ncached_input_per_mtok = 0.5\n\
                      output_per_mtok = 6\n";

/// What a call costs under [`PRICES`], in nano-dollars: 1500 per uncached prompt token, 500
/// per cached one, 6000 per completion token.
fn nanos(prompt: u32, cached: u32, completion: u32) -> i64 {
    i64::from(prompt - cached) * 1500 + i64::from(cached) * 500 + i64::from(completion) * 6000
}

fn usd(nanos: i64) -> f64 {
    nanos as f64 / 1e9
}

fn close(actual: f64, nanos: i64) -> bool {
    (actual - usd(nanos)).abs() < 1e-12
}

fn is_routing_call(request: &Recorded) -> bool {
    request.tool_names().iter().any(|t| t == "use_mcp_agent")
}

/// Each call reports its own usage, so every part of a turn's cost can be told apart.
fn script(request: &Recorded) -> Reply {
    let system = request.system_text();
    if is_routing_call(request) {
        let message = request.user_text();
        return if message.contains("experts") {
            Reply::tool_call(
                "use_multiagent_orchestration",
                r#"{"domains": ["technical", "finance"], "reasoning": "two views"}"#,
            )
            .usage(300, 15)
        } else if message.contains("add") {
            Reply::tool_call("use_mcp_agent", r#"{"reasoning": "a calculation"}"#).usage(200, 10)
        } else {
            Reply::text("Hello there.").usage(100, 20).cached(40)
        };
    }
    if let Some(sum_tool) = request.tool_names().into_iter().find(|t| t.ends_with("get-sum")) {
        return match request.tool_results().last() {
            None => Reply::tool_call(&sum_tool, r#"{"a": 17, "b": 25}"#).usage(400, 30).cached(100),
            Some(result) => Reply::text(format!("The sum is {result}")).usage(500, 40),
        };
    }
    if system.contains("one of several experts") && system.contains("Technology Expert") {
        Reply::text("TECH view").usage(600, 50)
    } else if system.contains("one of several experts") {
        Reply::text("OTHER view").usage(650, 55)
    } else {
        Reply::text("Synthesis.").usage(700, 60).cached(200)
    }
}

/// (kind, role, prompt, cached, completion) of a part, and its cost.
type Part = (&'static str, String, u32, u32, u32);

fn check_parts(response: &ChatResponse, expected: &[Part]) -> i64 {
    let meta = response.metadata.as_ref().expect("metadata");
    let parts: Vec<&CallCost> = meta.cost_parts.iter().collect();
    assert_eq!(parts.len(), expected.len(), "{:?}", meta.cost_parts);
    let mut total = 0;
    for (part, (kind, role, prompt, cached, completion)) in parts.iter().zip(expected) {
        let cost = nanos(*prompt, *cached, *completion);
        assert_eq!(part.kind, *kind, "{part:?}");
        assert_eq!(part.model, "openai/gpt-4o-mini", "{part:?}");
        assert_eq!(&part.role_id, role, "{part:?}");
        assert_eq!(
            (part.prompt_tokens, part.cached_prompt_tokens, part.completion_tokens),
            (*prompt, *cached, *completion),
            "{part:?}"
        );
        assert!(part.priced && close(part.cost_usd, cost), "{part:?}: expected {cost} nano-dollars");
        total += cost;
    }
    assert!(close(meta.cost_usd, total), "cost_usd {} is the sum of the parts, {total} nano-dollars", meta.cost_usd);
    let usage = response.usage.expect("usage");
    let sum = |f: fn(&Part) -> u32| expected.iter().map(f).sum::<u32>();
    assert_eq!(usage.prompt_tokens, sum(|p| p.2));
    assert_eq!(usage.cached_prompt_tokens, sum(|p| p.3));
    assert_eq!(usage.completion_tokens, sum(|p| p.4));
    total
}

fn figures<'a>(groups: &'a [CostFigures], key: &str) -> &'a CostFigures {
    groups.iter().find(|g| g.key == key).unwrap_or_else(|| panic!("no figures for {key}: {groups:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_of_a_turn_is_priced_recorded_and_summed_in_the_stats() {
    let dir = tempfile_dir();
    let prices = dir.join("prices.toml");
    std::fs::write(&prices, PRICES).expect("price file");
    let llm = ScriptedLlm::start(script).await;
    let configure = Box::new(move |config: &mut RouterConfig| config.model_prices = Some(prices));
    let suite = Suite::with(llm, Options { gateway: true, configure, ..Options::default() }).await;
    let client = suite.client().await;
    let ask = |message: &str| {
        let mut client = client.clone();
        let request = as_tenant("acme", chat(message));
        async move { client.chat(request).await.expect("chat").into_inner() }
    };

    let direct = ask("hello").await;
    let role = direct.metadata.as_ref().expect("metadata").role_id.clone();
    // The routing call answered itself: one part, 40 of its 100 prompt tokens cached.
    let direct_parts: Vec<Part> = vec![("routing", role.clone(), 100, 40, 20)];
    let direct_cost = check_parts(&direct, &direct_parts);
    assert_eq!(direct_cost, 60 * 1500 + 40 * 500 + 20 * 6000);

    let agent = ask("add 17 and 25").await;
    let meta = agent.metadata.as_ref().expect("metadata");
    assert_eq!(meta.route_type(), RouteType::McpAgent);
    let agent_role = meta.role_id.clone();
    let agent_parts: Vec<Part> = vec![
        ("routing", agent_role.clone(), 200, 0, 10),
        ("agent_step", agent_role.clone(), 400, 100, 30),
        ("agent_step", agent_role.clone(), 500, 0, 40),
    ];
    let agent_cost = check_parts(&agent, &agent_parts);

    let multi = ask("ask the experts about the architecture and the budget").await;
    let meta = multi.metadata.as_ref().expect("metadata");
    assert_eq!(meta.route_type(), RouteType::Multiagent);
    assert_eq!(meta.expert_role_ids.len(), 2, "{meta:?}");
    let multi_role = meta.role_id.clone();
    let (first, second) = (meta.expert_role_ids[0].clone(), meta.expert_role_ids[1].clone());
    let expert = |id: &str| if id.contains("tech") { (600, 50) } else { (650, 55) };
    let ((p1, c1), (p2, c2)) = (expert(&first), expert(&second));
    assert!(first.contains("tech") || second.contains("tech"), "a technology expert answers: {meta:?}");
    let multi_parts: Vec<Part> = vec![
        ("routing", multi_role.clone(), 300, 0, 15),
        ("expert", first.clone(), p1, 0, c1),
        ("expert", second.clone(), p2, 0, c2),
        ("synthesis", multi_role.clone(), 700, 200, 60),
    ];
    let multi_cost = check_parts(&multi, &multi_parts);

    // The decision rows hold the same sums and parts.
    let pool =
        switchyard_kit::postgres::connect_in_schema(&database_url(), suite.schema.name(), 1).await.expect("postgres");
    for (response, cost, parts) in [(&direct, direct_cost, 1), (&agent, agent_cost, 3), (&multi, multi_cost, 4)] {
        let row: (i64, i64, i32) = eventually(Duration::from_secs(10), "the turn recorded", || {
            let pool = pool.clone();
            let id = response.id.clone();
            async move {
                let row: Option<(i64, i64, i32)> = sqlx::query_as(
                    "SELECT cost_nanousd, jsonb_array_length(cost_parts)::bigint, cached_prompt_tokens \
                     FROM routing_decisions WHERE id = $1",
                )
                .bind(&id)
                .fetch_optional(&pool)
                .await
                .map_err(|err| err.to_string())?;
                row.ok_or_else(|| "not yet".to_owned())
            }
        })
        .await;
        let cached = response.usage.expect("usage").cached_prompt_tokens;
        assert_eq!(row, (cost, parts, cached as i32), "{}", response.id);
    }

    let stats: GetRoutingStatsResponse = eventually(Duration::from_secs(10), "acme's three turns", || {
        let mut client = client.clone();
        async move {
            let stats = client
                .get_routing_stats(as_tenant("acme", GetRoutingStatsRequest::default()))
                .await
                .map_err(|s| s.to_string())?
                .into_inner();
            if stats.total == 3 { Ok(stats) } else { Err(format!("{stats:?}")) }
        }
    })
    .await;
    let total = direct_cost + agent_cost + multi_cost;
    assert_eq!(stats.tenant_id, "acme");
    assert!(close(stats.cost_usd, total), "{stats:?}");
    assert_eq!(stats.prompt_tokens, 100 + 200 + 400 + 500 + 300 + 600 + 650 + 700);
    assert_eq!(stats.cached_prompt_tokens, 40 + 100 + 200);
    assert_eq!(stats.completion_tokens, 20 + 10 + 30 + 40 + 15 + 50 + 55 + 60);
    assert_eq!(stats.unpriced_calls, 0);
    for (route, cost) in
        [(RouteType::Direct, direct_cost), (RouteType::McpAgent, agent_cost), (RouteType::Multiagent, multi_cost)]
    {
        let figures = stats.routes.iter().find(|r| r.route_type() == route).expect("route figures");
        assert!(close(figures.cost_usd, cost) && close(figures.cost_per_turn_usd, cost), "{figures:?}");
    }
    // One model made all eight calls.
    let model = figures(&stats.models, "openai/gpt-4o-mini");
    assert_eq!((model.calls, stats.models.len()), (8, 1));
    assert!(close(model.cost_usd, total));
    // Per kind of call.
    let routing = nanos(100, 40, 20) + nanos(200, 0, 10) + nanos(300, 0, 15);
    let kinds = [
        ("routing", 3, routing),
        ("agent_step", 2, nanos(400, 100, 30) + nanos(500, 0, 40)),
        ("expert", 2, nanos(600, 0, 50) + nanos(650, 0, 55)),
        ("synthesis", 1, nanos(700, 200, 60)),
    ];
    assert_eq!(stats.call_kinds.len(), kinds.len(), "{:?}", stats.call_kinds);
    for (kind, calls, cost) in kinds {
        let figures = figures(&stats.call_kinds, kind);
        assert!(figures.calls == calls && close(figures.cost_usd, cost), "{figures:?}");
    }
    // Per role: each expert under its own role, the rest under the turn's (a role may be both).
    let all_parts: Vec<&Part> = direct_parts.iter().chain(&agent_parts).chain(&multi_parts).collect();
    let mut by_role: std::collections::BTreeMap<&str, (u64, i64)> = Default::default();
    for (_, role, prompt, cached, completion) in &all_parts {
        let entry = by_role.entry(role.as_str()).or_default();
        *entry = (entry.0 + 1, entry.1 + nanos(*prompt, *cached, *completion));
    }
    assert_eq!(stats.roles.len(), by_role.len(), "{:?} vs {by_role:?}", stats.roles);
    for (role, (calls, cost)) in &by_role {
        let figures = figures(&stats.roles, role);
        assert!(
            figures.calls == *calls && close(figures.cost_usd, *cost),
            "{role}: {figures:?}, expected {calls} calls, {cost}"
        );
    }
    let role_sum: f64 = stats.roles.iter().map(|r| r.cost_usd).sum();
    assert!((role_sum - usd(total)).abs() < 1e-12, "{:?}", stats.roles);
    assert_eq!(stats.roles.iter().map(|r| r.calls).sum::<u64>(), 8);
    // Costliest first.
    assert!(stats.call_kinds.windows(2).all(|w| w[0].cost_usd >= w[1].cost_usd), "{:?}", stats.call_kinds);
    // Every turn made its routing call: nothing avoided, and the mean routing call is known.
    assert_eq!(stats.routing_calls_avoided, 0);
    assert!((stats.routing_call_cost_usd - usd(routing) / 3.0).abs() < 1e-12);
    assert_eq!(stats.routing_savings_usd, 0.0);

    // Another tenant's stats hold none of it.
    let other = client
        .clone()
        .get_routing_stats(as_tenant("globex", GetRoutingStatsRequest::default()))
        .await
        .expect("stats")
        .into_inner();
    assert_eq!((other.total, other.cost_usd, other.models.len()), (0, 0.0, 0));
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("router-prices-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[tokio::test]
async fn a_bad_price_table_stops_the_start_naming_the_model_and_the_field() {
    let dir = tempfile_dir();
    let cases = [
        (
            "[\"openai/gpt-4o-mini\"]\ninput_per_mtok = -0.15\noutput_per_mtok = 0.6\n",
            "[\"openai/gpt-4o-mini\"].input_per_mtok",
        ),
        (
            "[\"openai/gpt-4o-mini\"]\ninput_per_mtok = 0.15\noutput_per_mtok = 0.6\ncache_per_mtok = 0.1\n",
            "unknown key `cache_per_mtok`",
        ),
        (
            "[\"openai/gpt-4o-mini\"]\ninput_per_mtok = 0.15\noutput_per_mtok = \"cheap\"\n",
            "[\"openai/gpt-4o-mini\"].output_per_mtok",
        ),
        ("[\"anthropic/claude-haiku-4-5\"]\ninput_per_mtok = 1\n", "`output_per_mtok` is missing"),
    ];
    for (index, (text, named)) in cases.into_iter().enumerate() {
        let path = dir.join(format!("prices-{index}.toml"));
        std::fs::write(&path, text).expect("price file");
        let mut config = RouterConfig::in_memory(loopback(), "http://127.0.0.1:1", "http://127.0.0.1:1");
        config.model_prices = Some(path.clone());
        let err = match RouterServer::bind_with(&config, Arc::new(MemoryAnalytics::default()), Default::default()).await
        {
            Ok(_) => panic!("{text:?} was accepted"),
            Err(err) => format!("{err:#}"),
        };
        assert!(err.contains(named) && err.contains("ROUTER_MODEL_PRICES"), "{text:?}: {err}");
        assert!(err.contains(&path.display().to_string()), "the file is named: {err}");
    }
    let missing = dir.join("absent.toml");
    let mut config = RouterConfig::in_memory(loopback(), "http://127.0.0.1:1", "http://127.0.0.1:1");
    config.model_prices = Some(missing.clone());
    let Err(err) = RouterServer::bind_with(&config, Arc::new(MemoryAnalytics::default()), Default::default()).await
    else {
        panic!("a missing price file was accepted");
    };
    assert!(format!("{err:#}").contains("absent.toml"), "{err:#}");
}
