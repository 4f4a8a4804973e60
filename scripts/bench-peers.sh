#!/usr/bin/env bash
# Measures Switchyard's edge beside two peer gateways, each in front of the same scripted vendor
# (switchyard-scripted-llm, answering at once), with the same open-loop generator
# (switchyard-loadgen http-chat: HTTP/1.1 keep-alive connections, TCP_NODELAY), rounds
# interleaved, at a fixed rate:
#   vendor direct        the vendor's /v1/chat/completions called by the same generator (the
#                        baseline the overheads are taken against), and llm-direct (the router's
#                        own provider client straight to the vendor, bench-edge.sh's baseline);
#   Switchyard           the edge's /v1/chat/completions (edge -> router -> sessions -> triggers,
#                        stack as scripts/bench-edge.sh starts it, 64 continuing sessions);
#   LiteLLM              the LiteLLM proxy (tools/peers/requirements.txt, no database, one model
#                        pointed at the vendor's /v1; one worker below 500 req/s, one per core
#                        from 500 on; BENCH_LITELLM_WORKERS overrides);
#   Portkey              the Portkey gateway (tools/peers/portkey), the vendor as a custom
#                        OpenAI host named in the x-portkey-provider / x-portkey-custom-host headers;
# each JSON and streamed to its first token. CPU per request: each process's user + system time
# (/proc/PID/stat) over the run, warm-up included, divided by every call made, summed over a
# gateway's processes (the edge, router, sessions and triggers; LiteLLM's master and workers;
# Portkey's node).
# The peers are installed on first use into the git-ignored .tools/peers/ (a venv from PyPI and
# an npm prefix, both from lock files under tools/peers/, with a stamp so a second run installs
# nothing); scripts/test never installs them.
# BENCH_SUITE=serve runs Switchyard as `switchyard serve` (every service in one process, the same
# stores as above; scripts/lib/bench.sh bench_start_serve), its CPU that one process's.
# Usage: scripts/bench-peers.sh [RATE] [DURATION]   (defaults: 50 5s; BENCH_ROUNDS=3 rounds;
#        BENCH_SUITE=processes)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib/bench.sh
source scripts/lib/bench.sh
rate="${1:-50}"
duration="${2:-5s}"
rounds="${BENCH_ROUNDS:-3}"
llm_port="${BENCH_LLM_PORT:-50370}"
triggers_port="${BENCH_TRIGGERS_PORT:-50371}"
sessions_port="${BENCH_SESSIONS_PORT:-50372}"
router_port="${BENCH_ROUTER_PORT:-50373}"
edge_port="${BENCH_EDGE_PORT:-50374}"
gateway_port="${BENCH_GATEWAY_PORT:-50377}"
gateway_mcp_port="${BENCH_MCP_PORT:-50378}"
suite="${BENCH_SUITE:-processes}"
case "$suite" in
  processes | serve) ;;
  *) echo "unknown BENCH_SUITE '$suite' (processes, serve)" >&2; exit 2 ;;
esac
litellm_port="${BENCH_LITELLM_PORT:-50375}"
portkey_port="${BENCH_PORTKEY_PORT:-50376}"
schema="bench_peers_$$"
if [[ -n "${BENCH_LITELLM_WORKERS:-}" ]]; then
  litellm_workers="$BENCH_LITELLM_WORKERS"
elif awk -v r="$rate" 'BEGIN { exit !(r >= 500) }'; then
  litellm_workers="$(nproc)"
else
  litellm_workers=1
fi

PEERS=.tools/peers
LITELLM_VERSION=1.83.14
PORTKEY_VERSION=1.15.2

die() {
  echo "bench-peers: error: $*" >&2
  exit 1
}

# Runs a command with its output in LOG; shows the output only if it fails.
quietly() {
  local log="$1"
  shift
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    die "command failed: $*"
  fi
}

