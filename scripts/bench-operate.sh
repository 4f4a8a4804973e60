#!/usr/bin/env bash
# What operating Switchyard costs a turn, with switchyard-loadgen against release binaries at a
# fixed rate (open loop), the same stack as scripts/bench-router.sh (the scripted vendor that
# answers at once, triggers and sessions in memory, the router's analytics and budgets in the
# real Postgres) with the router's spend counters in the real Redis (REDIS_URL) and its
# Prometheus endpoint on --metrics-listen. Two measurements:
#   budget: `chat` (RouterService.Chat on 64 continuing sessions) for tenant `bench-free`, which
#           has no budget, against tenant `bench-budgeted`, which has a day budget and a month
#           budget it never reaches (the check reads both counters, every turn charges both),
#           rounds interleaved. Every turn's cost is computed from the shipped price table in
#           both cases; the difference is the budget check and charge.
#   metrics: GET /metrics on the router every 100 ms while it serves `chat` at the rate, each
#           scrape on a new connection (as Prometheus makes one after an idle timeout); the
#           scrape's whole time (connect to last byte) and its size.
# The router takes ROUTER_BUDGET_SYNC_INTERVAL from the environment: unset (0s), every budgeted
# turn reads and adds to the Redis counters on its path; e.g. 1s, it checks its own view and
# adds in the background.
# Usage: scripts/bench-operate.sh [RATE] [DURATION]   (defaults: 250 10s; BENCH_ROUNDS=3 rounds)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib/bench.sh
source scripts/lib/bench.sh
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
rate="${1:-250}"
duration="${2:-10s}"
rounds="${BENCH_ROUNDS:-3}"
llm_port="${BENCH_LLM_PORT:-50390}"
triggers_port="${BENCH_TRIGGERS_PORT:-50391}"
sessions_port="${BENCH_SESSIONS_PORT:-50392}"
router_port="${BENCH_ROUTER_PORT:-50393}"
metrics_port="${BENCH_METRICS_PORT:-50394}"
schema="bench_operate_$$"
prefix="bench-operate-$$"
grpcurl="$PWD/.tools/bin/grpcurl"
[[ -x "$grpcurl" ]] || scripts/install-tools.sh >/dev/null
[[ -x "$grpcurl" ]] || { echo "grpcurl is missing from .tools/bin (scripts/install-tools.sh)" >&2; exit 1; }

bench_build
results="$(mktemp)"
scrapes="$(mktemp)"
scratch+=("$results" "$scrapes")
cleanup() {
  bench_cleanup
  redis-cli -u "$REDIS_URL" --scan --pattern "$prefix:*" 2>/dev/null | xargs -r redis-cli -u "$REDIS_URL" del >/dev/null 2>&1 || true
}
trap cleanup EXIT

bench_start_vendor
"$bin/switchyard-triggers" --in-memory --listen "127.0.0.1:$triggers_port" >/dev/null 2>&1 &
pids+=($!)
"$bin/switchyard-sessions" --in-memory --listen "127.0.0.1:$sessions_port" \
  --triggers-url "http://127.0.0.1:$triggers_port" >/dev/null 2>&1 &
pids+=($!)
OPENAI_BASE_URL="http://127.0.0.1:$llm_port/v1" "$bin/switchyard-router" --listen "127.0.0.1:$router_port" \
  --sessions-url "http://127.0.0.1:$sessions_port" --db-schema "$schema" --redis-prefix "$prefix" \
  --metrics-listen "127.0.0.1:$metrics_port" >/dev/null 2>&1 &
router=$!
pids+=("$router")

chat=(chat --target "http://127.0.0.1:$router_port" --sessions-url "http://127.0.0.1:$sessions_port")
ready=""
for _ in $(seq 150); do
  if "$bin/switchyard-loadgen" "${chat[@]}" --sessions 1 --duration 100ms --warmup 0s >/dev/null 2>&1; then
    ready=1
    break
  fi
  sleep 0.2
done
[[ -n "$ready" ]] || { echo "the router did not become ready" >&2; exit 1; }

# The operator (an administrator of the default tenant) sets the budgets, far above what the run spends.
for period in BUDGET_PERIOD_DAY BUDGET_PERIOD_MONTH; do
  "$grpcurl" -plaintext -H 'x-switchyard-admin: true' \
    -d "{\"budget\": {\"tenant_id\": \"bench-budgeted\", \"limit_usd\": 1000000, \"soft_usd\": 900000, \"period\": \"$period\"}}" \
    "127.0.0.1:$router_port" switchyard.router.v1.RouterService/SetBudget >/dev/null
