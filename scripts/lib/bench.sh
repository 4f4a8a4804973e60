# Shared by the bench scripts (sourced, not run): the release
# build, Switchyard's stack behind the scripted vendor, and the clean-up of what was started.
# The sourcing script sets, before calling these: llm_port, triggers_port, sessions_port,
# router_port, edge_port, gateway_port, gateway_mcp_port and schema (the router's analytics
# schema in DATABASE_URL, dropped at the end); `bench_start_stack` sets llm, triggers, sessions,
# router and edge to their PIDs.

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/switchyard-target}"
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
bin="$CARGO_TARGET_DIR/release"
# BENCH_WORKER_THREADS=N: each Switchyard process runs N tokio worker threads (tokio's
# TOKIO_WORKER_THREADS; the default is one per core). The vendor and the load generator keep theirs.
svc_vars=(${BENCH_WORKER_THREADS:+TOKIO_WORKER_THREADS=$BENCH_WORKER_THREADS})
svc_env=(env "${svc_vars[@]}")
# Every process started, stopped by bench_cleanup; files and folders it removes.
pids=()
scratch=()

# BENCH_SKIP_BUILD=1: run the release binaries already in CARGO_TARGET_DIR (a rebuild on a
# shared tree may take long; the binaries are then those of the last build, not the tree's).
# Extra arguments name more packages (`-p switchyard-mcp-gateway`).
bench_build() {
  [[ "${BENCH_SKIP_BUILD:-}" == 1 ]] && return 0
  cargo build --quiet --release --locked -p switchyard-triggers -p switchyard-sessions -p switchyard-router \
    -p switchyard-edge -p switchyard-loadgen -p switchyard-testkit "$@" --bins
}

bench_cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  # Until they have exited and freed their ports: a bench run right after this one binds them.
  wait "${pids[@]}" 2>/dev/null || true
  if [[ -n "${schema:-}" ]]; then
    psql "$DATABASE_URL" -qc "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
  fi
  rm -rf "${scratch[@]}"
}

# The scripted OpenAI-compatible vendor that answers at once, on $llm_port; sets llm.
bench_start_vendor() {
  "$bin/switchyard-scripted-llm" "127.0.0.1:$llm_port" >/dev/null 2>&1 &
  llm=$!
  pids+=("$llm")
}

# `switchyard dev` on the sourcing script's ports, calling the vendor: every service in one
# process, every store in memory (the router's analytics too), the edge open with no rate limit.
# CALLS (default in-process) is how the services call each other (`--service-calls`). Sets
# suite_pid; the caller adds it to pids.
bench_start_dev() {
  env -u DATABASE_URL -u REDIS_URL "${svc_vars[@]}" OPENAI_BASE_URL="http://127.0.0.1:$llm_port/v1" "$bin/switchyard" dev     --service-calls "${1:-in-process}" --triggers-port "$triggers_port" --sessions-port "$sessions_port"     --router-port "$router_port" --mcp-gateway-port "$gateway_port" --mcp-port "$gateway_mcp_port"     --edge-port "$edge_port" --edge-rate-limit 0 >/dev/null 2>&1 &
  suite_pid=$!
}

# `switchyard serve`, the production one-process deployment, configured through each service's
# own environment variables to keep what bench_start_stack keeps where it keeps it: triggers,
# sessions and the gateway in memory, the router's analytics in the real Postgres ($schema), the
# edge open with no rate limit (DATABASE_URL reaches it too, for keys, unused by open callers).
# REDIS_URL is unset, as no store here uses Redis. Sets suite_pid; the caller adds it to pids.
bench_start_serve() {
  env -u REDIS_URL "${svc_vars[@]}" OPENAI_BASE_URL="http://127.0.0.1:$llm_port/v1" \
    TRIGGERS_IN_MEMORY=true SESSIONS_IN_MEMORY=true MCP_GATEWAY_IN_MEMORY=true ROUTER_DB_SCHEMA="$schema" \
    EDGE_OPEN=true EDGE_RATE_LIMIT=0 TRIGGERS_LISTEN="127.0.0.1:$triggers_port" \
    SESSIONS_LISTEN="127.0.0.1:$sessions_port" MCP_GATEWAY_LISTEN="127.0.0.1:$gateway_port" \
    MCP_GATEWAY_MCP_LISTEN="127.0.0.1:$gateway_mcp_port" ROUTER_LISTEN="127.0.0.1:$router_port" \
    EDGE_LISTEN="127.0.0.1:$edge_port" "$bin/switchyard" serve >/dev/null 2>&1 &
  suite_pid=$!
}

