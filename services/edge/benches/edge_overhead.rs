//! What the edge costs: `POST /api/context/process` through the edge (JSON → gRPC → back)
//! against `ProcessQuery` over gRPC straight to the sessions service, in the same run. The REST
//! callers come two ways: HTTP/1.1 keep-alive (reqwest, a connection per concurrent caller, as
//! most SDKs and browsers talk) and HTTP/2 without TLS (one multiplexed connection, as an API
//! gateway or service mesh in front talks, and as the gRPC caller does).
//!
//! Two deployments, each with triggers and sessions in memory:
//! - `loopback`: the services call each other over loopback gRPC, as separate processes do;
//! - `in-process`: triggers and sessions served in process (`switchyard_kit::in_process`), so
//!   the edge's calls to sessions, and sessions' to triggers, skip TCP and HTTP/2, as in
//!   `switchyard dev` or an all-in-one deployment. The gRPC caller still reaches sessions over
//!   loopback (it stands for a caller in another process).
//!
//! Two measurements, each alternating the paths over several rounds so drift on a noisy
//! machine falls on all alike:
//! - latency: one caller, one request at a time; p50 and p99 of each path;
//! - throughput: `CONCURRENCY` callers in a closed loop; requests per second of each path.
//!
//! `cargo bench -p switchyard-edge --bench edge_overhead` (`EDGE_BENCH_SECS` per round,
//! default 3; `EDGE_BENCH_ONLY` names one path to run alone, for a profiler). The services run
//! on a runtime of their own; callers on another.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use hdrhistogram::Histogram;
use switchyard_edge::{EdgeConfig, EdgeServer, auth::Authenticator, clients::UpstreamUrls};
use switchyard_proto::sessions::v1::{
    CreateSessionRequest, ProcessQueryRequest, session_service_client::SessionServiceClient,
};
use switchyard_sessions::{SessionsConfig, SessionsServer};
use switchyard_triggers::{TriggersConfig, TriggersServer};
use tonic::transport::Channel;

const QUERY: &str = "What are the best investment strategies for tech startups?";
const ROUNDS: usize = 3;
const CONCURRENCY: usize = 16;

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// One deployment: the sessions service's address (for the gRPC caller) and the edge's.
struct Servers {
    sessions: SocketAddr,
    edge: SocketAddr,
}

async fn start_servers(in_process: bool) -> Servers {
    let mut triggers_config = TriggersConfig::in_memory(loopback());
    // The keyword path only: this measures the edge, not the semantic signal.
    triggers_config.no_semantic = true;
    triggers_config.server.serve_in_process = in_process;
    let triggers = TriggersServer::bind(&triggers_config).await.expect("triggers");
    let triggers_url = format!("http://{}", triggers.local_addr());
    tokio::spawn(triggers.serve(std::future::pending()));
    let mut sessions_config = SessionsConfig::in_memory(loopback(), &triggers_url);
    sessions_config.server.serve_in_process = in_process;
    let sessions = SessionsServer::bind(&sessions_config).await.expect("sessions");
    let sessions_addr = sessions.local_addr();
    tokio::spawn(sessions.serve(std::future::pending()));
    let closed = "http://127.0.0.1:9".to_owned();
    let urls = UpstreamUrls {
        router: closed.clone(),
        sessions: format!("http://{sessions_addr}"),
        triggers: triggers_url,
        mcp_gateway: closed,
    };
    let mut config = EdgeConfig::open(loopback(), &urls);
    config.rate_limit = 0;
    let edge = EdgeServer::bind_with_auth(&config, Authenticator::new(true, None, None)).await.expect("edge");
    let edge_addr = edge.local_addr();
    tokio::spawn(edge.serve(std::future::pending()));
    Servers { sessions: sessions_addr, edge: edge_addr }
}

#[derive(Clone)]
enum Caller {
    Grpc(SessionServiceClient<Channel>),
    Rest(reqwest::Client, String),
    /// REST over one HTTP/2 connection (prior knowledge, no TLS).
    RestH2(Box<H2Client>, http::Uri),
}

type H2Client = hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, String>;

fn h2_client() -> H2Client {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).http2_only(true).build_http()
}

