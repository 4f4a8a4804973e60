//! What the edge costs: `POST /api/context/process` through the edge (HTTP/1.1 JSON → gRPC →
//! back) against `ProcessQuery` over gRPC straight to the sessions service, in the same run,
//! on the same triggers and sessions services (in memory, on loopback).
//!
//! Two measurements, each alternating the two paths over several rounds so drift on a noisy
//! machine falls on both alike:
//! - latency: one caller, one request at a time; p50 and p99 of each path;
//! - throughput: `CONCURRENCY` callers in a closed loop; requests per second of each path.
//!
//! `cargo bench -p switchyard-edge --bench edge_overhead` (`EDGE_BENCH_SECS` per round,
//! default 3). The services run on a runtime of their own; callers on another.
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

struct Servers {
    sessions: SocketAddr,
    edge: SocketAddr,
}

async fn start_servers() -> Servers {
    let mut triggers_config = TriggersConfig::in_memory(loopback());
    // The keyword path only: this measures the edge, not the semantic signal.
    triggers_config.no_semantic = true;
    let triggers = TriggersServer::bind(&triggers_config).await.expect("triggers");
    let triggers_url = format!("http://{}", triggers.local_addr());
    tokio::spawn(triggers.serve(std::future::pending()));
    let sessions = SessionsServer::bind(&SessionsConfig::in_memory(loopback(), &triggers_url)).await.expect("sessions");
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
                let body = format!(r#"{{"session_id": "{session}", "query": "{QUERY}"}}"#);
                let response = client
                    .post(url.as_str())
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .expect("REST process");
                assert_eq!(response.status(), 200);
                response.bytes().await.expect("body");
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

fn main() {
    switchyard_kit::tls::install_crypto_provider();
    let secs = Duration::from_secs(std::env::var("EDGE_BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3));
    let servers_rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let servers = servers_rt.block_on(start_servers());
    let callers_rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    callers_rt.block_on(async {
        let channel = Channel::from_shared(format!("http://{}", servers.sessions)).unwrap().connect().await.unwrap();
        let mut grpc = SessionServiceClient::new(channel);
        // One session per concurrent caller: each session's turns are serialised by design.
        let mut sessions = Vec::new();
        for _ in 0..CONCURRENCY {
            let created = grpc
                .create_session(CreateSessionRequest { initial_role_id: "tech-expert".into(), ..Default::default() })
                .await
                .unwrap()
                .into_inner();
            sessions.push(created.session.unwrap().session_id);
        }
        let rest = reqwest::Client::builder().pool_max_idle_per_host(CONCURRENCY).build().unwrap();
        let callers = [
            ("grpc", Caller::Grpc(grpc)),
            ("rest", Caller::Rest(rest, format!("http://{}/api/context/process", servers.edge))),
        ];
        // Warm both paths (connections, allocators, caches).
        for (_, caller) in &callers {
            let mut h = Histogram::new(3).unwrap();
            latency(caller, &sessions, Duration::from_millis(500), &mut h).await;
        }
        let mut histograms = [Histogram::<u64>::new(3).unwrap(), Histogram::<u64>::new(3).unwrap()];
        let mut rates = [Vec::new(), Vec::new()];
        for _ in 0..ROUNDS {
            for (i, (_, caller)) in callers.iter().enumerate() {
                latency(caller, &sessions, secs, &mut histograms[i]).await;
            }
            for (i, (_, caller)) in callers.iter().enumerate() {
                rates[i].push(throughput(caller, &sessions, secs).await);
            }
        }
        let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        println!("edge overhead, POST /api/context/process vs gRPC ProcessQuery ({ROUNDS} rounds of {secs:?} each)");
        for (i, (name, _)) in callers.iter().enumerate() {
            println!(
                "  {name:<5} p50 {:>7.3} ms  p99 {:>7.3} ms  ({} calls)   throughput {:>8.0} req/s at {CONCURRENCY} callers (rounds: {})",
                ms(&histograms[i], 0.5),
                ms(&histograms[i], 0.99),
                histograms[i].len(),
                mean(&rates[i]),
                rates[i].iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", "),
            );
        }
        println!(
            "  edge adds {:+.3} ms at p50, {:+.3} ms at p99; REST throughput is {:.2}x gRPC's",
            ms(&histograms[1], 0.5) - ms(&histograms[0], 0.5),
            ms(&histograms[1], 0.99) - ms(&histograms[0], 0.99),
            mean(&rates[1]) / mean(&rates[0]),
        );
    });
}
