//! A stdio MCP server that dies or hangs under a call: the caller gets a JSON-RPC error naming
//! the server (at once when the server is killed, at `--call-timeout` when it hangs), calls to
//! other servers go on meanwhile, and the gateway starts the dead server again, its tools back.
//! Real pieces: the gateway over streamable HTTP on loopback, two servers written with the
//! Python SDK behind it over stdio (tests/data/stalling_server.py), an rmcp client, `kill -9`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use rmcp::{Peer, ServiceError, model::CallToolRequestParams, service::RoleClient};
use serde_json::{Value, json};
use switchyard_mcp_gateway::Stores;
use switchyard_testkit::{eventually, mcp::client, peer_tool, root};

/// Short, so the hung call's timeout is part of the test; long enough that a killed server's
/// error can be told from it.
const CALL_TIMEOUT: Duration = Duration::from_secs(6);

/// The gateway in front of two instances of the stalling server: `stall`, the one that fails,
/// and `steady`, which must not notice.
async fn gateway() -> common::Running {
    let script = root().join("services/mcp-gateway/tests/data/stalling_server.py");
    let python = peer_tool("mcp-python");
    let servers: Vec<String> =
        ["stall", "steady"].iter().map(|name| format!("{name}={} {}", python, script.display())).collect();
    let mut config = common::config(&servers);
    config.call_timeout = CALL_TIMEOUT;
    let running = common::start(&config, Stores::in_memory(), None).await;
    running.ready(6).await;
    running
}

async fn call(client: &Peer<RoleClient>, name: &str, arguments: Value) -> Result<String, ServiceError> {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = arguments.as_object().cloned();
    let result = client.call_tool(params).await?;
    assert_ne!(result.is_error, Some(true), "{name} answered an error result: {result:?}");
    Ok(result.content.iter().filter_map(|c| c.as_text()).map(|t| t.text.clone()).collect::<Vec<_>>().join("\n"))
}

/// The JSON-RPC error a failed call got (and not some other failure of the client).
fn json_rpc_error(outcome: Result<String, ServiceError>) -> rmcp::ErrorData {
    match outcome {
        Err(ServiceError::McpError(err)) => err,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

/// Waits until the fixture created `mark`: the call is under way in the server.
async fn reached(mark: &Path) {
    eventually(Duration::from_secs(10), "the held call reached the server", || async { mark.exists() }).await;
}

async fn tool_names(client: &Peer<RoleClient>) -> Vec<String> {
    let mut names: Vec<String> =
        client.list_all_tools().await.unwrap().into_iter().map(|tool| tool.name.to_string()).collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_or_hanging_costs_that_call_only() {
    let running = gateway().await;
    let session = client(&running.mcp_url()).await;
    let client = session.peer().clone();
    let marks = tempfile::tempdir().unwrap();
    // The gateway's own set_context, then both servers' tools.
    let all_tools =
        ["set_context", "stall__echo", "stall__hold", "stall__pid", "steady__echo", "steady__hold", "steady__pid"];
    assert_eq!(tool_names(&client).await, all_tools);

    // (a) Killed while a call is in flight: that call fails at once, naming the server.
    let first_pid: u32 = call(&client, "stall__pid", json!({})).await.unwrap().parse().unwrap();
    let mark = marks.path().join("killed");
    let held = {
        let client = client.clone();
        let arguments = json!({"seconds": 60, "mark": mark.to_str().unwrap()});
        tokio::spawn(async move { call(&client, "stall__hold", arguments).await })
    };
    reached(&mark).await;
    let killed_at = Instant::now();
    let kill = std::process::Command::new("kill").args(["-9", &first_pid.to_string()]).status().unwrap();
    assert!(kill.success(), "kill -9 {first_pid}");
    let outcome = tokio::time::timeout(CALL_TIMEOUT * 2, held).await.expect("the killed call ends").unwrap();
    let failed_after = killed_at.elapsed();
    let err = json_rpc_error(outcome);
    assert_eq!(err.code, rmcp::model::ErrorCode::INTERNAL_ERROR, "{err:?}");
    assert!(err.message.contains("server `stall`"), "the error names the server: {}", err.message);
    assert!(!err.message.contains("did not answer within"), "ended by the death, not the timeout: {}", err.message);
    assert!(failed_after < CALL_TIMEOUT / 2, "the caller heard of the death after {failed_after:?}");

    // The other server never noticed.
    assert_eq!(call(&client, "steady__echo", json!({"text": "still here"})).await.unwrap(), "still here");

    // The gateway starts the server again: a new process, its tools listed, calls answered.
    let second_pid: u32 = eventually(Duration::from_secs(30), "the killed server started again", || async {
        match call(&client, "stall__pid", json!({})).await {
            Ok(pid) => pid.parse::<u32>().map_err(|err| format!("{pid}: {err}")),
            Err(err) => Err(err.to_string()),
        }
    })
    .await;
    assert_ne!(second_pid, first_pid, "a new process");
    assert_eq!(tool_names(&client).await, all_tools, "its tools are back");
    assert_eq!(call(&client, "stall__echo", json!({"text": "back"})).await.unwrap(), "back");

    // (b) A call that hangs: an error naming the tool, the server and the wait, at the timeout;
    // calls to the other server are answered promptly all the while.
    let mark = marks.path().join("hung");
    let started = Instant::now();
    let hung = {
        let client = client.clone();
        let arguments = json!({"seconds": 60, "mark": mark.to_str().unwrap()});
        tokio::spawn(async move { call(&client, "stall__hold", arguments).await })
    };
    reached(&mark).await;
    let mut answered_meanwhile = 0;
    while !hung.is_finished() {
        let asked = Instant::now();
        let text = format!("call {answered_meanwhile}");
        assert_eq!(call(&client, "steady__echo", json!({"text": text})).await.unwrap(), text);
        let took = asked.elapsed();
        assert!(took < Duration::from_secs(2), "a call to the other server took {took:?} while one hung");
        answered_meanwhile += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let waited = started.elapsed();
    let err = json_rpc_error(hung.await.unwrap());
    assert_eq!(err.code, rmcp::model::ErrorCode::INTERNAL_ERROR, "{err:?}");
    assert!(
        err.message.contains(&format!("tool `stall__hold` on server `stall` did not answer within {CALL_TIMEOUT:?}")),
        "{}",
        err.message
    );
    assert!(
        waited >= CALL_TIMEOUT && waited < CALL_TIMEOUT + Duration::from_secs(3),
        "the hung call ended after {waited:?}, not at the {CALL_TIMEOUT:?} timeout"
    );
    assert!(answered_meanwhile >= 5, "only {answered_meanwhile} calls to the other server while one hung");
    // The hung server is still usable, the same process.
    assert_eq!(call(&client, "stall__echo", json!({"text": "usable"})).await.unwrap(), "usable");
    let pid: u32 = call(&client, "stall__pid", json!({})).await.unwrap().parse().unwrap();
    assert_eq!(pid, second_pid, "a hung call does not cost the server its process");

    session.cancel().await.unwrap();
    running.stop().await;
}
