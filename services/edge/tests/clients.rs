//! Real clients against the edge: the official Python `openai` package on
//! `/v1/chat/completions` (streaming and not), and schemathesis over every operation of
//! `/openapi.json` with a valid key, failing on any 5xx. Both come pinned from
//! `scripts/install-tools.sh` (`.tools/venv`); the tests fail when they are missing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::{Auth, Options, Stack};
use switchyard_testkit::llm::{Reply, ScriptedLlm};

const ANSWER: &str = "Hello! Switchyard here, happy to help.";

async fn run(program: std::path::PathBuf, args: Vec<String>) -> (bool, String, String) {
    assert!(program.exists(), "{} is missing: run scripts/install-tools.sh", program.display());
    let output = tokio::task::spawn_blocking(move || Command::new(program).args(args).output())
        .await
        .unwrap()
        .expect("the client runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_openai_python_sdk_works_unchanged() {
    let llm = ScriptedLlm::start(|_| Reply::text(ANSWER).usage(11, 7).chunk_size(6)).await;
    let stack = Stack::start(llm, Options { auth: Auth::Closed { jwks_file: None }, ..Options::default() }).await;
    let key = stack.key("acme", "sdk-user", false).await;
    let root = switchyard_testkit::root();
    let (ok, stdout, stderr) = run(
        root.join(".tools/venv/bin/python"),
        vec![
            root.join("services/edge/tests/clients/openai_check.py").display().to_string(),
            "--base-url".into(),
            format!("{}/v1", stack.edge.url()),
            "--api-key".into(),
            key,
            "--expect-content".into(),
            "happy to help".into(),
        ],
    )
    .await;
    assert!(ok, "the openai client check failed:\n{stdout}\n{stderr}");
    let summary: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).expect("a JSON summary");
    assert!(summary.to_string().contains("direct"), "{summary}");
    // The SDK's calls reached the router and its model as the key's tenant and user.
    assert!(stack.llm.requests().len() >= 2);
}

