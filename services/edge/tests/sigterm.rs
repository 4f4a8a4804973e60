//! A real SIGTERM to the `switchyard-edge` process under load (open, in front of triggers,
//! sessions and the router in process, the scripted vendor behind them, a 3 s
//! `--shutdown-grace`): REST chat turns from callers on kept-alive connections, an SSE stream
//! shorter than the grace and one longer, and a turn whose vendor answers after the grace.
//! The turns sent before the signal are answered and the short stream completes; the long
//! stream ends with exactly one `error` event (503 UNAVAILABLE, "edge is shutting down"); the
//! turn past the grace is answered at the grace, not later, with a 503 (the JSON error,
//! UNAVAILABLE, "edge is shutting down", `Retry-After`) before its connection closes; new
//! connections are refused once the signal is taken; the process exits 0 within the grace.
//! The edge holds no records of its own to drain (its API keys are read, not written, on a
//! request's path).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use common::parse_events;
use serde_json::{Value, json};
use switchyard_cli::{DevPorts, Stack, stack::Serving};
use switchyard_kit::Secret;
use switchyard_llm::{ModelRef, ProviderArgs};
use switchyard_testkit::{
    Served, Shutdown, closed_port, eventually, free_port,
    llm::{Recorded, Reply, ScriptedLlm},
    process::{ServiceProcess, UnaryLoad, assert_answered_or_refused},
    wait_serving,
};

const BINARY: &str = env!("CARGO_BIN_EXE_switchyard-edge");
const GRACE: Duration = Duration::from_secs(3);
const CALLERS: usize = 3;

/// `quick:` answered at once, `story:` streamed over about 1 s, `long-story:` over 10 s,
/// `hang:` answered after 30 s.
fn vendor(request: &Recorded) -> Reply {
    let asked = request.last_user_text().unwrap_or_default();
    let answer = format!("answer to: {asked}");
    match asked.split_once(':').map(|(kind, _)| kind) {
        Some("story") => Reply::text(answer.repeat(8)).chunk_size(16).chunk_delay(Duration::from_millis(50)),
        Some("long-story") => Reply::text(answer.repeat(8)).chunk_size(2).chunk_delay(Duration::from_millis(100)),
        Some("hang") => Reply::text(answer).delay(Duration::from_secs(30)),
        _ => Reply::text(answer),
    }
}

/// A whole SSE body's events, read to its end.
async fn stream(http: reqwest::Client, url: String, question: &'static str) -> Vec<(String, Value)> {
    let response = http.post(url).json(&json!({"message": question})).send().await.expect("the stream opens");
    assert_eq!(response.status().as_u16(), 200, "{question}");
    let text = response.text().await.expect("the stream's body ends cleanly, not cut");
    assert!(text.ends_with("\n\n"), "{question}: the last event is whole: {text:?}");
    parse_events(&text)
}

