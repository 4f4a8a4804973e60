//! Real MCP clients against the gateway's `/mcp`: the Python SDK (`mcp`, installed by
//! scripts/install-tools.sh as `.tools/bin/mcp-python`) and the MCP Inspector CLI.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use serde_json::Value;
use switchyard_mcp_gateway::Stores;
use switchyard_testkit::{
    mcp::{FixtureServer, tool},
    peer_tool, root,
};

fn fixture_tools() -> Vec<rmcp::model::Tool> {
    vec![
        tool("outfit_ideas", "Suggests what to wear for an occasion and the weather.", &["occasion"]),
        tool("flight_search", "Finds flights between two airports on a date.", &["from", "to"]),
        tool("sql_from_text", "Turns a question into an SQL query.", &["question"]),
        tool("currency_convert", "Converts an amount between currencies.", &["amount"]),
    ]
}

async fn gateway() -> (FixtureServer, common::Running) {
    let fixture = FixtureServer::start(fixture_tools()).await.unwrap();
    let mut config = common::config(&[format!("fx={}", fixture.url())]);
    config.top_k = 2;
    let running = common::start(&config, Stores::in_memory(), Some(common::embedder())).await;
    running.ready(4).await;
    (fixture, running)
}

fn run(program: &str, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(program).args(args).output().unwrap_or_else(|err| panic!("{program}: {err}"));
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into(),
        String::from_utf8_lossy(&output.stderr).into(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_client() {
    let (_fixture, running) = gateway().await;
    let script = root().join("services/mcp-gateway/tests/clients/python_client.py");
    let python = peer_tool("mcp-python");
    let url = running.mcp_url();
    let (ok, stdout, stderr) =
        tokio::task::spawn_blocking(move || run(&python, &[&script.display().to_string(), &url])).await.unwrap();
    assert!(ok, "python client failed:\n{stderr}");
    // Leaving the session sends DELETE /mcp; the SDK logs a warning unless it is 200 or 204.
    assert!(!stderr.contains("Session termination failed"), "the session did not end cleanly:\n{stderr}");
    let report: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|err| panic!("{err}: {stdout}"));
    assert_eq!(report["server"], "switchyard-mcp-gateway");
    assert_eq!(report["protocol"], "2025-11-25");
    assert_eq!(report["all"].as_array().unwrap().len(), 5, "{report}");
    assert_eq!(report["set_context_error"], false);
    let filtered: Vec<&str> = report["filtered"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(filtered, ["set_context", "fx__outfit_ideas", filtered[2]], "{report}");
    assert!(report["call"].as_str().unwrap().contains("outfit_ideas called with"), "{report}");
    assert!(report["unknown"].as_str().unwrap().contains("unknown tool `fx__missing`"), "{report}");
    // The discover-first client speaks the stateless revision, its context kept by handle.
    assert_eq!(report["high_level_protocol"], "2026-07-28", "{report}");
    assert_eq!(report["high_level_tools"], 5, "{report}");
    assert!(report["handle"].as_str().is_some_and(|h| h.starts_with("ctx-")), "{report}");
    assert_eq!(report["handle_in_meta"], true, "{report}");
    assert_eq!(report["high_level_filtered"], report["filtered"], "the same context, the same list: {report}");
    assert!(report["high_level_call"].as_str().unwrap().contains("outfit_ideas called with"), "{report}");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspector_cli() {
    let (_fixture, running) = gateway().await;
    let inspector = peer_tool("mcp-inspector");
    let url = running.mcp_url();
    let (listed, called, unknown) = tokio::task::spawn_blocking(move || {
        (
            run(&inspector, &["--cli", &url, "--method", "tools/list"]),
            run(
                &inspector,
                &[
                    "--cli",
                    &url,
                    "--method",
                    "tools/call",
                    "--tool-name",
                    "fx__flight_search",
                    "--tool-arg",
                    "from=LIS",
                    "to=CDG",
                ],
            ),
            run(&inspector, &["--cli", &url, "--method", "tools/call", "--tool-name", "fx__nope"]),
        )
    })
    .await
    .unwrap();

    let (ok, stdout, stderr) = listed;
    assert!(ok, "tools/list failed: {stderr}");
    let list: Value = serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("{err}: {stdout}"));
    let names: Vec<&str> = list["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["set_context", "fx__outfit_ideas", "fx__flight_search", "fx__sql_from_text", "fx__currency_convert"]
    );

    let (ok, stdout, stderr) = called;
    assert!(ok, "tools/call failed: {stderr}");
    assert!(stdout.contains(r#"flight_search called with"#) && stdout.contains("LIS"), "{stdout}");

    let (ok, _, stderr) = unknown;
    assert!(!ok, "an unknown tool is an error");
    assert!(stderr.contains("fx__nope"), "{stderr}");
    running.stop().await;
}
