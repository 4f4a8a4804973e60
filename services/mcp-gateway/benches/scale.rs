//! The gateway at 10,000 tools, run as its own process (the release binary, as deployed) so its
//! memory can be read from /proc, each figure against a baseline taken in the same run:
//!
//! - start-up until the catalog is embedded: cold (empty `--embedding-cache` file) against
//!   warm (the file the cold start wrote) — the cold/warm ratio is what the cache saves;
//! - filtered `tools/list` (a context set, ranking 10,000 tools) over MCP against `tools/list`
//!   of a server with 8 tools (the HTTP + JSON-RPC floor);
//! - memory per tool: the warm gateway's resident set with 10,000 tools, minus that of the
//!   same gateway with 8 tools after the same requests, over the difference in tools.
//!
//! The catalog is generated from MetaTool's 199 descriptions (testkit `catalog`), served by
//! the test kit's MCP server in this process. Run:
//! `cargo bench -p switchyard-mcp-gateway --bench scale` (needs models/; `SCALE_TOOLS=N` for
//! another size). Prints the gateway's progress lines and a table; BENCHMARKS.md records it.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use hdrhistogram::Histogram;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use switchyard_testkit::{
    catalog,
    latency::{ms, sequential},
    mcp::{FixtureServer, client, tool},
};

const WARMUP: usize = 50;
const SAMPLES: usize = 1000;
const FEW: usize = 8;

fn main() {
    // The MCP client's HTTP stack uses rustls without a built-in provider (as the services do).
    switchyard_kit::tls::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(run());
}

/// A gateway process and the JSON log lines it writes.
struct Gateway {
    child: Child,
    started: Instant,
    events: mpsc::Receiver<(Instant, Value)>,
    mcp: String,
}

impl Gateway {
    fn spawn(server: &str, cache: &Path) -> Self {
        let started = Instant::now();
        let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard-mcp-gateway"))
            .args(["--in-memory", "--listen", "127.0.0.1:0", "--mcp-listen", "127.0.0.1:0", "--log-format", "json"])
            .arg("--server")
            .arg(server)
            .arg("--embedding-cache")
            .arg(cache)
            .env("SWITCHYARD_MODEL_DIR", switchyard_testkit::model_dir())
            .env("RUST_LOG", "info,rmcp=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gateway binary");
        let stderr = child.stderr.take().expect("stderr");
        let (send, events) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let event = serde_json::from_str::<Value>(&line).unwrap_or_else(|_| json!({"message": line}));
                if send.send((Instant::now(), event)).is_err() {
                    return;
                }
            }
        });
        let mut gateway = Self { child, started, events, mcp: String::new() };
        let listening = gateway.wait_for(|e| e["message"] == "mcp-gateway listening");
        gateway.mcp = format!("http://{}/mcp", listening["mcp"].as_str().expect("mcp address"));
        gateway
    }

    /// Waits for a log event; echoes the gateway's progress and cache lines on the way.
    fn wait_for(&self, wanted: impl Fn(&Value) -> bool) -> Value {
        loop {
            let (at, event) = self.events.recv_timeout(Duration::from_secs(3600)).expect("gateway log line");
            let message = event["message"].as_str().unwrap_or_default();
            if message.contains("embedding") || event["level"] == "WARN" {
                eprintln!("  [{:>7.1} s] {event}", at.duration_since(self.started).as_secs_f64());
            }
            if wanted(&event) {
                return event;
            }
        }
    }

    /// Time from spawn until the catalog of `tools` tools is published embedded.
    fn until_embedded(&self, tools: usize) -> Duration {
        loop {
            let event = self.wait_for(|e| e["message"] == "catalog published");
            if event["tools"] == tools && event["embedded"] == true {
                return self.started.elapsed();
            }
        }
    }

    /// Resident set size, in bytes, from /proc.
    fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("/proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmRSS")
            * 1024
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sets a context on the gateway at `url` and measures its filtered `tools/list`.
async fn filtered_list(url: &str) -> Histogram<u64> {
    let through = client(url).await;
    let mut params = CallToolRequestParams::new("set_context");
    params.arguments = json!({"query": "Turn this question into a SQL query"}).as_object().cloned();
    through.call_tool(params).await.expect("set_context");
    let list = sequential(WARMUP, SAMPLES, |_| {
        let through = &through;
        async move {
            let tools = through.list_tools(None).await.expect("tools/list");
            assert_eq!(tools.tools.len(), 9, "set_context and the top 8");
        }
    })
    .await;
    let _ = through.cancel().await;
    list
}