# The scripted OpenAI-compatible vendor that answers at once, triggers and sessions in memory,
# the router (analytics in the real Postgres, as scripts/bench-router.sh) and the edge (open, no
# rate limit, in-memory stores), each a release binary on loopback.
bench_start_stack() {
  bench_start_vendor
  "${svc_env[@]}" "$bin/switchyard-triggers" --in-memory --listen "127.0.0.1:$triggers_port" >/dev/null 2>&1 &
  triggers=$!
  pids+=("$triggers")
  "${svc_env[@]}" "$bin/switchyard-sessions" --in-memory --listen "127.0.0.1:$sessions_port" \
    --triggers-url "http://127.0.0.1:$triggers_port" >/dev/null 2>&1 &
  sessions=$!
  pids+=("$sessions")
  "${svc_env[@]}" OPENAI_BASE_URL="http://127.0.0.1:$llm_port/v1" "$bin/switchyard-router" --listen "127.0.0.1:$router_port" \
    --sessions-url "http://127.0.0.1:$sessions_port" --db-schema "$schema" >/dev/null 2>&1 &
  router=$!
  pids+=("$router")
  # In-memory stores: no Postgres for keys (open), no Redis for the Responses store.
  env -u DATABASE_URL -u REDIS_URL "${svc_vars[@]}" "$bin/switchyard-edge" --listen "127.0.0.1:$edge_port" --open --rate-limit 0 \
    --router-url "http://127.0.0.1:$router_port" --sessions-url "http://127.0.0.1:$sessions_port" \
    --triggers-url "http://127.0.0.1:$triggers_port" >/dev/null 2>&1 &
  edge=$!
  pids+=("$edge")
  bench_wait_semantic "$triggers_port" "$router_port"
}

# Waits (up to 30 s) until the background models are loaded: the triggers' semantic signal at
# TRIGGERS_PORT (health component `…TriggerService.semantic`) and, given ROUTER_PORT, the router's
# fast router (`…RouterService.fast`). Loading embeds every exemplar (the router's are cached on
# disk after the first start, the triggers' are not): seconds of CPU that would otherwise be
# counted against the first case measured. Without the model (scripts/fetch-models.sh not run) it
# says so and goes on: the figures must then say so.
bench_wait_semantic() {
  local triggers_port="$1" router_port="${2:-}"
  bench_wait_component "$triggers_port" switchyard.triggers.v1.TriggerService.semantic "the triggers' semantic signal"
  if [[ -n "$router_port" ]]; then
    bench_wait_component "$router_port" switchyard.router.v1.RouterService.fast "the router's fast router"
  fi
}

# Waits (up to 30 s) until the gRPC health component SERVICE at PORT is SERVING; WHAT names it
# in the warning given when it is not.
bench_wait_component() {
  local port="$1" service="$2" what="$3" grpcurl="$PWD/.tools/bin/grpcurl" _
  [[ -x "$grpcurl" ]] || scripts/install-tools.sh >/dev/null
  for _ in $(seq 150); do
    if "$grpcurl" -plaintext -d "{\"service\":\"$service\"}" "127.0.0.1:$port" grpc.health.v1.Health/Check \
      2>/dev/null | grep -q '"SERVING"'; then
      return 0
    fi
    sleep 0.2
  done
  echo "warning: $what was not ready after 30 s (models/ missing?); measuring without it" >&2
}

# Waits until one chat completion through ORIGIN (`http://host:port`) answers, for up to
# SECONDS (default 30); extra arguments go to the load generator's http-chat (a path, headers).
# WHAT names the server in the error.
bench_wait_chat() {
  local what="$1" origin="$2" seconds="${3:-30}"
  shift 3 || shift $#
  local _
  for _ in $(seq $((seconds * 5))); do
    if "$bin/switchyard-loadgen" http-chat --target "$origin" "$@" --connections 1 --duration 100ms --warmup 0s \
      >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.2
  done
  echo "$what did not become ready (no chat completion answered at $origin in ${seconds}s)" >&2
  return 1
}

