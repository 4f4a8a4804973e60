#!/usr/bin/env bash
# Measures the router's overhead with switchyard-loadgen against release binaries, at a fixed
# rate (open loop): a scripted OpenAI-compatible vendor that answers at once
# (switchyard-scripted-llm), triggers and sessions in memory, and the router with its analytics
# in the real Postgres. In the same run, as baselines:
#   llm-direct             the vendor called directly by the same provider client (no router);
#   chat                   RouterService.Chat, a whole direct-route turn on a continuing session;
#   llm-direct first token / chat-stream first token: time to the first content token.
# Router overhead = chat minus llm-direct (it includes the turn's three calls to the sessions
# service: GetSession, ProcessQuery with trigger detection, AppendMessages).
# Usage: scripts/bench-router.sh [RATE] [DURATION]   (defaults: 1000 10s)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/switchyard-target}"
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
rate="${1:-1000}"
duration="${2:-10s}"
llm_port="${BENCH_LLM_PORT:-50190}"
triggers_port="${BENCH_TRIGGERS_PORT:-50191}"
sessions_port="${BENCH_SESSIONS_PORT:-50192}"
router_port="${BENCH_ROUTER_PORT:-50193}"
schema="bench_router_$$"

cargo build --quiet --release --locked -p switchyard-triggers -p switchyard-sessions -p switchyard-router \
  -p switchyard-loadgen -p switchyard-testkit --bins
bin="$CARGO_TARGET_DIR/release"
"$bin/switchyard-scripted-llm" "127.0.0.1:$llm_port" >/dev/null 2>&1 &
llm=$!
"$bin/switchyard-triggers" --in-memory --listen "127.0.0.1:$triggers_port" >/dev/null 2>&1 &
triggers=$!
"$bin/switchyard-sessions" --in-memory --listen "127.0.0.1:$sessions_port" \
  --triggers-url "http://127.0.0.1:$triggers_port" >/dev/null 2>&1 &
sessions=$!
OPENAI_BASE_URL="http://127.0.0.1:$llm_port/v1" "$bin/switchyard-router" --listen "127.0.0.1:$router_port" \
  --sessions-url "http://127.0.0.1:$sessions_port" --db-schema "$schema" >/dev/null 2>&1 &
router=$!
cleanup() {
  kill "$router" "$sessions" "$triggers" "$llm" 2>/dev/null || true
  psql "$DATABASE_URL" -qc "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
}
trap cleanup EXIT

chat_args=(--target "http://127.0.0.1:$router_port" --sessions-url "http://127.0.0.1:$sessions_port")
ready=""
for _ in $(seq 150); do
  if "$bin/switchyard-loadgen" chat "${chat_args[@]}" --sessions 1 --duration 100ms --warmup 0s >/dev/null 2>&1; then
    ready=1
    break
  fi
  sleep 0.2
done
[[ -n "$ready" ]] || { echo "the router did not become ready" >&2; exit 1; }

run() { "$bin/switchyard-loadgen" "$@" --rate "$rate" --concurrency 64 --duration "$duration" --json; }
direct=$(run llm-direct --base-url "http://127.0.0.1:$llm_port/v1")
chat=$(run chat "${chat_args[@]}")
direct_first=$(run llm-direct --base-url "http://127.0.0.1:$llm_port/v1" --first-token)
chat_first=$(run chat "${chat_args[@]}" --stream --first-token)
python3 - "$direct" "$chat" "$direct_first" "$chat_first" <<'PY'
import json, sys
direct, chat, direct_first, chat_first = (json.loads(a) for a in sys.argv[1:5])
rows = (("llm-direct (whole answer)", direct), ("chat (router, direct route)", chat),
        ("llm-direct first token", direct_first), ("chat-stream first token", chat_first))
for name, r in rows:
    l = r["latency_ms"]
    errors = sum(r["errors"].values()) if isinstance(r["errors"], dict) else r["errors"]
    print(f"{name:30} {r['throughput_rps']:>7.0f} req/s  p50 {l['p50']:.3f} ms  p90 {l['p90']:.3f} ms  "
          f"p99 {l['p99']:.3f} ms  p99.9 {l['p99_9']:.3f} ms  errors {errors}")
for label, a, b in (("router overhead (chat - llm-direct)", chat, direct),
                    ("time to first token (chat-stream - llm-direct)", chat_first, direct_first)):
    la, lb = a["latency_ms"], b["latency_ms"]
    print(f"{label}: p50 +{la['p50'] - lb['p50']:.3f} ms  p99 +{la['p99'] - lb['p99']:.3f} ms  "
          f"(p50 ratio {la['p50'] / lb['p50']:.2f})")
PY
