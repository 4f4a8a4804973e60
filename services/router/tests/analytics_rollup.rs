//! GetRoutingStats from the hourly rollups, on the real Postgres: random decisions of many
//! tenants, hours, routes, models, roles and keys go through the record buffer into the store
//! (a part of them twice, as a replay after an outage), and every window — whole hours, edges
//! off the hour, shorter than an hour — gives the figures the decisions themselves give (the
//! in-memory store computes them from every decision): counts, tokens and cost exactly,
//! latency percentiles exactly without a whole hour in the window and within 1/128 with one.
//! The rollups the writer kept equal those rebuilt from the decisions (the migration's
//! backfill), before and after retention cuts into an hour.
#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

use std::{sync::Arc, time::Duration as StdDuration};

use chrono::{DateTime, Duration, TimeZone, Utc};
use sqlx::PgPool;
use switchyard_kit::{
    TenantId,
    postgres::connect_in_schema,
    records::{RecordBuffer, RecordBufferConfig},
};
use switchyard_router::{
    analytics::{
        AnalyticsStore, DecisionRecord, DecisionSink, Feedback, MemoryAnalytics, PostgresAnalytics, RoutingStats,
        rollup::WindowPlan,
    },
    cost::{CallCost, CallKind},
    route::Route,
};
use switchyard_testkit::{Schema, database_url};

/// xorshift64*: the same decisions on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

const TENANTS: [&str; 5] = ["acme", "globex", "initech", "umbrella", "hooli"];
const MODELS: [&str; 4] = ["openai/gpt-4o-mini", "openai/gpt-4o", "anthropic/claude-haiku-4-5", "openai/unpriced"];
const ROLES: [&str; 3] = ["general-assistant", "finance-expert", "tech-expert"];
const KINDS: [CallKind; 5] =
    [CallKind::Routing, CallKind::Answer, CallKind::AgentStep, CallKind::Expert, CallKind::Synthesis];

fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).single().unwrap()
}

/// A latency: often under 128 ms (one bucket per millisecond), else up to a minute.
fn latency(rng: &mut Rng) -> u64 {
    if rng.chance(3) { rng.below(128) } else { rng.below(60_000) }
}

fn random_decision(rng: &mut Rng, n: usize) -> DecisionRecord {
    // Tenants of unequal size: acme about half the turns.
    let tenant = if rng.chance(2) { TENANTS[0] } else { *rng.pick(&TENANTS) };
    // Over 30 hours, to the microsecond (what Postgres keeps).
    let occurred_at = start() + Duration::microseconds(rng.below(30 * 3_600_000_000) as i64);
    let route = *rng.pick(&Route::ALL);
    let cost_parts: Vec<CallCost> = (0..rng.below(4))
        .map(|_| {
            let model = *rng.pick(&MODELS);
            CallCost {
                kind: *rng.pick(&KINDS),
                model: model.to_owned(),
                role_id: (*rng.pick(&ROLES)).to_owned(),
                prompt_tokens: rng.below(5_000) as u32,
                cached_prompt_tokens: rng.below(1_000) as u32,
                completion_tokens: rng.below(2_000) as u32,
                cost_nanousd: rng.below(10_000_000) as i64,
                priced: model != "openai/unpriced",
            }
        })
        .collect();
    let sum = |f: fn(&CallCost) -> u32| cost_parts.iter().map(f).sum::<u32>();
    DecisionRecord {
        id: format!("chat-{n}"),
        occurred_at,
        tenant: tenant.to_owned(),
        user: None,
        session_id: format!("s-{}", n % 17),
        role_id: (*rng.pick(&ROLES)).to_owned(),
        route,
        reasoning: String::new(),
        routing_ms: latency(rng),
        execution_ms: latency(rng),
        provider: "openai".to_owned(),
        model: "gpt-4o-mini".to_owned(),
        routing_model: "openai/gpt-4o-mini".to_owned(),
        cache_hit: rng.chance(5),
        fallback_used: rng.chance(7),
        attempts: 1,
        model_fallbacks: 0,
        prompt_tokens: sum(|p| p.prompt_tokens),
        completion_tokens: sum(|p| p.completion_tokens),
        cached_prompt_tokens: sum(|p| p.cached_prompt_tokens),
        cost_nanousd: cost_parts.iter().map(|p| p.cost_nanousd).sum(),
        routing_call_avoided: rng.chance(4),
        key_id: rng.pick(&[None, Some("k1"), Some("k2"), Some("k3")]).map(str::to_owned),
        cost_parts,
        tools_used: Vec::new(),
        domains: Vec::new(),
        degraded: if rng.chance(6) { vec!["expert x: timed out".to_owned()] } else { Vec::new() },
        message: None,
        interrupted: false,
        client_tools: rng.chance(3),
        continuation: rng.chance(8),
        held_switch_role_id: rng.chance(9).then(|| "finance-expert".to_owned()),
        client_tools_called: Vec::new(),
    }
}

