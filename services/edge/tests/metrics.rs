//! `GET /metrics` on the edge's own port (no `--metrics-listen`): every HTTP request counted and
//! timed by method, route template and status — a fixed route, a REST route with a path
//! variable (its template, never the session id), a path no route has (`unmatched`) — and, from
//! the same process, the gRPC calls the services behind it answered.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Options, Stack};
use serde_json::json;
use switchyard_kit::telemetry::init_metrics;
use switchyard_testkit::{llm::ScriptedLlm, prometheus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_serves_its_routes_metrics_on_its_own_port() {
    // Before the services make their instruments, as `main` does.
    let _metrics = init_metrics("edge-metrics-test", None, None).unwrap();
    let stack = Stack::start(ScriptedLlm::queue(vec![]).await, Options::default()).await;

    assert_eq!(stack.get("/healthz", None).await.status().as_u16(), 200);
    let created = stack.post("/api/context/sessions", None, &json!({"initial_role_id": "tech-expert"})).await;
    assert_eq!(created.status().as_u16(), 200);
    let created: serde_json::Value = created.json().await.unwrap();
    let session_id = created["session"]["session_id"].as_str().unwrap().to_owned();
    for _ in 0..2 {
        let session = stack.get(&format!("/api/context/sessions/{session_id}"), None).await;
        assert_eq!(session.status().as_u16(), 200);
    }
    let missing = stack.get("/api/context/sessions/no-such-session", None).await;
    assert_eq!(missing.status().as_u16(), 404);
    assert_eq!(stack.get("/no/such/path/4242", None).await.status().as_u16(), 404);

    let scraped = stack.get("/metrics", None).await;
    assert_eq!(scraped.status().as_u16(), 200);
    let content_type = scraped.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = scraped.text().await.unwrap();
    let metrics = prometheus::parse(&text).unwrap_or_else(|err| panic!("{err}\n{text}"));

    let requests = "http_server_requests_total";
    assert_eq!(metrics.sum(requests, &[("method", "GET"), ("route", "/healthz"), ("status", "200")]), 1.0, "{text}");
    let session_route = "/api/context/sessions/{session_id}";
    assert_eq!(metrics.sum(requests, &[("route", session_route), ("status", "200")]), 2.0, "{text}");
    assert_eq!(metrics.sum(requests, &[("route", session_route), ("status", "404")]), 1.0, "{text}");
    assert_eq!(metrics.sum(requests, &[("route", "unmatched"), ("status", "404")]), 1.0, "{text}");
    assert!(!text.contains(&session_id) && !text.contains("4242"), "no path becomes a label:\n{text}");
    assert_eq!(
        metrics.sum("http_server_request_duration_seconds_count", &[("route", session_route), ("status", "200")]),
        2.0,
        "{text}"
    );
    // The services behind the edge share the process: their gRPC calls are in the same scrape.
    let sessions = "switchyard.sessions.v1.SessionService";
    assert_eq!(
        metrics.sum("rpc_server_requests_total", &[("service", sessions), ("method", "GetSession"), ("code", "OK")]),
        2.0,
        "{text}"
    );
    assert_eq!(
        metrics.sum(
            "rpc_server_requests_total",
            &[("service", sessions), ("method", "GetSession"), ("code", "NOT_FOUND")]
        ),
        1.0,
        "{text}"
    );
}
