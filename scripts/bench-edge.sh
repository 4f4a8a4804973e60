#!/usr/bin/env bash
# Measures the edge's overhead and time to first token, per client API, with switchyard-loadgen
# against release binaries at a fixed rate (open loop): the scripted OpenAI-compatible vendor
# that answers at once (switchyard-scripted-llm), triggers and sessions in memory, the router
# with its analytics in the real Postgres (as scripts/bench-router.sh), and the edge (open, no
# rate limit, in-memory stores) in front. In the same run, rounds interleaved:
#   llm-direct            the vendor called by the router's own provider client (the baseline);
#   router Chat / ChatStream first token   the router's gRPC API, 64 continuing sessions;
#   edge <api> JSON / first token           each client API of the edge (chat completions,
#                         Messages, Responses, the REST chat) over HTTP/1.1 keep-alive
#                         connections (one per caller, TCP_NODELAY, as the SDKs hold them), on
#                         64 continuing sessions named in x-session-id.
# CPU per request: each process's user + system time (/proc/PID/stat) over the run, warm-up
# included, divided by every call made; "Switchyard" sums the edge, router, sessions, triggers.
# SUITE (third argument, or BENCH_SUITE) says how the services run:
#   processes     one release binary each (the default; stack as above);
#   one-process   `switchyard dev`: every service in one process calling the others in process
#                 (the edge's calls to the router included), every store in memory (the router's
#                 analytics too), the edge's rate limit lifted; CPU is that one process's;
#   serve         `switchyard serve`, the production one-process deployment, with the stores of
#                 `processes` (the router's analytics in the real Postgres); CPU as one-process.
# Usage: scripts/bench-edge.sh [RATE] [DURATION] [SUITE]   (defaults: 50 5s processes; BENCH_ROUNDS=3)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib/bench.sh
source scripts/lib/bench.sh
rate="${1:-50}"
duration="${2:-5s}"
rounds="${BENCH_ROUNDS:-3}"
llm_port="${BENCH_LLM_PORT:-50290}"
triggers_port="${BENCH_TRIGGERS_PORT:-50291}"
sessions_port="${BENCH_SESSIONS_PORT:-50292}"
router_port="${BENCH_ROUTER_PORT:-50293}"
edge_port="${BENCH_EDGE_PORT:-50294}"
gateway_port="${BENCH_GATEWAY_PORT:-50295}"
gateway_mcp_port="${BENCH_MCP_PORT:-50296}"
schema="bench_edge_$$"
suite="${BENCH_SUITE:-${3:-processes}}"

case "$suite" in
  processes) bench_build ;;
  one-process | serve) bench_build -p switchyard-cli ;;
  *) echo "unknown suite '$suite' (processes, one-process, serve)" >&2; exit 2 ;;
esac
results="$(mktemp)"
scratch+=("$results")
trap bench_cleanup EXIT
if [[ "$suite" == processes ]]; then
  bench_start_stack
  cpu=(--cpu-of "edge=$edge" --cpu-of "router=$router" --cpu-of "sessions=$sessions" --cpu-of "triggers=$triggers"
    --cpu-of "vendor=$llm")
else
  bench_start_vendor
  if [[ "$suite" == serve ]]; then bench_start_serve; else bench_start_dev in-process; fi
  pids+=("$suite_pid")
  bench_wait_semantic "$triggers_port" "$router_port"
  cpu=(--cpu-of "switchyard=$suite_pid" --cpu-of "vendor=$llm")
