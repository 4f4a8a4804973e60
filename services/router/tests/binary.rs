//! The `switchyard-router` binary as it is deployed: its flags parse (every one has an
//! environment fallback), it reports ready over gRPC health once a provider is configured, and
//! on SIGTERM it drains and exits cleanly.

mod common;

use std::{process::Stdio, time::Duration};

use common::wait_serving;
use switchyard_testkit::{
    free_port,
    llm::{Reply, ScriptedLlm},
};

const BINARY: &str = env!("CARGO_BIN_EXE_switchyard-router");

#[test]
fn help_lists_the_specs_settings() {
    let output = std::process::Command::new(BINARY).arg("--help").output().expect("run --help");
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "--help fails: {}", String::from_utf8_lossy(&output.stderr));
    for setting in [
        "UNIFIED_CHAT_DEFAULT_MODEL",
        "UNIFIED_CHAT_FALLBACK_MODELS",
        "UNIFIED_CHAT_MAX_RETRIES",
        "UNIFIED_CHAT_LOG_ROUTING_DECISIONS",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ROUTER_MAX_MESSAGE_BYTES",
        "MAX_MESSAGE_BYTES",
        "[default: 300s]",
    ] {
        assert!(help.contains(setting), "--help does not mention {setting}:\n{help}");
    }
}

#[tokio::test]
async fn the_binary_becomes_ready_and_exits_cleanly_on_sigterm() {
    let llm = ScriptedLlm::start(|_| Reply::text("hi")).await;
    let port = free_port();
    let mut child = tokio::process::Command::new(BINARY)
        .args(["--in-memory", "--listen", &format!("127.0.0.1:{port}")])
        .env("OPENAI_BASE_URL", llm.openai_base_url())
        .env("OPENAI_API_KEY", "sk-binary-test")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start switchyard-router");
    wait_serving(&format!("http://127.0.0.1:{port}"), "switchyard.router.v1.RouterService").await;

    let pid = child.id().expect("pid");
    let status = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().expect("kill");
    assert!(status.success(), "SIGTERM sent");
    let exit = tokio::time::timeout(Duration::from_secs(30), child.wait()).await.expect("exits in time").expect("wait");
    assert!(exit.success(), "clean exit after SIGTERM: {exit:?}");
}

#[test]
fn a_malformed_gateway_tools_tenant_list_stops_the_start_naming_it() {
    for (value, says) in [
        ("acme,,beta", "ROUTER_GATEWAY_TOOLS_TENANTS: item 2 is empty"),
        ("acme,bad tenant", "ROUTER_GATEWAY_TOOLS_TENANTS: item 2 (\"bad tenant\") is not a tenant id"),
    ] {
        let output = std::process::Command::new(BINARY)
            .args(["--in-memory", "--listen", "127.0.0.1:0", "--no-fast-router"])
            .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
            .env("ROUTER_GATEWAY_TOOLS_TENANTS", value)
            .output()
            .expect("run switchyard-router");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{value:?} must stop the start: {stderr}");
        assert!(stderr.contains(says), "{value:?}: {stderr}");
    }
    let help = std::process::Command::new(BINARY).arg("--help").output().expect("run --help");
    assert!(String::from_utf8_lossy(&help.stdout).contains("ROUTER_GATEWAY_TOOLS_TENANTS"));
}
