//! `switchyard-scripted-llm`: the test kit's scripted LLM vendor as a process, for the
//! benchmarks (scripts/bench-*.sh): every request, on the OpenAI or the Anthropic wire,
//! streaming or not, gets the same instant answer.
//!
//! Two behaviours for the load and soak benchmarks (scripts/bench-load.sh, bench-soak.sh):
//! - A message containing `[agent]` is sent down the MCP agent route: the routing call gets the
//!   `use_mcp_agent` tool call, the agent's first step a call of the first offered tool whose
//!   name ends in `echo` (with `{"message": …}`), and the step after the tool's result the answer.
//! - SIGUSR1 starts a burst of provider failures: every request gets a 503 until SIGUSR2.
//!
//! Usage: switchyard-scripted-llm [ADDR] [ANSWER]   (default 127.0.0.1:8090, a greeting)

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use serde_json::json;
use switchyard_testkit::llm::{Recorded, Reply, ScriptedLlm};
use tokio::signal::unix::{SignalKind, signal};

const GREETING: &str = "Hello! I'm doing well, thank you for asking. How can I help you today?";
/// The marker that sends a message down the agent route.
const AGENT_MARKER: &str = "[agent]";
const ROUTE_TO_AGENT: &str = "use_mcp_agent";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args.next().as_deref().unwrap_or("127.0.0.1:8090").parse()?;
    let answer = args.next().unwrap_or_else(|| GREETING.to_owned());
    let failing = Arc::new(AtomicBool::new(false));
    let failing_now = failing.clone();
    let llm = ScriptedLlm::start_on(addr, false, move |request| {
        if failing_now.load(Ordering::Relaxed) {
            return Reply::error(503, "scripted failure burst");
        }
        reply(request, &answer)
    })
    .await?;
    println!("switchyard-scripted-llm listening on {}", llm.addr());
    let mut start_burst = signal(SignalKind::user_defined1())?;
    let mut end_burst = signal(SignalKind::user_defined2())?;
    // Serves until the process is stopped; dropping `llm` would stop the server.
    let _serving = llm;
    loop {
        tokio::select! {
            _ = start_burst.recv() => failing.store(true, Ordering::Relaxed),
            _ = end_burst.recv() => failing.store(false, Ordering::Relaxed),
        }
    }
}

fn reply(request: &Recorded, answer: &str) -> Reply {
    // Pieces of 8 characters: a realistic number of SSE events for a short answer.
    let text = || Reply::text(answer).usage(60, 18).chunk_size(8);
    let agent = request.last_user_text().is_some_and(|text| text.contains(AGENT_MARKER));
    if !agent {
        return text();
    }
    let tools = request.tool_names();
    if tools.iter().any(|tool| tool == ROUTE_TO_AGENT) {
        return Reply::tool_call(ROUTE_TO_AGENT, json!({"reasoning": "the message asks for a tool"}).to_string())
            .usage(60, 12);
    }
    // A tool's result: OpenAI's `tool` message, Anthropic's `tool_result` part of a user message.
    let after_tool = request.messages().last().is_some_and(|message| {
        message["role"] == "tool"
            || message["content"].as_array().is_some_and(|parts| parts.iter().any(|part| part["type"] == "tool_result"))
    });
    match tools.iter().find(|tool| tool.ends_with("echo")) {
        Some(echo) if !after_tool => {
            Reply::tool_call(echo.as_str(), json!({"message": "soak"}).to_string()).usage(60, 12)
        }
        _ => text(),
    }
}
