#!/usr/bin/env bash
# The soak: the whole suite as it runs in production (scripts/lib/bench.sh
# bench_start_full_stack: every service's records in the real Postgres, live state in a Redis of
# the soak's own, the MCP gateway with the reference server-everything, release binaries, the
# scripted vendor that answers at once) under a steady open-loop load through the edge for
# MINUTES, measured in 30 s windows, with faults on a schedule:
#   Redis     (window n/4):  the soak's Redis killed (SIGKILL) 10 s into the window and started
#                            again, empty, 2 s later (no persistence: every live session is lost);
#   Postgres  (window n/2):  unreachable for 30 s from the window's start: a fault proxy between
#                            every service and Postgres cuts each connection and refuses new ones;
#   provider  (window 3n/4): the vendor answers 503 to every call for 15 s from 10 s in; the
#                            router's fallback model, on a second vendor, is there to answer.
# Load: chat completions through the edge at RATE req/s on 64 continuing sessions (a new set
# each window), and a tenth of that down the MCP agent route (the vendor routes a message marked
# `[agent]` to the agent, whose first step calls server-everything's echo through the gateway).
# What it checks, and prints as PASS or FAIL:
#   errors only inside the fault windows (each window's calls and errors are listed);
#   zero lost records: after the run, every turn answered has its routing decision in Postgres,
#     its two messages (the user's and the answer) in the sessions' history, and every tool call
#     its decision names in the gateway's usage (counted from before the first window; exact up
#     to the failed calls, which may or may not have written theirs); no record dropped or set
#     aside by any service (records_dropped_total, records_set_aside_total on each /metrics);
#   each service's resident memory at the end within 10 % of its level after the warm-up (the
#     end of window 2).
# Usage: scripts/bench-soak.sh [RATE] [MINUTES]   (defaults: 100 10)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib/bench.sh
source scripts/lib/bench.sh
rate="${1:-100}"
minutes="${2:-10}"
window_s=30
windows=$((minutes * 60 / window_s))
((windows >= 4)) || { echo "the soak needs at least 2 minutes (4 windows)" >&2; exit 2; }
redis_window=$((windows / 4))
postgres_window=$((windows / 2))
provider_window=$((windows * 3 / 4))
agent_rate=$(python3 -c "print(max(1.0, $rate / 10))")
llm_port="${BENCH_LLM_PORT:-21490}"
triggers_port=21491 sessions_port=21492 gateway_port=21493 gateway_mcp_port=21494 router_port=21495
edge_port=21496 redis_port=21497 pg_proxy_port=21498 fallback_port=21499 metrics_base=21500
schema="bench_soak_$$"
logs="$(mktemp -d)"
results="$(mktemp -d)"
scratch+=("$results")

bench_build -p switchyard-mcp-gateway
[[ -x .tools/bin/mcp-server-everything ]] || scripts/install-tools.sh >/dev/null
command -v redis-server >/dev/null || { echo "redis-server is missing (scripts/ensure-services.sh installs it)" >&2; exit 1; }

redis_pid=
start_redis() {
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    >>"$logs/redis.log" 2>&1 &
  redis_pid=$!
  pids+=("$redis_pid")
  local _
  for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "the soak's Redis did not start (log: $logs/redis.log)" >&2
  return 1
}
cleanup() {
  bench_cleanup
  bench_drop_full_stack_schemas
  echo "logs: $logs"
}
trap cleanup EXIT

start_redis
"$bin/switchyard-fault-proxy" "127.0.0.1:$pg_proxy_port" "$(python3 -c "
import sys, urllib.parse as u
p = u.urlsplit(sys.argv[1]); print(f'{p.hostname or \"127.0.0.1\"}:{p.port or 5432}')" "$DATABASE_URL")" \
  >"$logs/proxy.log" 2>&1 &
proxy=$!
pids+=("$proxy")
for _ in $(seq 50); do grep -qs listening "$logs/proxy.log" && break; sleep 0.1; done
export REDIS_URL="redis://127.0.0.1:$redis_port"
DATABASE_URL_VIA="$(python3 -c "
import sys, urllib.parse as u
p = u.urlsplit(sys.argv[1]); user = p.username + '@' if p.username else ''
print(u.urlunsplit((p.scheme, f'{user}127.0.0.1:$pg_proxy_port', p.path, p.query, '')))" "$DATABASE_URL")"
export DATABASE_URL_VIA
# glibc's malloc arenas limited as the deployment files run every service (deploy/k8s config
# map, the root docker-compose.yml); MALLOC_ARENA_MAX in the caller's environment overrides it.
export MALLOC_ARENA_MAX="${MALLOC_ARENA_MAX:-2}"
bench_start_full_stack
edge_url="http://127.0.0.1:$edge_port"
bench_wait_chat "the edge" "$edge_url" 60
bench_wait_chat "the agent route" "$edge_url" 60 --message "[agent] echo this back"
services=(triggers sessions gateway router edge)
declare -A pid_of=([triggers]=$triggers [sessions]=$sessions [gateway]=$gateway [router]=$router [edge]=$edge)