done

run() { "$bin/switchyard-loadgen" "${chat[@]}" --sessions 64 "$@" --cpu-of "router=$router" --rate "$rate" --concurrency 64 \
  --duration "$duration" --json; }
for round in $(seq "$rounds"); do
  # Alternate which tenant runs first.
  order=(bench-free bench-budgeted)
  ((round % 2 == 0)) && order=(bench-budgeted bench-free)
  for tenant in "${order[@]}"; do
    printf '%s\t%s\t%s\n' "$round" "$tenant" "$(run --tenant "$tenant")" >>"$results"
  done
done

# Scrapes while the router is busy.
python3 - "http://127.0.0.1:$metrics_port/metrics" "$scrapes" <<'PY' &
import sys, time, urllib.request
url, out = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 3600
with open(out, "w") as f:
    while time.monotonic() < deadline:
        started = time.monotonic()
        body = urllib.request.urlopen(url, timeout=5).read()
        f.write(f"{(time.monotonic() - started) * 1000:.3f}\t{len(body)}\n")
        f.flush()
        time.sleep(0.1)
PY
scraper=$!
pids+=("$scraper")
busy=$(run --tenant bench-budgeted)
kill "$scraper" 2>/dev/null || true

echo "scripts/bench-operate.sh $rate $duration  (ROUTER_BUDGET_SYNC_INTERVAL=${ROUTER_BUDGET_SYNC_INTERVAL:-0s}; $rounds rounds interleaved; $(bench_cpu_line))"
python3 - "$results" "$scrapes" "$busy" <<'PY'
import json, statistics, sys

runs = {}
for line in open(sys.argv[1]):
    _, tenant, report = line.rstrip("\n").split("\t", 2)
    runs.setdefault(tenant, []).append(json.loads(report))

def med(tenant, key):
    return statistics.median(r["latency_ms"][key] for r in runs[tenant])

def cpu(tenant):
    return statistics.median(r["cpu_ms_per_call"].get("router", 0.0) for r in runs[tenant])

def errors(tenant):
    return sum(r["errors_total"] + (r["unsent"] or 0) for r in runs[tenant])

print("\nBudget check and charge: medians over the rounds (p50 / p99 of each round in brackets).\n")
print("| tenant | p50 ms | p99 ms | rounds p50 / p99 | router CPU ms per turn | errors |")
print("| --- | --- | --- | --- | --- | --- |")
for tenant in ("bench-free", "bench-budgeted"):
    per_round = ", ".join(f"{r['latency_ms']['p50']:.3f} / {r['latency_ms']['p99']:.3f}" for r in runs[tenant])
    print(f"| {tenant} | {med(tenant, 'p50'):.3f} | {med(tenant, 'p99'):.3f} | {per_round} | {cpu(tenant):.3f} | "
          f"{errors(tenant)} |")
diff50 = med("bench-budgeted", "p50") - med("bench-free", "p50")
diff99 = med("bench-budgeted", "p99") - med("bench-free", "p99")
print(f"\nbudgeted - free: p50 {diff50:+.3f} ms, p99 {diff99:+.3f} ms, router CPU "
      f"{cpu('bench-budgeted') - cpu('bench-free'):+.3f} ms per turn (aim: p99 <= +0.1 ms)")

times = sorted(float(line.split("\t")[0]) for line in open(sys.argv[2]))
sizes = [int(line.split("\t")[1]) for line in open(sys.argv[2])]
busy = json.loads(sys.argv[3])
if not times:
    sys.exit("no scrape was recorded")
q = lambda p: times[min(len(times) - 1, int(p * len(times)))]
print(f"\nGET /metrics while the router served {busy['throughput_rps']:.0f} turns/s (p99 {busy['latency_ms']['p99']:.3f} ms, "
      f"{busy['errors_total']} errors): {len(times)} scrapes, p50 {q(0.5):.3f} ms, p99 {q(0.99):.3f} ms, "
      f"max {times[-1]:.3f} ms, {statistics.median(sizes) / 1024:.1f} KiB (aim: <= 10 ms)")
PY
