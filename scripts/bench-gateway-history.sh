#!/usr/bin/env bash
# The MCP gateway's resident memory as its usage history grows: a release gateway (the
# reference server-everything over stdio, the MiniLM model, its own schema in the real Postgres,
# its own prefix in REDIS_URL, MALLOC_ARENA_MAX=2 as deployed) whose tool_calls table gets PAIRS
# past calls at once and then RATE more a second (each with a context and a unit-length
# 384-dimension embedding near its tool's direction, as the gateway records them), reloading its
# history every REFRESH (the default is a minute; shorter shows more reloads in a short run).
# Prints the gateway's VmRSS every 5 s and, at the end: after start-up (the first pairs
# loaded), the peak, the end, and the growth per pair added (BENCHMARKS.md, "The soak").
# Usage: scripts/bench-gateway-history.sh [PAIRS] [RATE] [SECONDS] [REFRESH]   (defaults: 0 100 180 5s)
# BENCH_SKIP_BUILD=1 runs the release binary already built; GATEWAY_BIN names another one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib/bench.sh
source scripts/lib/bench.sh
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
pairs="${1:-0}"
rate="${2:-100}"
seconds="${3:-180}"
refresh="${4:-5s}"
gateway_port=21601 gateway_mcp_port=21602
schema="bench_gwhist_$$"
logs="$(mktemp -d)"

if [[ "${BENCH_SKIP_BUILD:-}" != 1 ]]; then
  cargo build --quiet --release --locked -p switchyard-mcp-gateway --bins
fi
gateway_bin="${GATEWAY_BIN:-$bin/switchyard-mcp-gateway}"
[[ -x .tools/bin/mcp-server-everything ]] || scripts/install-tools.sh >/dev/null
[[ -d models/all-MiniLM-L6-v2 ]] || { echo "the model is missing (scripts/fetch-models.sh)" >&2; exit 1; }

cleanup() {
  bench_cleanup
  psql "$DATABASE_URL" -qc "DROP SCHEMA IF EXISTS ${schema}_gateway CASCADE" >/dev/null 2>&1 || true
  echo "logs: $logs"
}
trap cleanup EXIT

MALLOC_ARENA_MAX=2 MCP_GATEWAY_HISTORY_REFRESH="$refresh" "$gateway_bin" --listen "127.0.0.1:$gateway_port" \
  --mcp-listen "127.0.0.1:$gateway_mcp_port" --db-schema "${schema}_gateway" --redis-prefix "$schema" \
  --server "everything=$PWD/.tools/bin/mcp-server-everything stdio" >"$logs/gateway.log" 2>&1 &
gateway=$!
pids+=("$gateway")
for _ in $(seq 300); do
  grep -qs '"catalog published"' "$logs/gateway.log" && grep -qs 'embedded=true\|"embedded":true' "$logs/gateway.log" && break
  kill -0 "$gateway" 2>/dev/null || { echo "the gateway exited (log: $logs/gateway.log)" >&2; exit 1; }
  sleep 0.2
done
rss() { awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$gateway/status"; }

# The past calls: PAIRS at once, then RATE a second, as INSERTs on one psql session.
python3 - "$schema" "$pairs" "$rate" "$seconds" <<'EOF' | psql -q -v ON_ERROR_STOP=1 "$DATABASE_URL" >"$logs/psql.log" 2>&1 &
import math, random, struct, sys, time
schema, pairs, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
tools = ["echo", "get-annotated-message", "get-env", "get-resource-links", "get-resource-reference",
         "get-structured-content", "get-sum", "get-tiny-image", "gzip-file-as-resource",
         "toggle-simulated-logging", "toggle-subscriber-updates", "trigger-long-running-operation",
         "simulate-research-query"]
words = ("weather flight paris recipe stock price news today tomorrow find book cheap hotel translate "
         "german email calendar meeting invoice report summary search music podcast").split()
random.seed(7)
def unit(v):
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v]
directions = [unit([random.gauss(0, 1) for _ in range(384)]) for _ in tools]
made = 0
def rows(count):
    global made
    out = []
    for _ in range(count):
        made += 1
        t = random.randrange(len(tools))
        vector = unit([d + random.gauss(0, 0.05) for d in directions[t]])
        text = " ".join(random.choice(words) + str(random.randrange(16)) for _ in range(12)) + f" {made}"
        hexed = struct.pack("<384f", *vector).hex()
        out.append(f"('bench', 's{made % 64}', 'everything__{tools[t]}', 'everything', '{tools[t]}', "
                   f"'{text}', NULL, '\\x{hexed}'::bytea, true, false, 1, now())")
    return out
def insert(count):
    for start in range(0, count, 1000):
        chunk = rows(min(1000, count - start))
        print(f"INSERT INTO {schema}_gateway.tool_calls (tenant, session_id, tool, server, upstream_tool, "
              f"context_query, context_intent, context_embedding, in_filtered_list, is_error, duration_ms, "
              f"created_at) VALUES " + ",\n".join(chunk) + ";", flush=True)
insert(pairs)
started = time.monotonic()
while time.monotonic() - started < seconds:
    tick = time.monotonic()
    insert(int(rate))
    time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
EOF
writer=$!
pids+=("$writer")

# Start-up: the initial pairs loaded and learned (one refresh after they are in).
sleep "$(python3 -c "import re; s='$refresh'; n=float(re.sub('[a-z]+', '', s)); print(n * (60 if s.endswith('m') else 1) + 3)")"
start_rss="$(rss)"
peak="$start_rss"
echo "t=0 s  rss $start_rss MiB (after start-up, $pairs pairs)"
for ((t = 5; t <= seconds; t += 5)); do
  for _ in 1 2 3 4 5; do
    sleep 1
    now="$(rss)"
    peak="$(python3 -c "print(max($peak, $now))")"
  done
  echo "t=$t s  rss $now MiB"
done
wait "$writer" || true
sleep "$(python3 -c "import re; s='$refresh'; n=float(re.sub('[a-z]+', '', s)); print(n * (60 if s.endswith('m') else 1) * 2 + 3)")"
end_rss="$(rss)"
peak="$(python3 -c "print(max($peak, $end_rss))")"
added="$(psql "$DATABASE_URL" -tAc "SELECT count(*) FROM ${schema}_gateway.tool_calls")"
python3 - "$start_rss" "$peak" "$end_rss" "$pairs" "$added" <<'EOF'
import sys
start, peak, end, initial, total = map(float, sys.argv[1:])
grown = total - initial
print(f"rss after start-up {start:.1f} MiB, peak {peak:.1f} MiB, end {end:.1f} MiB "
      f"({(end - start) / start * 100:+.1f} %); {grown:.0f} pairs added ({total:.0f} in the table): "
      f"{(end - start) * 1024 * 1024 / max(grown, 1):.0f} bytes a pair")
EOF
grep -c '"catalog published"\|catalog published' "$logs/gateway.log" | sed 's/^/catalog publications logged at info: /'
