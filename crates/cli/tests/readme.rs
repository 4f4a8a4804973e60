//! The grpcurl and curl examples of the README and the pages it links (docs/grpcurl.md, each
//! service manual), run verbatim (only the ports differ) with the real `grpcurl`
//! binary against the `switchyard dev` stack. A command followed by `# ERROR: Code: X` in the
//! README must fail with that code. grpcurl comes from `scripts/install-tools.sh`
//! (`.tools/bin/grpcurl`), `$GRPCURL`, or PATH; the test fails when it is missing.

use std::{process::Command, time::Duration};

use switchyard_cli::{DevChat, DevMcp, DevPorts, DevStack};
use switchyard_llm::ProviderArgs;
use switchyard_testkit::llm::{Recorded, Reply, ScriptedLlm};
use switchyard_testkit::{eventually, grpcurl, peer_tool, wait_serving};

/// The README and the pages it sends readers to, in the order their commands run (the grpcurl
/// walk-through first, then each service's manual).
fn manuals() -> String {
    [
        include_str!("../../../README.md"),
        include_str!("../../../docs/grpcurl.md"),
        include_str!("../../../services/edge/README.md"),
        include_str!("../../../services/triggers/README.md"),
        include_str!("../../../services/sessions/README.md"),
        include_str!("../../../services/mcp-gateway/README.md"),
        include_str!("../../../services/router/README.md"),
        include_str!("../../../docs/configuration.md"),
    ]
    .join("\n")
}

/// The curl command lines of the README's `sh` blocks, each with the HTTP error it documents
/// (`# HTTP 400 …` after it).
fn readme_curl_examples() -> Vec<(String, Option<u16>)> {
    let readme = manuals();
    let mut examples: Vec<(String, Option<u16>)> = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        match line.trim() {
            "```sh" => in_sh = true,
            "```" => in_sh = false,
            text if in_sh && text.starts_with("curl ") => examples.push((text.to_owned(), None)),
            text if in_sh && text.starts_with("# HTTP ") => {
                let code = text.trim_start_matches("# HTTP ").split_whitespace().next().and_then(|c| c.parse().ok());
                if let Some(last) = examples.last_mut() {
                    last.1 = code;
                }
            }
            _ => {}
        }
    }
    examples
}

/// Checks one curl example's output: JSON without an error (or the documented one), or an SSE
/// stream that completed.
fn check_curl_output(command: &str, output: &str, expected: Option<u16>) {
    let body = output.trim();
    if body.starts_with('{') {
        let json: serde_json::Value =
            serde_json::from_str(body).unwrap_or_else(|err| panic!("`{command}` printed invalid JSON ({err}): {body}"));
        match expected {
            // A Responses API object has `"error": null` when it succeeded.
            None => assert!(json.get("error").is_none_or(serde_json::Value::is_null), "`{command}` failed: {body}"),
            Some(code) => assert_eq!(json["error"]["code"], code, "`{command}` should answer {code}: {body}"),
        }
    } else {
        assert!(expected.is_none(), "`{command}` should answer an error: {body}");
        assert!(
            body.contains("event: completed")
                || body.ends_with("data: [DONE]")
                || body.contains("event: message_stop")
                || body.contains("event: response.completed"),
            "`{command}` should stream to completion: {body}"
        );
        assert!(
            !body.contains("event: error") && !body.contains("event: response.failed"),
            "`{command}` streamed an error: {body}"
        );
    }
}

/// The grpcurl command lines of the README's `sh` blocks, each with the error it documents.
fn readme_examples() -> Vec<(String, Option<String>)> {
    let readme = manuals();
    let mut examples: Vec<(String, Option<String>)> = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        match line.trim() {
            "```sh" => in_sh = true,
            "```" => in_sh = false,
            text if in_sh && text.starts_with("grpcurl ") => examples.push((text.to_owned(), None)),
            text if in_sh && text.starts_with("# ERROR: Code: ") => {
                let code = text.trim_start_matches("# ERROR: Code: ").split_whitespace().next().unwrap_or("");
                if let Some(last) = examples.last_mut() {
                    last.1 = Some(code.to_owned());
                }
            }
            _ => {}
        }
    }
    examples
}

