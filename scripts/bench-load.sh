#!/usr/bin/env bash
# The whole path at rising rates: the suite as it runs in production (scripts/lib/bench.sh
# bench_start_full_stack: records in the real Postgres, live state in a Redis of the
# benchmark's own, the MCP gateway with the reference server-everything over stdio, release
# binaries, the scripted vendor that answers at once), driven through the edge's chat
# completions by one open-loop generator on 64 continuing sessions:
#   direct  edge → router (routing call) → sessions → triggers, the vendor answering;
#   agent   the same, routed to the MCP agent, whose first step calls server-everything's echo
#           through the gateway (three vendor calls and one MCP tool call per turn).
# Each route climbs RATES (requests per second, STEP_DURATION each after a 3 s warm-up) and
# stops after the first rate whose p99 is over 50 ms or that has an error; the highest rate
# held is the last with p99 ≤ 50 ms and none. CPU per turn: each process's user + system time
# (/proc/PID/stat) over the step, warm-up included, divided by the calls made; "Switchyard" sums
# the edge, router, sessions, triggers and gateway (the vendor and the MCP server apart).
# Where the time goes per hop, at HOP_RATE in the same run: the vendor alone (llm-direct),
# triggers' DetectTriggers, sessions' ProcessQuery (it calls triggers), the router's gRPC Chat
# (it calls sessions three times and the vendor) and the edge (it calls the router).
# BENCH_SUITE=serve runs the same suite as `switchyard serve`, every service in one process
# calling the others in process, with the same stores and settings (bench_start_full_serve);
# CPU is that one process's.
# Usage: scripts/bench-load.sh [RATES] [STEP_DURATION]   (defaults: "50 100 200 400 600 800 1000" 15s;
#        HOP_RATE=100; BENCH_SUITE=processes)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib/bench.sh
source scripts/lib/bench.sh
read -r -a rates <<<"${1:-50 100 200 400 600 800 1000}"
step="${2:-15s}"
hop_rate="${HOP_RATE:-100}"
llm_port="${BENCH_LLM_PORT:-21590}"
triggers_port=21591 sessions_port=21592 gateway_port=21593 gateway_mcp_port=21594 router_port=21595
edge_port=21596 redis_port=21597 metrics_base=21600
schema="bench_load_$$"
logs="$(mktemp -d)"
results="$(mktemp)"
scratch+=("$results" "$logs")

suite="${BENCH_SUITE:-processes}"
case "$suite" in
  processes) bench_build -p switchyard-mcp-gateway ;;
  serve) bench_build -p switchyard-mcp-gateway -p switchyard-cli ;;
  *) echo "unknown BENCH_SUITE '$suite' (processes, serve)" >&2; exit 2 ;;
esac
[[ -x .tools/bin/mcp-server-everything ]] || scripts/install-tools.sh >/dev/null
command -v redis-server >/dev/null || { echo "redis-server is missing (scripts/ensure-services.sh installs it)" >&2; exit 1; }
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$logs/redis.log" 2>&1 &
pids+=($!)
cleanup() {
  bench_cleanup
  bench_drop_full_stack_schemas
}
trap cleanup EXIT
for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
export REDIS_URL="redis://127.0.0.1:$redis_port"
if [[ "$suite" == serve ]]; then
  bench_start_full_serve
  cpu=(--cpu-of "switchyard=$serve" --cpu-of "vendor=$llm")
else
  bench_start_full_stack
  cpu=(--cpu-of "edge=$edge" --cpu-of "router=$router" --cpu-of "sessions=$sessions" --cpu-of "triggers=$triggers"
    --cpu-of "gateway=$gateway" --cpu-of "vendor=$llm")
fi
edge_url="http://127.0.0.1:$edge_port"
agent_message="[agent] echo this back"
bench_wait_chat "the edge" "$edge_url" 60
bench_wait_chat "the agent route" "$edge_url" 60 --message "$agent_message"
http=(http-chat --target "$edge_url" --sessions 64 --connections 64)

run() { # name, then the loadgen's arguments
  local name="$1"
  shift
  printf '%s\t%s\n' "$name" "$("$bin/switchyard-loadgen" "$@" "${cpu[@]}" --concurrency 64 --warmup 3s --json)" \
    >>"$results"
}
held() { # whether the last line of $results held: p99 ≤ 50 ms and no error
  tail -1 "$results" | cut -f2 | python3 -c "
import json, sys
r = json.load(sys.stdin)
sys.exit(0 if r['errors_total'] + (r.get('unsent') or 0) == 0 and r['latency_ms']['p99'] <= 50 else 1)"
}

