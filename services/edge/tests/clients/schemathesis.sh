#!/usr/bin/env bash
# Schemathesis against the edge's generated OpenAPI: every operation in /openapi.json is sent
# schema-driven and boundary/negative requests with the given key, and the run fails on any 5xx
# (the not_a_server_error check) or on a request that times out or crashes.
#
#   services/edge/tests/clients/schemathesis.sh HOST:PORT KEY [EXTRA SCHEMATHESIS RUN OPTIONS…]
#
# Uses the pinned .tools/bin/schemathesis (scripts/install-tools.sh). The run is repeatable:
# deterministic generation, no example database and no cache between runs, one worker. Per-
# operation limits (fewer cases and a longer timeout for the operations that run the
# model) are in schemathesis.toml beside this script; schemathesis_hooks.py renames dotted path
# parameters ({role.id}), which schemathesis 4.32 cannot substitute. The run changes the server's
# state (it deletes roles and sessions it finds, as an admin in open mode): give it a server of
# its own, or run it after the other checks.
#
# With $SCHEMATHESIS_REPORT_DIR set, writes there junit.xml, events.ndjson (every request and
# response) and schemathesis.log (the full output). Prints the run's summary; on failure, the
# full output (with a curl command reproducing each failure) on stderr. Exits non-zero on
# failure.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 HOST:PORT KEY [SCHEMATHESIS RUN OPTIONS…]" >&2
  exit 2
fi
TARGET="$1"
KEY="$2"
shift 2
[[ "$TARGET" == http://* || "$TARGET" == https://* ]] || TARGET="http://$TARGET"
TARGET="${TARGET%/}"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../../.." && pwd)"
ST="$ROOT/.tools/bin/schemathesis"
[[ -x "$ST" ]] || {
  echo "schemathesis.sh: $ST is missing: run scripts/install-tools.sh" >&2
  exit 1
}

# Schemathesis and Hypothesis leave .hypothesis/ and .schemathesis/ in the working directory:
# run in a scratch one.
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
REPORT="${SCHEMATHESIS_REPORT_DIR:-$WORK/report}"
mkdir -p "$REPORT"
REPORT="$(cd "$REPORT" && pwd)"
LOG="$REPORT/schemathesis.log"

# shellcheck disable=SC2054 # the commas are inside option values
run=(
  "$ST" --config-file "$HERE/schemathesis.toml" run "$TARGET/openapi.json"
  --header "Authorization: Bearer $KEY"
  --generation-with-security-parameters false
  --checks not_a_server_error
  --phases examples,coverage,fuzzing
  --generation-deterministic
  --workers 1
  --rate-limit auto
  --wait-for-schema 30
  --report junit,ndjson
  --report-junit-path "$REPORT/junit.xml"
  --report-ndjson-path "$REPORT/events.ndjson"
  --no-color
  "$@"
)

started=$SECONDS
status=0
(cd "$WORK" && SCHEMATHESIS_HOOKS="$HERE/schemathesis_hooks.py" "${run[@]}") >"$LOG" 2>&1 || status=$?
elapsed=$((SECONDS - started))

# "Test cases:" is followed by "  N generated, N passed[, N failed…]".
cases="$(sed -n '/^Test cases:/{n;s/^ *//;p;q}' "$LOG")"
operations="$(grep -o 'tests="[0-9]*"' "$REPORT/junit.xml" 2>/dev/null | head -1 | tr -dc 0-9 || true)"
if [[ $status -eq 0 ]]; then
  sed -n '/^=* SUMMARY =*$/,$p' "$LOG"
  echo "schemathesis.sh: ok: no 5xx in ${operations:-?} operations, ${cases:-? cases} in ${elapsed}s against $TARGET"
else
  cat "$LOG" >&2
  echo "schemathesis.sh: FAILED (exit $status) after ${elapsed}s against $TARGET: ${cases:-no test cases}" >&2
  if [[ -n "${SCHEMATHESIS_REPORT_DIR:-}" ]]; then
    echo "schemathesis.sh: report in $REPORT" >&2
  fi
fi
exit "$status"
