#!/usr/bin/env bash
# Makes sure PostgreSQL (DATABASE_URL), Redis (REDIS_URL) and a three-primary Redis Cluster
# (REDIS_CLUSTER_URL) answer for the tests, and that Prometheus (the server and promtool) is
# installed for the observability tests. Changes nothing when all do. Otherwise, for a local URL, it installs what is missing with apt-get,
# sets PostgreSQL up (trust auth for local connections, roles postgres/root, database test),
# starts what is stopped, and waits for it (~30 s at most). Each change to the machine is
# printed as it is made.
set -euo pipefail

DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
REDIS_CLUSTER_URL="${REDIS_CLUSTER_URL:-redis+cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003}"
# The cluster's nodes keep their nodes.conf (and nothing else: no persistence) here.
REDIS_CLUSTER_DIR="${REDIS_CLUSTER_DIR:-/tmp/switchyard-redis-cluster}"
TIMEOUT="${ENSURE_SERVICES_TIMEOUT:-30}"
PATH="$PATH:/usr/sbin:/sbin" # runuser, and the daemons on a minimal PATH
HBA_MARKER="# switchyard: trust local connections (added by scripts/ensure-services.sh)"
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT

die() {
  echo "ensure-services: error: $*" >&2
  exit 1
}
# Announces a change to the machine before making it.
change() { echo "ensure-services: $*" >&2; }
# Runs a command with its output captured; shows the output only if it fails.
quietly() {
  if ! "$@" >>"$LOG" 2>&1; then
    cat "$LOG" >&2
    die "command failed: $*"
  fi
}