fi
edge_url="http://127.0.0.1:$edge_port"
bench_wait_chat "the edge" "$edge_url" 30
direct=(llm-direct --base-url "http://127.0.0.1:$llm_port/v1")
grpc=(chat --target "http://127.0.0.1:$router_port" --sessions-url "http://127.0.0.1:$sessions_port" --sessions 64)
http=(http-chat --target "$edge_url" --sessions 64 --connections 64)
# name|arguments (one case per line)
cases=(
  "llm-direct|${direct[*]}"
  "llm-direct first token|${direct[*]} --first-token"
  "router gRPC Chat|${grpc[*]}"
  "router gRPC ChatStream first token|${grpc[*]} --stream --first-token"
  "edge chat-completions JSON|${http[*]} --api chat-completions"
  "edge chat-completions first token|${http[*]} --api chat-completions --stream --first-token"
  "edge messages JSON|${http[*]} --api messages"
  "edge messages first token|${http[*]} --api messages --stream --first-token"
  "edge responses JSON|${http[*]} --api responses"
  "edge responses first token|${http[*]} --api responses --stream --first-token"
  "edge rest-chat JSON|${http[*]} --api rest-chat"
  "edge rest-chat first token|${http[*]} --api rest-chat --stream --first-token"
)
count=${#cases[@]}
for round in $(seq "$rounds"); do
  # Each round starts one case further on, so that no case always runs first or after the same one.
  for step in $(seq 0 $((count - 1))); do
    entry="${cases[$(((step + round - 1) % count))]}"
    name="${entry%%|*}"
    read -r -a args <<<"${entry#*|}"
    report=$("$bin/switchyard-loadgen" "${args[@]}" "${cpu[@]}" --rate "$rate" --concurrency 64 \
      --duration "$duration" --json)
    printf '%s\t%s\t%s\n' "$round" "$name" "$report" >>"$results"
  done
done

echo "scripts/bench-edge.sh $rate $duration $suite  ($rounds rounds interleaved; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
python3 - "$results" <<'PY'
import json, statistics, sys

runs = {}
for line in open(sys.argv[1]):
    round_, name, report = line.rstrip("\n").split("\t", 2)
    runs.setdefault(name, []).append(json.loads(report))

def med(name, key):
    return statistics.median(r["latency_ms"][key] for r in runs[name])

def cpu(name, process):
    return statistics.median(r["cpu_ms_per_call"].get(process, 0.0) for r in runs[name])

def switchyard_cpu(name):
    return statistics.median(sum(r["cpu_ms_per_call"].get(p, 0.0)
                                 for p in ("edge", "router", "sessions", "triggers", "switchyard"))
                             for r in runs[name])

one_process = any("switchyard" in r["cpu_ms_per_call"] for rs in runs.values() for r in rs)

def errors(name):
    return sum(r["errors_total"] + (r["unsent"] or 0) for r in runs[name])

print("\nMedians over the rounds; p50 of each round in brackets. CPU: ms per request (edge / router / sessions /"
      " triggers = Switchyard; vendor apart).")
print(f"| case | p50 ms (rounds) | p99 ms | vs llm-direct p50 / p99 | errors | CPU edge / router / sessions / triggers"
      " = Switchyard | vendor |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for name in runs:
    base = "llm-direct first token" if "first token" in name else "llm-direct"
    rounds = ", ".join(f"{r['latency_ms']['p50']:.3f}" for r in runs[name])
    parts = "one process" if one_process else " / ".join(f"{cpu(name, p):.2f}" for p in ("edge", "router", "sessions", "triggers"))
    print(f"| {name} | {med(name, 'p50'):.3f} ({rounds}) | {med(name, 'p99'):.3f} | "
          f"{med(name, 'p50') - med(base, 'p50'):+.3f} / {med(name, 'p99') - med(base, 'p99'):+.3f} | {errors(name)} | "
          f"{parts} = **{switchyard_cpu(name):.2f}** | {cpu(name, 'vendor'):.2f} |")

stream = "router gRPC ChatStream first token"
print(f"\nFirst token through the edge against the router's own gRPC stream (aim: within +2 ms p50):\n")
print("| API | edge first token p50 | router ChatStream p50 | difference p50 (per round) | aim |")
print("| --- | --- | --- | --- | --- |")
for name in runs:
    if name.startswith("edge") and name.endswith("first token"):
        per_round = [e["latency_ms"]["p50"] - g["latency_ms"]["p50"] for e, g in zip(runs[name], runs[stream])]
        diff = med(name, "p50") - med(stream, "p50")
        shown = ", ".join(f"{d:+.3f}" for d in per_round)
        print(f"| {name[5:-12]} | {med(name, 'p50'):.3f} ms | {med(stream, 'p50'):.3f} ms | **{diff:+.3f} ms** ({shown}) | "
              f"{'met' if diff <= 2.0 else '**not met**'} |")
PY
