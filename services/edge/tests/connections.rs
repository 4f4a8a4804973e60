//! The edge's listener against slow, idle and too many clients, over real TCP with the
//! deadlines shortened: a request head sent a byte at a time and a connection that says
//! nothing are closed by the header timeout, a keep-alive connection by the idle timeout after
//! its last response; past the connection limit a new connection takes the place of the one
//! idle longest, or waits while every connection has a request in progress; while a client
//! that keeps asking and a stream that keeps running longer than both timeouts are left alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Options, Stack, events};
use serde_json::json;
use switchyard_edge::EdgeConfig;
use switchyard_testkit::{
    llm::{Reply, ScriptedLlm},
    raw_http::{Closed, RawConnection},
};

const HEADER_TIMEOUT: Duration = Duration::from_secs(1);
const IDLE_TIMEOUT: Duration = Duration::from_secs(2);
/// How much later than its deadline a close may come and still count (a loaded test machine).
const SLACK: Duration = Duration::from_secs(3);

async fn edge(configure: impl FnOnce(&mut EdgeConfig) + Send + 'static) -> Stack {
    let llm = ScriptedLlm::start(|_| Reply::text("Hello.")).await;
    Stack::start(llm, Options { configure: Box::new(configure), ..Options::default() }).await
}

fn short_deadlines(config: &mut EdgeConfig) {
    config.header_timeout = HEADER_TIMEOUT;
    config.idle_timeout = IDLE_TIMEOUT;
}

fn host(stack: &Stack) -> String {
    stack.edge.addr.to_string()
}

#[tokio::test]
async fn slow_and_silent_clients_are_closed_by_the_header_timeout() {
    let stack = edge(short_deadlines).await;
    let addr = stack.edge.addr;

    // A header byte every 200 ms: each byte is progress, but the head never ends.
    let mut slow = RawConnection::connect(addr).await;
    match slow.slow_loris("/healthz", Duration::from_millis(200), HEADER_TIMEOUT + SLACK).await {
        Closed::After(after) => assert!(after >= HEADER_TIMEOUT / 2, "closed after {after:?}"),
        Closed::StillOpen => panic!("a slow request head was kept past {:?}", HEADER_TIMEOUT + SLACK),
    }

    // Connected, and not a byte: a new connection owes a request head.
    let mut silent = RawConnection::connect(addr).await;
    assert!(
        matches!(silent.closed_within(HEADER_TIMEOUT + SLACK).await, Closed::After(_)),
        "a connection that sent nothing was kept"
    );

    // Meanwhile the edge serves as ever.
    assert_eq!(stack.get("/healthz", None).await.status(), 200);
}