count() { psql "$DATABASE_URL" -tAc "$1"; }
records() { # routing decisions, history messages, tool calls, and the tool calls the decisions name
  echo "$(count "SELECT count(*) FROM ${schema}_router.routing_decisions")" \
    "$(count "SELECT count(*) FROM ${schema}_sessions.session_messages")" \
    "$(count "SELECT count(*) FROM ${schema}_gateway.tool_calls")" \
    "$(count "SELECT coalesce(sum(cardinality(tools_used)), 0) FROM ${schema}_router.routing_decisions")"
}
# The readiness probes above made turns of their own; their records are settled first.
sleep 2
read -r decisions_before messages_before tool_calls_before tools_used_before <<<"$(records)"

echo "soak: $rate req/s direct + $agent_rate req/s agent for $minutes min in $windows windows of ${window_s}s;" \
  "Redis restart in window $redis_window, Postgres cut in window $postgres_window, provider 503s in window $provider_window"
for window in $(seq 1 "$windows"); do
  common=(http-chat --target "$edge_url" --duration "${window_s}s" --warmup 0s --timeout 10s --json)
  "$bin/switchyard-loadgen" "${common[@]}" --rate "$rate" --sessions 64 --connections 64 --concurrency 64 \
    >"$results/direct.$window" &
  direct=$!
  "$bin/switchyard-loadgen" "${common[@]}" --rate "$agent_rate" --sessions 8 --connections 8 --concurrency 8 \
    --message "[agent] echo this back" >"$results/agent.$window" &
  agent=$!
  fault=
  if ((window == redis_window)); then
    sleep 10
    kill -KILL "$redis_pid"
    wait "$redis_pid" 2>/dev/null || true
    sleep 2
    start_redis
    fault="Redis killed at +10 s, back empty at +12 s"
  elif ((window == postgres_window)); then
    kill -USR1 "$proxy"
    sleep "$window_s"
    kill -USR2 "$proxy"
    fault="Postgres unreachable +0 to +30 s"
  elif ((window == provider_window)); then
    sleep 10
    kill -USR1 "$llm"
    sleep 15
    kill -USR2 "$llm"
    fault="provider 503 +10 to +25 s"
  fi
  wait "$direct" "$agent" || { echo "the load generator failed in window $window" >&2; exit 1; }
  rss=()
  for service in "${services[@]}"; do rss+=("$service=$(bench_rss_kib "${pid_of[$service]}")"); done
  printf '%s\t%s\t%s\n' "$window" "${fault:--}" "${rss[*]}" >>"$results/windows"
  python3 - "$results" "$window" "${fault:--}" <<'PY'
import json, sys
results, window, fault = sys.argv[1], sys.argv[2], sys.argv[3]
parts = []
for kind in ("direct", "agent"):
    r = json.load(open(f"{results}/{kind}.{window}"))
    lat = r.get("latency_ms") or {}
    parts.append(f"{kind} {r['requests_ok']} ok {r['errors_total'] + (r.get('unsent') or 0)} err"
                 f" p99 {lat.get('p99', float('nan')):.1f} ms {dict(r['errors']) or ''}")
print(f"window {window:>2}: {'; '.join(parts)}  [{fault}]", flush=True)
PY
done

# Let every buffer drain: the records' backlog on every service's /metrics at 0.
for _ in $(seq 120); do
  backlog=0
  for i in 0 1 2 3 4; do
    backlog=$((backlog + $(bench_counter "http://127.0.0.1:$((metrics_base + i))/metrics" records_backlog)))
  done
  ((backlog == 0)) && break
  sleep 1
done
dropped=0
set_aside=0
for i in 0 1 2 3 4; do
  url="http://127.0.0.1:$((metrics_base + i))/metrics"
  dropped=$((dropped + $(bench_counter "$url" records_dropped_total)))
  set_aside=$((set_aside + $(bench_counter "$url" records_set_aside_total)))
