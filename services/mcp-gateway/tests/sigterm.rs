//! A real SIGTERM to the `switchyard-mcp-gateway` process under load, with a stdio MCP server
//! written with the Python SDK behind it (tests/data/stalling_server.py) and its records in a
//! Postgres schema of the test's own: callers calling a quick tool on one connection, a call
//! the server holds 1 s (inside the 3 s `--shutdown-grace`) and one it holds 30 s (past it,
//! the call timeout longer still). The calls sent before the signal are answered, the held
//! one in full; the one past the grace is answered UNAVAILABLE ("shutting down") at the grace,
//! neither hung nor cut with its connection; new connections are refused once the signal is
//! taken; the process exits 0 within its grace and drain; and every tool call it answered is in
//! Postgres after.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use switchyard_kit::proto_json::to_struct;
use switchyard_proto::mcp::v1::{
    CallToolRequest, ListToolsRequest, content::Kind, mcp_gateway_service_client::McpGatewayServiceClient,
};
use switchyard_testkit::{
    KeyPrefix, Schema, database_url, eventually, free_port, peer_tool,
    process::{ServiceProcess, UnaryLoad, assert_answered_or_refused},
    redis_url, root,
};
use tonic::{Code, transport::Channel};

const BINARY: &str = env!("CARGO_BIN_EXE_switchyard-mcp-gateway");
const GRACE: Duration = Duration::from_secs(3);
const DRAIN: Duration = Duration::from_secs(5);
const CALLERS: usize = 3;

type Client = McpGatewayServiceClient<Channel>;

fn call(session: &str, tool: &str, arguments: Value) -> CallToolRequest {
    CallToolRequest {
        session_id: session.to_owned(),
        name: tool.to_owned(),
        arguments: Some(to_struct(arguments.as_object().unwrap())),
    }
}

