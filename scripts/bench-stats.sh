#!/usr/bin/env bash
# GetRoutingStats against a filled decisions table, with switchyard-loadgen (routing-stats, one
# call at a time) against the release router: ROWS routing decisions (default 10,000,000) spread
# evenly over the last 31 days, shaped like real turns — 40 tenants of very unequal size (the
# largest, tenant-00, has about 16 % of the turns), 200 users, 5 API keys, the three routes
# (60/30/10 %), four models, one to three priced model calls each in cost_parts — filled with
# generate_series, then VACUUM ANALYZE, then the hourly rollups built from them by
# routing_rollup_rebuild (what migration 0011 runs over the rows already stored; its time is
# reported). The windows read are the largest tenant's last day and last 30 days (neither on
# the hour: their first and last hours are read from the decisions, the rest from the rollups).
#   partitioned    the router's own layout: day partitions (migration 0010), one per filled day;
#   unpartitioned  the layout before 0010 (migrations 0001-0009, the same rows), as the
#                  baseline; 0010 marked applied so the router keeps one table (it applies
#                  0011, the rollups, at start). BENCH_BASELINE=0
#                  skips it (it doubles the fill time and the disk: about 13 GB per 10 M rows,
#                  indexes included; a 1 M run filled in 88 s and copied in 46 s on 2 cores).
# Each (layout, window) runs BENCH_DAY_DURATION (default 30s) or BENCH_MONTH_DURATION (default
# 60s) after a 2 s warm-up; the report gives how many calls that was. The router's statements
# are bounded at 5 s (its pool's statement timeout): a slower window answers UNAVAILABLE, counted
# as errors.
# Usage: scripts/bench-stats.sh [ROWS]   (BENCH_SKIP_BUILD=1 runs the binaries already built;
# BENCH_BIN_DIR=DIR runs the router and the load generator from DIR instead of the release build:
# the time measured is Postgres's either way, but say which build a figure came from;
# BENCH_KEEP=1 keeps the filled partitioned schema and prints its name; BENCH_STATS_SCHEMA=NAME
# measures a schema so kept instead of filling one, migrating it to the router's newest
# migrations first (ROWS is then what that schema holds) and keeping it)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib/bench.sh
source scripts/lib/bench.sh
bin="${BENCH_BIN_DIR:-$bin}"
rows="${1:-10000000}"
days=31
tenant="${BENCH_STATS_TENANT:-tenant-00}"
day_duration="${BENCH_DAY_DURATION:-30s}"
month_duration="${BENCH_MONTH_DURATION:-60s}"
router_port="${BENCH_ROUTER_PORT:-50490}"
flat_port="${BENCH_FLAT_ROUTER_PORT:-50491}"
schema="${BENCH_STATS_SCHEMA:-bench_stats_$$}"
keep="${BENCH_KEEP:-0}"
[[ -z "${BENCH_STATS_SCHEMA:-}" ]] || keep=1
flat="bench_stats_flat_$$"
logs="$(mktemp -d)"
scratch+=("$logs")

[[ -n "${BENCH_BIN_DIR:-}" ]] || bench_build
cleanup() {
  if [[ "$keep" == 1 ]]; then
    echo "kept the partitioned layout in schema $schema (drop it with DROP SCHEMA $schema CASCADE)" >&2
    schema=""
  fi
  bench_cleanup
  psql "$DATABASE_URL" -qc "DROP SCHEMA IF EXISTS $flat CASCADE" >/dev/null 2>&1 || true
}
trap cleanup EXIT
sql() { PGOPTIONS="-c search_path=$1 -c statement_timeout=0 -c client_min_messages=warning" psql "$DATABASE_URL" -qAt -v ON_ERROR_STOP=1 "${@:2}"; }

# The router on SCHEMA at PORT; only GetRoutingStats is called, so no vendor, sessions service
# or fast router is needed (a provider is configured so that it reports ready). Its retention
# is a year: with the default (30 days) its round at start would delete the filled rows older
# than that (a day's worth, some 300,000 rows at 10 M) while the windows are measured.
start_router() {
  OPENAI_BASE_URL="http://127.0.0.1:9/v1" "$bin/switchyard-router" --listen "127.0.0.1:$2" --db-schema "$1" \
    --no-fast-router --analytics-retention 8760h >"$logs/router-$1.log" 2>&1 &
  pids+=($!)
  local _
  for _ in $(seq 150); do
    if "$bin/switchyard-loadgen" health-check --target "http://127.0.0.1:$2" --concurrency 1 --connections 1 \
      --duration 100ms --warmup 0s >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.2
  done
  echo "the router on schema $1 did not become ready; its log:" >&2
  cat "$logs/router-$1.log" >&2
  return 1
}

