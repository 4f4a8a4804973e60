//! The two analytics stores answer alike: the same decisions and feedback give the same
//! figures from memory (`switchyard dev`) and from Postgres (its SQL percentiles), tenants and
//! windows are kept apart, and retention prunes what is older than the cut.

use std::sync::Arc;

use chrono::{Duration, TimeZone, Utc};
use switchyard_kit::TenantId;
use switchyard_router::{
    analytics::{AnalyticsStore, Correction, DecisionRecord, Feedback, MemoryAnalytics, PostgresAnalytics, Spend},
    cost::{CallCost, CallKind},
    route::Route,
};
use switchyard_testkit::{Schema, database_url};

/// A priced model call of a turn.
fn part(kind: CallKind, model: &str, role: &str, prompt: u32, cached: u32, completion: u32, cost: i64) -> CallCost {
    CallCost {
        kind,
        model: model.to_owned(),
        role_id: role.to_owned(),
        prompt_tokens: prompt,
        cached_prompt_tokens: cached,
        completion_tokens: completion,
        cost_nanousd: cost,
        priced: !model.starts_with("openai/unpriced"),
    }
}

/// The calls of decision `id` on `route`: a routing call (none on a cache hit), then the
/// route's calls, with sizes and costs that vary with `id`; every eleventh turn's answer is of
/// a model without a price.
fn parts(id: usize, route: Route) -> Vec<CallCost> {
    let n = id as u32;
    let cost = |base: i64| base * (id as i64 + 1) + 7;
    let mut parts = Vec::new();
    if !id.is_multiple_of(5) {
        parts.push(part(CallKind::Routing, "openai/gpt-4o-mini", "general-assistant", 100 + n, n % 7, 9, cost(1_500)));
    }
    let answer_model = if id.is_multiple_of(11) { "openai/unpriced-model" } else { "openai/gpt-4o-mini" };
    match route {
        Route::Direct => {}
        Route::McpAgent => {
            parts.push(part(
                CallKind::AgentStep,
                "openai/gpt-4o-mini",
                "general-assistant",
                300 + n,
                0,
                20,
                cost(2_700),
            ));
            parts.push(part(CallKind::AgentStep, answer_model, "general-assistant", 400, 50, 30 + n, cost(3_100)));
        }
        Route::Multiagent => {
            parts.push(part(CallKind::Expert, "anthropic/claude-haiku-4-5", "finance-expert", 500, 0, 40, cost(9_000)));
            parts.push(part(CallKind::Expert, "openai/gpt-4o-mini", "tech-expert", 450 + n, 10, 35, cost(4_400)));
            parts.push(part(CallKind::Synthesis, answer_model, "general-assistant", 900, 300, 60 + n, cost(5_300)));
        }
    }
    if route == Route::Direct && id.is_multiple_of(5) {
        parts.push(part(CallKind::Answer, answer_model, "general-assistant", 120, 0, 15 + n, cost(1_900)));
    }
    parts
}

/// The API key a turn came with: none for every fourth, else `k1` or `k2`.
fn key_of(id: usize) -> Option<&'static str> {
    match id % 4 {
        0 => None,
        1 | 2 => Some("k1"),
        _ => Some("k2"),
    }
}

