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