done
read -r decisions messages tool_calls tools_used <<<"$(records)"
decisions=$((decisions - decisions_before))
messages=$((messages - messages_before))
tool_calls=$((tool_calls - tool_calls_before))
tools_used=$((tools_used - tools_used_before))

echo
echo "scripts/bench-soak.sh $rate $minutes  ($(bench_cpu_line))"
python3 - "$results" "$windows" "$backlog" "$dropped" "$set_aside" "$decisions" "$messages" "$tool_calls" \
  "$tools_used" <<'PY'
import json, sys
results, windows = sys.argv[1], int(sys.argv[2])
backlog, dropped, set_aside, decisions, messages, tool_calls, tools_used = map(int, sys.argv[3:10])
rows = [line.rstrip("\n").split("\t") for line in open(f"{results}/windows")]
ok = {"direct": 0, "agent": 0}
failed_by_kind = {"direct": 0, "agent": 0}
stray = []
names = [pair.split("=")[0] for pair in rows[0][2].split()]
print("| window | fault | direct ok / errors / p99 ms | agent ok / errors / p99 ms | errors by kind | resident MiB "
      + " / ".join(names) + " |")
print("| --- | --- | --- | --- | --- | --- |")
for window, fault, sample in rows:
    resident = " / ".join(f"{int(pair.split('=')[1]) / 1024:.1f}" for pair in sample.split())
    cells, kinds = [], {}
    for kind in ("direct", "agent"):
        r = json.load(open(f"{results}/{kind}.{window}"))
        ok[kind] += r["requests_ok"]
        errors = r["errors_total"] + (r.get("unsent") or 0)
        failed_by_kind[kind] += r["errors_total"]
        for name, n in r["errors"].items():
            kinds[f"{kind} {name}"] = n
        if errors and fault == "-":
            stray.append((window, kind, errors))
        p99 = (r.get("latency_ms") or {}).get("p99", float("nan"))
        cells.append(f"{r['requests_ok']} / {errors} / {p99:.1f}")
    print(f"| {window} | {fault} | {cells[0]} | {cells[1]} | {', '.join(f'{k} {n}' for k, n in kinds.items()) or '-'} |"
          f" {resident} |")

# Each load generator run opens with one probe call of its own, answered before it measures.
probes = {"direct": len(rows), "agent": len(rows)}
turns = {kind: ok[kind] + probes[kind] for kind in ok}
answered = turns["direct"] + turns["agent"]
# A failed turn may have written its decision (and an agent turn its tool call) before failing:
# the count is exact up to the failed calls, and never below the turns answered.
failed = failed_by_kind["direct"] + failed_by_kind["agent"]
def within(value, low, slack):
    return low <= value <= low + slack
checks = []
checks.append(("errors only inside fault windows", not stray, f"outside: {stray}" if stray else "none outside"))
checks.append(("every answered turn's routing decision in Postgres", within(decisions, answered, failed),
               f"{decisions} decisions for {answered} turns answered (probes included) and {failed} failed"))
checks.append(("every answered turn's two messages in the history", within(messages, 2 * answered, 2 * failed),
               f"{messages} messages for {answered} turns answered and {failed} failed"))
# An agent turn whose routing call ran past its deadline is answered directly by design (the
# decision says so): the tool calls to find are the ones the decisions name.
checks.append(("every tool call a decision names in the gateway's usage",
               within(tool_calls, tools_used, failed_by_kind["agent"]),
               f"{tool_calls} tool calls recorded for {tools_used} named by the decisions of {turns['agent']} agent"
               f" turns answered, {failed_by_kind['agent']} failed"))
checks.append(("no record dropped, set aside or still held", dropped == 0 and set_aside == 0 and backlog == 0,
               f"dropped {dropped}, set aside {set_aside}, backlog {backlog}"))
rss = {}
for window, _, sample in rows:
    for pair in sample.split():
        name, kib = pair.split("=")
        rss.setdefault(name, {})[int(window)] = int(kib)
growth = []
for name, by_window in rss.items():
    base, end = by_window.get(2), by_window[max(by_window)]
    growth.append((name, base, end, (end / base - 1) * 100 if base else float("inf")))
checks.append(("resident memory within +10 % of the warm-up's", all(g <= 10 for *_, g in growth),
               ", ".join(f"{n} {b / 1024:.1f} → {e / 1024:.1f} MiB ({g:+.1f} %)" for n, b, e, g in growth)))
print()
failed = False
for name, passed, detail in checks:
    failed |= not passed
    print(f"- {'PASS' if passed else '**FAIL**'} {name}: {detail}")
sys.exit(1 if failed else 0)
PY