# The partitioned layout: the router migrates the schema and makes today and the days ahead;
# the filled days get the partitions the keeper would have made on each of them.
start_router "$schema" "$router_port"
if [[ -n "${BENCH_STATS_SCHEMA:-}" ]]; then
  rows="$(sql "$schema" -c "SELECT count(*) FROM routing_decisions")"
  echo "measuring the $rows decisions already in schema $schema ($(bench_cpu_line))" >&2
else
echo "filling $rows decisions over $days days ($(bench_cpu_line))" >&2
fill_started=$SECONDS
sql "$schema" <<SQL
DO \$\$
DECLARE
    day date;
BEGIN
    FOR day IN SELECT generate_series(current_date - $days, current_date, interval '1 day')::date LOOP
        EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF routing_decisions FOR VALUES FROM (%L) TO (%L)',
            'routing_decisions_p' || to_char(day, 'YYYYMMDD'), day::text || ' 00:00:00+00',
            (day + 1)::text || ' 00:00:00+00');
    END LOOP;
END
\$\$;
INSERT INTO routing_decisions (id, occurred_at, tenant_id, user_id, session_id, role_id, route, reasoning,
    routing_ms, execution_ms, provider, model, routing_model, cache_hit, fallback_used, attempts, model_fallbacks,
    prompt_tokens, completion_tokens, tools_used, domains, degraded, message, interrupted, client_tools,
    continuation, held_switch_role_id, client_tools_called, cached_prompt_tokens, cost_nanousd, cost_parts,
    unpriced_calls, routing_call_avoided, key_id)
SELECT 'chat-' || md5(n::text)::uuid, t.at, t.tenant, 'user-' || (r.user_pick * 200)::int,
    'session-' || n / 12, (ARRAY['general-assistant', 'finance-expert', 'tech-expert', 'legal-expert'])[1 + n % 4],
    t.route, 'the question needs ' || t.route, 40 + (r.latency * r.latency * 900)::int,
    300 + (r.latency * 4000)::int, split_part(t.model, '/', 1), split_part(t.model, '/', 2), 'openai/gpt-4o-mini',
    n % 5 = 0, n % 97 = 0, 1, 0, t.prompt, t.completion,
    CASE WHEN t.route = 'mcp_agent' THEN ARRAY['everything__echo'] ELSE '{}' END,
    ARRAY[(ARRAY['finance', 'tech', 'legal', 'general'])[1 + n % 4]], '{}', NULL, false, n % 7 = 0, n % 11 = 0,
    NULL, '{}', t.prompt / 4, t.calls * (t.prompt * 150 + t.completion * 600),
    (SELECT jsonb_agg(jsonb_build_object('kind', CASE WHEN c = 1 THEN 'routing' WHEN t.route = 'multiagent'
            AND c < t.calls THEN 'expert' WHEN t.route = 'multiagent' THEN 'synthesis' WHEN t.route = 'mcp_agent'
            THEN 'agent_step' ELSE 'answer' END,
        'model', CASE WHEN c = 1 THEN 'openai/gpt-4o-mini' ELSE t.model END, 'role_id', 'general-assistant',
        'prompt_tokens', t.prompt, 'cached_prompt_tokens', t.prompt / 4, 'completion_tokens', t.completion,
        'cost_nanousd', t.prompt * 150 + t.completion * 600, 'priced', true))
     FROM generate_series(1, t.calls) AS c),
    0, n % 5 = 0, CASE WHEN n % 10 < 3 THEN NULL ELSE 'key-' || n % 5 END
FROM generate_series(1::bigint, $rows) AS n
CROSS JOIN LATERAL (SELECT random() + 0 * n AS tenant_pick, random() + 0 * n AS route_pick,
    random() + 0 * n AS user_pick, random() + 0 * n AS latency) AS r
CROSS JOIN LATERAL (SELECT
    now() - ($days * 86400.0 * n / $rows) * interval '1 second' AS at,
    'tenant-' || lpad(floor(40 * r.tenant_pick * r.tenant_pick)::int::text, 2, '0') AS tenant,
    CASE WHEN r.route_pick < 0.6 THEN 'direct' WHEN r.route_pick < 0.9 THEN 'mcp_agent' ELSE 'multiagent' END
        AS route,
    (ARRAY['openai/gpt-4o-mini', 'openai/gpt-4o', 'anthropic/claude-haiku-4-5', 'anthropic/claude-sonnet-4-5'])
        [1 + n % 4] AS model,
    CASE WHEN r.route_pick < 0.6 THEN 2 WHEN r.route_pick < 0.9 THEN 3 ELSE 4 END AS calls,
    (200 + (n * 7919) % 1800)::int AS prompt, (20 + (n * 104729) % 400)::int AS completion) AS t;
