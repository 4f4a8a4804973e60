//! Streams in flight when a shutdown grace runs out — the router's behind the edge, or the
//! edge's own — end with exactly one error event in each API's shape saying the server is
//! shutting down: the REST SSE stream an `error` event (503, UNAVAILABLE), the OpenAI stream
//! one chunk in OpenAI's error shape and no `[DONE]`. Never a bare cut, never two errors.

mod common;

use std::time::Duration;

use common::{Options, Stack, parse_events};
use reqwest::Response;
use serde_json::{Value, json};
use switchyard_testkit::llm::{Reply, ScriptedLlm};

const GRACE: Duration = Duration::from_secs(2);

/// An answer that takes far longer than the grace: a few words every 200 ms.
async fn slow_vendor() -> ScriptedLlm {
    ScriptedLlm::start(|_| {
        Reply::text("Refinancing replaces your mortgage with a new loan at today's rate. ".repeat(20))
            .chunk_size(8)
            .chunk_delay(Duration::from_millis(200))
    })
    .await
}

/// An SSE body read as it arrives.
struct Reading {
    response: Response,
    text: String,
}

impl Reading {
    async fn open(stack: &Stack, path: &str, body: Value) -> Self {
        let response = stack.post(path, None, &body).await;
        assert_eq!(response.status().as_u16(), 200, "{path} opens");
        Self { response, text: String::new() }
    }

    /// Reads until `count` events whose data has `needle` have arrived.
    async fn until(&mut self, needle: &str, count: usize) {
        while self.text.matches(needle).count() < count {
            let chunk = self.response.chunk().await.expect("the stream reads").expect("the stream goes on");
            self.text.push_str(std::str::from_utf8(&chunk).expect("utf-8"));
        }
    }

    /// Reads to the end; the body must end cleanly (not be cut mid-frame).
    async fn finish(mut self) -> Vec<(String, Value)> {
        while let Some(chunk) = self.response.chunk().await.expect("the stream ends cleanly, not cut") {
            self.text.push_str(std::str::from_utf8(&chunk).expect("utf-8"));
        }
        assert!(self.text.ends_with("\n\n"), "the last event is whole: {:?}", self.text);
        parse_events(&self.text)
    }
}

async fn open_both(stack: &Stack) -> (Reading, Reading) {
    let mut rest = Reading::open(stack, "/api/v1/chat/stream", json!({"message": "how does refinancing work?"})).await;
    let mut openai = Reading::open(
        stack,
        "/v1/chat/completions",
        json!({"model": "switchyard", "stream": true, "messages": [{"role": "user", "content": "and in my case?"}]}),
    )
    .await;
    // Both answers have begun.
    rest.until("event: delta", 2).await;
    openai.until("\"content\"", 3).await;
    (rest, openai)
}

/// One `error` event, the last, in Google's error shape (503, UNAVAILABLE) with `message`.
fn assert_rest_ends_with_one_error(events: &[(String, Value)], message: &str) {
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.iter().filter(|n| **n == "error").count(), 1, "{names:?}");
    assert!(names.contains(&"delta"), "{names:?}");
    let (name, error) = events.last().expect("events");
    assert_eq!(name, "error", "{names:?}");
    assert_eq!(error["error"]["code"], 503, "{error}");
    assert_eq!(error["error"]["status"], "UNAVAILABLE", "{error}");
    assert!(error["error"]["message"].as_str().is_some_and(|m| m.contains(message)), "{error}");
}

/// One error chunk in OpenAI's shape, the last: no `[DONE]` after it.
fn assert_openai_ends_with_one_error(events: &[(String, Value)], message: &str) {
    let data: Vec<&Value> = events.iter().map(|(_, v)| v).collect();
    let errors: Vec<&&Value> = data.iter().filter(|v| v.get("error").is_some()).collect();
    assert_eq!(errors.len(), 1, "{data:?}");
    assert!(data.iter().any(|v| v["object"] == "chat.completion.chunk"), "{data:?}");
    let last = data.last().expect("chunks");
    assert!(last.get("error").is_some(), "the error chunk is the last, no [DONE]: {data:?}");
    assert_eq!(last["error"]["type"], "api_error", "{last}");
    assert_eq!(last["error"]["code"], "unavailable", "{last}");
    assert!(last["error"]["message"].as_str().is_some_and(|m| m.contains(message)), "{last}");
}

#[tokio::test]
async fn streams_cut_by_the_routers_shutdown_end_with_one_error_event_each() {
    let options =
        Options { configure_router: Box::new(|config| config.server.shutdown_grace = GRACE), ..Options::default() };
    let stack = Stack::start(slow_vendor().await, options).await;
    let (rest, openai) = open_both(&stack).await;

    let Stack { router, .. } = stack;
    let stopping = tokio::spawn(router.stop());
    let (rest, openai) = tokio::join!(rest.finish(), openai.finish());
    stopping.await.expect("router stops cleanly");

    assert_rest_ends_with_one_error(&rest, "shutting down");
    assert_openai_ends_with_one_error(&openai, "shutting down");
}

#[tokio::test]
async fn streams_still_open_when_the_edges_grace_ends_get_one_error_event_each() {
    let options = Options { configure: Box::new(|config| config.shutdown_grace = GRACE), ..Options::default() };
    let stack = Stack::start(slow_vendor().await, options).await;
    let (rest, openai) = open_both(&stack).await;

    let Stack { edge, .. } = stack;
    let stopping = tokio::spawn(edge.stop());
    let (rest, openai) = tokio::join!(rest.finish(), openai.finish());
    stopping.await.expect("edge stops cleanly");

    assert_rest_ends_with_one_error(&rest, "edge is shutting down");
    assert_openai_ends_with_one_error(&openai, "edge is shutting down");
}
