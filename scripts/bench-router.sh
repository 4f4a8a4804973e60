#!/usr/bin/env bash
# Measures the router's overhead with switchyard-loadgen against release binaries, at a fixed
# rate (open loop), behind a scripted OpenAI-compatible vendor that answers at once
# (switchyard-scripted-llm). In the same run, as baselines:
#   llm-direct             the vendor called directly by the same provider client (no router);
#   chat                   RouterService.Chat, a whole direct-route turn on a continuing session;
#   llm-direct first token / chat-stream first token: time to the first content token.
# Router overhead = chat minus llm-direct (it includes the turn's calls to the sessions service:
# ProcessQuery with trigger detection, AppendMessages). CPU per turn: each Switchyard process's
# CPU time (/proc/PID/stat) over the chat run, warm-up included, divided by the calls made.
#
# SUITE says how the services run:
#   processes            triggers and sessions in memory and the router (analytics in the real
#                        Postgres), one release binary each, calling each other over loopback gRPC;
#   one-process          `switchyard dev`: every service in one process, calling each other in
#                        process (the same gRPC contracts without the network), stores in memory;
#   one-process-network  `switchyard dev --service-calls network`: one process, loopback gRPC;
#   serve                `switchyard serve`, the production one-process deployment, with the
#                        stores of `processes` (the router's analytics in the real Postgres).
# Usage: scripts/bench-router.sh [RATE] [DURATION] [SUITE]   (defaults: 1000 10s processes)
# BENCH_WORKER_THREADS=N: N tokio worker threads in each Switchyard process (default: one per core).
# BENCH_SETTLE (default 8 s): the wait after a suite answers before it is measured.
# Several suites in one run, interleaved round by round: BENCH_SUITES="processes one-process" and
# BENCH_ROUNDS=N (each round starts each suite afresh and measures it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rate="${1:-1000}"
duration="${2:-10s}"
suites="${BENCH_SUITES:-${3:-processes}}"
rounds="${BENCH_ROUNDS:-1}"
llm_port="${BENCH_LLM_PORT:-20190}"
triggers_port="${BENCH_TRIGGERS_PORT:-20191}"
sessions_port="${BENCH_SESSIONS_PORT:-20192}"
router_port="${BENCH_ROUTER_PORT:-20193}"
gateway_port="${BENCH_GATEWAY_PORT:-20194}"
gateway_mcp_port="${BENCH_GATEWAY_MCP_PORT:-20195}"
edge_port="${BENCH_EDGE_PORT:-20196}"
schema="bench_router_$$"
# shellcheck source=scripts/lib/bench.sh
source scripts/lib/bench.sh
trap bench_cleanup EXIT

for suite in $suites; do
  case "$suite" in
    processes | one-process | one-process-network | serve) ;;
    *) echo "unknown suite '$suite' (processes, one-process, one-process-network, serve)" >&2; exit 2 ;;
  esac
done
bench_build -p switchyard-cli

# Starts SUITE; sets `cpu` to the loadgen's --cpu-of arguments for its Switchyard processes.
start_suite() {
  case "$1" in
    processes)
      "${svc_env[@]}" "$bin/switchyard-triggers" --in-memory --listen "127.0.0.1:$triggers_port" >/dev/null 2>&1 &
      local triggers=$!
      "${svc_env[@]}" "$bin/switchyard-sessions" --in-memory --listen "127.0.0.1:$sessions_port" \
        --triggers-url "http://127.0.0.1:$triggers_port" >/dev/null 2>&1 &
      local sessions=$!
      "${svc_env[@]}" OPENAI_BASE_URL="http://127.0.0.1:$llm_port/v1" "$bin/switchyard-router" --listen "127.0.0.1:$router_port" \
        --sessions-url "http://127.0.0.1:$sessions_port" --db-schema "$schema" >/dev/null 2>&1 &
      local router=$!
      suite_pids=("$triggers" "$sessions" "$router")
      cpu=(--cpu-of "router=$router" --cpu-of "sessions=$sessions" --cpu-of "triggers=$triggers")
      ;;
    one-process | one-process-network | serve)
      case "$1" in
        one-process) bench_start_dev in-process ;;
        one-process-network) bench_start_dev network ;;
        serve) bench_start_serve ;;
      esac
      suite_pids=("$suite_pid")
      cpu=(--cpu-of "switchyard=$suite_pid")
      ;;
  esac
  pids+=("${suite_pids[@]}")
}

