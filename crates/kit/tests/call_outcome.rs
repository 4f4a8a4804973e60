//! The kit's gRPC server counts and times every call by how it ended, and `/metrics` shows it:
//! a real server on loopback (the health service every Switchyard service carries), real tonic
//! clients, and the Prometheus text read back from `--metrics-listen`. A unary answer, a unary
//! error, a method no service has (labelled `unknown`), and a stream the caller walked away
//! from (`CANCELLED`).
#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

use std::{net::SocketAddr, time::Duration};

use switchyard_kit::{GrpcServer, ServerArgs, telemetry::init_metrics};
use switchyard_proto::triggers::v1::{DetectTriggersRequest, trigger_service_client::TriggerServiceClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

const HEALTH: &str = "grpc.health.v1.Health";

/// `GET /metrics` over a plain HTTP/1.1 connection: the status line and the body.
async fn scrape(addr: SocketAddr) -> (String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: metrics\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

/// The value of the sample `name` whose labels include every one of `labels`, if present.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|line| !line.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
        let matches = metric == name && labels.iter().all(|(key, value)| rest.contains(&format!("{key}=\"{value}\"")));
        matches.then(|| value.parse().unwrap())
    })
}

async fn wait_for(addr: SocketAddr, name: &str, labels: &[(&str, &str)], want: f64) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = scrape(addr).await;
        assert!(status.contains("200"), "{status}");
        if sample(&body, name, labels) == Some(want) || tokio::time::Instant::now() > deadline {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_is_counted_and_timed_by_how_it_ended() {
    let metrics_addr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let _metrics = init_metrics("kit-call-outcome-test", None, Some(metrics_addr)).unwrap();

    let server = GrpcServer::bind(SocketAddr::from(([127, 0, 0, 1], 0)), ServerArgs::default()).await.unwrap();
    let addr = server.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));

    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut health = HealthClient::new(channel.clone());
    for _ in 0..3 {
        health.check(HealthCheckRequest { service: String::new() }).await.unwrap();
    }
    let unknown = health.check(HealthCheckRequest { service: "no.such.Service".into() }).await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);

    // A method this server does not have: answered UNIMPLEMENTED, labelled `unknown` (a
    // caller cannot mint label values).
    let mut triggers = TriggerServiceClient::new(channel.clone());
    let missing = triggers.detect_triggers(DetectTriggersRequest { query: "hi".into() }).await.unwrap_err();
    assert_eq!(missing.code(), Code::Unimplemented);

    // A watch the caller drops before its end: the server sees the stream cut.
    let mut watch = health.watch(HealthCheckRequest { service: String::new() }).await.unwrap().into_inner();
    watch.message().await.unwrap().unwrap();
    drop(watch);

    let ok = [("service", HEALTH), ("method", "Check"), ("code", "OK")];
    let body = wait_for(metrics_addr, "rpc_server_requests_total", &ok, 3.0).await;
    assert_eq!(sample(&body, "rpc_server_requests_total", &ok), Some(3.0), "{body}");
    let not_found = [("service", HEALTH), ("method", "Check"), ("code", "NOT_FOUND")];
    assert_eq!(sample(&body, "rpc_server_requests_total", &not_found), Some(1.0), "{body}");
    let unimplemented = [("service", "unknown"), ("method", "unknown"), ("code", "UNIMPLEMENTED")];
    assert_eq!(sample(&body, "rpc_server_requests_total", &unimplemented), Some(1.0), "{body}");
    assert!(!body.contains("TriggerService"), "a method the server lacks never becomes a label:\n{body}");
    // Every call is timed under the same labels: the histogram's count matches the counter.
    assert_eq!(sample(&body, "rpc_server_call_duration_seconds_count", &ok), Some(3.0), "{body}");

    let cancelled = [("service", HEALTH), ("method", "Watch"), ("code", "CANCELLED")];
    let body = wait_for(metrics_addr, "rpc_server_requests_total", &cancelled, 1.0).await;
    assert_eq!(sample(&body, "rpc_server_requests_total", &cancelled), Some(1.0), "{body}");

    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}