# Both peers, each only when its lock files changed since its stamp (or it is missing).
install_peers() {
  command -v python3 >/dev/null 2>&1 || die "python3 is not installed (needed for the LiteLLM proxy)"
  command -v npm >/dev/null 2>&1 || die "node and npm are not installed (needed for the Portkey gateway)"
  mkdir -p "$PEERS"
  exec 8>"$PEERS/.install.lock"
  flock 8
  local log want
  log="$(mktemp)"
  scratch+=("$log")

  # LiteLLM: wheels only, every file checked against its hash in the lock. --no-deps: the lock
  # holds every dependency, and pip 23's hash mode refuses an extra (`pydantic[email]`) asked
  # for by one package against the pin another shape of it got; pip check then checks the set.
  local venv="$PEERS/litellm"
  want="$(sha256sum tools/peers/requirements.txt | cut -d' ' -f1)"
  if [[ "$(cat "$venv/.installed" 2>/dev/null)" != "$want" || ! -x "$venv/bin/litellm" ]]; then
    echo "bench-peers: installing litellm[proxy]==$LITELLM_VERSION into $venv" >&2
    rm -rf "$venv"
    quietly "$log" python3 -m venv "$venv"
    quietly "$log" "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --require-hashes \
      --no-deps --only-binary=:all: -r tools/peers/requirements.txt
    quietly "$log" "$venv/bin/python" -m pip check --disable-pip-version-check
    echo "$want" >"$venv/.installed"
  fi
  local installed
  installed="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("litellm"))')"
  # 1.107.0 was a compromised release: never run it, whatever the lock says.
  [[ "$installed" != "1.107.0" ]] || die "$venv holds litellm 1.107.0, a compromised release: remove $venv"
  [[ "$installed" == "$LITELLM_VERSION" ]] || die "$venv holds litellm $installed, not $LITELLM_VERSION"

  # Portkey: npm ci of the lock, no install scripts.
  local prefix="$PEERS/portkey"
  want="$(cat tools/peers/portkey/package.json tools/peers/portkey/package-lock.json | sha256sum | cut -d' ' -f1)"
  if [[ "$(cat "$prefix/.installed" 2>/dev/null)" != "$want" || ! -f "$prefix/node_modules/@portkey-ai/gateway/build/start-server.js" ]]; then
    echo "bench-peers: installing @portkey-ai/gateway@$PORTKEY_VERSION into $prefix" >&2
    rm -rf "$prefix"
    mkdir -p "$prefix"
    cp tools/peers/portkey/package.json tools/peers/portkey/package-lock.json "$prefix/"
    quietly "$log" npm ci --prefix "$prefix" --no-audit --no-fund --ignore-scripts --loglevel=error
    echo "$want" >"$prefix/.installed"
  fi
  installed="$(node -p 'require(process.argv[1]).version' "$PWD/$prefix/node_modules/@portkey-ai/gateway/package.json")"
  [[ "$installed" == "$PORTKEY_VERSION" ]] || die "$prefix holds @portkey-ai/gateway $installed, not $PORTKEY_VERSION"
  exec 8>&-
}

install_peers
if [[ "$suite" == serve ]]; then bench_build -p switchyard-cli; else bench_build; fi
work="$(mktemp -d)"
scratch+=("$work")
trap bench_cleanup EXIT
if [[ "$suite" == serve ]]; then
  bench_start_vendor
  bench_start_serve
  pids+=("$suite_pid")
  bench_wait_semantic "$triggers_port" "$router_port"
  switchyard_cpu=(--cpu-of "switchyard=$suite_pid")
else
  bench_start_stack
  switchyard_cpu=(--cpu-of "edge=$edge" --cpu-of "router=$router" --cpu-of "sessions=$sessions"
    --cpu-of "triggers=$triggers")
fi

# LiteLLM: one model, the vendor as an OpenAI-compatible endpoint; no database (DATABASE_URL
# unset, no master key), no telemetry, the cost map it ships instead of fetching one.
cat >"$work/litellm.yaml" <<EOF
model_list:
  - model_name: bench
    litellm_params:
      model: openai/bench
      api_base: http://127.0.0.1:$llm_port/v1
      api_key: sk-bench
