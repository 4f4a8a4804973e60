//! The public MCP reference servers behind the gateway (installed by scripts/install-tools.sh):
//! server-everything over stdio and over streamable HTTP, server-memory, server-filesystem on
//! a temporary folder — listed, filtered, called; one killed and seen restarted. Also: the
//! example config in deploy/ parses.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{process::Stdio, time::Duration};

use rmcp::model::{CallToolRequestParams, CallToolResult, ReadResourceRequestParams};
use serde_json::{Value, json};
use switchyard_mcp_gateway::{
    Stores, naming,
    upstream::{ServerState, Transport, config::parse_file},
};
use switchyard_testkit::{eventually, free_port, mcp, peer_tool, root};

async fn call(client: &mcp::Client, name: &str, arguments: Value) -> CallToolResult {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = arguments.as_object().cloned();
    client.call_tool(params).await.unwrap_or_else(|err| panic!("{name}: {err}"))
}

fn text_of(result: &CallToolResult) -> String {
    result.content.iter().filter_map(|c| c.as_text()).map(|t| t.text.clone()).collect::<Vec<_>>().join("\n")
}

/// server-everything in streamable HTTP mode on a free port, killed with the test.
async fn everything_over_http() -> (tokio::process::Child, String) {
    let port = free_port();
    let child = tokio::process::Command::new(peer_tool("mcp-server-everything"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start server-everything (streamableHttp)");
    eventually(Duration::from_secs(30), &format!("server-everything listening on {port}"), || {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
    })
    .await;
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reference_servers_behind_the_gateway() {
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(folder.path().join("notes.txt"), "The meeting moved to Thursday.").unwrap();
    let memory_file = folder.path().join("memory.jsonl");
    let (_http_server, http_url) = everything_over_http().await;

    // The servers come from a config file, as in production.
    let config_file = folder.path().join("servers.toml");
    let files_dir = folder.path().display().to_string();
    std::fs::write(
        &config_file,
        format!(
            r#"
[servers.every]
command = "{every}"
args = ["stdio"]

[servers.web]
url = "{http_url}"

[servers.memory]
command = "{memory}"
env = {{ MEMORY_FILE_PATH = "{memory_file}" }}

[servers.files]
command = "{files}"
args = ["{files_dir}"]
"#,
            every = peer_tool("mcp-server-everything"),
            memory = peer_tool("mcp-server-memory"),
            files = peer_tool("mcp-server-filesystem"),
            memory_file = memory_file.display(),
        ),
    )
    .unwrap();
    let mut config = common::config(&[]);
    config.config_file = Some(config_file);
    config.top_k = 6;
    let running = common::start(&config, Stores::in_memory(), Some(common::embedder())).await;
    // server-everything's list grows after initialize (it announces extra tools), so the
    // counts below are minimums.
    running.ready(12 + 12 + 9 + 14).await;

    let servers = running.gateway.servers();
    let transports: Vec<(&str, &str)> = servers.iter().map(|s| (s.name.as_str(), s.transport)).collect();
    assert_eq!(transports, [("every", "stdio"), ("web", "streamable-http"), ("memory", "stdio"), ("files", "stdio")]);

    let client = mcp::client(&running.mcp_url()).await;
    let all = client.list_all_tools().await.unwrap();
    let names: Vec<String> = all.iter().map(|t| t.name.to_string()).collect();
    assert!(names.len() > 12 + 12 + 9 + 14, "{names:?}");
    assert!(names.iter().all(|n| naming::is_valid(n)), "{names:?}");
    for expected in ["set_context", "every__echo", "web__echo", "memory__create_entities", "files__read_text_file"] {
        assert!(names.iter().any(|n| n == expected), "{expected} missing from {names:?}");
    }

    // Calls reach each server by its own tool name.
    assert!(text_of(&call(&client, "every__echo", json!({"message": "over stdio"})).await).contains("over stdio"));
    assert!(text_of(&call(&client, "web__echo", json!({"message": "over http"})).await).contains("over http"));
    let notes = folder.path().join("notes.txt").display().to_string();
    let read = call(&client, "files__read_text_file", json!({"path": notes})).await;
    assert!(text_of(&read).contains("moved to Thursday"), "{read:?}");
    call(
        &client,
        "memory__create_entities",
        json!({"entities": [{"name": "Ada", "entityType": "person", "observations": ["writes programs"]}]}),
    )
    .await;
    assert!(text_of(&call(&client, "memory__read_graph", json!({})).await).contains("Ada"));

    // A server's own validation error comes back as an error, not a crash.
    let mut params = CallToolRequestParams::new("every__get-sum");
    params.arguments = json!({"a": "one"}).as_object().cloned();
    let bad = client.call_tool(params).await.expect("the server's error comes back as a tool result");
    assert_eq!(bad.is_error, Some(true), "{bad:?}");
    assert!(text_of(&bad).contains("Input validation error"), "the server's own message: {bad:?}");

    // Filtering: a file task lists file tools first; other tools stay callable.
    call(
        &client,
        "set_context",
        json!({"query": "read the text of a file in my folder", "intent": "file manipulation"}),
    )
    .await;
    let filtered = client.list_all_tools().await.unwrap();
    let filtered: Vec<String> = filtered.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(filtered.len(), 7, "{filtered:?}");
    assert!(filtered[1].starts_with("files__read"), "{filtered:?}");
    assert!(!filtered.iter().any(|n| n == "every__echo"));
    assert!(text_of(&call(&client, "every__echo", json!({"message": "still here"})).await).contains("still here"));

    // Resources and prompts pass through.
    let resources = client.list_all_resources().await.unwrap();
    assert!(!resources.is_empty(), "server-everything's resources are listed");
    let read = client.read_resource(ReadResourceRequestParams::new(resources[0].uri.clone())).await.unwrap();
    assert!(!read.contents.is_empty());
    let prompts = client.list_all_prompts().await.unwrap();
    assert!(prompts.iter().any(|p| p.name.starts_with("every__")), "{prompts:?}");

    // Kill the stdio server: the gateway starts it again and its tools work again.
    let pid = running.gateway.servers()[0].pid.expect("every runs as a child process");
    let killed = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
    assert!(killed.success());
    let restarted = eventually(Duration::from_secs(30), "the killed server restarted", || async {
        let status = running.gateway.servers()[0].clone();
        if status.restarts == 1 && status.state == ServerState::Ready {
            Ok(status)
        } else {
            Err(format!("not restarted: {status:?}"))
        }
    })
    .await;
    assert_ne!(restarted.pid, Some(pid), "a new process");
    assert!(text_of(&call(&client, "every__echo", json!({"message": "back"})).await).contains("back"));

    client.cancel().await.unwrap();
    running.stop().await;
}

#[test]
fn the_deploy_example_config_parses() {
    let path = root().join("deploy/mcp-gateway/servers.example.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    let lookup = |name: &str| (name == "SEARCH_API_TOKEN").then(|| "token-from-secret".to_owned());
    let specs = parse_file(&path.display().to_string(), &text, false, &lookup).unwrap();
    assert!(specs.len() >= 3, "{specs:?}");
    assert!(specs.iter().any(|s| matches!(&s.transport, Transport::Stdio { .. })));
    assert!(specs.iter().any(|s| matches!(&s.transport, Transport::Http { headers, .. }
        if headers.values().any(|v| v.expose().contains("token-from-secret")))));
}