fn decision(id: usize, tenant: &str, route: Route, routing_ms: u64, minutes_ago: i64) -> DecisionRecord {
    let now = Utc.with_ymd_and_hms(2026, 11, 1, 12, 0, 0).single().expect("time");
    let cost_parts = parts(id, route);
    let sum = |f: fn(&CallCost) -> u32| cost_parts.iter().map(f).sum::<u32>();
    DecisionRecord {
        id: format!("chat-{id}"),
        occurred_at: now - Duration::minutes(minutes_ago),
        tenant: tenant.to_owned(),
        user: None,
        session_id: "s".to_owned(),
        role_id: "general-assistant".to_owned(),
        route,
        reasoning: String::new(),
        routing_ms,
        execution_ms: routing_ms * 3,
        provider: "openai".to_owned(),
        model: "gpt-4o-mini".to_owned(),
        routing_model: "openai/gpt-4o-mini".to_owned(),
        cache_hit: id.is_multiple_of(5),
        fallback_used: id.is_multiple_of(7),
        attempts: 1,
        model_fallbacks: 0,
        prompt_tokens: sum(|p| p.prompt_tokens),
        completion_tokens: sum(|p| p.completion_tokens),
        cached_prompt_tokens: sum(|p| p.cached_prompt_tokens),
        cost_nanousd: cost_parts.iter().map(|p| p.cost_nanousd).sum(),
        routing_call_avoided: id.is_multiple_of(5),
        key_id: key_of(id).map(str::to_owned),
        cost_parts,
        tools_used: Vec::new(),
        domains: Vec::new(),
        degraded: if id.is_multiple_of(4) { vec!["expert x: timed out".to_owned()] } else { Vec::new() },
        message: id.is_multiple_of(2).then(|| format!("message {id}")),
        interrupted: false,
        client_tools: id.is_multiple_of(3),
        continuation: id.is_multiple_of(6),
        held_switch_role_id: id.is_multiple_of(12).then(|| "finance-expert".to_owned()),
        client_tools_called: if id.is_multiple_of(3) { vec!["run_shell".to_owned()] } else { Vec::new() },
    }
}

async fn fill(store: &dyn AnalyticsStore) {
    let routes = [Route::Direct, Route::McpAgent, Route::Multiagent];
    let decisions: Vec<DecisionRecord> =
        (0..60).map(|i| decision(i, "acme", routes[i % 3], 10 + (i as u64 * 37) % 400, i as i64)).collect();
    store.record(&decisions).await.expect("record");
    // A batch written twice (a retry after a timeout) counts once.
    store.record(&decisions[..5]).await.expect("record again");
    // Another tenant's turn, with a key of the same id as one of acme's.
    let mut globex = decision(100, "globex", Route::Direct, 5, 1);
    globex.key_id = Some("k1".to_owned());
    globex.user = Some("alice".to_owned());
    store.record(&[globex]).await.expect("another tenant");
    let acme = TenantId::parse("acme").expect("tenant");
    for (i, helpful, expected) in
        [(0, true, None), (3, false, Some(Route::McpAgent)), (1, true, None), (4, false, Some(Route::McpAgent))]
    {
        let feedback = Feedback {
            response_id: format!("chat-{i}"),
            tenant: acme.clone(),
            helpful,
            expected_route: expected,
            comment: String::new(),
            submitted_at: Utc.with_ymd_and_hms(2026, 11, 1, 12, 30, 0).single().expect("time"),
        };
        store.put_feedback(&feedback).await.expect("feedback");
    }
}