EOF
env -u DATABASE_URL -u REDIS_URL LITELLM_LOCAL_MODEL_COST_MAP=True \
  "$PEERS/litellm/bin/litellm" --config "$work/litellm.yaml" --host 127.0.0.1 --port "$litellm_port" \
  --num_workers "$litellm_workers" --telemetry False >"$work/litellm.log" 2>&1 &
litellm=$!
pids+=("$litellm")
# Portkey: headless (no console), the vendor named per request in its headers.
node "$PEERS/portkey/node_modules/@portkey-ai/gateway/build/start-server.js" --port="$portkey_port" --headless \
  >"$work/portkey.log" 2>&1 &
portkey=$!
pids+=("$portkey")

edge_url="http://127.0.0.1:$edge_port"
litellm_url="http://127.0.0.1:$litellm_port"
portkey_url="http://127.0.0.1:$portkey_port"
portkey_headers=(--header "x-portkey-provider: openai" --header "x-portkey-custom-host: http://127.0.0.1:$llm_port/v1"
  --header "authorization: Bearer sk-bench")
bench_wait_chat "the edge" "$edge_url" 30
for api in "" "--stream"; do
  # shellcheck disable=SC2086 # empty or one flag
  bench_wait_chat "LiteLLM" "$litellm_url" 120 --model bench $api ||
    { tail -n 40 "$work/litellm.log" >&2; exit 1; }
  # shellcheck disable=SC2086
  bench_wait_chat "Portkey" "$portkey_url" 60 "${portkey_headers[@]}" --model bench $api ||
    { tail -n 40 "$work/portkey.log" >&2; exit 1; }
done

# Every process of each gateway, now that its workers have started (also stopped at the end).
cpu=("${switchyard_cpu[@]}" --cpu-of "vendor=$llm")
n=0
for pid in $(bench_tree "$litellm"); do
  cpu+=(--cpu-of "litellm.$n=$pid")
  pids+=("$pid")
  n=$((n + 1))
done
litellm_processes=$n
n=0
for pid in $(bench_tree "$portkey"); do
  cpu+=(--cpu-of "portkey.$n=$pid")
  pids+=("$pid")
  n=$((n + 1))
done

