//! The README's grpcurl examples, run verbatim (only the ports differ) with the real `grpcurl`
//! binary against the `switchyard dev` stack. A command followed by `# ERROR: Code: X` in the
//! README must fail with that code. grpcurl comes from `scripts/install-tools.sh`
//! (`.tools/bin/grpcurl`), `$GRPCURL`, or PATH; the test fails when it is missing.

use std::{process::Command, time::Duration};

use switchyard_cli::{DevChat, DevMcp, DevPorts, DevStack};
use switchyard_testkit::{eventually, grpcurl, peer_tool};
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};

/// The grpcurl command lines of the README's `sh` blocks, each with the error it documents.
fn readme_examples() -> Vec<(String, Option<String>)> {
    let readme = include_str!("../../../README.md");
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

async fn wait_ready(addr: std::net::SocketAddr, service: &str) {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let health = HealthClient::new(channel);
    eventually(Duration::from_secs(10), &format!("{service} ready"), || {
        let mut health = health.clone();
        async move {
            let status =
                health.check(HealthCheckRequest { service: service.into() }).await.map(|r| r.into_inner().status());
            if matches!(status, Ok(ServingStatus::Serving)) { Ok(()) } else { Err(format!("{status:?}")) }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_grpcurl_examples_work_verbatim_against_switchyard_dev() {
    let loopback = "127.0.0.1".parse().expect("ip");
    // The demo server scripts/dev starts, as `everything`.
    let everything = peer_tool("mcp-server-everything");
    let mcp = DevMcp { servers: vec![format!("everything={everything} stdio")], config_file: None };
    let ports = DevPorts { host: loopback, triggers: 0, sessions: 0, mcp_gateway: 0, mcp: 0, router: 0 };
    let stack = DevStack::start(ports, mcp, DevChat::default()).await.expect("dev stack");
    let (triggers, sessions, mcp_gateway) = (stack.triggers_addr(), stack.sessions_addr().0, stack.mcp_gateway_addr());
    let gateway = stack.gateway();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(stack.serve(async move {
        let _ = stopped.await;
    }));
    wait_ready(sessions, "switchyard.sessions.v1.SessionService").await;
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
        ] {
            assert!(examples.iter().any(|(command, _)| command.contains(rpc)), "README has no example of {rpc}");
        }
        for (command, expected_error) in examples {
            let command = command
                .replace("127.0.0.1:50051", &triggers.to_string())
                .replace("127.0.0.1:50052", &sessions.to_string())
                .replace("127.0.0.1:50054", &mcp_gateway.to_string())
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
    })
    .await;
    let _ = stop.send(());
    serving.await.expect("serving task").expect("served cleanly");
    result.expect("README examples");
}