as_root() {
  if [[ "$(id -u)" -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    die "need root (or sudo) to run: $*"
  fi
}
as_postgres() {
  # From / so the postgres user never trips over an unreadable working directory.
  if [[ "$(id -u)" -eq 0 ]]; then
    (cd / && runuser -u postgres -- "$@")
  else
    (cd / && sudo -u postgres -- "$@")
  fi
}

# Splits URL into URL_HOST, URL_PORT (default $2), URL_USER and URL_PATH (no leading slash).
parse_url() {
  local url=$1 rest auth hostport
  rest=${url#*://}
  rest=${rest%%\?*}
  URL_PATH=""
  if [[ "$rest" == */* ]]; then
    URL_PATH=${rest#*/}
    rest=${rest%%/*}
  fi
  hostport=${rest##*@}
  URL_USER=""
  if [[ "$rest" == *@* ]]; then
    auth=${rest%@*}
    URL_USER=${auth%%:*}
  fi
  if [[ "$hostport" =~ ^\[([^]]+)\](:([0-9]+))?$ ]] || [[ "$hostport" =~ ^([^:]*)(:([0-9]+))?$ ]]; then
    URL_HOST=${BASH_REMATCH[1]:-localhost}
    URL_PORT=${BASH_REMATCH[3]:-$2}
  else
    die "cannot parse host and port from '$url'"
  fi
}

is_local() {
  case "$1" in 127.0.0.1 | localhost | ::1 | 0.0.0.0) return 0 ;; *) return 1 ;; esac
}

# True if something accepts TCP connections on host $1 port $2.
tcp_open() {
  # shellcheck disable=SC2016 # $0 and $1 expand in the inner bash
  timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2" 2>/dev/null
}

# Waits until the check command answers; else prints the daemon's log hint and fails.
wait_for() {
  local what="$1" hint="$2" deadline=$((SECONDS + TIMEOUT))
  shift 2
  until "$@"; do
    ((SECONDS < deadline)) || die "$what did not answer within ${TIMEOUT}s; see $hint"
    sleep 0.5
  done
}

APT_UPDATED=""
apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "$* not installed and apt-get is not available: install them yourself"
  change "installing $* with apt-get"
  if [[ -z "$APT_UPDATED" ]]; then
    quietly as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 update -q
    APT_UPDATED=1
  fi
  # The packages' own attempts to start the services may fail without an init system; fine.
  quietly as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q "$@"
}

# ---- PostgreSQL: check, install, configure, start ---------------------------------------------

pg_up() {
  if command -v pg_isready >/dev/null 2>&1; then
    timeout 5 pg_isready -q -h "$PG_HOST" -p "$PG_PORT" -t 3
  else
    tcp_open "$PG_HOST" "$PG_PORT"
  fi
}
# The server answers AND the URL's role and database work (checked when psql is present).
pg_connects() {
  command -v psql >/dev/null 2>&1 || return 0
  PGCONNECT_TIMEOUT=3 timeout 10 psql "$DATABASE_URL" -X -Atqc 'select 1' >/dev/null 2>&1
}
# The cluster the machine's start command names: the newest under /etc/postgresql.
pg_cluster_version() {
  local version
  # shellcheck disable=SC2012 # version directories: plain names
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n1) || true
  [[ -n "$version" && -d "/etc/postgresql/$version/main" ]] || return 1
  echo "$version"
}
pg_installed() { command -v pg_ctlcluster >/dev/null 2>&1 && pg_cluster_version >/dev/null; }

pg_install() {
  local version
  apt_install postgresql
  if ! pg_cluster_version >/dev/null; then
    # Installed without a cluster (create_main_cluster off): create the default one.
    # shellcheck disable=SC2012 # version directories: plain names
    version=$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -n1) || true
    [[ -n "$version" ]] || die "PostgreSQL installed but no server version under /usr/lib/postgresql"
    change "creating the PostgreSQL cluster $version/main"
    quietly as_root pg_createcluster "$version" main
  fi
  pg_installed || die "apt-get installed postgresql but pg_ctlcluster or its cluster is missing"
}

# Trust auth for local sockets and loopback, ahead of the cluster's own rules (first match
# wins). Reloads a running server. Does nothing the second time.
pg_configure_hba() {
  local version hba tmp
  version=$(pg_cluster_version) || die "no PostgreSQL cluster under /etc/postgresql to configure"
  hba="/etc/postgresql/$version/main/pg_hba.conf"
  as_root test -f "$hba" || die "missing $hba"
  as_root grep -qF "$HBA_MARKER" "$hba" && return
  change "trusting local connections in $hba"
  tmp=$(mktemp)
  {
    echo "$HBA_MARKER"
    printf '%-7s %-15s %-15s %-23s %s\n' local all all "" trust host all all 127.0.0.1/32 trust \
      host all all ::1/128 trust
    echo
    as_root cat "$hba"
  } >"$tmp"
  as_root install -o postgres -g postgres -m 0640 "$tmp" "$hba"
  rm -f "$tmp"
  if pg_up; then
    as_postgres psql -X -q -p "$PG_PORT" -d postgres -c 'select pg_reload_conf()' >/dev/null ||
      die "could not reload PostgreSQL's configuration"
  fi
}

# Roles postgres/root (+ the URL's user) and databases test (+ the URL's database), those
# missing only, on a running local server.
pg_provision() {
  local name sql=""
  pg_configure_hba
  for name in postgres root "$PG_USER"; do
    [[ -n "$name" ]] || continue
    [[ "$name" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "unsupported role name '$name' in DATABASE_URL"
    sql+="SELECT 'CREATE ROLE \"$name\" LOGIN SUPERUSER' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$name') \\gexec"$'\n'
  done
  for name in test "$PG_DB"; do
    [[ -n "$name" ]] || continue
    [[ "$name" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "unsupported database name '$name' in DATABASE_URL"
    sql+="SELECT 'CREATE DATABASE \"$name\"' WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '$name') \\gexec"$'\n'
  done
  change "creating the PostgreSQL roles and databases that are missing (roles postgres, root and the URL's user; databases test and the URL's)"
  as_postgres psql -X -q -v ON_ERROR_STOP=1 -p "$PG_PORT" -d postgres <<<"$sql" >/dev/null ||
    die "could not create the PostgreSQL roles and databases"
}

pg_start() {
  local version
  version=$(pg_cluster_version) || die "no PostgreSQL cluster under /etc/postgresql"
  change "starting PostgreSQL $version/main"
  # /run may be fresh (a new container): recreate the socket directory the cluster expects.
  as_root install -d -o postgres -g postgres -m 2775 /var/run/postgresql
  # Fails harmlessly if the cluster is already starting; the wait is the real check.
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start >>"$LOG" 2>&1 || true
  wait_for "PostgreSQL at $PG_HOST:$PG_PORT" "/var/log/postgresql/postgresql-$version-main.log" pg_up
}

ensure_postgres() {
  parse_url "$DATABASE_URL" 5432
  PG_HOST=$URL_HOST PG_PORT=$URL_PORT PG_USER=$URL_USER PG_DB=$URL_PATH
  pg_up && pg_connects && return
  is_local "$PG_HOST" ||
    die "PostgreSQL does not answer with DATABASE_URL at $PG_HOST:$PG_PORT; it is not local, so not setting it up"
  if ! pg_up; then
    if ! pg_installed; then
      pg_install
      # Trust auth before the first start; roles and databases follow once it answers.
      pg_configure_hba
    fi
    pg_start
  fi
  pg_connects && return
  pg_provision
  pg_connects || die "PostgreSQL is up but cannot connect with DATABASE_URL=$DATABASE_URL (check role, database, pg_hba.conf)"
}

# ---- Redis: check, install, start ---------------------------------------------------------------

redis_up() {
  local reply
  if command -v redis-cli >/dev/null 2>&1; then
    reply=$(timeout 5 redis-cli -u "$REDIS_URL" ping 2>/dev/null) || return 1
  else
    # No client: speak the protocol over bash's /dev/tcp.
    # shellcheck disable=SC2016 # $0, $1 and $line expand in the inner bash
    reply=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" && printf "PING\r\n" >&3 && read -r line <&3 && echo "$line"' \
      "$REDIS_HOST" "$REDIS_PORT" 2>/dev/null) || return 1
  fi
  [[ "${reply%$'\r'}" == PONG || "${reply%$'\r'}" == +PONG ]]
}

redis_install() {
  apt_install redis-server
  command -v redis-server >/dev/null 2>&1 || die "apt-get installed redis-server but redis-server is not on PATH"
}

redis_start() {
  change "starting Redis on port $REDIS_PORT (no persistence; data in /var/lib/redis, log /var/log/redis/ci.log)"
  as_root mkdir -p /var/lib/redis /var/log/redis
  as_root redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log >>"$LOG" 2>&1 || true
  wait_for "Redis at $REDIS_HOST:$REDIS_PORT" /var/log/redis/ci.log redis_up
}

ensure_redis() {
  parse_url "$REDIS_URL" 6379
  REDIS_HOST=$URL_HOST REDIS_PORT=$URL_PORT
  redis_up && return
  is_local "$REDIS_HOST" || die "Redis does not answer at $REDIS_HOST:$REDIS_PORT (REDIS_URL); it is not local, so not starting it"
  command -v redis-server >/dev/null 2>&1 || redis_install
  redis_start
}

# ---- Redis Cluster: three primaries on loopback ports, no replicas -----------------------------

# The nodes of REDIS_CLUSTER_URL (redis+cluster://HOST:PORT,HOST:PORT,...) into CLUSTER_NODES.
parse_cluster_url() {
  local rest=${REDIS_CLUSTER_URL#redis+cluster://} node
  [[ "$REDIS_CLUSTER_URL" == redis+cluster://* && -n "$rest" ]] ||
    die "REDIS_CLUSTER_URL must be redis+cluster://HOST:PORT[,HOST:PORT...], got '$REDIS_CLUSTER_URL'"
  IFS=, read -r -a CLUSTER_NODES <<<"$rest"
  for node in "${CLUSTER_NODES[@]}"; do
    [[ "$node" =~ ^([^:]+):([0-9]+)$ ]] || die "REDIS_CLUSTER_URL: '$node' is not HOST:PORT"
  done
}

node_ping() { [[ "$(timeout 5 redis-cli -h "${1%:*}" -p "${1##*:}" ping 2>/dev/null)" == PONG ]]; }
# Every slot served and every node known to the first.
cluster_healthy() {
  local info node
  for node in "${CLUSTER_NODES[@]}"; do node_ping "$node" || return 1; done
  info=$(timeout 5 redis-cli -h "${CLUSTER_NODES[0]%:*}" -p "${CLUSTER_NODES[0]##*:}" cluster info 2>/dev/null) || return 1
  [[ "$info" == *cluster_state:ok* && "$info" == *"cluster_slots_assigned:16384"* &&
    "$info" == *"cluster_known_nodes:${#CLUSTER_NODES[@]}"* ]]
}

cluster_node_start() {
  local host=${1%:*} port=${1##*:} dir="$REDIS_CLUSTER_DIR/${1##*:}"
  change "starting Redis Cluster node on $host:$port (no persistence; nodes.conf and log in $dir)"
  mkdir -p "$dir"
  redis-server --daemonize yes --bind "$host" --port "$port" --cluster-enabled yes \
    --cluster-config-file nodes.conf --cluster-node-timeout 5000 --save "" --appendonly no \
    --dir "$dir" --logfile "$dir/redis.log" >>"$LOG" 2>&1 || true
  wait_for "Redis Cluster node at $host:$port" "$dir/redis.log" node_ping "$1"
}

ensure_redis_cluster() {
  local node info
  parse_cluster_url
  cluster_healthy && return
  for node in "${CLUSTER_NODES[@]}"; do
    is_local "${node%:*}" || die "the Redis Cluster node $node (REDIS_CLUSTER_URL) does not answer and is not local"
  done
  command -v redis-server >/dev/null 2>&1 || redis_install
  local rejoining=""
  for node in "${CLUSTER_NODES[@]}"; do
    node_ping "$node" && continue
    [[ -f "$REDIS_CLUSTER_DIR/${node##*:}/nodes.conf" ]] && rejoining=1
    cluster_node_start "$node"
  done
  # Restarted nodes rejoin from their nodes.conf; give them a little more than the node
  # timeout to agree.
  if [[ -n "$rejoining" ]]; then
    TIMEOUT=8
    (wait_for "the Redis Cluster" "$REDIS_CLUSTER_DIR" cluster_healthy) 2>/dev/null && return
  fi
  # Not one cluster (fresh nodes, or ones that met others): start it over, empty.
  change "creating the Redis Cluster on ${CLUSTER_NODES[*]} (its data is flushed)"
  for node in "${CLUSTER_NODES[@]}"; do
    quietly redis-cli -h "${node%:*}" -p "${node##*:}" flushall
    quietly redis-cli -h "${node%:*}" -p "${node##*:}" cluster reset hard
  done
  quietly redis-cli --cluster create "${CLUSTER_NODES[@]}" --cluster-replicas 0 --cluster-yes
  TIMEOUT=30
  wait_for "the Redis Cluster" "$REDIS_CLUSTER_DIR/*/redis.log" cluster_healthy
  info=$(redis-cli -h "${CLUSTER_NODES[0]%:*}" -p "${CLUSTER_NODES[0]##*:}" cluster info | tr -d '\r' | grep cluster_state)
  change "Redis Cluster up: $info"
}

# ---- Prometheus: the binaries the observability tests run (promtool, a real server) ----------

ensure_prometheus() {
  command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 && return
  apt_install prometheus
  command -v promtool >/dev/null 2>&1 || die "apt-get installed prometheus but promtool is not on PATH"
}

main() {
  ensure_postgres
  ensure_redis
  ensure_redis_cluster
  ensure_prometheus
}

main "$@"
