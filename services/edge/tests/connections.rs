//! The edge's listener against slow, idle and too many clients, over real TCP with the
//! deadlines shortened: a request head sent a byte at a time and a connection that says
//! nothing are closed by the header timeout, a keep-alive connection by the idle timeout after
//! its last response, connections past the limit wait until one closes; while a client that
//! keeps asking and a stream that keeps running longer than both timeouts are left alone.
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

#[tokio::test]
async fn connections_past_the_limit_wait_until_one_closes() {
    let stack = edge(|config| config.max_connections = 2).await;
    let (addr, host) = (stack.edge.addr, host(&stack));

    let mut first = RawConnection::connect(addr).await;
    let mut second = RawConnection::connect(addr).await;
    for connection in [&mut first, &mut second] {
        connection.send_get("/healthz", &host).await;
        assert_eq!(connection.response(Duration::from_secs(10)).await.map(|(status, _)| status), Some(200));
    }
    // The third is not served while two are open...
    let mut third = RawConnection::connect(addr).await;
    third.send_get("/healthz", &host).await;
    assert_eq!(third.response(Duration::from_secs(1)).await, None, "a connection past the limit was served");
    // ...and is as soon as one of them closes.
    drop(first);
    let answer = third.response(Duration::from_secs(10)).await;
    assert_eq!(answer.map(|(status, _)| status), Some(200), "the waiting connection is served once one closes");
    // The connection still open was not disturbed.
    second.send_get("/healthz", &host).await;
    assert_eq!(second.response(Duration::from_secs(10)).await.map(|(status, _)| status), Some(200));
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
