//! A real Prometheus (Debian's package, which `scripts/ensure-services.sh` installs) scrapes the
//! `switchyard` binary's `dev` stack on `METRICS_LISTEN`; after a chat turn through the edge
//! (answered by a scripted vendor on the OpenAI wire format), the routing metric comes back
//! from Prometheus's query API. Then the Grafana dashboard in `deploy/observability/` is checked
//! against that Prometheus: every panel's query is valid PromQL there, and every metric it
//! reads is one `docs/operations.md` documents.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use serde_json::{Value, json};
use switchyard_testkit::{
    eventually, free_port,
    llm::{Reply, ScriptedLlm},
    root,
};
use tokio::process::{Child, Command};

/// Debian's Prometheus, or `$PROMETHEUS`.
fn prometheus_binary() -> PathBuf {
    let path = std::env::var_os("PROMETHEUS").map_or_else(|| PathBuf::from("/usr/bin/prometheus"), PathBuf::from);
    assert!(
        path.exists(),
        "{} is missing: run scripts/ensure-services.sh (it installs Debian's prometheus package) or set PROMETHEUS",
        path.display()
    );
    path
}

fn spawn(command: &mut Command, log: &Path) -> Child {
    let out = std::fs::File::create(log).unwrap();
    command
        .stdout(Stdio::from(out.try_clone().unwrap()))
        .stderr(Stdio::from(out))
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|err| panic!("starting {command:?}: {err}"))
}

/// An instant query against Prometheus's HTTP API: its `status` and `data`.
async fn query(http: &reqwest::Client, prometheus: &str, promql: &str) -> Value {
    let response = http.get(query_url(prometheus, promql)).send().await.unwrap();
    response.json().await.unwrap()
}

fn query_url(prometheus: &str, promql: &str) -> reqwest::Url {
    reqwest::Url::parse_with_params(&format!("{prometheus}/api/v1/query"), [("query", promql)]).unwrap()
}

/// The metric names of the table in docs/operations.md (first column, backquoted).
fn documented_metrics() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let mut names = BTreeSet::new();
    for line in text.lines().filter(|line| line.starts_with("| `")) {
        let first = line.trim_start_matches('|').split('|').next().unwrap_or_default();
        names.extend(first.split('`').skip(1).step_by(2).map(str::to_owned));
    }
    names
}

/// The Switchyard metric names a PromQL expression reads (their families: no `_bucket`,
/// `_sum` or `_count`).
fn metrics_read(expr: &str) -> BTreeSet<String> {
    const PREFIXES: [&str; 9] = [
        "rpc_server_",
        "http_server_",
        "router_",
        "gen_ai_",
        "mcp_gateway_",
        "records_",
        "triggers_",
        "edge_",
        "switchyard_",
    ];
    // Label names are not metrics: drop the matchers in braces and the `by (…)` lists.
    let mut names_only = String::new();
    let mut rest = expr;
    while let Some(at) = rest.find(['{', '(']) {
        let (before, from) = rest.split_at(at);
        let grouping =
            from.starts_with('(') && (before.trim_end().ends_with(" by") || before.trim_end().ends_with(" without"));
        names_only.push_str(before);
        if from.starts_with('{') || grouping {
            let close = if from.starts_with('{') { '}' } else { ')' };
            rest = from.find(close).map_or("", |end| &from[end + 1..]);
        } else {
            names_only.push('(');
            rest = &from[1..];
        }
    }
    names_only.push_str(rest);
    names_only
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| PREFIXES.iter().any(|prefix| word.starts_with(prefix)))
        .map(|word| {
            ["_bucket", "_sum", "_count"].iter().find_map(|suffix| word.strip_suffix(suffix)).unwrap_or(word).to_owned()
        })
        .collect()
}

