//! Every variable the Kubernetes base gives a service is one that service reads. A misspelt
//! name in a ConfigMap or a Deployment's `env` is otherwise silent: the pod starts on the
//! flag's default (an `MCP_GATEWAY_AUTH` typo would leave `/mcp` open). The names are checked
//! against each binary's own flags (their `env = …` attributes, through clap), so a renamed
//! flag fails here too.

use std::collections::BTreeSet;

use clap::{Args, Command};
use switchyard_edge::EdgeConfig;
use switchyard_kit::TelemetryArgs;
use switchyard_mcp_gateway::GatewayConfig;
use switchyard_router::RouterConfig;
use switchyard_sessions::SessionsConfig;
use switchyard_triggers::TriggersConfig;

/// Variables read by something other than the flags, each with its reader.
const NOT_FLAGS: &[(&str, &str)] = &[
    ("RUST_LOG", "the log filter (tracing-subscriber's EnvFilter)"),
    ("MALLOC_ARENA_MAX", "glibc's allocator"),
    ("OTEL_SERVICE_NAME", "the OpenTelemetry SDK's resource"),
    ("POD_NAMESPACE", "the Deployment itself, in $(POD_NAMESPACE) expansions"),
    ("SEARCH_API_TOKEN", "the gateway's servers file, as ${SEARCH_API_TOKEN}"),
];

/// The variables a service's binary reads: its configuration's flags and the telemetry flags
/// every binary shares.
fn flag_variables<T: Args>() -> BTreeSet<String> {
    TelemetryArgs::augment_args(T::augment_args(Command::new("service")))
        .get_arguments()
        .filter_map(|arg| arg.get_env())
        .map(|env| env.to_string_lossy().into_owned())
        .collect()
}

/// A base file's text, from the repository root.
fn base_file(name: &str) -> String {
    let path = format!("{}/../../deploy/k8s/base/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("reading {path}: {err}"))
}

/// The keys of a ConfigMap's `data` (flat `  KEY: value` lines, as the base writes them).
fn config_map_keys(name: &str) -> Vec<String> {
    let text = base_file(name);
    let data = text.split_once("\ndata:\n").unwrap_or_else(|| panic!("{name} has no data section")).1;
    let keys: Vec<String> = data
        .lines()
        .filter(|line| line.starts_with("  ") && !line.trim_start().starts_with('#'))
        .filter_map(|line| line.trim().split_once(':').map(|(key, _)| key.to_owned()))
        .collect();
    assert!(!keys.is_empty(), "{name}: no keys read");
    keys
}

/// The names of a Deployment's `env` entries (`- name: UPPER_CASE`; containers, volumes and
/// ports are lower case).
fn deployment_env(name: &str) -> Vec<String> {
    base_file(name)
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- name: "))
        .filter(|value| value.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        .map(str::to_owned)
        .collect()
}

fn unknown(names: &[String], known: &BTreeSet<String>) -> Vec<String> {
    names
        .iter()
        .filter(|name| !known.contains(*name) && !NOT_FLAGS.iter().any(|(other, _)| other == name))
        .cloned()
        .collect()
}

#[test]
fn every_variable_the_kubernetes_base_sets_is_read_by_its_service() {
    let services: [(&str, BTreeSet<String>, Option<&str>); 5] = [
        ("triggers", flag_variables::<TriggersConfig>(), None),
        ("sessions", flag_variables::<SessionsConfig>(), None),
        ("mcp-gateway", flag_variables::<GatewayConfig>(), Some("mcp-gateway-configmap.yaml")),
        ("router", flag_variables::<RouterConfig>(), Some("router-configmap.yaml")),
        ("edge", flag_variables::<EdgeConfig>(), Some("edge-configmap.yaml")),
    ];
    let mut problems = Vec::new();
    for (service, known, config_map) in &services {
        for read in ["SHUTDOWN_GRACE", "LOG_FORMAT"] {
            assert!(known.contains(read), "{service}: the flags were not read ({read} missing)");
        }
        if let Some(config_map) = config_map {
            for name in unknown(&config_map_keys(config_map), known) {
                problems.push(format!("{config_map}: {name} is not a variable switchyard-{service} reads"));
            }
        }
        let deployment = format!("{service}-deployment.yaml");
        for name in unknown(&deployment_env(&deployment), known) {
            problems.push(format!("{deployment}: {name} is not a variable switchyard-{service} reads"));
        }
    }
    // The shared ConfigMap reaches every pod: each key must be read by one service at least.
    let everyone: BTreeSet<String> = services.iter().flat_map(|(_, known, _)| known.iter().cloned()).collect();
    for name in unknown(&config_map_keys("configmap.yaml"), &everyone) {
        problems.push(format!("configmap.yaml: {name} is not a variable any service reads"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_gateway_in_the_base_refuses_callers_without_a_key() {
    assert!(
        base_file("mcp-gateway-configmap.yaml").lines().any(|line| line.trim() == "MCP_GATEWAY_AUTH: keys"),
        "/mcp is reachable from the ingress controller's namespace: the base must not leave it open"
    );
}
