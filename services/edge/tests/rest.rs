//! The REST surface end to end: HTTP/JSON through the edge to the real services over gRPC,
//! with the examples of docs/requirements.md, streams as Server-Sent Events, and every class
//! of bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Options, Stack, events, json};
use reqwest::Method;
use serde_json::{Value, json};
use switchyard_testkit::llm::{Reply, ScriptedLlm};

const ANSWER: &str = "Diversify across stages, keep a cash runway, and favour founders with traction.";

async fn stack() -> Stack {
    Stack::start(ScriptedLlm::start(|_| Reply::text(ANSWER).usage(12, 9).chunk_size(12)).await, Options::default())
        .await
}

#[tokio::test]
async fn the_session_endpoints_work_as_the_requirements_examples_show() {
    let stack = stack().await;
    // "POST /api/context/sessions" with just the body of docs/requirements.md#sessions-usage-example.
    let (status, created) =
        json(stack.post("/api/context/sessions", None, &json!({"initial_role_id": "tech-expert"})).await).await;
    assert_eq!(status, 200, "{created}");
    let session_id = created["session"]["session_id"].as_str().unwrap().to_owned();
    assert_eq!(created["session"]["role_id"], "tech-expert");
    assert_eq!(created["session"]["status"], "SESSION_STATUS_ACTIVE");

    // The example's query names finance and technology; hysteresis decides.
    let (status, processed) = json(
        stack
            .post(
                "/api/context/process",
                None,
                &json!({"session_id": session_id, "query": "What are the best investment strategies for tech startups?"}),
            )
            .await,
    )
    .await;
    assert_eq!(status, 200, "{processed}");
    assert_eq!(processed["session_id"], session_id.as_str());
    assert!(processed["role_id"].as_str().is_some_and(|r| r.ends_with("-expert")), "{processed}");

    let (status, switched) = json(
        stack
            .post(
                "/api/context/switch",
                None,
                &json!({"session_id": session_id, "new_role_id": "legal-expert", "reason": "Manual switch by user"}),
            )
            .await,
    )
    .await;
    assert_eq!(status, 200, "{switched}");

    let (status, session) = json(stack.get(&format!("/api/context/sessions/{session_id}"), None).await).await;
    assert_eq!(status, 200);
    assert_eq!(session["session"]["role_id"], "legal-expert");

    let (status, history) = json(stack.get(&format!("/api/context/sessions/{session_id}/history"), None).await).await;
    assert_eq!(status, 200);
    let events = history["events"].as_array().unwrap();
    assert!(events.iter().any(|e| e["to_role_id"] == "legal-expert"), "the manual switch is in the history: {history}");

    let (status, _) =
        json(stack.send(Method::DELETE, &format!("/api/context/sessions/{session_id}"), None, &json!({})).await).await;
    assert_eq!(status, 200);
    let (status, closed) = json(
        stack.post("/api/context/process", None, &json!({"session_id": session_id, "query": "still there?"})).await,
    )
    .await;
    assert_eq!(status, 409, "a closed session refuses queries with a conflict: {closed}");
}

#[tokio::test]
async fn chat_returns_the_required_response_shape() {
    let stack = stack().await;
    let (status, body) =
        json(stack.post("/api/v1/chat", None, &json!({"message": "Hello, how are you today?"})).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "chat.completion");
    assert!(body["id"].as_str().unwrap().starts_with("chat-"));
    assert!(body["created"].as_i64().unwrap() > 1_700_000_000);
    assert_eq!(body["choices"][0]["index"], 0);
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(body["choices"][0]["message"]["content"], ANSWER);
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert!(body["usage"]["total_tokens"].as_u64().unwrap() > 0);
    let metadata = &body["_metadata"];
    assert_eq!(metadata["route_type"], "direct");
    assert!(metadata["execution_time_ms"].is_u64());
    assert!(metadata["tools_used"].is_array() && metadata["domains"].is_array());
    assert!(body["session_id"].as_str().is_some_and(|s| !s.is_empty()));
}