#[tokio::test]
async fn keep_alive_connections_close_after_the_idle_timeout_but_not_while_used() {
    let stack = edge(short_deadlines).await;
    let (addr, host) = (stack.edge.addr, host(&stack));

    // An ordinary keep-alive client asking every 400 ms for longer than both timeouts keeps
    // its one connection throughout.
    let mut busy = RawConnection::connect(addr).await;
    let start = Instant::now();
    while start.elapsed() < HEADER_TIMEOUT + IDLE_TIMEOUT + Duration::from_secs(1) {
        busy.send_get("/healthz", &host).await;
        let answer = busy.response(Duration::from_secs(10)).await;
        assert_eq!(answer.map(|(status, _)| status), Some(200), "after {:?} on one connection", start.elapsed());
        tokio::time::sleep(Duration::from_millis(400)).await;
    }

    // After its last answer a connection may wait for the idle timeout (longer than the
    // header timeout), then it is closed.
    let mut idle = RawConnection::connect(addr).await;
    idle.send_get("/healthz", &host).await;
    assert_eq!(idle.response(Duration::from_secs(10)).await.map(|(status, _)| status), Some(200));
    match idle.closed_within(IDLE_TIMEOUT + SLACK).await {
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
async fn a_stream_running_longer_than_the_timeouts_is_not_cut() {
    // Twelve pieces a quarter of a second apart: three seconds of stream, past both timeouts.
    let llm = ScriptedLlm::start(|_| {
        Reply::text("One two three four five six seven eight nine ten eleven twelve.")
            .chunk_size(6)
            .chunk_delay(Duration::from_millis(250))
    })
    .await;
    let stack = Stack::start(llm, Options { configure: Box::new(short_deadlines), ..Options::default() }).await;
    let start = Instant::now();
    let events = events(stack.post("/api/v1/chat/stream", None, &json!({"message": "Count to twelve"})).await).await;
    assert!(start.elapsed() > HEADER_TIMEOUT + IDLE_TIMEOUT, "the stream ran {:?}", start.elapsed());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.last(), Some(&"completed"), "{names:?}");
    let text: String =
        events.iter().filter(|(n, _)| n == "delta").map(|(_, d)| d["content"].as_str().unwrap()).collect();
    assert_eq!(text, "One two three four five six seven eight nine ten eleven twelve.");
}

/// The head of a chat request whose 17-byte body has not all arrived: the request is in
/// progress, its handler waiting for the rest ([`REST_OF_BODY`]).
fn unfinished_chat(host: &str) -> String {
    format!(
        "POST /api/v1/chat HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{{\"mess"
    )
}
const REST_OF_BODY: &[u8] = br#"age": "Hi"}"#;

#[tokio::test]
async fn past_the_limit_a_new_connection_takes_the_place_of_the_one_idle_longest_or_waits_while_all_are_busy() {
    let stack = edge(|config| config.max_connections = 2).await;
    let (addr, host) = (stack.edge.addr, host(&stack));

    let mut first = RawConnection::connect(addr).await;
    let mut second = RawConnection::connect(addr).await;
    for connection in [&mut first, &mut second] {
        connection.send_get("/healthz", &host).await;
        assert_eq!(connection.response(Duration::from_secs(10)).await.map(|(status, _)| status), Some(200));
    }
    // Both places are held by idle connections: a third closes the one idle longest and is
    // served at once.
    let mut third = RawConnection::connect(addr).await;
    third.send_get("/healthz", &host).await;
    assert_eq!(third.response(Duration::from_secs(5)).await.map(|(status, _)| status), Some(200));
    assert!(
        matches!(first.closed_within(Duration::from_secs(5)).await, Closed::After(_)),
        "the connection idle longest made room"
    );
    // The other was not disturbed.
    second.send_get("/healthz", &host).await;
    assert_eq!(second.response(Duration::from_secs(10)).await.map(|(status, _)| status), Some(200));

    // With a request in progress on both, a new connection is not served...
    for connection in [&mut second, &mut third] {
        connection.send_raw(unfinished_chat(&host).as_bytes()).await;
    }
    let mut fourth = RawConnection::connect(addr).await;
    fourth.send_get("/healthz", &host).await;
    assert_eq!(fourth.response(Duration::from_secs(1)).await, None, "served while every connection was busy");
    // ...until one of them ends its request: then it takes that one's place.
    second.send_raw(REST_OF_BODY).await;
    assert_eq!(second.response(Duration::from_secs(10)).await.map(|(status, _)| status), Some(200));
    let answer = fourth.response(Duration::from_secs(10)).await;
    assert_eq!(answer.map(|(status, _)| status), Some(200), "the waiting connection is served once a place is idle");
    assert!(matches!(second.closed_within(Duration::from_secs(5)).await, Closed::After(_)), "the idle one made room");
    // The request still in progress was not cut.
    third.send_raw(REST_OF_BODY).await;
    assert_eq!(third.response(Duration::from_secs(10)).await.map(|(status, _)| status), Some(200));
}

#[tokio::test]
async fn shutdown_stops_accepting_closes_idle_connections_and_lets_a_stream_finish() {
    let llm = ScriptedLlm::start(|_| {
        Reply::text("One two three four five six seven eight nine ten eleven twelve.")
            .chunk_size(6)
            .chunk_delay(Duration::from_millis(250))
    })
    .await;
    // Default deadlines: the idle connection is closed by the shutdown, not by its timeout.
    let stack = Stack::start(llm, Options::default()).await;
    let (addr, host, url) = (stack.edge.addr, host(&stack), stack.url("/api/v1/chat/stream"));
    let mut idle = RawConnection::connect(addr).await;
    idle.send_get("/healthz", &host).await;
    assert_eq!(idle.response(Duration::from_secs(10)).await.map(|(status, _)| status), Some(200));

    let http = stack.http.clone();
    let stream = tokio::spawn(async move {
        let response = http.post(url).json(&json!({"message": "Count to twelve"})).send().await.expect("stream starts");
        events(response).await
    });
    // The stream is under way (its first piece is out) before shutdown begins.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let edge = stack.edge;
    edge.stop().await;

    let events = stream.await.expect("stream task");
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.last(), Some(&"completed"), "the stream in flight finished: {names:?}");
    assert!(matches!(idle.closed_within(Duration::from_secs(1)).await, Closed::After(_)), "idle connection closed");
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "no new connections after shutdown");
}
