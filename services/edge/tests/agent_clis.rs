//! The two agent CLIs of issue 26, run headless against the edge as their users run them:
//! Claude Code (`claude -p`, on `/v1/messages`) and Codex (`codex exec` with a custom provider on
//! `/v1/responses`), both pinned by `scripts/install-tools.sh` (`.tools/bin/claude`,
//! `.tools/bin/codex`; the tests fail when they are missing). Behind the edge are the real
//! router, sessions and triggers and the scripted vendor, which asks the CLI to run a shell
//! command with the CLI's own tool, then answers with what the command printed. Each CLI gets a
//! HOME (and CODEX_HOME) and a working directory of its own, an environment holding only what
//! the test gives it, and no address but the edge's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use common::{Options, Stack};
use serde_json::{Value, json};
use switchyard_testkit::llm::{Recorded, Reply, ScriptedLlm, Wire};

/// How long one CLI run may take before it is killed and the test fails.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// A token no one else prints: the command the vendor asks for writes it, so finding it in a
/// tool result and in the file proves that the CLI ran that command.
fn token() -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    format!("switchyard-{:x}-{}", nanos, std::process::id())
}

/// The text of a tool result the request carries: OpenAI's `tool` messages, or Anthropic's
/// `tool_result` blocks (their content a string or text blocks).
fn tool_results(request: &Recorded) -> Vec<String> {
    let mut results = Vec::new();
    for message in request.messages() {
        if message["role"] == "tool" {
            results.push(text_of(&message["content"]));
        }
        for block in message["content"].as_array().map(Vec::as_slice).unwrap_or_default() {
            if block["type"] == "tool_result" {
                results.push(text_of(&block["content"]));
            }
        }
    }
    results
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|part| part["text"].as_str()).collect::<Vec<_>>().join(""),
        _ => String::new(),
    }
}

/// The vendor of an agent: once the request carries a tool result holding `token`, the final
/// answer naming it; while it offers `tool` and the user's task (which names `marker`), a call
/// of `tool` with `arguments`; anything else (routing calls, titles, quota checks) plain text.
fn agent_vendor(token: &str, marker: &str, tool: &str, arguments: Value) -> impl Fn(&Recorded) -> Reply + use<> {
    let (token, marker, tool, arguments) =
        (token.to_owned(), marker.to_owned(), tool.to_owned(), arguments.to_string());
    move |request| {
        if tool_results(request).iter().any(|result| result.contains(&token)) {
            return Reply::text(format!("Done: the proof file holds {token}.")).chunk_size(7);
        }
        let asked = request.messages().iter().any(|message| text_of(&message["content"]).contains(&marker));
        if asked && request.tool_names().contains(&tool) {
            return Reply::tool_call(&tool, &arguments).chunk_size(9);
        }
        Reply::text("OK.")
    }
}

/// A directory for the run: `home/` (HOME), `work/` (the working directory).
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        for sub in ["home", "work"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        Self { dir }
    }

    fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }
}