#[tokio::test]
async fn chat_streams_as_server_sent_events() {
    let stack = stack().await;
    let events = events(stack.post("/api/v1/chat/stream", None, &json!({"message": "Hello there"})).await).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"route"), "{names:?}");
    assert_eq!(names.last(), Some(&"completed"), "{names:?}");
    let text: String =
        events.iter().filter(|(n, _)| n == "delta").map(|(_, d)| d["content"].as_str().unwrap()).collect();
    assert_eq!(text, ANSWER);
    assert!(names.iter().filter(|n| **n == "delta").count() > 1, "the answer arrives in pieces");
    let (_, route) = &events[0];
    assert_eq!(route["metadata"]["route_type"], "ROUTE_TYPE_DIRECT");
    let (_, done) = events.last().unwrap();
    assert_eq!(done["finish_reason"], "stop");
    assert_eq!(done["usage"]["total_tokens"], 21);
}

#[tokio::test]
async fn process_stream_sends_the_switch_decision_first() {
    let stack = stack().await;
    let (_, created) =
        json(stack.post("/api/context/sessions", None, &json!({"initial_role_id": "general-assistant"})).await).await;
    let session_id = created["session"]["session_id"].as_str().unwrap().to_owned();
    let events = events(
        stack
            .post(
                "/api/context/process/stream",
                None,
                &json!({"session_id": session_id, "query": "Review this employment contract's non-compete clause for enforceability"}),
            )
            .await,
    )
    .await;
    let (name, context) = &events[0];
    assert_eq!(name, "context");
    assert_eq!(context["session_id"], session_id.as_str());
    assert_eq!(context["role_id"], "legal-expert", "{context}");
    assert_eq!(context["switched"], true);
    assert_eq!(context["previous_role_id"], "general-assistant");
    assert_eq!(events[1].0, "route");
    assert_eq!(events.last().unwrap().0, "completed");
    let text: String =
        events.iter().filter(|(n, _)| n == "delta").map(|(_, d)| d["content"].as_str().unwrap()).collect();
    assert_eq!(text, ANSWER);
    // The answer came in the chosen role: the model's system prompt is the legal expert's.
    let requests = stack.llm.requests();
    assert!(
        requests.iter().any(|r| r.system().is_some_and(|s| s.to_lowercase().contains("law"))),
        "the legal role answered"
    );

    // Bad input is refused before any stream starts.
    let (status, body) =
        json(stack.post("/api/context/process/stream", None, &json!({"session_id": session_id, "query": " "})).await)
            .await;
    assert_eq!((status, body["error"]["details"][0]["field_violations"][0]["field"].as_str()), (400, Some("query")));
    let (status, body) =
        json(stack.post("/api/context/process/stream", None, &json!({"session_id": session_id})).await).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) =
        json(stack.post("/api/context/process/stream", None, &json!({"query": "x", "colour": "red"})).await).await;
    assert_eq!((status, body["error"]["details"][0]["field_violations"][0]["field"].as_str()), (400, Some("colour")));
}

fn violation(body: &Value) -> Option<&str> {
    body["error"]["details"][0]["field_violations"][0]["field"].as_str()
}