# Lazy first-use work (models loaded on the first query, caches filled, pools grown) is not a
# rate's cost: both routes run once at the lowest rate before anything is recorded.
"$bin/switchyard-loadgen" "${http[@]}" --rate "${rates[0]}" --duration 10s --warmup 0s >/dev/null
"$bin/switchyard-loadgen" "${http[@]}" --message "$agent_message" --rate "${rates[0]}" --duration 10s --warmup 0s \
  >/dev/null
for route in direct agent; do
  message=()
  [[ "$route" == agent ]] && message=(--message "$agent_message")
  for rate in "${rates[@]}"; do
    run "$route $rate" "${http[@]}" "${message[@]}" --rate "$rate" --duration "$step"
    held || break
  done
done
run "hop llm-direct" llm-direct --base-url "http://127.0.0.1:$llm_port/v1" --rate "$hop_rate" --duration "$step"
run "hop triggers DetectTriggers" detect-triggers --target "http://127.0.0.1:$triggers_port" --rate "$hop_rate" \
  --duration "$step"
run "hop sessions ProcessQuery" process-query --target "http://127.0.0.1:$sessions_port" --rate "$hop_rate" \
  --duration "$step"
run "hop router Chat" chat --target "http://127.0.0.1:$router_port" --sessions-url "http://127.0.0.1:$sessions_port" \
  --rate "$hop_rate" --duration "$step"
run "hop edge chat completions" "${http[@]}" --rate "$hop_rate" --duration "$step"

echo "scripts/bench-load.sh \"${rates[*]}\" $step  (BENCH_SUITE=$suite, HOP_RATE=$hop_rate; $(bench_cpu_line))"
python3 - "$results" <<'PY'
import json, sys

rows = [line.rstrip("\n").split("\t", 1) for line in open(sys.argv[1])]
runs = [(name, json.loads(report)) for name, report in rows]
SWITCHYARD = ("edge", "router", "sessions", "triggers", "gateway", "switchyard")
ONE_PROCESS = any("switchyard" in (r.get("cpu_ms_per_call") or {}) for _, r in runs)

def cpu(r, process):
    return (r.get("cpu_ms_per_call") or {}).get(process, 0.0)

def errors(r):
    return r["errors_total"] + (r.get("unsent") or 0)

print("\n| route | rate req/s | achieved | p50 ms | p99 ms | errors | CPU ms/turn edge / router / sessions / triggers"
      " / gateway = Switchyard | vendor |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
best = {}
for name, r in runs:
    if name.startswith("hop "):
        continue
    route, rate = name.split()
    lat = r["latency_ms"]
    ok = errors(r) == 0 and lat["p99"] <= 50
    if ok:
        best[route] = rate
    parts = "one process" if ONE_PROCESS else " / ".join(f"{cpu(r, p):.2f}" for p in SWITCHYARD[:-1])
    total = sum(cpu(r, p) for p in SWITCHYARD)
    print(f"| {route} | {rate} | {r.get('achieved_rate') or 0:.0f} | {lat['p50']:.2f} | {lat['p99']:.2f} | {errors(r)} | "
          f"{parts} = **{total:.2f}** | {cpu(r, 'vendor'):.2f} |")
print()
for route in ("direct", "agent"):
    print(f"- highest rate held (p99 ≤ 50 ms, no error), {route}: **{best.get(route, 'none')} req/s**")

hops = {name[4:]: r for name, r in runs if name.startswith("hop ")}
print("\nPer hop, each layer called alone at the same rate (p50 / p99 ms; what the layer adds is its"
      " figure minus the layers it calls):\n")
print("| layer | p50 | p99 | errors | CPU ms/call in that layer's process |")
print("| --- | --- | --- | --- | --- |")
own = {"llm-direct": "vendor", "triggers DetectTriggers": "triggers", "sessions ProcessQuery": "sessions",
       "router Chat": "router", "edge chat completions": "edge"}
for name, r in hops.items():
    lat = r["latency_ms"]
    process = own[name] if name == "llm-direct" or not ONE_PROCESS else "switchyard"
    print(f"| {name} | {lat['p50']:.3f} | {lat['p99']:.3f} | {errors(r)} | {cpu(r, process):.3f} |")
if "router Chat" in hops and "edge chat completions" in hops and "llm-direct" in hops:
    edge, router, vendor = (hops[k]["latency_ms"]["p50"] for k in ("edge chat completions", "router Chat", "llm-direct"))
    print(f"\nThe edge adds {edge - router:+.3f} ms p50 over the router's gRPC Chat; the router (with its sessions and"
          f" triggers calls) {router - vendor:+.3f} ms over the vendor alone.")
PY
