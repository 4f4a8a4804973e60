//! What a downstream server sends during a call reaches the client that made it: progress, log
//! messages, and its requests to the client — sampling, elicitation, roots — answered by that
//! client and handed back. Real pieces: the gateway over streamable HTTP on loopback, the Python
//! SDK's fixture server behind it over stdio (tests/conformance/fixture_server.py), and rmcp
//! clients whose handlers answer as a chat application would. The other way round, a request
//! the gateway forwards to a server that stops answering ends at `--call-timeout` too.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    deprecated,
    reason = "sampling, roots and logging: deprecated by 2026-07-28, relayed for session-based clients"
)]

mod common;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use rmcp::{
    ClientHandler, ErrorData as McpError, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, CreateMessageRequestParams,
        CreateMessageResult, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
        Implementation, ListRootsResult, LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam,
        ProtocolVersion, ReadResourceRequestParams, Role, Root, RootsCapabilities, SamplingCapability, SamplingMessage,
        SetLevelRequestParams,
    },
    service::{NotificationContext, RequestContext, RoleClient, RunningService},
    transport::{StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig},
};
use serde_json::json;
use switchyard_mcp_gateway::Stores;
use switchyard_testkit::{eventually, peer_tool, root};
use tokio::sync::Notify;

/// A chat application's client: its model answers sampling, its user elicitation (after
/// `hold`, when set), and it works in one root; it keeps the log messages and progress it hears.
#[derive(Clone, Default)]
struct App {
    name: &'static str,
    capabilities: ClientCapabilities,
    logs: Arc<Mutex<Vec<LoggingMessageNotificationParam>>>,
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    hold: Option<Arc<Notify>>,
}

impl App {
    fn capable(name: &'static str) -> Self {
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = Some(SamplingCapability::default());
        capabilities.elicitation = Some(ElicitationCapability::default());
        capabilities.roots = Some(RootsCapabilities::default());
        Self { name, capabilities, ..Self::default() }
    }
}