# The PID and every descendant of it, now (a server's worker processes).
bench_tree() {
  ps -e -o pid=,ppid= | awk -v root="$1" '
    { parent[$1] = $2 }
    END {
      print root; found[root] = 1
      do { more = 0; for (p in parent) if (!(p in found) && (parent[p] in found)) { found[p] = 1; print p; more = 1 } } while (more)
    }'
}

# The CPU line of a report: model, cores, the vector extensions a speed claim depends on, load.
bench_cpu_line() {
  local flags
  flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx2|fma|f16c|avx512f|avx512vl|avx512_bf16' | xargs)
  echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, flags $flags, load $(cut -d' ' -f1-3 /proc/loadavg)"
}

# The vendors of the full suite: the scripted vendor on $llm_port (logs in $logs/vendor.log) and,
# with $fallback_port, a second one there answering as the router's fallback model on Anthropic's
# wire. Sets llm and fallback_llm to their PIDs, and `fallback` (the caller's local) to the
# router's variables for it (empty without one).
bench_start_full_vendors() {
  fallback=()
  "$bin/switchyard-scripted-llm" "127.0.0.1:$llm_port" >"$logs/vendor.log" 2>&1 &
  llm=$!
  pids+=("$llm")
  if [[ -n "${fallback_port:-}" ]]; then
    "$bin/switchyard-scripted-llm" "127.0.0.1:$fallback_port" >"$logs/fallback-vendor.log" 2>&1 &
    fallback_llm=$!
    pids+=("$fallback_llm")
    fallback=(ANTHROPIC_BASE_URL="http://127.0.0.1:$fallback_port"
      UNIFIED_CHAT_FALLBACK_MODELS=anthropic/claude-haiku-4-5)
  fi
}

# The whole suite as it runs in production, for scripts/bench-load.sh and bench-soak.sh: every
# service's records in the real Postgres (schemas named after $schema) and its live state in a
# Redis of the benchmark's own (REDIS_URL), the MCP gateway with the reference
# `server-everything` over stdio, the router with the gateway, and the edge (open, no rate
# limit) in front. DATABASE_URL_VIA (default DATABASE_URL) is the services' way to Postgres (the
# soak sends it through its fault proxy). Every service serves Prometheus metrics on its own
# port from $metrics_base (triggers +0, sessions +1, gateway +2, router +3, edge +4). With
# $fallback_port, a second scripted vendor there answers on Anthropic's wire as the router's
# fallback model (anthropic/claude-haiku-4-5). Sets llm, fallback_llm, triggers, sessions,
# gateway, router and edge to their PIDs; logs go to $logs/<service>.log.
bench_start_full_stack() {
  local db="${DATABASE_URL_VIA:-$DATABASE_URL}" fallback
  bench_start_full_vendors
  DATABASE_URL="$db" "$bin/switchyard-triggers" --listen "127.0.0.1:$triggers_port" --db-schema "${schema}_triggers" \
    --metrics-listen "127.0.0.1:$metrics_base" >"$logs/triggers.log" 2>&1 &
  triggers=$!
  pids+=("$triggers")
  DATABASE_URL="$db" "$bin/switchyard-sessions" --listen "127.0.0.1:$sessions_port" --db-schema "${schema}_sessions" \
    --redis-prefix "$schema" --triggers-url "http://127.0.0.1:$triggers_port" \
    --metrics-listen "127.0.0.1:$((metrics_base + 1))" >"$logs/sessions.log" 2>&1 &
  sessions=$!
  pids+=("$sessions")
  DATABASE_URL="$db" "$bin/switchyard-mcp-gateway" --listen "127.0.0.1:$gateway_port" \
    --mcp-listen "127.0.0.1:$gateway_mcp_port" --db-schema "${schema}_gateway" --redis-prefix "$schema" \
    --server "everything=$PWD/.tools/bin/mcp-server-everything stdio" \
    --metrics-listen "127.0.0.1:$((metrics_base + 2))" >"$logs/gateway.log" 2>&1 &
  gateway=$!
  pids+=("$gateway")
  env "${fallback[@]}" DATABASE_URL="$db" OPENAI_BASE_URL="http://127.0.0.1:$llm_port/v1" "$bin/switchyard-router" \
    --listen "127.0.0.1:$router_port" --sessions-url "http://127.0.0.1:$sessions_port" \
    --mcp-gateway-url "http://127.0.0.1:$gateway_port" --db-schema "${schema}_router" --redis-prefix "$schema" \
    --metrics-listen "127.0.0.1:$((metrics_base + 3))" >"$logs/router.log" 2>&1 &
  router=$!
  pids+=("$router")
  env -u DATABASE_URL "$bin/switchyard-edge" --listen "127.0.0.1:$edge_port" --open --rate-limit 0 \
    --redis-prefix "$schema" --router-url "http://127.0.0.1:$router_port" \
    --sessions-url "http://127.0.0.1:$sessions_port" --triggers-url "http://127.0.0.1:$triggers_port" \
    --mcp-gateway-url "http://127.0.0.1:$gateway_port" --metrics-listen "127.0.0.1:$((metrics_base + 4))" >"$logs/edge.log" 2>&1 &
  edge=$!
  pids+=("$edge")
  bench_wait_semantic "$triggers_port" "$router_port"
}