#[tokio::test]
async fn schemathesis_finds_no_server_error_in_the_openapi_document() {
    let llm = ScriptedLlm::start(|_| Reply::text(ANSWER).usage(5, 5)).await;
    let options = Options {
        // Every operation has its service behind it, the MCP gateway too.
        gateway: true,
        auth: Auth::Closed { jwks_file: None },
        // Thousands of requests from one key: no rate limit here (tested on its own).
        configure: Box::new(|config| config.rate_limit = 0),
        ..Options::default()
    };
    let stack = Stack::start(llm, options).await;
    // An administrator, so the role operations are exercised too.
    let key = stack.key("acme", "fuzzer", true).await;
    let root = switchyard_testkit::root();
    let report = option_env!("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), std::path::PathBuf::from)
        .join("test-output/edge-schemathesis");
    std::fs::create_dir_all(&report).unwrap();
    let script = root.join("services/edge/tests/clients/schemathesis.sh");
    let program = std::path::PathBuf::from("bash");
    assert!(script.exists());
    let output = tokio::task::spawn_blocking({
        let report = report.clone();
        let target = stack.edge.addr.to_string();
        move || Command::new(program).arg(script).arg(target).arg(key).env("SCHEMATHESIS_REPORT_DIR", report).output()
    })
    .await
    .unwrap()
    .expect("schemathesis runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "schemathesis failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("no 5xx"), "{stdout}");
    assert!(report.join("junit.xml").exists());
}

/// The vendor as an agent's model: it calls the forced tool, or `get_weather` for Paris while
/// the request offers the caller's tools and does not end in a tool result; answers with the
/// tool's result once it has one; answers JSON when a response format asks for it.
fn agent_model(request: &switchyard_testkit::llm::Recorded) -> Reply {
    let last = request.messages().last().cloned().unwrap_or_default();
    if last["role"] == "tool" {
        let result = last["content"].as_str().unwrap_or_default().to_owned();
        return Reply::text(format!("It is {result} in Paris.")).chunk_size(5);
    }
    if request.body.get("response_format").is_some() {
        return Reply::text(r#"{"city": "Paris"}"#);
    }
    let client_tools: Vec<String> = request.tool_names().into_iter().filter(|name| !name.starts_with("use_")).collect();
    if !client_tools.is_empty() {
        let forced = request.body["tool_choice"]["function"]["name"].as_str();
        return match forced {
            Some(name) => Reply::tool_call(name, r#"{"city": "Paris"}"#),
            None => Reply::tool_call("get_weather", r#"{"city": "Paris"}"#).chunk_size(4),
        };
    }
    Reply::text("A single pixel.")
}

#[tokio::test]
async fn the_openai_python_sdk_runs_a_tool_loop_with_images_and_json() {
    let llm = ScriptedLlm::start(agent_model).await;
    let stack = Stack::start(llm, Options { auth: Auth::Closed { jwks_file: None }, ..Options::default() }).await;
    let key = stack.key("acme", "agent", false).await;
    let root = switchyard_testkit::root();
    let (ok, stdout, stderr) = run(
        root.join(".tools/venv/bin/python"),
        vec![
            root.join("services/edge/tests/clients/openai_tools_check.py").display().to_string(),
            "--base-url".into(),
            format!("{}/v1", stack.edge.url()),
            "--api-key".into(),
            key,
        ],
    )
    .await;
    assert!(ok, "the openai tools check failed:\n{stdout}\n{stderr}");
    let requests = stack.llm.requests();
    let client_turns: Vec<_> = requests.iter().filter(|r| r.tool_names().contains(&"get_weather".to_owned())).collect();
    // The caller's tools reach the model unchanged, and alone: never the routing tools beside them.
    for request in &client_turns {
        assert!(request.tool_names().iter().all(|name| !name.starts_with("use_")), "{:?}", request.tool_names());
    }
    let weather = &client_turns[0].body["tools"][0]["function"];
    assert_eq!(weather["description"], "The current weather in a city.");
    assert_eq!(weather["parameters"]["required"][0], "city");
    // The tool result came back to the model after its call, with the call's id.
    let continued = requests
        .iter()
        .find(|r| r.messages().last().is_some_and(|m| m["role"] == "tool"))
        .expect("a request ending in the tool result");
    let result = continued.messages().last().unwrap();
    assert_eq!(result["content"], "18C and sunny");
    let asked = &continued.messages()[continued.messages_len() - 2];
    assert_eq!(asked["tool_calls"][0]["id"], result["tool_call_id"]);
    assert_eq!(asked["tool_calls"][0]["function"]["name"], "get_weather");
    // tool_choice and parallel_tool_calls reached the model.
    let forced = requests.iter().find(|r| r.body["tool_choice"]["function"]["name"] == "get_time").expect("forced");
    assert_eq!(forced.body["parallel_tool_calls"], false);
    // The image part reached the model as an image_url part.
    let image = requests
        .iter()
        .flat_map(|r| r.messages().to_vec())
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|part| part["type"] == "image_url")
        .expect("an image part reached the vendor");
    assert!(image["image_url"]["url"].as_str().unwrap().starts_with("data:image/png;base64,"));
    // Once: the message with the image is the user's message, not one more before its text.
    let asking = requests
        .iter()
        .find(|r| r.messages().iter().any(|m| m["content"].as_array().is_some_and(|parts| parts.contains(&image))))
        .unwrap();
    let questions: Vec<_> =
        asking.messages().iter().filter(|m| m["role"] == "user").map(|m| m["content"].to_string()).collect();
    assert_eq!(questions.len(), 1, "{questions:?}");
    // response_format reached the OpenAI-wire vendor as sent.
    let format = requests.iter().find_map(|r| r.body.get("response_format").cloned()).expect("response_format");
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["name"], "weather");
    assert_eq!(format["json_schema"]["schema"]["required"][0], "city");
}