vendor=(http-chat --target "http://127.0.0.1:$llm_port" --model bench --connections 64)
direct=(llm-direct --base-url "http://127.0.0.1:$llm_port/v1")
edge_chat=(http-chat --target "$edge_url" --sessions 64 --connections 64)
litellm_chat=(http-chat --target "$litellm_url" --model bench --connections 64)
portkey_chat=(http-chat --target "$portkey_url" --model bench --connections 64)
# name|arguments (one case per line); the header values hold spaces, so Portkey's cases are
# given their headers when run.
cases=(
  "vendor direct JSON|${vendor[*]}"
  "vendor direct first token|${vendor[*]} --stream --first-token"
  "llm-direct JSON|${direct[*]}"
  "llm-direct first token|${direct[*]} --first-token"
  "Switchyard JSON|${edge_chat[*]}"
  "Switchyard first token|${edge_chat[*]} --stream --first-token"
  "LiteLLM JSON|${litellm_chat[*]}"
  "LiteLLM first token|${litellm_chat[*]} --stream --first-token"
  "Portkey JSON|${portkey_chat[*]}"
  "Portkey first token|${portkey_chat[*]} --stream --first-token"
)
results="$work/results"
count=${#cases[@]}
for round in $(seq "$rounds"); do
  # Each round starts one case further on, so that no case always runs first or after the same one.
  for step in $(seq 0 $((count - 1))); do
    entry="${cases[$(((step + round - 1) % count))]}"
    name="${entry%%|*}"
    read -r -a args <<<"${entry#*|}"
    extra=()
    [[ "$name" == Portkey* ]] && extra=("${portkey_headers[@]}")
    # A case that fails as a whole (no call succeeded: a gateway that cannot keep up) is kept as
    # its error, and the run goes on.
    if ! report=$("$bin/switchyard-loadgen" "${args[@]}" "${extra[@]}" "${cpu[@]}" --rate "$rate" --concurrency 64 \
      --duration "$duration" --json 2>"$work/error"); then
      report=$(python3 -c 'import json, sys; print(json.dumps({"failed": sys.argv[1]}))' "$(tail -n 3 "$work/error")")
    fi
    printf '%s\t%s\t%s\n' "$round" "$name" "$report" >>"$results"
  done
done

echo "scripts/bench-peers.sh $rate $duration  (BENCH_SUITE=$suite; $rounds rounds interleaved; LiteLLM $LITELLM_VERSION with" \
  "$litellm_workers worker(s), $litellm_processes processes; Portkey $PORTKEY_VERSION; $(bench_cpu_line))"
python3 - "$results" <<'PY'
import json, statistics, sys

runs, failed = {}, {}
for line in open(sys.argv[1]):
    round_, name, report = line.rstrip("\n").split("\t", 2)
    report = json.loads(report)
    if "failed" in report:
        failed.setdefault(name, []).append(f"round {round_}: {report['failed']}")
    else:
        runs.setdefault(name, []).append(report)

GATEWAYS = {
    "Switchyard": lambda p: p in ("edge", "router", "sessions", "triggers", "switchyard"),
    "LiteLLM": lambda p: p.startswith("litellm."),
    "Portkey": lambda p: p.startswith("portkey."),
}

def med(name, key):
    if name not in runs:
        return float("nan")
    return statistics.median(r["latency_ms"][key] for r in runs[name])

def cpu(name, gateway):
    if name not in runs:
        return float("nan")
    return statistics.median(sum(v for p, v in r["cpu_ms_per_call"].items() if GATEWAYS[gateway](p))
                             for r in runs[name])

def vendor_cpu(name):
    return statistics.median(r["cpu_ms_per_call"].get("vendor", 0.0) for r in runs[name])

def errors(name):
    return sum(r["errors_total"] + (r["unsent"] or 0) for r in runs.get(name, []))

def rate(name):
    return statistics.median(r["achieved_rate"] or 0.0 for r in runs[name])

print("\nEvery case: medians over the rounds (each round's p50 in brackets); CPU in ms per request,"
      " summed over each gateway's processes.")
print("| case | p50 ms (rounds) | p99 ms | errors + unsent | sent req/s | CPU Switchyard / LiteLLM / Portkey | vendor |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for name in runs:
    shown = ", ".join(f"{r['latency_ms']['p50']:.3f}" for r in runs[name])
    parts = " / ".join(f"{cpu(name, g):.2f}" for g in GATEWAYS)
    print(f"| {name} | {med(name, 'p50'):.3f} ({shown}) | {med(name, 'p99'):.3f} | {errors(name)} | {rate(name):.0f} | "
          f"{parts} | {vendor_cpu(name):.2f} |")

print("\nOverheads against the vendor called directly by the same generator (vendor direct JSON /"
      " first token), medians over the rounds:\n")
print("| gateway | overhead p50 / p99 (JSON) | first token, streamed: p50 / p99 over direct | CPU per request"
      " JSON / streamed | errors + unsent |")
print("| --- | --- | --- | --- | --- |")
for gateway in GATEWAYS:
    json_case, stream_case = f"{gateway} JSON", f"{gateway} first token"
    base_json, base_stream = "vendor direct JSON", "vendor direct first token"
    print(f"| {gateway} | {med(json_case, 'p50') - med(base_json, 'p50'):+.1f} / "
          f"{med(json_case, 'p99') - med(base_json, 'p99'):+.1f} ms | "
          f"{med(stream_case, 'p50') - med(base_stream, 'p50'):+.1f} / "
          f"{med(stream_case, 'p99') - med(base_stream, 'p99'):+.1f} ms | "
          f"{cpu(json_case, gateway):.2f} / {cpu(stream_case, gateway):.2f} ms | "
          f"{errors(json_case)} / {errors(stream_case)} |")
for name, messages in failed.items():
    print(f"\n**{name}: {len(messages)} round(s) failed as a whole** (no medians from them):")
    for message in messages:
        print(f"- {message}")
PY
