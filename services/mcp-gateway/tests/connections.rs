//! The MCP endpoint's listener against slow, idle and too many clients, over real TCP with the
//! deadlines shortened: a request head sent a byte at a time and a connection that says
//! nothing are closed by the header timeout, a keep-alive connection by the idle timeout; past
//! the connection limit a new connection takes the place of the one idle longest, or waits
//! while every connection has a request in progress; a session's event stream held open longer
//! than both timeouts is left alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_mcp_gateway::{GatewayConfig, Stores};
use switchyard_testkit::raw_http::{Closed, RawConnection};

const HEADER_TIMEOUT: Duration = Duration::from_secs(1);
const IDLE_TIMEOUT: Duration = Duration::from_secs(2);
/// How much later than its deadline a close may come and still count (a loaded test machine).
const SLACK: Duration = Duration::from_secs(3);

/// A gateway with no downstream servers, in memory: only its HTTP listener is under test.
async fn gateway(configure: impl FnOnce(&mut GatewayConfig)) -> common::Running {
    let mut config = common::config(&[]);
    configure(&mut config);
    common::start(&config, Stores::in_memory(), None).await
}

fn short_deadlines(config: &mut GatewayConfig) {
    config.mcp_header_timeout = HEADER_TIMEOUT;
    config.mcp_idle_timeout = IDLE_TIMEOUT;
}

/// Any complete request gets an answer; which one does not matter here (a GET without a
/// session is refused by the transport).
async fn answered(connection: &mut RawConnection, host: &str) -> bool {
    connection.send_get("/mcp", host).await;
    connection.response(Duration::from_secs(10)).await.is_some()
}

#[tokio::test]
async fn slow_silent_and_idle_connections_to_the_mcp_endpoint_are_closed() {
    let running = gateway(short_deadlines).await;
    let (addr, host) = (running.mcp, running.mcp.to_string());

    let mut slow = RawConnection::connect(addr).await;
    match slow.slow_loris("/mcp", Duration::from_millis(200), HEADER_TIMEOUT + SLACK).await {
        Closed::After(after) => assert!(after >= HEADER_TIMEOUT / 2, "closed after {after:?}"),
        Closed::StillOpen => panic!("a slow request head was kept past {:?}", HEADER_TIMEOUT + SLACK),
    }

    let mut silent = RawConnection::connect(addr).await;
    assert!(
        matches!(silent.closed_within(HEADER_TIMEOUT + SLACK).await, Closed::After(_)),
        "a connection that sent nothing was kept"
    );

    // A client asking every 400 ms keeps its connection past both timeouts...
    let mut busy = RawConnection::connect(addr).await;
    let start = Instant::now();
    loop {
        assert!(answered(&mut busy, &host).await, "after {:?} on one connection", start.elapsed());
        if start.elapsed() > HEADER_TIMEOUT + IDLE_TIMEOUT + Duration::from_secs(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    // ...and once it stops asking, the connection goes after the idle timeout.
    match busy.closed_within(IDLE_TIMEOUT + SLACK).await {
        Closed::After(after) => {
            assert!(
                after >= IDLE_TIMEOUT - Duration::from_millis(300),
                "closed after {after:?}, before the idle timeout"
            );
        }
        Closed::StillOpen => panic!("an idle keep-alive connection was kept past {:?}", IDLE_TIMEOUT + SLACK),
    }
}

#[tokio::test]
async fn a_sessions_event_stream_outlasts_the_timeouts() {
    let running = gateway(short_deadlines).await;
    let http = reqwest::Client::new();
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    });
    let response = http
        .post(running.mcp_url())
        .header("accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let session = response.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let _ = response.text().await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = http
        .post(running.mcp_url())
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .json(&initialized)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());

    // The server's stream for the session: quiet, and open as long as the session is.
    let mut stream = http
        .get(running.mcp_url())
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let held = HEADER_TIMEOUT + IDLE_TIMEOUT + Duration::from_secs(1);
    let start = Instant::now();
    while start.elapsed() < held {
        match tokio::time::timeout(held - start.elapsed(), stream.chunk()).await {
            // Quiet but open, or a keep-alive comment.
            Err(_) | Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => panic!("the event stream ended after {:?}", start.elapsed()),
            Ok(Err(err)) => panic!("the event stream was cut after {:?}: {err}", start.elapsed()),
        }
    }
}

/// The head of a JSON-RPC `ping` whose body has not all arrived: the request is in progress,
/// the endpoint waiting for the rest ([`REST_OF_PING`]).
fn unfinished_ping(host: &str) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{{\"jsonrpc\"",
        "{\"jsonrpc\"".len() + REST_OF_PING.len()
    )
}
const REST_OF_PING: &[u8] = br#": "2.0", "id": 1, "method": "ping"}"#;

#[tokio::test]
async fn past_the_limit_a_new_connection_takes_the_place_of_the_one_idle_longest_or_waits_while_all_are_busy() {
    let running = gateway(|config| config.mcp_max_connections = 2).await;
    let (addr, host) = (running.mcp, running.mcp.to_string());

    let mut first = RawConnection::connect(addr).await;
    let mut second = RawConnection::connect(addr).await;
    assert!(answered(&mut first, &host).await && answered(&mut second, &host).await);
    // Both places held by idle connections: a third closes the one idle longest.
    let mut third = RawConnection::connect(addr).await;
    assert!(answered(&mut third, &host).await, "a new connection is served at once");
    assert!(
        matches!(first.closed_within(Duration::from_secs(5)).await, Closed::After(_)),
        "the connection idle longest made room"
    );
    assert!(answered(&mut second, &host).await, "the other was not disturbed");

    // With a request in progress on both, a new connection is not served...
    for connection in [&mut second, &mut third] {
        connection.send_raw(unfinished_ping(&host).as_bytes()).await;
    }
    let mut fourth = RawConnection::connect(addr).await;
    fourth.send_get("/mcp", &host).await;
    assert_eq!(fourth.response(Duration::from_secs(1)).await, None, "served while every connection was busy");
    // ...until one of them ends its request: then it takes that one's place.
    second.send_raw(REST_OF_PING).await;
    assert!(second.response(Duration::from_secs(10)).await.is_some(), "the ping answered");
    assert!(fourth.response(Duration::from_secs(10)).await.is_some(), "the waiting connection is served");
    assert!(matches!(second.closed_within(Duration::from_secs(5)).await, Closed::After(_)), "the idle one made room");
    third.send_raw(REST_OF_PING).await;
    assert!(third.response(Duration::from_secs(10)).await.is_some(), "the request in progress was not cut");
}
