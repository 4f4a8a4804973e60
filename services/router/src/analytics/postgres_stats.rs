//! GetRoutingStats in Postgres, and the hourly rollups behind it (migration 0011): the writer
//! adds each newly stored decision to its hour's rollup rows in the transaction that stores
//! it; a window's whole hours are read from the rollups, its partial first and last hours from
//! the decisions, and the two summed. Counts, tokens and cost are exact; latency percentiles are
//! exact when the whole window is read from the decisions (a window without a whole hour in
//! it), else within 1/128 of the exact figure (see [`super::rollup`]).

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use sqlx::{PgPool, Postgres, Row, Transaction, postgres::PgRow};
use switchyard_kit::TenantId;

use super::{
    RouteFigures, RoutingStats, Spend,
    rollup::{Latencies, RollupDelta, RouteHour, WindowPlan, add_histogram, hour_of},
    stats::{KeySpend, sort_groups, sort_keys},
};
use crate::route::Route;

/// Adds a batch's delta to the rollup rows (creating those the hour lacks), rows in key order.
pub async fn write_rollup(tx: &mut Transaction<'_, Postgres>, delta: &RollupDelta) -> Result<(), sqlx::Error> {
    if !delta.routes.is_empty() {
        let rows: Vec<_> = delta.routes.iter().collect();
        let column = |f: fn(&RouteHour) -> i64| rows.iter().map(|(_, row)| f(row)).collect::<Vec<i64>>();
        let histogram = |f: fn(&RouteHour) -> &Vec<u64>| {
            rows.iter()
                .map(|(_, row)| {
                    let counts: Vec<String> = f(row).iter().map(u64::to_string).collect();
                    format!("{{{}}}", counts.join(","))
                })
                .collect::<Vec<String>>()
        };
        sqlx::query(
            "INSERT INTO routing_stats_hourly (tenant_id, hour, route, turns, cache_hits, fallbacks, degraded, \
             client_tools, continuations, held_switches, routing_calls_avoided, calls, prompt_tokens, \
             cached_prompt_tokens, completion_tokens, cost_nanousd, unpriced_calls, routing_ms_histogram, \
             execution_ms_histogram) \
             SELECT t, h, r, n1, n2, n3, n4, n5, n6, n7, n8, n9, n10, n11, n12, n13, n14, rh::bigint[], eh::bigint[] \
             FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], \
             $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], \
             $14::bigint[], $15::bigint[], $16::bigint[], $17::bigint[], $18::text[], $19::text[]) \
             AS u(t, h, r, n1, n2, n3, n4, n5, n6, n7, n8, n9, n10, n11, n12, n13, n14, rh, eh) \
             ON CONFLICT (tenant_id, hour, route) DO UPDATE SET \
             turns = routing_stats_hourly.turns + EXCLUDED.turns, \
             cache_hits = routing_stats_hourly.cache_hits + EXCLUDED.cache_hits, \
             fallbacks = routing_stats_hourly.fallbacks + EXCLUDED.fallbacks, \
             degraded = routing_stats_hourly.degraded + EXCLUDED.degraded, \
             client_tools = routing_stats_hourly.client_tools + EXCLUDED.client_tools, \
             continuations = routing_stats_hourly.continuations + EXCLUDED.continuations, \
             held_switches = routing_stats_hourly.held_switches + EXCLUDED.held_switches, \
             routing_calls_avoided = routing_stats_hourly.routing_calls_avoided + EXCLUDED.routing_calls_avoided, \
             calls = routing_stats_hourly.calls + EXCLUDED.calls, \
             prompt_tokens = routing_stats_hourly.prompt_tokens + EXCLUDED.prompt_tokens, \
             cached_prompt_tokens = routing_stats_hourly.cached_prompt_tokens + EXCLUDED.cached_prompt_tokens, \
             completion_tokens = routing_stats_hourly.completion_tokens + EXCLUDED.completion_tokens, \
             cost_nanousd = routing_stats_hourly.cost_nanousd + EXCLUDED.cost_nanousd, \
             unpriced_calls = routing_stats_hourly.unpriced_calls + EXCLUDED.unpriced_calls, \
             routing_ms_histogram = \
                 routing_histogram_add(routing_stats_hourly.routing_ms_histogram, EXCLUDED.routing_ms_histogram), \
             execution_ms_histogram = \
                 routing_histogram_add(routing_stats_hourly.execution_ms_histogram, EXCLUDED.execution_ms_histogram)",
        )
        .bind(rows.iter().map(|((tenant, _, _), _)| tenant.as_str()).collect::<Vec<&str>>())
        .bind(rows.iter().map(|((_, hour, _), _)| *hour).collect::<Vec<DateTime<Utc>>>())
        .bind(rows.iter().map(|((_, _, route), _)| *route).collect::<Vec<&str>>())
        .bind(column(|r| r.turns))
        .bind(column(|r| r.cache_hits))
        .bind(column(|r| r.fallbacks))
        .bind(column(|r| r.degraded))
        .bind(column(|r| r.client_tools))
        .bind(column(|r| r.continuations))
        .bind(column(|r| r.held_switches))
        .bind(column(|r| r.routing_calls_avoided))
        .bind(column(|r| r.calls))
        .bind(column(|r| r.prompt_tokens))
        .bind(column(|r| r.cached_prompt_tokens))
        .bind(column(|r| r.completion_tokens))
        .bind(column(|r| r.cost_nanousd))
        .bind(column(|r| r.unpriced_calls))
        .bind(histogram(|r| &r.routing_ms))
        .bind(histogram(|r| &r.execution_ms))
        .execute(&mut **tx)
        .await?;
    }
    if !delta.spend.is_empty() {
        let rows: Vec<_> = delta.spend.iter().collect();
        let column = |f: fn(&Spend) -> i64| rows.iter().map(|(_, row)| f(&row.spend)).collect::<Vec<i64>>();
        fn count(n: u64) -> i64 {
            i64::try_from(n).unwrap_or(i64::MAX)
        }
        sqlx::query(
            "INSERT INTO routing_spend_hourly (tenant_id, hour, dimension, key, turns, calls, prompt_tokens, \
             cached_prompt_tokens, completion_tokens, cost_nanousd, unpriced_calls) \
             SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::bigint[], \
             $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[]) \
             ON CONFLICT (tenant_id, hour, dimension, key) DO UPDATE SET \
             turns = routing_spend_hourly.turns + EXCLUDED.turns, \
             calls = routing_spend_hourly.calls + EXCLUDED.calls, \
             prompt_tokens = routing_spend_hourly.prompt_tokens + EXCLUDED.prompt_tokens, \
             cached_prompt_tokens = routing_spend_hourly.cached_prompt_tokens + EXCLUDED.cached_prompt_tokens, \
             completion_tokens = routing_spend_hourly.completion_tokens + EXCLUDED.completion_tokens, \
             cost_nanousd = routing_spend_hourly.cost_nanousd + EXCLUDED.cost_nanousd, \
             unpriced_calls = routing_spend_hourly.unpriced_calls + EXCLUDED.unpriced_calls",
        )
        .bind(rows.iter().map(|((tenant, ..), _)| tenant.as_str()).collect::<Vec<&str>>())
        .bind(rows.iter().map(|((_, hour, ..), _)| *hour).collect::<Vec<DateTime<Utc>>>())
        .bind(rows.iter().map(|((_, _, dimension, _), _)| *dimension).collect::<Vec<&str>>())
        .bind(rows.iter().map(|((.., key), _)| key.as_str()).collect::<Vec<&str>>())
        .bind(rows.iter().map(|(_, row)| row.turns).collect::<Vec<i64>>())
        .bind(column(|s| count(s.calls)))
        .bind(column(|s| count(s.prompt_tokens)))
        .bind(column(|s| count(s.cached_prompt_tokens)))
        .bind(column(|s| count(s.completion_tokens)))
        .bind(column(|s| s.cost_nanousd))
        .bind(column(|s| count(s.unpriced_calls)))
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Removes the rollups of the hours before `cut`'s and rebuilds the hour it falls in from the
/// decisions left (retention has just deleted those before the cut).
pub async fn prune_rollups(pool: &PgPool, cut: DateTime<Utc>) -> Result<(), sqlx::Error> {
    let hour = hour_of(cut);
    let mut tx = pool.begin().await?;
    for table in ["routing_stats_hourly", "routing_spend_hourly"] {
        sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table} WHERE hour < $1")))
            .bind(hour)
            .execute(&mut *tx)
            .await?;
    }
    if hour < cut {
        sqlx::query("SELECT routing_rollup_rebuild($1, $2)")
            .bind(hour)
            .bind(hour + TimeDelta::hours(1))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await
}

/// The decisions of the window's edges: `$1` tenant, `[$2, $3)` and `[$4, $5)`.
const EDGES: &str = "d.tenant_id = $1 AND ((d.occurred_at >= $2 AND d.occurred_at < $3) \
     OR (d.occurred_at >= $4 AND d.occurred_at < $5))";

/// The model calls, tokens and cost of the turns a query selects, as columns.
const TURN_SPEND: &str = "coalesce(sum(jsonb_array_length(d.cost_parts)), 0)::bigint AS calls, \
     coalesce(sum(d.prompt_tokens), 0)::bigint AS prompt_tokens, \
     coalesce(sum(d.cached_prompt_tokens), 0)::bigint AS cached_prompt_tokens, \
     coalesce(sum(d.completion_tokens), 0)::bigint AS completion_tokens, \
     coalesce(sum(d.cost_nanousd), 0)::bigint AS cost_nanousd, \
     coalesce(sum(d.unpriced_calls), 0)::bigint AS unpriced_calls";

fn edge_routes() -> String {
    format!(
        "SELECT d.route, count(*) AS turns, \
         count(*) FILTER (WHERE d.cache_hit) AS cache_hits, \
         count(*) FILTER (WHERE d.fallback_used) AS fallbacks, \
         count(*) FILTER (WHERE cardinality(d.degraded) > 0) AS degraded, \
         count(*) FILTER (WHERE d.client_tools) AS client_tools, \
         count(*) FILTER (WHERE d.continuation) AS continuations, \
         count(*) FILTER (WHERE d.held_switch_role_id IS NOT NULL) AS held_switches, \
         count(*) FILTER (WHERE d.routing_call_avoided) AS routing_calls_avoided, {TURN_SPEND} \
         FROM routing_decisions d WHERE {EDGES} GROUP BY d.route"
    )
}

/// Each route's latencies at the edges, as (value, count) pairs, in one scan.
fn edge_latencies() -> String {
    format!(
        "SELECT d.route, d.routing_ms, d.execution_ms, grouping(d.routing_ms) AS not_routing, count(*) AS n \
         FROM routing_decisions d WHERE {EDGES} \
         GROUP BY GROUPING SETS ((d.route, d.routing_ms), (d.route, d.execution_ms))"
    )
}

/// The edges' model calls grouped by model, by role and by kind of call in one scan.
fn edge_groups() -> String {
    format!(
        "SELECT CASE WHEN grouping(c.model) = 0 THEN 'model' WHEN grouping(c.role_id) = 0 THEN 'role' \
         ELSE 'kind' END AS dimension, \
         coalesce(CASE WHEN grouping(c.model) = 0 THEN c.model WHEN grouping(c.role_id) = 0 THEN c.role_id \
         ELSE c.kind END, '') AS key, \
         0::bigint AS turns, count(*) AS calls, \
         coalesce(sum(c.prompt_tokens), 0)::bigint AS prompt_tokens, \
         coalesce(sum(c.cached_prompt_tokens), 0)::bigint AS cached_prompt_tokens, \
         coalesce(sum(c.completion_tokens), 0)::bigint AS completion_tokens, \
         coalesce(sum(c.cost_nanousd), 0)::bigint AS cost_nanousd, \
         count(*) FILTER (WHERE NOT c.priced) AS unpriced_calls \
         FROM routing_decisions d, jsonb_to_recordset(d.cost_parts) AS c(kind text, model text, role_id text, \
         prompt_tokens bigint, cached_prompt_tokens bigint, completion_tokens bigint, cost_nanousd bigint, \
         priced boolean) \
         WHERE {EDGES} GROUP BY GROUPING SETS ((c.model), (c.role_id), (c.kind))"
    )
}

/// The edges' turns grouped by API key (turns without one under '').
fn edge_keys() -> String {
    format!(
        "SELECT 'key' AS dimension, coalesce(d.key_id, '') AS key, count(*) AS turns, {TURN_SPEND} \
         FROM routing_decisions d WHERE {EDGES} GROUP BY coalesce(d.key_id, '')"
    )
}

/// The whole hours' rows, one per hour and route (`$1` tenant, hours in `[$2, $3)`).
const HOURLY_ROUTES: &str = "SELECT route, turns, cache_hits, fallbacks, degraded, client_tools, continuations, \
     held_switches, routing_calls_avoided, calls, prompt_tokens, cached_prompt_tokens, completion_tokens, \
     cost_nanousd, unpriced_calls, routing_ms_histogram, execution_ms_histogram \
     FROM routing_stats_hourly WHERE tenant_id = $1 AND hour >= $2 AND hour < $3";

/// The whole hours' spend per model, role, kind of call and key.
const HOURLY_SPEND: &str = "SELECT dimension, key, sum(turns)::bigint AS turns, sum(calls)::bigint AS calls, \
     sum(prompt_tokens)::bigint AS prompt_tokens, sum(cached_prompt_tokens)::bigint AS cached_prompt_tokens, \
     sum(completion_tokens)::bigint AS completion_tokens, sum(cost_nanousd)::bigint AS cost_nanousd, \
     sum(unpriced_calls)::bigint AS unpriced_calls \
     FROM routing_spend_hourly WHERE tenant_id = $1 AND hour >= $2 AND hour < $3 GROUP BY dimension, key";

/// Feedback by the route of its answer, for the answers of the window. Read from the feedback
/// side: a window's feedback was submitted after its answers, so only feedback submitted since
/// the window's start (less an hour for replicas' clocks disagreeing) is joined to its answer.
const FEEDBACK: &str = "SELECT d.route, count(*) AS feedback, count(*) FILTER (WHERE f.helpful) AS helpful, \
     count(*) FILTER (WHERE f.expected_route IS NOT NULL AND f.expected_route <> d.route) AS misrouted \
     FROM routing_feedback f JOIN routing_decisions d ON d.id = f.response_id \
     WHERE f.tenant_id = $1 AND f.submitted_at >= $2 - interval '1 hour' \
     AND d.tenant_id = $1 AND d.occurred_at >= $2 AND d.occurred_at < $3 \
     GROUP BY d.route";

/// One route's figures as they are summed.
#[derive(Debug, Default)]
struct RouteSums {
    counts: RouteHour,
    routing: Latencies,
    execution: Latencies,
    feedback: (u64, u64, u64),
}

impl RouteSums {
    fn add(&mut self, other: &RouteSums) {
        let (a, b) = (&mut self.counts, &other.counts);
        a.turns += b.turns;
        a.cache_hits += b.cache_hits;
        a.fallbacks += b.fallbacks;
        a.degraded += b.degraded;
        a.client_tools += b.client_tools;
        a.continuations += b.continuations;
        a.held_switches += b.held_switches;
        a.routing_calls_avoided += b.routing_calls_avoided;
        a.calls += b.calls;
        a.prompt_tokens += b.prompt_tokens;
        a.cached_prompt_tokens += b.cached_prompt_tokens;
        a.completion_tokens += b.completion_tokens;
        a.cost_nanousd += b.cost_nanousd;
        a.unpriced_calls += b.unpriced_calls;
        self.routing.merge(&other.routing);
        self.execution.merge(&other.execution);
        self.feedback.0 += other.feedback.0;
        self.feedback.1 += other.feedback.1;
        self.feedback.2 += other.feedback.2;
    }

    fn figures(&self) -> RouteFigures {
        let n = |v: i64| v.max(0) as u64;
        let c = &self.counts;
        RouteFigures {
            count: n(c.turns),
            routing_p50_ms: self.routing.percentile(0.5),
            routing_p95_ms: self.routing.percentile(0.95),
            routing_p99_ms: self.routing.percentile(0.99),
            execution_p50_ms: self.execution.percentile(0.5),
            execution_p95_ms: self.execution.percentile(0.95),
            feedback: self.feedback.0,
            helpful: self.feedback.1,
            misrouted: self.feedback.2,
            spend: Spend {
                calls: n(c.calls),
                prompt_tokens: n(c.prompt_tokens),
                cached_prompt_tokens: n(c.cached_prompt_tokens),
                completion_tokens: n(c.completion_tokens),
                cost_nanousd: c.cost_nanousd,
                unpriced_calls: n(c.unpriced_calls),
            },
        }
    }
}

fn counts(row: &PgRow) -> Result<RouteHour, sqlx::Error> {
    let get = |name: &str| row.try_get::<i64, _>(name);
    Ok(RouteHour {
        turns: get("turns")?,
        cache_hits: get("cache_hits")?,
        fallbacks: get("fallbacks")?,
        degraded: get("degraded")?,
        client_tools: get("client_tools")?,
        continuations: get("continuations")?,
        held_switches: get("held_switches")?,
        routing_calls_avoided: get("routing_calls_avoided")?,
        calls: get("calls")?,
        prompt_tokens: get("prompt_tokens")?,
        cached_prompt_tokens: get("cached_prompt_tokens")?,
        completion_tokens: get("completion_tokens")?,
        cost_nanousd: get("cost_nanousd")?,
        unpriced_calls: get("unpriced_calls")?,
        routing_ms: Vec::new(),
        execution_ms: Vec::new(),
    })
}

/// A grouped spend row: (dimension, key, turns, spend).
fn spend_row(row: &PgRow) -> Result<(String, String, u64, Spend), sqlx::Error> {
    let count = |name: &str| row.try_get::<i64, _>(name).map(|n| n.max(0) as u64);
    Ok((
        row.try_get("dimension")?,
        row.try_get("key")?,
        count("turns")?,
        Spend {
            calls: count("calls")?,
            prompt_tokens: count("prompt_tokens")?,
            cached_prompt_tokens: count("cached_prompt_tokens")?,
            completion_tokens: count("completion_tokens")?,
            cost_nanousd: row.try_get("cost_nanousd")?,
            unpriced_calls: count("unpriced_calls")?,
        },
    ))
}

fn add_spend(into: &mut Spend, other: &Spend) {
    into.calls += other.calls;
    into.prompt_tokens += other.prompt_tokens;
    into.cached_prompt_tokens += other.cached_prompt_tokens;
    into.completion_tokens += other.completion_tokens;
    into.cost_nanousd += other.cost_nanousd;
    into.unpriced_calls += other.unpriced_calls;
}

fn histogram(row: &PgRow, name: &str) -> Result<Vec<u64>, sqlx::Error> {
    let counts: Vec<i64> = row.try_get(name)?;
    Ok(counts.into_iter().map(|n| n.max(0) as u64).collect())
}

/// The tenant's figures over `[since, until)`.
pub async fn stats(
    pool: &PgPool,
    tenant: &TenantId,
    since: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Result<RoutingStats, sqlx::Error> {
    let plan = WindowPlan::of(since, until);
    let tenant = tenant.as_str();
    let [(a_from, a_to), (b_from, b_to)] = plan.edges;
    let edge = |sql: String| {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(a_from)
            .bind(a_to)
            .bind(b_from)
            .bind(b_to)
            .fetch_all(pool)
    };
    let (hours_from, hours_to) = plan.hours.unwrap_or((since, since));
    let hourly = |sql: &'static str| sqlx::query(sql).bind(tenant).bind(hours_from).bind(hours_to).fetch_all(pool);
    // The statements share nothing: they run at once, on the pool's connections.
    let (edge_routes, edge_latencies, edge_groups, edge_keys, hourly_routes, hourly_spend, feedback) = tokio::try_join!(
        edge(edge_routes()),
        edge(edge_latencies()),
        edge(edge_groups()),
        edge(edge_keys()),
        hourly(HOURLY_ROUTES),
        hourly(HOURLY_SPEND),
        sqlx::query(FEEDBACK).bind(tenant).bind(since).bind(until).fetch_all(pool),
    )?;

    let mut routes: BTreeMap<String, RouteSums> = BTreeMap::new();
    for (rows, hourly) in [(&edge_routes, false), (&hourly_routes, true)] {
        for row in rows {
            let route: String = row.try_get("route")?;
            let mut sums = RouteSums { counts: counts(row)?, ..RouteSums::default() };
            if hourly {
                add_histogram(&mut sums.routing.histogram, &histogram(row, "routing_ms_histogram")?);
                add_histogram(&mut sums.execution.histogram, &histogram(row, "execution_ms_histogram")?);
            }
            routes.entry(route).or_default().add(&sums);
        }
    }
    for row in &edge_latencies {
        let route: String = row.try_get("route")?;
        let n: i64 = row.try_get("n")?;
        let sums = routes.entry(route).or_default();
        let (latencies, value) = if row.try_get::<i32, _>("not_routing")? == 0 {
            (&mut sums.routing, row.try_get::<i32, _>("routing_ms")?)
        } else {
            (&mut sums.execution, row.try_get::<i32, _>("execution_ms")?)
        };
        *latencies.exact.entry(i64::from(value)).or_default() += n.max(0) as u64;
    }
    for row in &feedback {
        let route: String = row.try_get("route")?;
        let count = |name: &str| row.try_get::<i64, _>(name).map(|n| n.max(0) as u64);
        let sums = routes.entry(route).or_default();
        sums.feedback = (count("feedback")?, count("helpful")?, count("misrouted")?);
    }

    let mut stats = RoutingStats::default();
    let mut overall = RouteSums::default();
    for (route, sums) in &routes {
        overall.add(sums);
        // A route with feedback but no turns in the window cannot occur (feedback is joined to
        // the window's turns); a route Postgres holds that this build does not know is left out.
        if let (Ok(route), true) = (route.parse::<Route>(), sums.counts.turns > 0) {
            stats.routes.push((route, sums.figures()));
        }
    }
    stats.routes.sort_by_key(|(route, _)| Route::ALL.iter().position(|r| r == route));
    let n = |v: i64| v.max(0) as u64;
    let c = &overall.counts;
    stats.total = n(c.turns);
    stats.cache_hits = n(c.cache_hits);
    stats.fallbacks = n(c.fallbacks);
    stats.degraded = n(c.degraded);
    stats.client_tools = n(c.client_tools);
    stats.continuations = n(c.continuations);
    stats.held_switches = n(c.held_switches);
    stats.routing_calls_avoided = n(c.routing_calls_avoided);
    stats.overall = overall.figures();

    let mut groups: BTreeMap<(String, String), (u64, Spend)> = BTreeMap::new();
    for row in edge_groups.iter().chain(&edge_keys).chain(&hourly_spend) {
        let (dimension, key, turns, spend) = spend_row(row)?;
        let group = groups.entry((dimension, key)).or_default();
        group.0 += turns;
        add_spend(&mut group.1, &spend);
    }
    for ((dimension, key), (turns, spend)) in groups {
        match dimension.as_str() {
            "model" => stats.models.push((key, spend)),
            "role" => stats.roles.push((key, spend)),
            "kind" => stats.call_kinds.push((key, spend)),
            _ => stats.keys.push(KeySpend { key_id: key, turns, spend }),
        }
    }
    for groups in [&mut stats.models, &mut stats.roles, &mut stats.call_kinds] {
        sort_groups(groups);
    }
    sort_keys(&mut stats.keys);
    Ok(stats)
}