#[tokio::test]
async fn mistakes_get_4xx_with_the_field_named_never_5xx() {
    let stack = stack().await;
    // Validation by the service behind the edge keeps its field.
    let (status, body) =
        json(stack.post("/api/context/process", None, &json!({"session_id": "s-1", "query": ""})).await).await;
    assert_eq!((status, violation(&body)), (400, Some("query")), "{body}");
    assert_eq!(body["error"]["status"], "INVALID_ARGUMENT");
    // Unknown fields, wrong types, broken JSON, a non-object body.
    let (status, body) =
        json(stack.post("/api/context/sessions", None, &json!({"initial_role": "tech-expert"})).await).await;
    assert_eq!((status, violation(&body)), (400, Some("initial_role")), "{body}");
    let (status, body) = json(stack.post("/api/v1/chat", None, &json!({"message": 42})).await).await;
    assert_eq!(status, 400, "{body}");
    let response = stack
        .http
        .post(stack.url("/api/v1/chat"))
        .header("content-type", "application/json")
        .body("{\"message\": ")
        .send()
        .await
        .unwrap();
    let (status, body) = json(response).await;
    assert_eq!((status, violation(&body)), (400, Some("body")));
    let (status, _) = json(stack.post("/api/v1/chat", None, &json!(["hi"])).await).await;
    assert_eq!(status, 400);
    // Enum names that do not exist.
    let (status, body) =
        json(stack.post("/api/v1/chat", None, &json!({"message": "x", "force_route": "ROUTE_TYPE_TELEPATHY"})).await)
            .await;
    assert_eq!(status, 400, "{body}");
    // Unknown session and role: 404.
    let (status, body) = json(stack.get("/api/context/sessions/no-such-session", None).await).await;
    assert_eq!((status, body["error"]["status"].as_str()), (404, Some("NOT_FOUND")));
    let (status, _) = json(stack.get("/api/context/roles/no-such-role", None).await).await;
    assert_eq!(status, 404);
    // No such path; a path with other methods.
    let (status, _) = json(stack.get("/api/nothing/here", None).await).await;
    assert_eq!(status, 404);
    let response = stack.send(Method::PUT, "/api/context/sessions", None, &json!({})).await;
    assert_eq!(response.headers()["allow"], "POST");
    assert_eq!(json(response).await.0, 405);
    // Query parameters that are not fields, or do not parse.
    let (status, body) = json(stack.get("/api/v1/chat/stats?window=3h", None).await).await;
    assert_eq!((status, violation(&body)), (400, Some("window")));
    let (status, _) = json(stack.get("/api/v1/chat/stats?since=yesterday", None).await).await;
    assert_eq!(status, 400);
    // Not JSON; too large.
    let response = stack
        .http
        .post(stack.url("/api/v1/chat"))
        .header("content-type", "text/plain")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(json(response).await.0, 415);
    let huge = "x".repeat(2 * 1024 * 1024);
    let (status, body) = json(stack.post("/api/v1/chat", None, &json!({"message": huge})).await).await;
    assert_eq!(status, 413, "{body}");
    // The services are fine after all that.
    let (status, _) = json(stack.get("/api/context/roles", None).await).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn roles_triggers_and_stats_are_served_from_their_annotations() {
    let stack = stack().await;
    let (status, roles) = json(stack.get("/api/context/roles", None).await).await;
    assert_eq!(status, 200);
    assert!(roles["roles"].as_array().unwrap().iter().any(|r| r["id"] == "finance-expert"));
    let (status, role) = json(stack.get("/api/context/roles/finance-expert", None).await).await;
    assert_eq!((status, role["role"]["id"].as_str()), (200, Some("finance-expert")));

    // A custom role through the REST API (body "role"), updated by a path with a nested
    // field (`{role.id}`), then removed.
    let role = json!({"id": "wine-expert", "name": "Sommelier", "description": "Wine pairing", "system_prompt": "You pair wine.",
                      "custom_triggers": [{"pattern": "sommelier", "kind": "TRIGGER_KIND_KEYWORD", "priority": 5}]});
    let (status, created) = json(stack.post("/api/context/roles", None, &role).await).await;
    assert_eq!(status, 200, "{created}");
    let (status, updated) = json(
        stack.send(Method::PATCH, "/api/context/roles/wine-expert", None, &json!({"name": "Head sommelier"})).await,
    )
    .await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["role"]["name"], "Head sommelier");
    assert_eq!(updated["role"]["id"], "wine-expert");

    let (status, domains) = json(stack.get("/api/triggers/domains", None).await).await;
    assert_eq!(status, 200);
    assert!(domains.to_string().contains("finance"));
    let (status, detected) = json(
        stack
            .post("/api/triggers/detect", None, &json!({"query": "Which index fund suits my retirement portfolio?"}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{detected}");
    assert!(detected.to_string().contains("finance-expert"), "{detected}");

    let (status, _) = json(stack.send(Method::DELETE, "/api/context/roles/wine-expert", None, &json!({})).await).await;
    assert_eq!(status, 200);
    // The role new sessions start with stays: deleting it is a conflict, not a broken suite.
    let (status, body) =
        json(stack.send(Method::DELETE, "/api/context/roles/general-assistant", None, &json!({})).await).await;
    assert_eq!((status, body["error"]["status"].as_str()), (409, Some("FAILED_PRECONDITION")), "{body}");
    let (status, _) = json(stack.get("/api/context/roles/wine-expert", None).await).await;
    assert_eq!(status, 404);

    // A turn, then the analytics window (a query parameter bound to a Timestamp).
    let (status, _) = json(stack.post("/api/v1/chat", None, &json!({"message": "Hi"})).await).await;
    assert_eq!(status, 200);
    let stats = switchyard_testkit::eventually(std::time::Duration::from_secs(10), "the turn in the stats", || async {
        let (status, stats) = json(stack.get("/api/v1/chat/stats?since=2020-01-01T00:00:00Z", None).await).await;
        if status == 200 && stats["total"] == "1" { Ok(stats) } else { Err(format!("{status} {stats}")) }
    })
    .await;
    // The per-key figures too: the turn came without an API key (an open edge), so under the
    // empty key id, with the turn's cost.
    let keys = stats["api_keys"].as_array().unwrap_or_else(|| panic!("api_keys: {stats}"));
    assert_eq!(keys.len(), 1, "{stats}");
    assert_eq!((&keys[0]["key_id"], &keys[0]["turns"]), (&json!(""), &json!("1")), "{stats}");
    assert_eq!(keys[0]["cost_usd"], stats["cost_usd"], "{stats}");
}

#[tokio::test]
async fn the_mcp_endpoints_reach_the_gateways_tools() {
    let llm = ScriptedLlm::start(|_| Reply::text("ok")).await;
    let stack = Stack::start(llm, Options { gateway: true, ..Options::default() }).await;
    let (status, tools) = json(stack.get("/api/mcp/tools?session_id=rest-1", None).await).await;
    assert_eq!(status, 200, "{tools}");
    let names: Vec<&str> =
        tools["tools"].as_array().unwrap().iter().filter_map(|t| t["tool"]["name"].as_str()).collect();
    let sum = names.iter().find(|n| n.ends_with("get-sum")).expect("get-sum listed");
    // `{name}:call`, a custom verb after a path variable.
    let (status, called) = json(
        stack
            .post(
                &format!("/api/mcp/tools/{sum}:call"),
                None,
                &json!({"session_id": "rest-1", "arguments": {"a": 17, "b": 25}}),
            )
            .await,
    )
    .await;
    assert_eq!(status, 200, "{called}");
    assert!(called.to_string().contains("42"), "{called}");
    let (status, servers) = json(stack.get("/api/mcp/servers", None).await).await;
    assert_eq!(status, 200);
    assert!(servers.to_string().contains("everything"));
    let (status, body) =
        json(stack.post("/api/mcp/tools/no_such_tool:call", None, &json!({"session_id": "rest-1"})).await).await;
    assert!(status == 404 || status == 400, "{status} {body}");
}

#[tokio::test]
async fn openapi_and_probes_are_served() {
    let stack = stack().await;
    let (status, doc) = json(stack.get("/openapi.json", None).await).await;
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.0.3");
    for path in [
        "/api/context/sessions",
        "/api/context/process",
        "/api/context/process/stream",
        "/api/v1/chat",
        "/v1/chat/completions",
    ] {
        assert!(doc["paths"][path]["post"].is_object(), "{path} documented");
    }
    let (status, health) = json(stack.get("/healthz", None).await).await;
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")));
    let (status, ready) = json(stack.get("/readyz", None).await).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["dependencies"]["router"], "SERVING");
    // The gateway is not running in this stack: reported, not fatal.
    assert!(ready["dependencies"]["mcp-gateway"].as_str().unwrap().starts_with("UNAVAILABLE"));
    let response = stack.get("/", None).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
}