impl ClientHandler for App {
    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        let prompt =
            params.messages.first().and_then(|m| m.content.first()).and_then(|c| c.as_text()).map(|t| t.text.clone());
        let answer = format!("{} model read: {}", self.name, prompt.unwrap_or_default());
        Ok(CreateMessageResult::new(
            SamplingMessage::new(Role::Assistant, rmcp::model::SamplingMessageContentBlock::text(answer)),
            "app-model".into(),
        ))
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        if let Some(hold) = &self.hold {
            hold.notified().await;
        }
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({"username": self.name, "email": format!("{}@example.com", self.name)})))
    }

    async fn list_roots(&self, _context: RequestContext<RoleClient>) -> Result<ListRootsResult, McpError> {
        Ok(ListRootsResult::new(vec![Root::new(format!("file:///home/{}/project", self.name))]))
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.logs.lock().unwrap().push(params);
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        self.progress.lock().unwrap().push(params);
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(self.capabilities.clone(), Implementation::new(self.name, "0"))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

async fn connect(url: &str, app: App) -> RunningService<RoleClient, App> {
    let transport =
        StreamableHttpClientTransport::from_config(StreamableHttpClientTransportConfig::with_uri(url.to_owned()));
    app.serve(transport).await.expect("client connects")
}

async fn call(
    client: &RunningService<RoleClient, App>,
    name: &str,
    arguments: serde_json::Value,
) -> Result<CallToolResult, String> {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = arguments.as_object().cloned();
    client.call_tool(params).await.map_err(|err| err.to_string())
}

fn text(result: &CallToolResult) -> String {
    result.content.iter().filter_map(|c| c.as_text()).map(|t| t.text.clone()).collect::<Vec<_>>().join("\n")
}

async fn gateway(call_timeout: Duration) -> common::Running {
    let fixture = root().join("services/mcp-gateway/tests/conformance/fixture_server.py");
    let mut config = common::config(&[format!("fixture={} {}", peer_tool("mcp-python"), fixture.display())]);
    config.prefix_tools = false;
    config.call_timeout = call_timeout;
    let running = common::start(&config, Stores::in_memory(), None).await;
    running.ready(8).await;
    running
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_s_requests_and_logs_reach_the_calling_client() {
    let running = gateway(Duration::from_secs(30)).await;
    let app = App::capable("ada");
    let client = connect(&running.mcp_url(), app.clone()).await;

    let sampled = call(&client, "test_sampling", json!({"prompt": "What is 2+2?"})).await.unwrap();
    assert_eq!(text(&sampled), "LLM response: ada model read: What is 2+2?");

    let elicited = call(&client, "test_elicitation", json!({"message": "Who are you?"})).await.unwrap();
    assert!(
        text(&elicited).contains("action=accept") && text(&elicited).contains("ada@example.com"),
        "{}",
        text(&elicited)
    );

    let roots = call(&client, "test_roots", json!({})).await.unwrap();
    assert_eq!(text(&roots), "Roots: file:///home/ada/project");

    // Log messages the server sends during a call, at the level the client set.
    client.set_level(SetLevelRequestParams::new(LoggingLevel::Debug)).await.unwrap();
    call(&client, "test_tool_with_logging", json!({})).await.unwrap();
    eventually(Duration::from_secs(5), "three log messages relayed", || async {
        let logs = app.logs.lock().unwrap().clone();
        let texts: Vec<String> = logs.iter().map(|l| l.data.to_string()).collect();
        if texts.iter().any(|t| t.contains("Tool execution started"))
            && texts.iter().any(|t| t.contains("Tool execution completed"))
        {
            Ok(())
        } else {
            Err(format!("{texts:?}"))
        }
    })
    .await;
    client.cancel().await.unwrap();
    running.stop().await;
}

/// The server's last log message comes a moment before its result; the connection hands the
/// two on by different paths, and the log message must not be lost to the race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_message_sent_just_before_the_result_is_never_lost() {
    const CALLS: usize = 20;
    let running = gateway(Duration::from_secs(30)).await;
    let app = App::capable("ada");
    let client = connect(&running.mcp_url(), app.clone()).await;
    client.set_level(SetLevelRequestParams::new(LoggingLevel::Debug)).await.unwrap();
    for _ in 0..CALLS {
        call(&client, "test_tool_with_logging", json!({})).await.unwrap();
    }
    eventually(Duration::from_secs(5), "every call's three log messages relayed", || async {
        let logs = app.logs.lock().unwrap().clone();
        let completed = logs.iter().filter(|l| l.data.to_string().contains("Tool execution completed")).count();
        if logs.len() == 3 * CALLS && completed == CALLS {
            Ok(())
        } else {
            Err(format!("{} log messages, {completed} of them the last one before the result", logs.len()))
        }
    })
    .await;
    client.cancel().await.unwrap();
    running.stop().await;
}

/// The server reports progress the moment the call starts: the connection notes the call's
/// progress token as it sends the request, so no report is lost, and each reaches the client
/// under the client's own token for that call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reported_at_once_reaches_the_caller_under_its_own_token() {
    const CALLS: usize = 20;
    let running = gateway(Duration::from_secs(30)).await;
    let app = App::capable("ada");
    let client = connect(&running.mcp_url(), app.clone()).await;
    for _ in 0..CALLS {
        let result = call(&client, "test_tool_with_progress", json!({})).await.unwrap();
        assert_eq!(text(&result), "Tool with progress executed successfully");
    }
    // The client hands each notification to a task of its own, so count once they have run.
    eventually(Duration::from_secs(5), "every call's three progress reports relayed", || async {
        let heard = app.progress.lock().unwrap().clone();
        let mut by_token: HashMap<String, Vec<f64>> = HashMap::new();
        for report in &heard {
            by_token.entry(format!("{:?}", report.progress_token)).or_default().push(report.progress);
        }
        let complete = by_token
            .values()
            .filter(|steps| {
                let mut steps = steps.to_vec();
                steps.sort_by(f64::total_cmp);
                steps == [0.0, 50.0, 100.0]
            })
            .count();
        if heard.len() == 3 * CALLS && complete == CALLS {
            Ok(())
        } else {
            Err(format!("{} reports over {} tokens, {complete} calls complete", heard.len(), by_token.len()))
        }
    })
    .await;
    client.cancel().await.unwrap();
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_a_client_cannot_answer_or_that_could_be_anyone_s_are_refused_never_guessed() {
    let running = gateway(Duration::from_secs(30)).await;

    // A client that declared neither sampling nor elicitation: the server hears why.
    let plain = connect(&running.mcp_url(), App { name: "plain", ..App::default() }).await;
    let refused = call(&plain, "test_sampling", json!({"prompt": "hello"})).await;
    let message = match &refused {
        Ok(result) => {
            assert_eq!(result.is_error, Some(true), "{result:?}");
            text(result)
        }
        Err(err) => err.clone(),
    };
    assert!(message.contains("does not support sampling"), "{message}");

    // While one client's elicitation is held, another client calls the same server: two callers
    // are in flight, so the second one's request cannot be placed and is refused.
    let hold = Arc::new(Notify::new());
    let first = connect(&running.mcp_url(), App { hold: Some(hold.clone()), ..App::capable("first") }).await;
    let second = connect(&running.mcp_url(), App::capable("second")).await;
    let first_call = tokio::spawn(async move {
        let result = call(&first, "test_elicitation", json!({"message": "Who are you?"})).await;
        (first, result)
    });
    // The first call is in flight once the server's elicitation is waiting on `hold`.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ambiguous = call(&second, "test_sampling", json!({"prompt": "whose?"})).await;
    let message = match &ambiguous {
        Ok(result) => text(result),
        Err(err) => err.clone(),
    };
    assert!(message.contains("cannot tell which client"), "{message}");
    assert!(!message.contains("model read"), "never answered by another client: {message}");
    hold.notify_one();
    let (first, answered) = first_call.await.unwrap();
    let answered = answered.unwrap();
    assert!(text(&answered).contains("first@example.com"), "the first client's own answer: {}", text(&answered));
    for client in [first, second, plain] {
        client.cancel().await.unwrap();
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_answers_does_not_hold_the_call_past_its_timeout() {
    let running = gateway(Duration::from_secs(2)).await;
    let hold = Arc::new(Notify::new());
    let silent = connect(&running.mcp_url(), App { hold: Some(hold), ..App::capable("silent") }).await;
    let started = std::time::Instant::now();
    let result = call(&silent, "test_elicitation", json!({"message": "anyone?"})).await;
    let message = match &result {
        Ok(result) => text(result),
        Err(err) => err.clone(),
    };
    assert!(message.contains("timed out") || message.contains("within"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(20), "ended by the timeout, after {:?}", started.elapsed());
    silent.cancel().await.unwrap();
    running.stop().await;
}

/// `resources/read` (like `prompts/get`, `completion/complete` and `resources/subscribe`) goes
/// to the server that owns the resource; one that never answers costs the client an error
/// naming the server and the wait, not a request that hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_a_read_does_not_hold_the_client_past_the_timeout() {
    let running = gateway(Duration::from_secs(1)).await;
    let client = connect(&running.mcp_url(), App::capable("reader")).await;
    let started = std::time::Instant::now();
    let err = client
        .read_resource(ReadResourceRequestParams::new("test://slow-resource"))
        .await
        .expect_err("the fixture takes a minute to answer")
        .to_string();
    assert!(err.contains("server `fixture` did not answer resources/read within 1s"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(20), "ended by the timeout, after {:?}", started.elapsed());
    // The connection is still good for reads that are answered.
    let read = client.read_resource(ReadResourceRequestParams::new("test://static-text")).await.unwrap();
    assert_eq!(read.contents.len(), 1);
    client.cancel().await.unwrap();
    running.stop().await;
}
