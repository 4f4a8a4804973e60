#!/usr/bin/env bash
# Measures gRPC DetectTriggers throughput and latency with switchyard-loadgen against a
# release triggers server (in memory, seven domain roles), and in the same run the floor:
# grpc.health.v1.Health/Check on the same server. Prints both and their throughput ratio.
# Usage: scripts/bench-grpc.sh [CONCURRENCY] [DURATION]   (defaults: 8 10s)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/switchyard-target}"
concurrency="${1:-8}"
duration="${2:-10s}"
port="${BENCH_PORT:-50161}"

cargo build --quiet --release --locked -p switchyard-triggers -p switchyard-loadgen
bin="$CARGO_TARGET_DIR/release"
"$bin/switchyard-triggers" --in-memory --listen "127.0.0.1:$port" >/dev/null 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  "$bin/switchyard-loadgen" health-check --target "http://127.0.0.1:$port" --duration 100ms --warmup 0s >/dev/null 2>&1 && break
  sleep 0.1
done

run() { "$bin/switchyard-loadgen" "$@" --target "http://127.0.0.1:$port" --concurrency "$concurrency" --duration "$duration" --json; }
floor=$(run health-check)
detect=$(run detect-triggers --register)
python3 - "$floor" "$detect" <<'PY'
import json, sys
floor, detect = (json.loads(a) for a in sys.argv[1:3])
for name, r in (("health-check (floor)", floor), ("detect-triggers", detect)):
    l = r["latency_ms"]
    print(f"{name:22} {r['throughput_rps']:>9.0f} req/s  p50 {l['p50']:.3f} ms  p99 {l['p99']:.3f} ms  p99.9 {l['p99_9']:.3f} ms  errors {sum(r['errors'].values()) if isinstance(r['errors'], dict) else r['errors']}")
print(f"detect-triggers / floor throughput: {detect['throughput_rps'] / floor['throughput_rps']:.2f}")
PY