/// The model behind the README's chat examples: greets, and adds through the MCP agent.
fn demo_model(request: &Recorded) -> Reply {
    let tools = request.tool_names();
    let asks_to_add = request.last_user_text().is_some_and(|t| t.starts_with("add "));
    if tools.iter().any(|t| t == "use_mcp_agent") {
        return if asks_to_add {
            Reply::tool_call("use_mcp_agent", r#"{"reasoning": "a calculation"}"#)
        } else {
            Reply::text("Hello! I'm doing well, thank you for asking. How can I help you today?")
        };
    }
    let answered = request.messages().iter().any(|m| m["role"] == "tool");
    // The OpenAI tool example: the caller's own get_weather, then its result.
    if tools.iter().any(|t| t == "get_weather") {
        return if answered {
            Reply::text("It is 18C and sunny in Paris.")
        } else {
            Reply::tool_call("get_weather", r#"{"city": "Paris"}"#)
        };
    }
    match tools.iter().find(|t| t.ends_with("get-sum")) {
        Some(sum) if !answered => Reply::tool_call(sum, r#"{"a": 17, "b": 25}"#),
        _ => Reply::text("17 + 25 = 42."),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_examples_work_verbatim_against_switchyard_dev() {
    let loopback = "127.0.0.1".parse().expect("ip");
    // The demo server scripts/dev starts, as `everything`.
    let everything = peer_tool("mcp-server-everything");
    let mcp = DevMcp { servers: vec![format!("everything={everything} stdio")], config_file: None };
    let ports = DevPorts { host: loopback, triggers: 0, sessions: 0, mcp_gateway: 0, mcp: 0, router: 0, edge: 0 };
    // The README's chat examples, answered by a scripted vendor on the OpenAI wire format.
    let llm = ScriptedLlm::start(demo_model).await;
    let providers = ProviderArgs { openai_base_url: Some(llm.openai_base_url()), ..ProviderArgs::default() };
    let chat = DevChat { providers, ..DevChat::default() };
    let stack = DevStack::start(ports, mcp, chat).await.expect("dev stack");
    let (triggers, sessions, mcp_gateway, router) =
        (stack.triggers_addr(), stack.sessions_addr().0, stack.mcp_gateway_addr(), stack.router_addr());
    let edge = stack.edge_addr();
    let gateway = stack.gateway();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(stack.serve(async move {
        let _ = stopped.await;
    }));
    wait_serving(&format!("http://{sessions}"), "switchyard.sessions.v1.SessionService").await;
    wait_serving(&format!("http://{router}"), "switchyard.router.v1.RouterService").await;
    // The demo MCP server is connected and its tools are listed.
    eventually(Duration::from_secs(60), "the gateway lists server-everything's tools", || async {
        !gateway.catalog().is_empty()
    })
    .await;

    let result = tokio::task::spawn_blocking(move || {
        let examples = readme_examples();
        for rpc in [
            "TriggerService/RegisterRoleTriggers",
            "TriggerService/UnregisterRole",
            "TriggerService/ListRoleTriggers",
            "TriggerService/ListDomains",
            "TriggerService/DetectTriggers",
            "TriggerService/GetBestRole",
            "SessionService/CreateSession",
            "SessionService/GetSession",
            "SessionService/CloseSession",
            "SessionService/ProcessQuery",
            "SessionService/SwitchContext",
            "SessionService/GetHistory",
            "SessionService/AppendMessages",
            "RoleService/CreateRole",
            "RoleService/GetRole",
            "RoleService/ListRoles",
            "RoleService/UpdateRole",
            "RoleService/DeleteRole",
            "McpGatewayService/ListServers",
            "McpGatewayService/ListTools",
            "McpGatewayService/SetContext",
            "McpGatewayService/CallTool",
            "RouterService/Chat",
            "RouterService/ChatStream",
            "RouterService/GetRoutingStats",
            "RouterService/SubmitFeedback",
        ] {
            assert!(examples.iter().any(|(command, _)| command.contains(rpc)), "README has no example of {rpc}");
        }
        for (command, expected_error) in examples {
            let command = command
                .replace("127.0.0.1:50051", &triggers.to_string())
                .replace("127.0.0.1:50052", &sessions.to_string())
                .replace("127.0.0.1:50054", &mcp_gateway.to_string())
                .replace("127.0.0.1:50053", &router.to_string())
                .replacen("grpcurl", &grpcurl().display().to_string(), 1);
            let output = Command::new("sh").arg("-c").arg(&command).output().expect("run sh");
            let text =
                format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
            match expected_error {
                None => assert!(output.status.success(), "`{command}` failed: {text}"),
                Some(code) => {
                    assert!(!output.status.success(), "`{command}` should fail with {code}");
                    assert!(text.contains(&format!("Code: {code}")), "`{command}` should fail with {code}: {text}");
                }
            }
        }
        // The HTTP examples, against the edge.
        let examples = readme_curl_examples();
        for path in [
            "/api/context/sessions",
            "/api/context/process",
            "/api/context/process/stream",
            "/api/v1/chat",
            "/v1/chat/completions",
            "/v1/models",
            "/v1/responses",
        ] {
            assert!(
                examples.iter().any(|(command, _)| command.contains(&format!("8080{path}"))),
                "README has no curl example of {path}"
            );
        }
        for (command, expected) in examples {
            let command = command.replace("127.0.0.1:8080", &edge.to_string());
            let output = Command::new("sh").arg("-c").arg(&command).output().expect("run sh");
            assert!(output.status.success(), "`{command}` failed: {}", String::from_utf8_lossy(&output.stderr));
            check_curl_output(&command, &String::from_utf8_lossy(&output.stdout), expected);
        }
        // `./scripts/chat` is `switchyard chat`.
        let chat = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["chat", "add 17 and 25", "--url", &format!("http://{edge}")])
            .output()
            .expect("run switchyard chat");
        let (stdout, stderr) = (String::from_utf8_lossy(&chat.stdout), String::from_utf8_lossy(&chat.stderr));
        assert!(chat.status.success(), "switchyard chat failed: {stderr}");
        assert!(stdout.contains("42"), "the answer streams to stdout: {stdout}");
        assert!(
            stderr.contains("route   mcp_agent") && stderr.contains("get-sum"),
            "route and tools on stderr: {stderr}"
        );
    })
    .await;
    let _ = stop.send(());
    serving.await.expect("serving task").expect("served cleanly");
    result.expect("README examples");
}