/// Runs `program` with only `env` (and a PATH of the system's directories) in `cwd`, its
/// standard input closed; killed after [`RUN_LIMIT`]. Exit status, stdout, stderr.
async fn run(program: &str, args: &[&str], env: &[(&str, String)], cwd: &Path) -> (bool, String, String) {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .envs(env.iter().map(|(name, value)| (*name, value.as_str())))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(RUN_LIMIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("{program} did not finish within {RUN_LIMIT:?}"))
        .unwrap_or_else(|err| panic!("{program} runs: {err}"));
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// What the vendor was asked, for a failure's message.
fn summary(requests: &[Recorded]) -> String {
    requests
        .iter()
        .map(|r| {
            format!(
                "{:?} tools={:?} messages={} last={}",
                r.wire,
                r.tool_names(),
                r.messages_len(),
                r.messages().last().map(Value::to_string).unwrap_or_default().chars().take(300).collect::<String>()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn claude_code_runs_its_bash_tool_through_the_edge() {
    let token = token();
    let marker = "proof file";
    let command = format!("echo {token} | tee proof.txt");
    let arguments = json!({"command": command, "description": "Write the proof file"});
    let llm = ScriptedLlm::start(agent_vendor(&token, marker, "Bash", arguments)).await;
    // Claude Code on Anthropic's wire end to end: an Anthropic-wire model behind the router.
    let options = Options {
        configure_router: Box::new(|config| {
            // The scripted vendor serves Anthropic's wire at its root, OpenAI's under /v1.
            let root = config.providers.openai_base_url.clone().unwrap_or_default();
            config.providers.anthropic_base_url = Some(root.trim_end_matches("/v1").to_owned());
            config.providers.anthropic_api_key = Some(switchyard_kit::Secret::new("sk-ant-vendor"));
            config.default_model = "anthropic/claude-test".parse().expect("model");
        }),
        ..Options::default()
    };
    let stack = Stack::start(llm, options).await;
    let sandbox = Sandbox::new();
    let claude = switchyard_testkit::peer_tool("claude");
    // Claude Code with its defaults; only what keeps it from reaching out beyond the edge.
    let env = [
        ("HOME", sandbox.path("home").display().to_string()),
        ("ANTHROPIC_BASE_URL", stack.edge.url()),
        // Open mode: any text is a key.
        ("ANTHROPIC_API_KEY", "sk-ant-any-text".to_owned()),
        ("DISABLE_TELEMETRY", "1".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
        ("DISABLE_ERROR_REPORTING", "1".to_owned()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
    ];
    let task = format!("Write the {marker} with the Bash tool, then tell me what it holds.");
    let (ok, stdout, stderr) =
        run(&claude, &["-p", &task, "--allowedTools", "Bash"], &env, &sandbox.path("work")).await;
    let asked = stack.llm.requests();
    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}\nthe vendor was asked:\n{}", summary(&asked));
    assert!(ok, "claude -p failed\n{context}");
    assert!(stdout.contains(&format!("the proof file holds {token}")), "{context}");
    // The command ran in the working directory.
    let proof = std::fs::read_to_string(sandbox.path("work/proof.txt")).unwrap_or_default();
    assert_eq!(proof.trim(), token, "{context}");
    // The vendor saw Claude Code's tools, on Anthropic's wire, and no routing tools beside them.
    let call = asked.iter().find(|r| r.tool_names().contains(&"Bash".to_owned())).expect("a request with Bash");
    assert_eq!(call.wire, Wire::Anthropic);
    let names = call.tool_names();
    for tool in ["Read", "Edit", "Write"] {
        assert!(names.iter().any(|name| name == tool), "{names:?}");
    }
    assert!(names.iter().all(|name| !name.starts_with("use_")), "{names:?}");
    let bash = call.body["tools"].as_array().unwrap().iter().find(|t| t["name"] == "Bash").unwrap();
    assert!(bash["input_schema"]["properties"]["command"].is_object(), "{bash}");
    // Claude Code's own max_tokens (64 000) reached the model lowered to the router's limit.
    assert_eq!(call.body["max_tokens"], 16_384);
    // Its second turn carried the command's output as the result of the call.
    let answered = asked
        .iter()
        .find(|r| tool_results(r).iter().any(|result| result.contains(&token)))
        .unwrap_or_else(|| panic!("no request carried the tool result\n{context}"));
    let messages = answered.messages();
    let result_at = messages.iter().rposition(|m| m["content"].to_string().contains("tool_result")).unwrap();
    let result =
        messages[result_at]["content"].as_array().unwrap().iter().find(|b| b["type"] == "tool_result").unwrap();
    let call = messages[..result_at]
        .iter()
        .rev()
        .find_map(|m| m["content"].as_array()?.iter().find(|b| b["type"] == "tool_use").cloned())
        .expect("the call before its result");
    assert_eq!(call["name"], "Bash");
    assert_eq!(call["input"]["command"], command);
    assert_eq!(call["id"], result["tool_use_id"]);
}

#[tokio::test]
async fn codex_runs_its_shell_tool_through_the_edge() {
    let token = token();
    let marker = "proof file";
    let command = format!("echo {token} | tee proof.txt");
    let arguments = json!({"cmd": command});
    let llm = ScriptedLlm::start(agent_vendor(&token, marker, "exec_command", arguments)).await;
    let stack = Stack::start(llm, Options::default()).await;
    let sandbox = Sandbox::new();
    let codex_home = sandbox.path("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    let config = format!(
        r#"model = "switchyard"
model_provider = "switchyard"
web_search = "disabled"
check_for_update_on_startup = false

[agents]
enabled = false

[features]
plugins = false

[analytics]
enabled = false

[model_providers.switchyard]
name = "Switchyard"
base_url = "{}/v1"
env_key = "SWITCHYARD_API_KEY"
wire_api = "responses"
"#,
        stack.edge.url()
    );
    std::fs::write(codex_home.join("config.toml"), config).unwrap();
    let codex = switchyard_testkit::peer_tool("codex");
    let env = [
        ("HOME", sandbox.path("home").display().to_string()),
        ("CODEX_HOME", codex_home.display().to_string()),
        // Open mode: any text is a key.
        ("SWITCHYARD_API_KEY", "sy-any-text".to_owned()),
    ];
    let task = format!("Write the {marker} with a shell command, then tell me what it holds.");
    // Codex's own sandbox, as a user runs it: the command may write in the working directory.
    let args = ["exec", "--skip-git-repo-check", "--sandbox", "workspace-write", &task];
    let (ok, stdout, stderr) = run(&codex, &args, &env, &sandbox.path("work")).await;
    let asked = stack.llm.requests();
    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}\nthe vendor was asked:\n{}", summary(&asked));
    assert!(ok, "codex exec failed\n{context}");
    assert!(stdout.contains(&format!("the proof file holds {token}")), "{context}");
    let proof = std::fs::read_to_string(sandbox.path("work/proof.txt")).unwrap_or_default();
    assert_eq!(proof.trim(), token, "{context}");
    // The vendor saw Codex's tools, its shell tool among them, on OpenAI's wire, and no routing
    // tools beside them.
    let call = asked.iter().find(|r| r.tool_names().contains(&"exec_command".to_owned())).expect("exec_command");
    assert_eq!(call.wire, Wire::OpenAi);
    let names = call.tool_names();
    assert!(names.len() > 1 && names.iter().all(|name| !name.starts_with("use_")), "{names:?}");
    let shell =
        call.body["tools"].as_array().unwrap().iter().find(|t| t["function"]["name"] == "exec_command").unwrap();
    assert!(shell["function"]["parameters"]["properties"]["cmd"].is_object(), "{shell}");
    // Its second turn carried the command's output as the result of the call.
    let answered = asked
        .iter()
        .find(|r| tool_results(r).iter().any(|result| result.contains(&token)))
        .unwrap_or_else(|| panic!("no request carried the tool result\n{context}"));
    let messages = answered.messages();
    let result = messages.last().unwrap();
    assert_eq!(result["role"], "tool", "{result}");
    let asked_for = &messages[messages.len() - 2]["tool_calls"][0];
    assert_eq!(asked_for["id"], result["tool_call_id"], "{asked_for}");
    assert_eq!(asked_for["function"]["name"], "exec_command");
    let arguments: Value = serde_json::from_str(asked_for["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments["cmd"], command);
}