/// Whether a request crossed the close of its idle kept-alive connection: the connection ended
/// before any response head (hyper's `IncompleteMessage`, under reqwest's error), so the edge
/// never read the request — it was refused, as a refused connection is. The edge closes idle
/// connections at once when it takes the SIGTERM, and a request sent at that instant meets it.
fn crossed_an_idle_close(err: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(err);
    while let Some(error) = source {
        if error.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_incomplete_message) {
            return true;
        }
        source = error.source();
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_under_load_finishes_or_cuts_each_request_and_refuses_new_connections() {
    let llm = ScriptedLlm::start(vendor).await;
    let gateway = closed_port();
    let openai_base_url = llm.openai_base_url();
    let stack = Stack::builder(DevPorts::loopback())
        .without_gateway(gateway.url())
        .router(move |config| {
            config.providers = ProviderArgs {
                openai_base_url: Some(openai_base_url),
                openai_api_key: Some(Secret::new("sk-edge-sigterm")),
                max_retries: 0,
                ..ProviderArgs::default()
            };
            config.default_model = "openai/gpt-4o-mini".parse::<ModelRef>().expect("model");
            config.no_fast_router = true;
        })
        .without_edge()
        .start()
        .await
        .expect("triggers, sessions and the router start");
    let Serving { triggers: _triggers, sessions, router, .. } = stack.serve_each::<_, Shutdown, _>(Served::spawn);
    wait_serving(&sessions.url(), "switchyard.sessions.v1.SessionService").await;
    wait_serving(&router.url(), "switchyard.router.v1.RouterService").await;

    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut command = tokio::process::Command::new(BINARY);
    command
        .args(["--listen", &addr.to_string(), "--open", "--rate-limit", "0"])
        .args(["--router-url", &router.url(), "--sessions-url", &sessions.url()])
        .args(["--mcp-gateway-url", &gateway.url(), "--triggers-url", &closed_port().url()])
        .args(["--shutdown-grace", &format!("{}s", GRACE.as_secs())])
        // Nothing shared: the in-process rate limiter, no API-key table.
        .env_remove("REDIS_URL")
        .env_remove("DATABASE_URL");
    let mut edge = ServiceProcess::spawn(command, "switchyard-edge", addr);
    edge.wait_http_ok("/healthz").await;
    let chat = format!("{}/api/v1/chat", edge.url());
    let stream_url = format!("{}/api/v1/chat/stream", edge.url());
    let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();

    // Quick turns on kept-alive connections, until the edge refuses them: a refused
    // connection, a request that crossed the close of its idle connection or a 503 count as
    // refused (UNAVAILABLE), anything else as a failure.
    let load = {
        let (http, chat) = (http.clone(), chat.clone());
        UnaryLoad::start(CALLERS, move |caller, n| {
            let (http, chat) = (http.clone(), chat.clone());
            async move {
                let question = format!("quick:load-{caller}-{n}");
                let answer = http.post(&chat).json(&json!({"message": question})).send().await;
                let answer = match answer {
                    Ok(answer) => answer,
                    Err(err) if err.is_connect() || crossed_an_idle_close(&err) => {
                        return Err(tonic::Status::unavailable(err.to_string()));
                    }
                    Err(err) => return Err(tonic::Status::unknown(format!("{err:?}"))),
                };
                let status = answer.status().as_u16();
                let body: Value = answer.json().await.unwrap_or(Value::Null);
                match status {
                    200 => {
                        let content = &body["choices"][0]["message"]["content"];
                        assert_eq!(content, &json!(format!("answer to: {question}")), "its own answer");
                        Ok(())
                    }
                    503 => Err(tonic::Status::unavailable(body.to_string())),
                    _ => Err(tonic::Status::unknown(format!("{status} {body}"))),
                }
            }
        })
    };
    load.under_way(CALLERS * 3).await;
    let story = tokio::spawn(stream(http.clone(), stream_url.clone(), "story:short"));
    let long_story = tokio::spawn(stream(http.clone(), stream_url.clone(), "long-story:past the grace"));
    let hang = {
        let (http, chat) = (http.clone(), chat.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let answer = http.post(&chat).json(&json!({"message": "hang:past the grace"})).send().await;
            let outcome = match answer {
                Ok(answer) => {
                    let retry_after = answer.headers().get("retry-after").cloned();
                    Ok((answer.status().as_u16(), retry_after, answer.text().await.unwrap_or_default()))
                }
                Err(err) => Err(format!("{err:?}")),
            };
            (outcome, started.elapsed())
        })
    };
    eventually(Duration::from_secs(30), "the requests in flight at the vendor", || async {
        let seen: Vec<String> = llm.requests().iter().filter_map(Recorded::last_user_text).collect();
        ["story:short", "long-story:past the grace", "hang:past the grace"]
            .iter()
            .all(|question| seen.iter().any(|s| s == question))
    })
    .await;

    let signaled = edge.sigterm();
    edge.refuses_new_connections(Duration::from_secs(2)).await;

    let events = story.await.expect("story task");
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names.last(), Some(&"completed"), "the stream in flight finishes: {names:?}");
    assert!(!names.contains(&"error"), "{names:?}");
    let events = long_story.await.expect("long story task");
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names.iter().filter(|name| **name == "error").count(), 1, "one error event: {names:?}");
    assert!(!names.contains(&"completed"), "{names:?}");
    let (name, error) = events.last().unwrap();
    assert_eq!(name, "error", "{names:?}");
    assert_eq!((error["error"]["code"].clone(), error["error"]["status"].clone()), (json!(503), json!("UNAVAILABLE")));
    assert!(error["error"]["message"].as_str().is_some_and(|m| m.contains("shutting down")), "{error}");
    let (outcome, took) = hang.await.expect("hang task");
    eprintln!("the turn past the grace ended {outcome:?} after {took:?}");
    assert!(took < GRACE + Duration::from_secs(2), "ended at the grace, not hung: {took:?}");
    let (status, retry_after, body) = outcome.expect("the turn past the grace is answered, its connection not cut");
    assert_eq!(status, 503, "{body}");
    assert_eq!(retry_after.as_ref().and_then(|v| v.to_str().ok()), Some("1"), "Retry-After: {retry_after:?}");
    let error: Value = serde_json::from_str(&body).expect("the edge's JSON error");
    assert_eq!((error["error"]["code"].clone(), error["error"]["status"].clone()), (json!(503), json!("UNAVAILABLE")));
    assert!(error["error"]["message"].as_str().is_some_and(|m| m.contains("edge is shutting down")), "{error}");

    let exit = edge.exits(GRACE + Duration::from_secs(2)).await;
    let stopped_after = signaled.elapsed();
    assert!(exit.success(), "exit 0 after SIGTERM: {exit:?}");
    let calls = load.finish().await;
    let answered = assert_answered_or_refused("edge", &calls, signaled);
    eprintln!("{answered} quick turns answered; the process exited {stopped_after:?} after SIGTERM");
}

/// The load's test for a request that crossed an idle connection's close, against a server
/// that reads a request and closes the connection with no response.
#[tokio::test]
async fn a_request_whose_connection_closes_before_any_response_is_told_apart() {
    use tokio::io::AsyncReadExt;

    switchyard_kit::tls::install_crypto_provider();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let closing = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        // The whole request is read (its JSON body ends it), so the close is a clean one, not
        // a reset over unread bytes.
        let mut request = Vec::new();
        while !request.ends_with(b"}") {
            let mut chunk = [0_u8; 1024];
            let read = socket.read(&mut chunk).await.unwrap();
            assert!(read > 0, "the request is whole: {}", String::from_utf8_lossy(&request));
            request.extend_from_slice(&chunk[..read]);
        }
    });
    let err = reqwest::Client::new()
        .post(format!("http://{addr}/api/v1/chat"))
        .json(&json!({"message": "quick:closed"}))
        .send()
        .await
        .expect_err("no response on a closed connection");
    closing.await.unwrap();
    assert!(crossed_an_idle_close(&err), "{err:?}");

    let refused = reqwest::Client::new().get(closed_port().url()).send().await.expect_err("a closed port");
    assert!(!crossed_an_idle_close(&refused), "{refused:?}");
}