fn text(answer: &switchyard_proto::mcp::v1::CallToolResponse) -> String {
    answer
        .content
        .iter()
        .filter_map(|content| match &content.kind {
            Some(Kind::Text(text)) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// Holds a call in the server for `seconds`; returns its outcome and how long it took.
fn held(
    client: &Client,
    session: &str,
    seconds: u64,
    mark: &std::path::Path,
) -> tokio::task::JoinHandle<(Result<String, tonic::Status>, Duration)> {
    let (mut client, session) = (client.clone(), session.to_owned());
    let arguments = json!({"seconds": seconds, "mark": mark.display().to_string()});
    tokio::spawn(async move {
        let started = Instant::now();
        let outcome = client.call_tool(call(&session, "stall__hold", arguments)).await;
        (outcome.map(|answer| text(&answer.into_inner())), started.elapsed())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_under_load_finishes_or_cuts_each_call_refuses_new_ones_and_drains_the_tool_calls() {
    let (schema, prefix) = (Schema::new("gateway_sigterm"), KeyPrefix::new("gateway-sigterm"));
    let marks = tempfile::tempdir().expect("a directory for the held calls' marks");
    let script = root().join("services/mcp-gateway/tests/data/stalling_server.py");
    let server = format!("stall={} {}", peer_tool("mcp-python"), script.display());
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mcp_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut command = tokio::process::Command::new(BINARY);
    command
        .args(["--listen", &addr.to_string(), "--mcp-listen", &mcp_addr.to_string()])
        .args(["--server", &server, "--no-embeddings", "--call-timeout", "60s"])
        .args(["--database-url", &database_url(), "--db-schema", schema.name()])
        .args(["--redis-url", &redis_url(), "--redis-prefix", prefix.as_str()])
        .args(["--shutdown-grace", &format!("{}s", GRACE.as_secs())])
        .args(["--record-drain-timeout", &format!("{}s", DRAIN.as_secs())])
        .env_remove("MCP_GATEWAY_IN_MEMORY");
    let mut gateway = ServiceProcess::spawn(command, "switchyard-mcp-gateway", addr);
    gateway.wait_grpc_serving("switchyard.mcp.v1.McpGatewayService").await;
    let channel = Channel::from_shared(gateway.url()).unwrap().connect().await.expect("reachable");
    let client = Client::new(channel);
    eventually(Duration::from_secs(60), "the stdio server's tools listed", || {
        let mut client = client.clone();
        async move {
            let listed = client.list_tools(ListToolsRequest { session_id: "ready".into(), limit: 50 }).await;
            let names: Vec<String> = listed
                .map_err(|status| status.to_string())?
                .into_inner()
                .tools
                .into_iter()
                .filter_map(|t| t.tool)
                .map(|t| t.name)
                .collect();
            if names.iter().any(|name| name == "stall__hold") { Ok(()) } else { Err(format!("{names:?}")) }
        }
    })
    .await;

    let load = {
        let client = client.clone();
        UnaryLoad::start(CALLERS, move |caller, n| {
            let mut client = client.clone();
            async move {
                let said = format!("{caller}-{n}");
                let answer =
                    client.call_tool(call(&format!("sigterm-{caller}"), "stall__echo", json!({"text": said}))).await?;
                assert_eq!(text(&answer.into_inner()), said, "a call answered with its own answer");
                Ok(())
            }
        })
    };
    load.under_way(CALLERS * 3).await;
    let (short_mark, long_mark) = (marks.path().join("short"), marks.path().join("long"));
    let short = held(&client, "held", 1, &short_mark);
    let long = held(&client, "held-past-the-grace", 30, &long_mark);
    eventually(Duration::from_secs(10), "both held calls in the server", || async {
        short_mark.exists() && long_mark.exists()
    })
    .await;

    let signaled = gateway.sigterm();
    gateway.refuses_new_connections(Duration::from_secs(2)).await;
    let fresh = match Channel::from_shared(gateway.url()).unwrap().connect().await {
        Ok(channel) => Client::new(channel).list_tools(ListToolsRequest::default()).await.map(drop),
        Err(err) => Err(tonic::Status::unavailable(err.to_string())),
    };
    assert_eq!(fresh.expect_err("a new call after the SIGTERM").code(), Code::Unavailable);

    let (answer, took) = short.await.expect("held call task");
    assert_eq!(answer.expect("the call held inside the grace is answered"), "held 1.0s");
    assert!(took < GRACE, "{took:?}");
    let (answer, took) = long.await.expect("held call task");
    let status = answer.expect_err("a call held past the grace cannot be answered");
    eprintln!("the call held past the grace ended {:?} {:?} after {took:?}", status.code(), status.message());
    assert!(took < GRACE + Duration::from_secs(2), "ended at the grace, not hung: {took:?}");
    // Answered by the gateway a little before its grace ends, while the connection is still up.
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("shutting down"), "{status:?}");

    let exit = gateway.exits(GRACE + DRAIN + Duration::from_secs(2)).await;
    let stopped_after = signaled.elapsed();
    assert!(exit.success(), "exit 0 after SIGTERM: {exit:?}");
    let calls = load.finish().await;
    let answered = assert_answered_or_refused("mcp-gateway", &calls, signaled);
    eprintln!("{answered} tool calls answered; the process exited {stopped_after:?} after SIGTERM");

    // Every call answered is in Postgres, per session.
    let mut expected = BTreeMap::from([("held".to_owned(), 1_i64)]);
    for call in calls.iter().filter(|call| call.result.is_ok()) {
        *expected.entry(format!("sigterm-{}", call.caller)).or_insert(0) += 1;
    }
    let pool = sqlx::PgPool::connect(&database_url()).await.expect("postgres");
    let recorded: Vec<(String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT session_id, count(*) FROM \"{}\".tool_calls WHERE session_id <> 'held-past-the-grace' GROUP BY session_id",
        schema.name()
    )))
    .fetch_all(&pool)
    .await
    .expect("tool calls");
    assert_eq!(recorded.into_iter().collect::<BTreeMap<_, _>>(), expected, "every call answered drained at exit");
    pool.close().await;
}