async fn run() {
    let tools: usize = std::env::var("SCALE_TOOLS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let base = catalog::base_tools(include_str!("../tests/data/metatool-tools.jsonl"));
    let big = FixtureServer::start(catalog::varied_tools(&base, tools)).await.expect("fixture");
    let small = FixtureServer::start((0..FEW).map(|i| tool(&format!("t{i}"), "A tool.", &["input"])).collect())
        .await
        .expect("fixture");
    let dir = tempfile::tempdir().expect("temporary directory");
    let cache = dir.path().join("embeddings.bin");

    eprintln!("cold start: {tools} tools, no embedding cache file");
    let cold = Gateway::spawn(&format!("big={}", big.url()), &cache);
    let cold_time = cold.until_embedded(tools);
    let cold_rss = cold.rss();
    drop(cold);
    let cache_bytes = std::fs::metadata(&cache).map(|m| m.len()).unwrap_or(0);

    eprintln!("warm start: the same tools, the file the cold start wrote ({cache_bytes} bytes)");
    let warm = Gateway::spawn(&format!("big={}", big.url()), &cache);
    let warm_time = warm.until_embedded(tools);
    let list = filtered_list(&warm.mcp).await;
    let warm_rss = warm.rss();

    // The baselines: the 8-tool server's own tools/list, and a gateway of 8 tools after the
    // same requests for memory.
    let floor_client = client(&small.url()).await;
    let floor = sequential(WARMUP, SAMPLES, |_| {
        let floor_client = &floor_client;
        async move {
            floor_client.list_tools(None).await.expect("tools/list");
        }
    })
    .await;
    let _ = floor_client.cancel().await;
    drop(warm);
    let few = Gateway::spawn(&format!("small={}", small.url()), &dir.path().join("few.bin"));
    let few_time = few.until_embedded(FEW);
    let few_list = filtered_list(&few.mcp).await;
    let few_rss = few.rss();
    drop(few);

    let (p50, p99) = (list.value_at_quantile(0.5), list.value_at_quantile(0.99));
    let (floor50, floor99) = (floor.value_at_quantile(0.5), floor.value_at_quantile(0.99));
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let per_tool = warm_rss.saturating_sub(few_rss) as f64 / (tools - FEW) as f64;
    println!("| figure | measured | baseline (same run) | baseline figure | ratio |");
    println!("| --- | --- | --- | --- | --- |");
    println!(
        "| start-up until {tools} tools are embedded, cold | {:.1} s | warm start (cache file of {:.1} MiB) | {:.2} s | {:.0}× |",
        cold_time.as_secs_f64(),
        mib(cache_bytes),
        warm_time.as_secs_f64(),
        cold_time.as_secs_f64() / warm_time.as_secs_f64()
    );
    println!(
        "| start-up of a gateway with {FEW} tools (model load, first list, embedding) | {:.2} s | warm start with {tools} tools | {:.2} s | {:.2}× |",
        few_time.as_secs_f64(),
        warm_time.as_secs_f64(),
        warm_time.as_secs_f64() / few_time.as_secs_f64()
    );
    println!(
        "| filtered `tools/list` over {tools} tools, p50 / p99 | {:.2} / {:.2} ms | `tools/list` of an {FEW}-tool server | {:.2} / {:.2} ms | {:.2}× / {:.2}× |",
        ms(p50),
        ms(p99),
        ms(floor50),
        ms(floor99),
        p50 as f64 / floor50.max(1) as f64,
        p99 as f64 / floor99.max(1) as f64
    );
    println!(
        "| filtered `tools/list` through the gateway with {FEW} tools, p50 / p99 | {:.2} / {:.2} ms | `tools/list` of an {FEW}-tool server | {:.2} / {:.2} ms | {:.2}× / {:.2}× |",
        ms(few_list.value_at_quantile(0.5)),
        ms(few_list.value_at_quantile(0.99)),
        ms(floor50),
        ms(floor99),
        few_list.value_at_quantile(0.5) as f64 / floor50.max(1) as f64,
        few_list.value_at_quantile(0.99) as f64 / floor99.max(1) as f64
    );
    println!(
        "| resident memory, warm gateway with {tools} tools | {:.1} MiB | the gateway with {FEW} tools | {:.1} MiB | {:.1} KiB per tool |",
        mib(warm_rss),
        mib(few_rss),
        per_tool / 1024.0
    );
    println!("| resident memory after the cold start (embedding buffers included) | {:.1} MiB | | | |", mib(cold_rss));
}