#[tokio::test]
async fn memory_and_postgres_give_the_same_figures() {
    let memory = Arc::new(MemoryAnalytics::default());
    let schema = Schema::new("router_store");
    let postgres = PostgresAnalytics::connect(&database_url(), schema.name())
        .await
        .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url()));
    fill(memory.as_ref()).await;
    fill(&postgres).await;

    let acme = TenantId::parse("acme").expect("tenant");
    let until = Utc.with_ymd_and_hms(2026, 11, 1, 12, 0, 1).single().expect("time");
    let since = until - Duration::minutes(45);
    let from_memory = memory.stats(&acme, since, until).await.expect("memory stats");
    let from_postgres = postgres.stats(&acme, since, until).await.expect("postgres stats");
    assert_eq!(from_memory.total, 45, "decisions 0 to 44 minutes old are in the window");
    assert_eq!(from_memory.total, from_postgres.total);
    assert_eq!(
        (from_memory.cache_hits, from_memory.fallbacks, from_memory.degraded),
        (from_postgres.cache_hits, from_postgres.fallbacks, from_postgres.degraded)
    );
    // Client-tools turns (every third), continuations (every sixth) and held switches (every
    // twelfth) of decisions 0 to 44.
    assert_eq!((from_memory.client_tools, from_memory.continuations, from_memory.held_switches), (15, 8, 4));
    assert_eq!(
        (from_memory.client_tools, from_memory.continuations, from_memory.held_switches),
        (from_postgres.client_tools, from_postgres.continuations, from_postgres.held_switches)
    );
    let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
    for ((route_m, m), (route_p, p)) in from_memory.routes.iter().zip(&from_postgres.routes) {
        assert_eq!(route_m, route_p);
        assert_eq!(
            (m.count, m.feedback, m.helpful, m.misrouted),
            (p.count, p.feedback, p.helpful, p.misrouted),
            "{route_m:?}"
        );
        assert!(
            close(m.routing_p50_ms, p.routing_p50_ms) && close(m.routing_p99_ms, p.routing_p99_ms),
            "{m:?} vs {p:?}"
        );
        assert!(close(m.execution_p95_ms, p.execution_p95_ms), "{m:?} vs {p:?}");
    }
    assert_eq!(from_memory.routes.len(), 3);

    // Cost and tokens agree exactly, per route, overall and per model, role and kind of call.
    for ((_, m), (_, p)) in from_memory.routes.iter().zip(&from_postgres.routes) {
        assert_eq!(m.spend, p.spend);
    }
    assert_eq!(from_memory.overall.spend, from_postgres.overall.spend);
    assert_eq!(from_memory.models, from_postgres.models);
    assert_eq!(from_memory.roles, from_postgres.roles);
    assert_eq!(from_memory.call_kinds, from_postgres.call_kinds);
    assert_eq!(from_memory.routing_calls_avoided, from_postgres.routing_calls_avoided);
    assert_eq!(from_memory.keys, from_postgres.keys);
    // And they are the sums of the window's parts (decisions 0 to 44).
    let window: Vec<CallCost> =
        (0..45).flat_map(|i| parts(i, [Route::Direct, Route::McpAgent, Route::Multiagent][i % 3])).collect();
    let overall = &from_postgres.overall.spend;
    assert_eq!(overall.cost_nanousd, window.iter().map(|p| p.cost_nanousd).sum::<i64>());
    assert_eq!(overall.calls, window.len() as u64);
    assert_eq!(overall.cached_prompt_tokens, window.iter().map(|p| u64::from(p.cached_prompt_tokens)).sum::<u64>());
    assert_eq!(overall.unpriced_calls, window.iter().filter(|p| !p.priced).count() as u64);
    assert!(overall.unpriced_calls > 0);
    let of = |groups: &[(String, Spend)], key: &str| groups.iter().find(|(k, _)| k == key).map(|(_, s)| s.clone());
    let finance = of(&from_postgres.roles, "finance-expert").expect("finance-expert spend");
    let expected: i64 = window.iter().filter(|p| p.role_id == "finance-expert").map(|p| p.cost_nanousd).sum();
    assert_eq!((finance.calls, finance.cost_nanousd), (15, expected));
    let haiku = of(&from_postgres.models, "anthropic/claude-haiku-4-5").expect("haiku spend");
    assert_eq!(haiku, finance, "only the finance expert ran on it");
    let kinds: Vec<&str> = from_postgres.call_kinds.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds.len(), 5, "{kinds:?}");
    assert!(from_postgres.models.windows(2).all(|w| w[0].1.cost_nanousd >= w[1].1.cost_nanousd), "costliest first");
    // Per API key: each key's turns of the window (0 to 44), their calls and cost; the turns
    // without a key under ""; costliest first; globex's k1 not among them.
    let key_ids: Vec<&str> = from_postgres.keys.iter().map(|k| k.key_id.as_str()).collect();
    assert_eq!(key_ids.len(), 3, "{key_ids:?}");
    for key in &from_postgres.keys {
        let turns: Vec<usize> = (0..45).filter(|&i| key_of(i).unwrap_or_default() == key.key_id).collect();
        let parts: Vec<CallCost> =
            turns.iter().flat_map(|&i| parts(i, [Route::Direct, Route::McpAgent, Route::Multiagent][i % 3])).collect();
        assert_eq!(key.turns, turns.len() as u64, "{key:?}");
        assert_eq!(key.spend.calls, parts.len() as u64, "{key:?}");
        assert_eq!(key.spend.cost_nanousd, parts.iter().map(|p| p.cost_nanousd).sum::<i64>(), "{key:?}");
        assert_eq!(key.spend.prompt_tokens, parts.iter().map(|p| u64::from(p.prompt_tokens)).sum::<u64>(), "{key:?}");
        assert_eq!(key.spend.unpriced_calls, parts.iter().filter(|p| !p.priced).count() as u64, "{key:?}");
    }
    assert_eq!(from_postgres.keys.iter().map(|k| k.turns).sum::<u64>(), 45, "every turn under one key");
    assert_eq!(from_postgres.keys.iter().map(|k| k.spend.cost_nanousd).sum::<i64>(), overall.cost_nanousd);
    assert!(from_postgres.keys.windows(2).all(|w| w[0].spend.cost_nanousd >= w[1].spend.cost_nanousd));

    // Cache hits (every fifth) made no routing call: 9 of 45 avoided, at the mean routing call.
    assert_eq!(from_postgres.routing_calls_avoided, 9);
    let routing = of(&from_postgres.call_kinds, "routing").expect("routing spend");
    assert_eq!(routing.calls, 36);
    assert!((from_postgres.routing_savings_nanousd() - 9.0 * routing.cost_nanousd as f64 / 36.0).abs() < 1e-6);

    let direct = &from_memory.routes[0].1;
    // Feedback on chat-0 (helpful) and chat-3 (misrouted): both direct.
    assert_eq!((direct.feedback, direct.helpful, direct.misrouted), (2, 1, 1));
    // chat-4 went to the MCP agent, the route its feedback names: not a misrouting. One of four.
    assert!(close(from_memory.overall.false_routing_rate(), 0.25));
    assert!(close(from_postgres.overall.false_routing_rate(), 0.25));
    assert!(close(from_memory.overall.routing_p95_ms, from_postgres.overall.routing_p95_ms));

    // Another tenant's decision is not in acme's figures, and not visible by id.
    let globex = TenantId::parse("globex").expect("tenant");
    assert_eq!(postgres.stats(&globex, since, until).await.expect("stats").total, 1);
    assert_eq!(postgres.recorded_turn(&acme, "chat-100").await.expect("lookup"), None);
    let recorded = postgres.recorded_turn(&globex, "chat-100").await.expect("lookup").expect("recorded");
    assert_eq!(
        (recorded.route, recorded.user.as_deref(), recorded.message.as_deref()),
        (Route::Direct, Some("alice"), Some("message 100"))
    );
    assert_eq!(memory.recorded_turn(&acme, "chat-100").await.expect("lookup"), None);
    // Without learning on, no message is kept.
    let unkept = postgres.recorded_turn(&acme, "chat-1").await.expect("lookup").expect("recorded");
    assert_eq!(unkept.message, None);

    // Retention: everything older than 30 minutes goes, in both.
    let cut = Utc.with_ymd_and_hms(2026, 11, 1, 11, 30, 0).single().expect("time");
    let (pruned_m, pruned_p) = (memory.prune(cut).await.expect("prune"), postgres.prune(cut).await.expect("prune"));
    assert_eq!(pruned_m, pruned_p);
    assert_eq!(pruned_m, 29, "decisions 31..=59 minutes old");
}

