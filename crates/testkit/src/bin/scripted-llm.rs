//! `switchyard-scripted-llm`: the test kit's scripted LLM vendor as a process, for the router's
//! benchmark (scripts/bench-router.sh): every request, on the OpenAI or the Anthropic wire,
//! streaming or not, gets the same instant answer.
//!
//! Usage: switchyard-scripted-llm [ADDR] [ANSWER]   (default 127.0.0.1:8090, a greeting)

use std::net::SocketAddr;

use switchyard_testkit::llm::{Reply, ScriptedLlm};

const GREETING: &str = "Hello! I'm doing well, thank you for asking. How can I help you today?";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args.next().as_deref().unwrap_or("127.0.0.1:8090").parse()?;
    let answer = args.next().unwrap_or_else(|| GREETING.to_owned());
    // Pieces of 8 characters: a realistic number of SSE events for a short answer.
    let llm =
        ScriptedLlm::start_on(addr, false, move |_| Reply::text(answer.clone()).usage(60, 18).chunk_size(8)).await?;
    println!("switchyard-scripted-llm listening on {}", llm.addr());
    // Serves until the process is stopped; dropping `llm` would stop the server.
    let _serving = llm;
    std::future::pending::<()>().await;
    Ok(())
}
