#!/usr/bin/env bash
# Makes sure PostgreSQL (DATABASE_URL) and Redis (REDIS_URL) answer for the tests: a no-op when
# both do; otherwise starts them if installed, or installs them with apt-get (PostgreSQL set up
# with trust auth, roles postgres/root, database test), then waits for both (~30 s at most).
set -euo pipefail

DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
TIMEOUT="${ENSURE_SERVICES_TIMEOUT:-30}"
PATH="$PATH:/usr/sbin:/sbin" # runuser, and the daemons on a minimal PATH
HBA_MARKER="# switchyard: trust local connections (added by scripts/ensure-services.sh)"

die() {
  echo "ensure-services: error: $*" >&2
  exit 1
}
note() { echo "ensure-services: $*" >&2; }

# ---- helpers -------------------------------------------------------------------------------
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

# ---- PostgreSQL ----------------------------------------------------------------------------
parse_url "$DATABASE_URL" 5432
PG_HOST=$URL_HOST PG_PORT=$URL_PORT PG_USER=$URL_USER PG_DB=$URL_PATH

pg_server_up() {
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
pg_cluster_version() {
  # The cluster the machine's start command names: `ls /etc/postgresql` (newest if several).
  local versions
  # shellcheck disable=SC2012 # version directories: plain names
  versions=$(ls /etc/postgresql 2>/dev/null | sort -V) || true
  [[ -n "$versions" ]] || return 1
  versions=$(tail -n1 <<<"$versions")
  [[ -d "/etc/postgresql/$versions/main" ]] || return 1
  echo "$versions"
}
pg_installed() {
  command -v pg_ctlcluster >/dev/null 2>&1 && pg_cluster_version >/dev/null
}
pg_start() {
  local ver
  ver=$(pg_cluster_version) || die "no PostgreSQL cluster under /etc/postgresql"
  note "starting PostgreSQL $ver/main"
  # /run may be fresh (a new container): recreate the socket directory the cluster expects.
  as_root install -d -o postgres -g postgres -m 2775 /var/run/postgresql
  # Fails harmlessly if the cluster is already starting; the wait below is the real check.
  as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start >"$PG_START_LOG" 2>&1 || true
}
# Trust auth for local sockets and loopback, ahead of the cluster's own rules (first match
# wins). Reloads a running server. Safe to run again.
pg_configure_hba() {
  local ver hba tmp
  ver=$(pg_cluster_version) || die "no PostgreSQL cluster under /etc/postgresql to configure"
  hba="/etc/postgresql/$ver/main/pg_hba.conf"
  as_root test -f "$hba" || die "missing $hba"
  if ! as_root grep -qF "$HBA_MARKER" "$hba"; then
    note "configuring trust auth for local connections in $hba"
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
    if pg_server_up; then
      as_postgres psql -X -q -p "$PG_PORT" -d postgres -c 'select pg_reload_conf()' >/dev/null ||
        die "could not reload PostgreSQL's configuration"
    fi
  fi
}
# Trust auth, roles postgres/root (+ the URL's user) and databases test (+ the URL's
# database) on a running local server. Safe to run again.
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
  as_postgres psql -X -q -v ON_ERROR_STOP=1 -p "$PG_PORT" -d postgres <<<"$sql" >/dev/null ||
    die "could not create the PostgreSQL roles and databases"
}

# ---- Redis ---------------------------------------------------------------------------------
parse_url "$REDIS_URL" 6379
REDIS_HOST=$URL_HOST REDIS_PORT=$URL_PORT

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
redis_installed() { command -v redis-server >/dev/null 2>&1; }
redis_start() {
  note "starting Redis on port $REDIS_PORT"
  as_root mkdir -p /var/lib/redis /var/log/redis
  as_root redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log >"$REDIS_START_LOG" 2>&1 || true
}

# ---- main ----------------------------------------------------------------------------------
pg_ok=0 redis_ok=0
pg_server_up && pg_connects && pg_ok=1
redis_up && redis_ok=1
((pg_ok && redis_ok)) && exit 0

PG_START_LOG=$(mktemp) REDIS_START_LOG=$(mktemp) APT_LOG=$(mktemp)
trap 'rm -f "$PG_START_LOG" "$REDIS_START_LOG" "$APT_LOG"' EXIT

# Install whatever is missing, in one apt-get run.
missing=()
if ((!pg_ok)) && ! pg_server_up; then
  is_local "$PG_HOST" || die "PostgreSQL does not answer at $PG_HOST:$PG_PORT (DATABASE_URL); it is not local, so not starting it"
  pg_installed || missing+=(postgresql)
fi
if ((!redis_ok)); then
  is_local "$REDIS_HOST" || die "Redis does not answer at $REDIS_HOST:$REDIS_PORT (REDIS_URL); it is not local, so not starting it"
  redis_installed || missing+=(redis-server)
fi
if ((${#missing[@]})); then
  command -v apt-get >/dev/null 2>&1 || die "${missing[*]} not installed and apt-get is not available: install them yourself"
  note "installing ${missing[*]} with apt-get"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 update -q >"$APT_LOG" 2>&1 ||
    { cat "$APT_LOG" >&2; die "apt-get update failed"; }
  # The packages' own attempts to start the services may fail without an init system; fine.
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q "${missing[@]}" \
    >>"$APT_LOG" 2>&1 || { cat "$APT_LOG" >&2; die "apt-get install ${missing[*]} failed"; }
  if [[ " ${missing[*]} " == *" postgresql "* ]]; then
    if ! pg_cluster_version >/dev/null; then
      # Installed without a cluster (create_main_cluster off): create the default one.
      # shellcheck disable=SC2012 # version directories: plain names
      ver=$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -n1) || true
      [[ -n "$ver" ]] || die "PostgreSQL installed but no server version under /usr/lib/postgresql"
      as_root pg_createcluster "$ver" main >>"$APT_LOG" 2>&1 || { cat "$APT_LOG" >&2; die "pg_createcluster failed"; }
    fi
    pg_installed || die "apt-get installed postgresql but pg_ctlcluster or its cluster is missing"
    # Trust auth before the first start; roles and database follow once it answers.
    pg_configure_hba
  fi
  [[ " ${missing[*]} " != *" redis-server "* ]] || redis_installed ||
    die "apt-get installed redis-server but redis-server is not on PATH"
fi

if ((!pg_ok)); then
  pg_server_up || pg_start
fi
if ((!redis_ok)); then
  redis_up || redis_start
fi

# Wait for both to answer.
deadline=$((SECONDS + TIMEOUT))
if ((!pg_ok)); then
  until pg_server_up; do
    if ((SECONDS >= deadline)); then
      cat "$PG_START_LOG" >&2
      ver=$(pg_cluster_version || echo '?')
      die "PostgreSQL did not answer at $PG_HOST:$PG_PORT within ${TIMEOUT}s (pg_isready); see /var/log/postgresql/postgresql-$ver-main.log"
    fi
    sleep 0.5
  done
  if ! pg_connects; then
    is_local "$PG_HOST" || die "PostgreSQL answers at $PG_HOST:$PG_PORT but DATABASE_URL cannot connect"
    pg_provision
    pg_connects || die "PostgreSQL is up but cannot connect with DATABASE_URL=$DATABASE_URL (check role, database, pg_hba.conf)"
  fi
fi
if ((!redis_ok)); then
  until redis_up; do
    if ((SECONDS >= deadline)); then
      cat "$REDIS_START_LOG" >&2
      die "Redis did not answer PING at $REDIS_HOST:$REDIS_PORT within ${TIMEOUT}s; see /var/log/redis/ci.log"
    fi
    sleep 0.5
  done
fi