stop_suite() {
  kill "${suite_pids[@]}" 2>/dev/null || true
  wait "${suite_pids[@]}" 2>/dev/null || true
  psql "$DATABASE_URL" -qc "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
}

bench_start_vendor
chat_args=(--target "http://127.0.0.1:$router_port" --sessions-url "http://127.0.0.1:$sessions_port")
run() { "$bin/switchyard-loadgen" "$@" --rate "$rate" --concurrency 64 --duration "$duration" --json; }

echo "scripts/bench-router.sh $rate $duration  suites: $suites  rounds: $rounds  ($(bench_cpu_line))"
results=()
for round in $(seq "$rounds"); do
  for suite in $suites; do
    start_suite "$suite"
    ready=""
    for _ in $(seq 150); do
      if "$bin/switchyard-loadgen" chat "${chat_args[@]}" --sessions 1 --duration 100ms --warmup 0s >/dev/null 2>&1; then
        ready=1
        break
      fi
      sleep 0.2
    done
    [[ -n "$ready" ]] || { echo "the router ($suite) did not become ready" >&2; exit 1; }
    bench_wait_semantic "$triggers_port" "$router_port"
    # Triggers loads its embedding model in the background after it starts serving: let that
    # finish, so its CPU is not counted against the turns.
    sleep "${BENCH_SETTLE:-8}"
    direct=$(run llm-direct --base-url "http://127.0.0.1:$llm_port/v1")
    chat=$(run chat "${chat_args[@]}" "${cpu[@]}")
    direct_first=$(run llm-direct --base-url "http://127.0.0.1:$llm_port/v1" --first-token)
    chat_first=$(run chat "${chat_args[@]}" --stream --first-token)
    stop_suite
    results+=("$(python3 -c 'import json,sys; print(json.dumps({"suite": sys.argv[1], "round": int(sys.argv[2]),
      "direct": json.loads(sys.argv[3]), "chat": json.loads(sys.argv[4]),
      "direct_first": json.loads(sys.argv[5]), "chat_first": json.loads(sys.argv[6])}))' \
      "$suite" "$round" "$direct" "$chat" "$direct_first" "$chat_first")")
  done
done

report=$(mktemp)
scratch+=("$report")
printf '%s\n' "${results[@]}" >"$report"
python3 - "$report" <<'PY'
import json, sys
def errors(r):
    return sum(r["errors"].values()) if isinstance(r["errors"], dict) else r["errors"]
for line in open(sys.argv[1]):
    run = json.loads(line)
    print(f"--- suite {run['suite']}, round {run['round']}")
    rows = (("llm-direct (whole answer)", run["direct"]), ("chat (router, direct route)", run["chat"]),
            ("llm-direct first token", run["direct_first"]), ("chat-stream first token", run["chat_first"]))
    for name, r in rows:
        l = r["latency_ms"]
        print(f"{name:30} {r['throughput_rps']:>7.0f} req/s  p50 {l['p50']:.3f} ms  p90 {l['p90']:.3f} ms  "
              f"p99 {l['p99']:.3f} ms  p99.9 {l['p99_9']:.3f} ms  errors {errors(r)} {r['errors'] or ''}")
    for label, a, b in (("router overhead (chat - llm-direct)", run["chat"], run["direct"]),
                        ("time to first token (chat-stream - llm-direct)", run["chat_first"], run["direct_first"])):
        la, lb = a["latency_ms"], b["latency_ms"]
        print(f"{label}: p50 +{la['p50'] - lb['p50']:.3f} ms  p99 +{la['p99'] - lb['p99']:.3f} ms  "
              f"(p50 ratio {la['p50'] / lb['p50']:.2f})")
    cpu = run["chat"].get("cpu_ms_per_call") or {}
    parts = "  ".join(f"{name} {ms:.3f}" for name, ms in cpu.items() if name != "total")
    print(f"CPU per turn (ms, Switchyard processes): {parts}  = {cpu.get('total', 0.0):.3f}")
PY
