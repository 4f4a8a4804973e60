#!/usr/bin/env bash
# Measures gRPC ProcessQuery (no switch) with switchyard-loadgen against release binaries: a
# triggers server (in memory) and a sessions server on the real Redis and Postgres. In the same
# run it measures the floor: the Redis round trip one such call needs (the conditional turn
# update script), made directly by the loadgen's own Redis client.
# Usage: scripts/bench-sessions.sh [CONCURRENCY] [DURATION]   (defaults: 16 10s)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/switchyard-target}"
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
concurrency="${1:-16}"
duration="${2:-10s}"
triggers_port="${BENCH_TRIGGERS_PORT:-50171}"
sessions_port="${BENCH_SESSIONS_PORT:-50172}"
schema="bench_sessions_$$"

cargo build --quiet --release --locked -p switchyard-triggers -p switchyard-sessions -p switchyard-loadgen
bin="$CARGO_TARGET_DIR/release"
"$bin/switchyard-triggers" --in-memory --listen "127.0.0.1:$triggers_port" >/dev/null 2>&1 &
triggers=$!
"$bin/switchyard-sessions" --listen "127.0.0.1:$sessions_port" --triggers-url "http://127.0.0.1:$triggers_port" \
  --db-schema "$schema" --redis-prefix "sy-bench-$$" >/dev/null 2>&1 &
sessions=$!
cleanup() {
  kill "$sessions" "$triggers" 2>/dev/null || true
  psql "$DATABASE_URL" -qc "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
}
trap cleanup EXIT
ready=""
for _ in $(seq 100); do
  if "$bin/switchyard-loadgen" process-query --target "http://127.0.0.1:$sessions_port" --sessions 1 \
    --duration 100ms --warmup 0s >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.2
done
[[ -n "$ready" ]] || { echo "sessions service did not become ready" >&2; exit 1; }

run() { "$bin/switchyard-loadgen" "$@" --concurrency "$concurrency" --duration "$duration" --json; }
# ProcessQuery first: the floor's Redis load must not colour the run under test.
process=$(run process-query --target "http://127.0.0.1:$sessions_port")
floor=$(run sessions-redis-floor --redis-url "$REDIS_URL" --prefix "sy-bench-floor-$$")
python3 - "$floor" "$process" <<'PY'
import json, sys
floor, process = (json.loads(a) for a in sys.argv[1:3])
for name, r in (("redis floor (direct)", floor), ("process-query (gRPC)", process)):
    l = r["latency_ms"]
    errors = sum(r["errors"].values()) if isinstance(r["errors"], dict) else r["errors"]
    print(f"{name:22} {r['throughput_rps']:>9.0f} req/s  p50 {l['p50']:.3f} ms  p99 {l['p99']:.3f} ms  p99.9 {l['p99_9']:.3f} ms  errors {errors}")
print(f"process-query / floor throughput: {process['throughput_rps'] / floor['throughput_rps']:.2f}")
PY