#[test]
fn metrics_read_skips_label_names() {
    let expr = "sum by (gen_ai_provider_name, le) (rate(gen_ai_client_operation_duration_seconds_bucket{error_type!=\"\"}[5m])) / sum(router_turns_total)";
    let read: Vec<String> = metrics_read(expr).into_iter().collect();
    assert_eq!(read, ["gen_ai_client_operation_duration_seconds", "router_turns_total"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_switchyard_dev_and_the_dashboard_queries_are_valid_there() {
    switchyard_kit::tls::install_crypto_provider();
    let prometheus_bin = prometheus_binary();
    let dir = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(|_| Reply::text("Paris is the capital of France.")).await;

    let metrics_port = free_port();
    let edge_port = free_port();
    let mut dev = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    dev.current_dir(root())
        .arg("dev")
        .args(["--triggers-port", &free_port().to_string(), "--sessions-port", &free_port().to_string()])
        .args(["--mcp-gateway-port", &free_port().to_string(), "--mcp-port", &free_port().to_string()])
        .args(["--router-port", &free_port().to_string(), "--edge-port", &edge_port.to_string()])
        .env("OPENAI_BASE_URL", llm.openai_base_url())
        .env("METRICS_LISTEN", format!("127.0.0.1:{metrics_port}"))
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    let dev_log = dir.path().join("dev.log");
    let mut dev = spawn(&mut dev, &dev_log);

    let http = reqwest::Client::new();
    let edge = format!("http://127.0.0.1:{edge_port}");
    let started = tokio::time::Instant::now();
    loop {
        if let Ok(response) = http.get(format!("{edge}/readyz")).send().await
            && response.status().is_success()
        {
            break;
        }
        if let Ok(Some(status)) = dev.try_wait() {
            panic!("switchyard dev exited ({status}):\n{}", std::fs::read_to_string(&dev_log).unwrap_or_default());
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "switchyard dev not ready in 180 s:\n{}",
            std::fs::read_to_string(&dev_log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let chat = http
        .post(format!("{edge}/v1/chat/completions"))
        .json(&json!({"model": "switchyard", "messages": [{"role": "user", "content": "What is the capital of France?"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status().as_u16(), 200, "{:?}", chat.text().await);

    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: switchyard\n    \
             static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
        ),
    )
    .unwrap();
    let prometheus_port = free_port();
    let mut command = Command::new(&prometheus_bin);
    command
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{prometheus_port}"));
    let prometheus_log = dir.path().join("prometheus.log");
    let _prometheus = spawn(&mut command, &prometheus_log);
    let prometheus = format!("http://127.0.0.1:{prometheus_port}");

    // The scrape succeeds and the turn is counted as a direct answer.
    eventually(Duration::from_secs(60), "Prometheus has scraped the routing metric", || async {
        let answer = match http.get(query_url(&prometheus, "sum(router_turns_total{route=\"direct\"})")).send().await {
            Ok(response) => response.json::<Value>().await.unwrap_or(Value::Null),
            Err(_) => return false,
        };
        answer["data"]["result"][0]["value"][1].as_str() == Some("1")
    })
    .await;
    let up = query(&http, &prometheus, "up{job=\"switchyard\"}").await;
    assert_eq!(up["data"]["result"][0]["value"][1], "1", "the target is up: {up}");
    // Metrics from every layer of the stack came through the one scrape.
    let names = http.get(format!("{prometheus}/api/v1/label/__name__/values")).send().await.unwrap();
    let names: Value = names.json().await.unwrap();
    let names: BTreeSet<&str> = names["data"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for family in [
        "rpc_server_requests_total",
        "rpc_server_call_duration_seconds_bucket",
        "http_server_requests_total",
        "router_turns_total",
        "router_routing_duration_milliseconds_bucket",
        "gen_ai_client_token_usage_bucket",
        "gen_ai_client_operation_duration_seconds_count",
        "switchyard_cost_usd_total",
    ] {
        assert!(names.contains(family), "{family} was not scraped; Prometheus has {names:?}");
    }

    // The dashboard: valid JSON, unique panel ids, every query valid PromQL in this Prometheus
    // and reading only documented metrics.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("deploy/observability/grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    let documented = documented_metrics();
    assert!(documented.contains("router_turns_total"), "the metrics table was read: {documented:?}");
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    let mut queries = 0;
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or_default();
        if panel["type"] == "row" {
            continue;
        }
        assert!(ids.insert(panel["id"].as_u64().expect("a panel id")), "panel id repeated: {title}");
        for target in panel["targets"].as_array().unwrap_or(&Vec::new()) {
            let expr = target["expr"].as_str().unwrap_or_else(|| panic!("panel {title:?}: a target without expr"));
            let answer = query(&http, &prometheus, expr).await;
            assert_eq!(answer["status"], "success", "panel {title:?}: {expr}\n{answer}");
            for metric in metrics_read(expr) {
                assert!(
                    documented.contains(&metric),
                    "panel {title:?} reads {metric}, which docs/operations.md does not list"
                );
            }
            queries += 1;
        }
    }
    assert!(queries >= 20, "the dashboard's queries were checked ({queries})");

    drop(dev);
    drop(llm);
}