SQL
sql "$schema" -c "VACUUM ANALYZE routing_decisions"
echo "partitioned layout filled in $((SECONDS - fill_started)) s" >&2
rollup_started=$SECONDS
# A day at a time, as the migration does (one statement over every row sorts them all on disk).
sql "$schema" -c "SELECT count(routing_rollup_rebuild(day, day + interval '1 day')) FROM
  (SELECT DISTINCT date_trunc('day', occurred_at, 'UTC') AS day FROM routing_decisions) AS days" >/dev/null
sql "$schema" -c "VACUUM ANALYZE routing_stats_hourly, routing_spend_hourly"
echo "hourly rollups built from the $rows decisions in $((SECONDS - rollup_started)) s" \
  "($(sql "$schema" -c "SELECT (SELECT count(*) FROM routing_stats_hourly) || ' route rows, ' ||
    (SELECT count(*) FROM routing_spend_hourly) || ' spend rows, ' ||
    pg_size_pretty(pg_total_relation_size('routing_stats_hourly') + pg_total_relation_size('routing_spend_hourly'))"))" >&2
fi

if [[ "${BENCH_BASELINE:-1}" != 0 ]]; then
  # The layout before 0010, 0010 and the migrations before it marked applied with their
  # checksums (as sqlx records it: SHA-384 of the file) so that the router keeps one table; it
  # applies the later ones (0011 builds the rollups from the copied rows).
  fill_started=$SECONDS
  psql "$DATABASE_URL" -qc "CREATE SCHEMA $flat"
  for file in services/router/migrations/000*.sql; do sql "$flat" -1 -f "$file" >/dev/null; done
  sql "$flat" -c "CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL,
    installed_on TIMESTAMPTZ NOT NULL DEFAULT now(), success BOOLEAN NOT NULL, checksum BYTEA NOT NULL,
    execution_time BIGINT NOT NULL)"
  for file in services/router/migrations/000*.sql services/router/migrations/0010_*.sql; do
    name="$(basename "$file" .sql)"
    sql "$flat" -c "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
      VALUES (${name%%_*}, '$(echo "${name#*_}" | tr _ ' ')', true, '\\x$(sha384sum "$file" | cut -d' ' -f1)', 0)"
  done
  sql "$flat" -c "INSERT INTO routing_decisions SELECT * FROM $schema.routing_decisions"
  sql "$flat" -c "VACUUM ANALYZE routing_decisions"
  echo "unpartitioned layout filled in $((SECONDS - fill_started)) s" >&2
  start_router "$flat" "$flat_port"
fi

window_rows() {
  sql "$schema" -c "SELECT count(*) FROM routing_decisions WHERE tenant_id = '$tenant' AND occurred_at >= now() - interval '$1'"
}
echo "$tenant: $(window_rows '1 day') decisions in the last day, $(window_rows '30 days') in the last 30 days" >&2

results="$(mktemp)"
scratch+=("$results")
measure() {
  local layout="$1" port="$2" window="$3" duration="$4" report
  report=$("$bin/switchyard-loadgen" routing-stats --target "http://127.0.0.1:$port" --tenant "$tenant" \
    --window "$window" --concurrency 1 --connections 1 --warmup 2s --duration "$duration" --timeout 10s --json || true)
  [[ -n "$report" ]] || report='{}'
  echo "$layout $window $report" >>"$results"
}
measure partitioned "$router_port" 24h "$day_duration"
measure partitioned "$router_port" 720h "$month_duration"
if [[ "${BENCH_BASELINE:-1}" != 0 ]]; then
  measure unpartitioned "$flat_port" 24h "$day_duration"
  measure unpartitioned "$flat_port" 720h "$month_duration"
fi

python3 - "$results" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    layout, window, report = line.split(" ", 2)
    r = json.loads(report)
    if "latency_ms" not in r:
        print(f"{layout:14} {window:>5}  no call succeeded")
        continue
    l = r["latency_ms"]
    errors = sum(r["errors"].values()) if isinstance(r["errors"], dict) else r["errors"]
    print(f"{layout:14} {window:>5}  calls {r['requests_ok']:>5}  p50 {l['p50']:8.1f} ms  p99 {l['p99']:8.1f} ms  "
          f"max {l['max']:8.1f} ms  errors {errors}")
PY