/// The two answers agree: every count, token and cost exactly; percentiles exactly when the
/// window is read from the decisions alone, else within the histogram's 1/128.
fn assert_same(raw: &RoutingStats, rolled: &RoutingStats, plan: &WindowPlan, what: &str) {
    assert_eq!(
        (raw.total, raw.cache_hits, raw.fallbacks, raw.degraded, raw.client_tools, raw.continuations),
        (rolled.total, rolled.cache_hits, rolled.fallbacks, rolled.degraded, rolled.client_tools, rolled.continuations),
        "{what}"
    );
    assert_eq!((raw.held_switches, raw.routing_calls_avoided), (rolled.held_switches, rolled.routing_calls_avoided));
    assert_eq!(
        (&raw.models, &raw.roles, &raw.call_kinds),
        (&rolled.models, &rolled.roles, &rolled.call_kinds),
        "{what}"
    );
    assert_eq!(raw.keys, rolled.keys, "{what}");
    assert_eq!(raw.routes.len(), rolled.routes.len(), "{what}");
    let figures = raw.routes.iter().map(|(route, f)| (Some(*route), f)).chain([(None, &raw.overall)]);
    let rolled_figures = rolled.routes.iter().map(|(route, f)| (Some(*route), f)).chain([(None, &rolled.overall)]);
    for ((route, r), (rolled_route, p)) in figures.zip(rolled_figures) {
        assert_eq!(route, rolled_route, "{what}");
        assert_eq!(
            (r.count, r.feedback, r.helpful, r.misrouted, &r.spend),
            (p.count, p.feedback, p.helpful, p.misrouted, &p.spend),
            "{what}, route {route:?}"
        );
        for (exact, read) in [
            (r.routing_p50_ms, p.routing_p50_ms),
            (r.routing_p95_ms, p.routing_p95_ms),
            (r.routing_p99_ms, p.routing_p99_ms),
            (r.execution_p50_ms, p.execution_p50_ms),
            (r.execution_p95_ms, p.execution_p95_ms),
        ] {
            let allowed = if plan.hours.is_some() { exact / 128.0 + 1e-6 } else { 1e-6 };
            assert!((exact - read).abs() <= allowed, "{what}, route {route:?}: percentile {read} for {exact}");
        }
    }
}

/// Both rollup tables, every row in key order, as text.
async fn rollup_rows(pool: &PgPool) -> Vec<String> {
    let mut rows = Vec::new();
    for query in [
        "SELECT s::text FROM routing_stats_hourly s ORDER BY tenant_id, hour, route",
        "SELECT p::text FROM routing_spend_hourly p ORDER BY tenant_id, hour, dimension, key",
    ] {
        rows.extend(sqlx::query_scalar::<_, String>(query).fetch_all(pool).await.unwrap());
    }
    rows
}

/// The rollups as rebuilt from the decisions equal `kept`, row for row.
async fn assert_rebuilt_equal(pool: &PgPool, kept: &[String]) {
    sqlx::query("SELECT routing_rollup_rebuild('-infinity', 'infinity')").execute(pool).await.unwrap();
    assert_eq!(rollup_rows(pool).await, kept, "the writer's rollups differ from those rebuilt from the decisions");
}

