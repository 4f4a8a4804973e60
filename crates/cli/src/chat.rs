//! `switchyard chat "…"`: one message to a running suite, through the edge's
//! `POST /api/v1/chat/stream`. The answer streams to stdout as it is written; the route, role,
//! tools and timings go to stderr, so `switchyard chat "…" > answer.txt` keeps just the answer.

use std::io::Write;

use anyhow::Context;
use clap::Args;
use futures::StreamExt;
use serde_json::{Value, json};

#[derive(Debug, Args)]
pub struct ChatArgs {
    /// The message.
    pub message: String,

    /// The edge's URL.
    #[arg(long, env = "SWITCHYARD_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,

    /// An API key (not needed by `switchyard dev`, whose edge is open).
    #[arg(long, env = "SWITCHYARD_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    /// Continue this session (printed after each answer).
    #[arg(long)]
    pub session: Option<String>,

    /// Skip the routing decision: direct, mcp_agent or multiagent.
    #[arg(long, value_parser = ["direct", "mcp_agent", "multiagent"])]
    pub route: Option<String>,

    /// The model that routes and answers (`openai/gpt-4o-mini`, …).
    #[arg(long)]
    pub model: Option<String>,
}

pub async fn run(args: ChatArgs) -> anyhow::Result<()> {
    let mut body = json!({"message": args.message});
    if let Some(session) = &args.session {
        body["session_id"] = json!(session);
    }
    if let Some(route) = &args.route {
        body["force_route"] = json!(format!("ROUTE_TYPE_{}", route.to_ascii_uppercase()));
    }
    if let Some(model) = &args.model {
        body["model"] = json!(model);
    }
    let url = format!("{}/api/v1/chat/stream", args.url.trim_end_matches('/'));
    let client = reqwest::Client::builder().connect_timeout(std::time::Duration::from_secs(5)).build()?;
    let mut request = client.post(&url).json(&body);
    if let Some(key) = &args.api_key {
        request = request.bearer_auth(key);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("reaching the edge at {} (is `switchyard dev` running?)", args.url))?;
    let status = response.status();
    if !status.is_success() {
        let text = response.text().await.unwrap_or_default();
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or(text);
        anyhow::bail!("{status}: {message}");
    }
    let mut report = Report::default();
    let mut buffer = String::new();
    let mut bytes = response.bytes_stream();
    while let Some(chunk) = bytes.next().await {
        buffer.push_str(&String::from_utf8_lossy(&chunk.context("reading the stream")?));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            report.event(&block)?;
        }
    }
    report.finish()
}

/// What the stream said, for the closing lines.
#[derive(Default)]
struct Report {
    route: Option<Value>,
    tools: Vec<String>,
    completed: Option<Value>,
    wrote_text: bool,
}

impl Report {
    fn event(&mut self, block: &str) -> anyhow::Result<()> {
        let mut name = "message";
        let mut data = String::new();
        for line in block.lines() {
            if let Some(value) = line.strip_prefix("event:") {
                name = value.trim();
            } else if let Some(value) = line.strip_prefix("data:") {
                data.push_str(value.strip_prefix(' ').unwrap_or(value));
            }
        }
        if data.is_empty() {
            return Ok(());
        }
        let value: Value = serde_json::from_str(&data).with_context(|| format!("a `{name}` event is not JSON"))?;
        match name {
            "route" => self.route = Some(value),
            "delta" => {
                let mut out = std::io::stdout().lock();
                out.write_all(value["content"].as_str().unwrap_or_default().as_bytes())?;
                out.flush()?;
                self.wrote_text = true;
            }
            "tool" if value["finished"].as_bool() == Some(true) => {
                let mut line =
                    format!("{} ({} ms)", value["tool"].as_str().unwrap_or("?"), number(&value["duration_ms"]));
                if value["is_error"].as_bool() == Some(true) {
                    line.push_str(&format!(" failed: {}", value["error"].as_str().unwrap_or_default()));
                }
                self.tools.push(line);
            }
            "completed" => self.completed = Some(value),
            "error" => anyhow::bail!("{}", value["error"]["message"].as_str().unwrap_or("the turn failed")),
            _ => {}
        }
        Ok(())
    }

    fn finish(self) -> anyhow::Result<()> {
        if self.wrote_text {
            println!();
        }
        let completed = self.completed.context("the stream ended before the answer was complete")?;
        let metadata = &completed["metadata"];
        let route =
            metadata["route_type"].as_str().unwrap_or_default().trim_start_matches("ROUTE_TYPE_").to_ascii_lowercase();
        let role = metadata["role_id"].as_str().unwrap_or_default();
        let mut role_line = role.to_owned();
        if metadata["role_switched"].as_bool() == Some(true) {
            role_line = format!("{role} (switched from {})", metadata["previous_role_id"].as_str().unwrap_or("?"));
        }
        eprintln!("──");
        eprintln!("route   {route}{}", if metadata["cache_hit"].as_bool() == Some(true) { " (cached)" } else { "" });
        eprintln!("role    {role_line}");
        if !self.tools.is_empty() {
            eprintln!("tools   {}", self.tools.join(", "));
        }
        if let Some(experts) = metadata["expert_role_ids"].as_array().filter(|a| !a.is_empty()) {
            let names: Vec<&str> = experts.iter().filter_map(Value::as_str).collect();
            eprintln!("experts {}", names.join(", "));
        }
        eprintln!(
            "time    routing {} ms, total {} ms · model {}",
            number(&metadata["routing_time_ms"]),
            number(&metadata["execution_time_ms"]),
            completed["model"].as_str().unwrap_or_default()
        );
        for line in metadata["degraded"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            eprintln!("note    {line}");
        }
        if let Some(session) = self.route.as_ref().and_then(|r| r["session_id"].as_str()) {
            eprintln!("session {session}  (continue with --session {session})");
        }
        Ok(())
    }
}

/// A proto3 JSON number, which 64-bit fields give as a string.
fn number(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => "?".to_owned(),
    }
}