# bench_start_full_stack's suite in one process: `switchyard serve`, configured through each
# service's environment variables with the same stores, schemas, prefixes, MCP server, vendors
# and open edge (DATABASE_URL reaches the edge too, for keys, unused by open callers). One
# Prometheus endpoint at $metrics_base. Sets llm, fallback_llm and serve to their PIDs; logs go
# to $logs/vendor.log, fallback-vendor.log and serve.log.
bench_start_full_serve() {
  local db="${DATABASE_URL_VIA:-$DATABASE_URL}" servers="$logs/servers.toml" fallback
  bench_start_full_vendors
  printf '[servers.everything]\ncommand = "%s"\nargs = ["stdio"]\n' "$PWD/.tools/bin/mcp-server-everything" >"$servers"
  env "${fallback[@]}" DATABASE_URL="$db" OPENAI_BASE_URL="http://127.0.0.1:$llm_port/v1" \
    TRIGGERS_DB_SCHEMA="${schema}_triggers" SESSIONS_DB_SCHEMA="${schema}_sessions" \
    MCP_GATEWAY_DB_SCHEMA="${schema}_gateway" ROUTER_DB_SCHEMA="${schema}_router" \
    SESSIONS_REDIS_PREFIX="$schema" MCP_GATEWAY_REDIS_PREFIX="$schema" ROUTER_REDIS_PREFIX="$schema" \
    EDGE_REDIS_PREFIX="$schema" MCP_GATEWAY_CONFIG="$servers" EDGE_OPEN=true EDGE_RATE_LIMIT=0 \
    TRIGGERS_LISTEN="127.0.0.1:$triggers_port" SESSIONS_LISTEN="127.0.0.1:$sessions_port" \
    MCP_GATEWAY_LISTEN="127.0.0.1:$gateway_port" MCP_GATEWAY_MCP_LISTEN="127.0.0.1:$gateway_mcp_port" \
    ROUTER_LISTEN="127.0.0.1:$router_port" EDGE_LISTEN="127.0.0.1:$edge_port" \
    METRICS_LISTEN="127.0.0.1:$metrics_base" "$bin/switchyard" serve >"$logs/serve.log" 2>&1 &
  serve=$!
  pids+=("$serve")
  bench_wait_semantic "$triggers_port" "$router_port"
}

# Drops the per-service schemas bench_start_full_stack made (named after $schema).
bench_drop_full_stack_schemas() {
  local service
  for service in triggers sessions gateway router; do
    psql "$DATABASE_URL" -qc "DROP SCHEMA IF EXISTS ${schema}_$service CASCADE" >/dev/null 2>&1 || true
  done
}

# Resident memory of a process in KiB (VmRSS), or 0 once it is gone.
bench_rss_kib() {
  awk '/^VmRSS:/ { print $2; found = 1 } END { if (!found) print 0 }' "/proc/$1/status" 2>/dev/null || echo 0
}

# The sum of every sample of the Prometheus counter NAME (any labels) at URL; 0 when absent.
bench_counter() {
  curl -fsS "$1" 2>/dev/null | awk -v name="$2" '$1 == name || index($1, name "{") == 1 { sum += $NF } END { printf "%d\n", sum }'
}