/// Corrections page by id in both stores, and a second judgement of the same answer replaces
/// the first under a new id (so replicas that loaded the first load the second).
#[tokio::test]
async fn corrections_page_by_id_and_replace_by_answer() {
    let schema = Schema::new("router_corrections");
    let postgres = PostgresAnalytics::connect(&database_url(), schema.name())
        .await
        .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url()));
    let memory = MemoryAnalytics::default();
    let stores: [&dyn AnalyticsStore; 2] = [&postgres, &memory];
    for store in stores {
        let correction = |id: &str, user: &str, route| Correction {
            tenant: "acme".to_owned(),
            user: user.to_owned(),
            message: format!("message of {id}"),
            route,
            response_id: id.to_owned(),
            created_at: Utc::now(),
        };
        let first = store.put_correction(&correction("chat-1", "ann", Route::McpAgent)).await.expect("put");
        let second = store.put_correction(&correction("chat-2", "", Route::Multiagent)).await.expect("put");
        assert!(second > first);
        let all = store.corrections_after(0, 10).await.expect("page");
        assert_eq!(all.iter().map(|c| c.id).collect::<Vec<_>>(), [first, second]);
        assert_eq!(
            all[1].correction,
            correction("chat-2", "", Route::Multiagent).clone_with_time(all[1].correction.created_at)
        );
        assert_eq!(store.corrections_after(first, 10).await.expect("page").len(), 1);
        assert_eq!(store.corrections_after(0, 1).await.expect("page").len(), 1);

        let again = store.put_correction(&correction("chat-1", "ann", Route::Direct)).await.expect("replace");
        let after = store.corrections_after(second, 10).await.expect("page");
        assert_eq!(after.len(), 1);
        assert_eq!((after[0].id, after[0].correction.route), (again, Route::Direct));
        assert_eq!(store.corrections_after(0, 10).await.expect("page").len(), 2, "the first judgement is gone");
    }
}