fn rest_body(session: &str) -> String {
    format!(r#"{{"session_id": "{session}", "query": "{QUERY}"}}"#)
}

impl Caller {
    async fn call(&mut self, session: &str) {
        match self {
            Self::Grpc(client) => {
                let request = ProcessQueryRequest {
                    session_id: session.to_owned(),
                    query: QUERY.to_owned(),
                    ..Default::default()
                };
                client.process_query(request).await.expect("gRPC ProcessQuery");
            }
            Self::Rest(client, url) => {
                let response = client
                    .post(url.as_str())
                    .header("content-type", "application/json")
                    .body(rest_body(session))
                    .send()
                    .await
                    .expect("REST process");
                assert_eq!(response.status(), 200);
                response.bytes().await.expect("body");
            }
            Self::RestH2(client, uri) => {
                let request = http::Request::post(uri.clone())
                    .header("content-type", "application/json")
                    .body(rest_body(session))
                    .unwrap();
                let response = client.request(request).await.expect("REST process over HTTP/2");
                assert_eq!(response.status(), 200);
                http_body_util::BodyExt::collect(response.into_body()).await.expect("body");
            }
        }
    }
}

/// One caller, one request at a time, for `secs`.
async fn latency(caller: &Caller, sessions: &[String], secs: Duration, histogram: &mut Histogram<u64>) {
    let mut caller = caller.clone();
    let deadline = Instant::now() + secs;
    let mut i = 0;
    while Instant::now() < deadline {
        let start = Instant::now();
        caller.call(&sessions[i % sessions.len()]).await;
        histogram.record(start.elapsed().as_micros() as u64).unwrap();
        i += 1;
    }
}

/// `CONCURRENCY` callers in a closed loop for `secs`; requests completed.
async fn throughput(caller: &Caller, sessions: &[String], secs: Duration) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for worker in 0..CONCURRENCY {
        let (mut caller, done, stop) = (caller.clone(), done.clone(), stop.clone());
        let session = sessions[worker % sessions.len()].clone();
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                caller.call(&session).await;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(secs).await;
    stop.store(true, Ordering::Relaxed);
    let count = done.load(Ordering::Relaxed);
    let elapsed = start.elapsed();
    for task in tasks {
        task.await.unwrap();
    }
    count as f64 / elapsed.as_secs_f64()
}

/// One session per concurrent caller (each session's turns are serialised by design).
async fn sessions_of(grpc: &mut SessionServiceClient<Channel>) -> Vec<String> {
    let mut sessions = Vec::new();
    for _ in 0..CONCURRENCY {
        let created = grpc
            .create_session(CreateSessionRequest { initial_role_id: "tech-expert".into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        sessions.push(created.session.unwrap().session_id);
    }
    sessions
}

fn main() {
    switchyard_kit::tls::install_crypto_provider();
    let secs = Duration::from_secs(std::env::var("EDGE_BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3));
    let servers_rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (loopback_servers, in_process_servers) =
        servers_rt.block_on(async { (start_servers(false).await, start_servers(true).await) });
    let callers_rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    callers_rt.block_on(async {
        let rest = reqwest::Client::builder().pool_max_idle_per_host(CONCURRENCY).build().unwrap();
        // (name, caller, the sessions it calls on)
        let mut callers = Vec::new();
        for (deployment, servers) in [("loopback", &loopback_servers), ("in-process", &in_process_servers)] {
            let channel = Channel::from_shared(format!("http://{}", servers.sessions)).unwrap().connect().await.unwrap();
            let mut grpc = SessionServiceClient::new(channel);
            let sessions = sessions_of(&mut grpc).await;
            let url = format!("http://{}/api/context/process", servers.edge);
            callers.push((format!("{deployment} grpc"), Caller::Grpc(grpc), sessions.clone()));
            let h2 = Caller::RestH2(Box::new(h2_client()), url.parse().unwrap());
            callers.push((format!("{deployment} rest"), Caller::Rest(rest.clone(), url), sessions.clone()));
            callers.push((format!("{deployment} rest h2"), h2, sessions));
        }
        // One path alone, for a profiler: `EDGE_BENCH_ONLY="in-process rest"`.
        if let Ok(only) = std::env::var("EDGE_BENCH_ONLY") {
            callers.retain(|(name, _, _)| *name == only);
            assert!(!callers.is_empty(), "EDGE_BENCH_ONLY names no path");
        }
        // Warm every path (connections, allocators, caches).
        for (_, caller, sessions) in &callers {
            let mut h = Histogram::new(3).unwrap();
            latency(caller, sessions, Duration::from_millis(500), &mut h).await;
        }
        let mut histograms: Vec<Histogram<u64>> = callers.iter().map(|_| Histogram::new(3).unwrap()).collect();
        let mut rates: Vec<Vec<f64>> = callers.iter().map(|_| Vec::new()).collect();
        for _ in 0..ROUNDS {
            for (i, (_, caller, sessions)) in callers.iter().enumerate() {
                latency(caller, sessions, secs, &mut histograms[i]).await;
            }
            for (i, (_, caller, sessions)) in callers.iter().enumerate() {
                rates[i].push(throughput(caller, sessions, secs).await);
            }
        }
        let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        println!("edge overhead, POST /api/context/process vs gRPC ProcessQuery ({ROUNDS} rounds of {secs:?} each)");
        for (i, (name, _, _)) in callers.iter().enumerate() {
            println!(
                "  {name:<20} p50 {:>7.3} ms  p99 {:>7.3} ms  ({} calls)   throughput {:>8.0} req/s at {CONCURRENCY} callers (rounds: {})",
                ms(&histograms[i], 0.5),
                ms(&histograms[i], 0.99),
                histograms[i].len(),
                mean(&rates[i]),
                rates[i].iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", "),
            );
        }
        // Pairs: (grpc, rest) of each deployment, then the in-process edge against the gRPC
        // caller of the loopback deployment (separate processes, the usual baseline).
        let index = |name: &str| callers.iter().position(|(n, _, _)| n == name);
        for (label, grpc, rest) in [
            ("loopback, HTTP/1.1", "loopback grpc", "loopback rest"),
            ("loopback, HTTP/2", "loopback grpc", "loopback rest h2"),
            ("in-process, HTTP/1.1", "in-process grpc", "in-process rest"),
            ("in-process, HTTP/2", "in-process grpc", "in-process rest h2"),
            ("in-process edge (HTTP/1.1) vs loopback gRPC", "loopback grpc", "in-process rest"),
        ] {
            let (Some(grpc), Some(rest)) = (index(grpc), index(rest)) else { continue };
            println!(
                "  {label}: the edge adds {:+.3} ms at p50, {:+.3} ms at p99; REST throughput is {:.2}x gRPC's",
                ms(&histograms[rest], 0.5) - ms(&histograms[grpc], 0.5),
                ms(&histograms[rest], 0.99) - ms(&histograms[grpc], 0.99),
                mean(&rates[rest]) / mean(&rates[grpc]),
            );
        }
    });
}
