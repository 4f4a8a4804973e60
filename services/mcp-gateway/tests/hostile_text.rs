//! Text Postgres refuses (a NUL) through the MCP endpoint and gRPC, with the usage record in
//! Postgres: conversation text is passed on as sent and recorded with U+FFFD, and holds back no
//! one's later records; an identifier holding one is refused naming the field.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};
use switchyard_proto::mcp::v1::{SetContextRequest, mcp_gateway_service_client::McpGatewayServiceClient};
use switchyard_testkit::{
    KeyPrefix, Schema, database_url, eventually,
    mcp::{self, FixtureServer, tool},
};
use tonic::Code;

async fn call(client: &mcp::Client, name: &str, arguments: Value) -> CallToolResult {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = arguments.as_object().cloned();
    client.call_tool(params).await.unwrap_or_else(|err| panic!("{name}: {err}"))
}

fn text_of(result: &CallToolResult) -> String {
    result.content.iter().filter_map(|c| c.as_text()).map(|t| t.text.clone()).collect::<Vec<_>>().join("\n")
}

/// The recorded text of `column` in `table`, oldest first (empty for none).
async fn recorded(schema: &str, table: &str, column: &str) -> Vec<String> {
    let mut db = PgConnection::connect(&database_url()).await.expect("postgres at DATABASE_URL");
    let statement = format!("SELECT {column} FROM \"{schema}\".{table} ORDER BY id");
    let texts: Vec<Option<String>> =
        sqlx::query_scalar(sqlx::AssertSqlSafe(statement)).fetch_all(&mut db).await.unwrap();
    texts.into_iter().map(Option::unwrap_or_default).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_context_text_and_tool_arguments_is_passed_on_and_recorded_safely() {
    let fixture = FixtureServer::start(vec![tool("lookup", "Looks something up.", &["phrase"])]).await.unwrap();
    let (prefix, schema) = (KeyPrefix::new("gw-nul"), Schema::new("gw_nul"));
    let stores = common::shared_stores(&prefix, &schema).await;
    let running = common::start(&common::config(&[format!("fx={}", fixture.url())]), stores, None).await;
    running.ready(1).await;

    let ann = mcp::client(&running.mcp_url()).await;
    call(&ann, "set_context", json!({"query": "refinance my mortgage \u{0}", "intent": "compare\u{0}"})).await;
    let result = call(&ann, "fx__lookup", json!({"phrase": "rate \u{0} table"})).await;
    assert!(text_of(&result).contains(r"rate \u0000 table"), "passed on as sent: {}", text_of(&result));
    // Another client after it: its record lands too.
    let bob = mcp::client(&running.mcp_url()).await;
    call(&bob, "set_context", json!({"query": "contract termination clauses"})).await;

    eventually(Duration::from_secs(15), "every usage record written", || async {
        let contexts = recorded(&schema, "context_events", "query").await;
        let calls = recorded(&schema, "tool_calls", "context_query").await;
        if contexts.len() == 2 && calls.len() == 1 { Ok(()) } else { Err(format!("{contexts:?} {calls:?}")) }
    })
    .await;
    assert_eq!(
        recorded(&schema, "context_events", "query").await,
        ["refinance my mortgage \u{FFFD}", "contract termination clauses"]
    );
    assert_eq!(recorded(&schema, "context_events", "intent").await[0], "compare\u{FFFD}");
    assert_eq!(recorded(&schema, "tool_calls", "context_query").await, ["refinance my mortgage \u{FFFD}"]);

    // Over gRPC: the session id is an identifier, refused; the query is context text, kept.
    let mut grpc = McpGatewayServiceClient::connect(format!("http://{}", running.grpc)).await.unwrap();
    let set = |session_id: &str| SetContextRequest {
        session_id: session_id.to_owned(),
        query: "my mortgage \u{0} rate".to_owned(),
        ..Default::default()
    };
    let err = grpc.set_context(set("s-\u{0}")).await.unwrap_err();
    assert!(err.code() == Code::InvalidArgument && err.message().starts_with("session_id"), "{err:?}");
    let context = grpc.set_context(set("s-grpc")).await.expect("set_context").into_inner().context.unwrap();
    assert_eq!(context.current_query, "my mortgage \u{0} rate", "the live context keeps what was sent");
    running.stop().await;
}