trait WithTime {
    fn clone_with_time(&self, at: chrono::DateTime<Utc>) -> Self;
}

impl WithTime for Correction {
    /// Postgres keeps microseconds: compare with the stored time.
    fn clone_with_time(&self, at: chrono::DateTime<Utc>) -> Self {
        Self { created_at: at, ..self.clone() }
    }
}

#[tokio::test]
async fn a_decision_postgres_refuses_is_set_aside_and_every_other_one_lands() {
    use switchyard_kit::records::{RecordBuffer, RecordBufferConfig};
    use switchyard_router::analytics::DecisionSink;

    let schema = Schema::new("router_store");
    let postgres = Arc::new(
        PostgresAnalytics::connect(&database_url(), schema.name())
            .await
            .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url())),
    );
    let recorder = RecordBuffer::start(
        Arc::new(DecisionSink(postgres.clone())),
        RecordBufferConfig { flush_interval: std::time::Duration::from_secs(3600), ..RecordBufferConfig::default() },
    );
    // Recorded text holding a NUL is stored with U+FFFD in its place.
    let mut nul = decision(1, "acme", Route::Direct, 5, 0);
    nul.reasoning = "the user asked \0".to_owned();
    nul.message = Some("refinance my mortgage \0".to_owned());
    nul.tools_used = vec!["calc\0".to_owned()];
    // A time before 4713 BC, which Postgres refuses whatever the text.
    let mut refused = decision(2, "acme", Route::Direct, 5, 0);
    refused.occurred_at = Utc.with_ymd_and_hms(-5000, 1, 1, 0, 0, 0).single().expect("time");
    recorder.push_all(vec![
        decision(0, "acme", Route::Direct, 5, 0),
        nul,
        refused,
        decision(3, "globex", Route::McpAgent, 5, 0),
    ]);
    let report = recorder.drain(std::time::Duration::from_secs(20)).await;
    assert_eq!((report.written, report.lost, recorder.set_aside()), (3, 0, 1));

    let (acme, globex) = (TenantId::parse("acme").expect("tenant"), TenantId::parse("globex").expect("tenant"));
    assert!(postgres.recorded_turn(&acme, "chat-0").await.expect("read").is_some());
    let turn = postgres.recorded_turn(&acme, "chat-1").await.expect("read").expect("recorded");
    assert_eq!(turn.message.as_deref(), Some("refinance my mortgage \u{FFFD}"));
    assert!(postgres.recorded_turn(&acme, "chat-2").await.expect("read").is_none());
    assert!(postgres.recorded_turn(&globex, "chat-3").await.expect("read").is_some());
}