async fn assert_windows_agree(
    memory: &MemoryAnalytics,
    postgres: &PostgresAnalytics,
    windows: &[(Duration, Duration)],
) {
    for tenant in TENANTS {
        let tenant = TenantId::parse(tenant).unwrap();
        for (from, to) in windows {
            let (since, until) = (start() + *from, start() + *to);
            let what = format!("{tenant:?} over [{since}, {until})");
            let raw = memory.stats(&tenant, since, until).await.unwrap();
            let rolled = postgres.stats(&tenant, since, until).await.unwrap();
            assert_same(&raw, &rolled, &WindowPlan::of(since, until), &what);
        }
    }
}

#[tokio::test]
async fn rollups_answer_as_the_decisions_do_for_every_window() {
    let schema = Schema::new("router_rollup");
    let postgres = Arc::new(
        PostgresAnalytics::connect(&database_url(), schema.name())
            .await
            .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url())),
    );
    let pool = connect_in_schema(&database_url(), schema.name(), 2).await.unwrap();
    let memory = MemoryAnalytics::default();

    let mut rng = Rng(0x5eed_1234_abcd_0042);
    let decisions: Vec<DecisionRecord> = (0..4_000).map(|n| random_decision(&mut rng, n)).collect();
    let recorder = RecordBuffer::start(
        Arc::new(DecisionSink(postgres.clone())),
        RecordBufferConfig { flush_interval: StdDuration::from_millis(20), ..RecordBufferConfig::default() },
    );
    recorder.push_all(decisions.clone());
    let report = recorder.drain(StdDuration::from_secs(60)).await;
    assert_eq!((report.written, report.lost), (4_000, 0));
    // The buffer's replay after an outage writes decisions already stored: they count once.
    let recorder = RecordBuffer::start(Arc::new(DecisionSink(postgres.clone())), RecordBufferConfig::default());
    recorder.push_all(decisions[1_000..1_700].to_vec());
    assert_eq!(recorder.drain(StdDuration::from_secs(60)).await.written, 700);
    memory.record(&decisions).await.unwrap();

    // Feedback on one answer in ten, some naming another route.
    for decision in &decisions {
        if !rng.chance(10) {
            continue;
        }
        let feedback = Feedback {
            response_id: decision.id.clone(),
            tenant: TenantId::parse(&decision.tenant).unwrap(),
            helpful: rng.chance(2),
            expected_route: if rng.chance(3) { Some(*rng.pick(&Route::ALL)) } else { None },
            comment: String::new(),
            submitted_at: decision.occurred_at + Duration::seconds(rng.below(600) as i64),
        };
        memory.put_feedback(&feedback).await.unwrap();
        postgres.put_feedback(&feedback).await.unwrap();
    }

    let (h, m, s) = (Duration::hours, Duration::minutes, Duration::seconds);
    let windows = [
        (h(0), h(30)),                  // every hour, aligned
        (h(2), h(26)),                  // a day of whole hours
        (m(17) + s(3), h(29) + m(41)),  // edges off the hour at both ends
        (h(5) + m(59), h(7) + m(1)),    // one whole hour and two minutes
        (h(3) + m(10), h(4) + m(50)),   // within two hours, no whole one: all from the decisions
        (h(12) + m(30), h(12) + m(31)), // a minute
        (h(-3), h(2) + m(30)),          // starting before any decision
        (h(28) + s(1), h(40)),          // past the last decision
    ];
    assert_windows_agree(&memory, &postgres, &windows).await;
    let kept = rollup_rows(&pool).await;
    assert!(!kept.is_empty());
    assert_rebuilt_equal(&pool, &kept).await;

    // Retention cutting into an hour: the rollups keep matching the decisions left.
    let cut = start() + h(6) + m(20) + s(7);
    assert_eq!(memory.prune(cut).await.unwrap(), postgres.prune(cut).await.unwrap());
    assert_windows_agree(&memory, &postgres, &windows).await;
    let kept = rollup_rows(&pool).await;
    assert_rebuilt_equal(&pool, &kept).await;
    let oldest: Option<DateTime<Utc>> =
        sqlx::query_scalar("SELECT min(hour) FROM routing_stats_hourly").fetch_one(&pool).await.unwrap();
    assert_eq!(oldest, Some(start() + h(6)), "hours before the cut's are gone");
}
