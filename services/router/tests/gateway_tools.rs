//! The gateway's tools beside the caller's (`ROUTER_GATEWAY_TOOLS_TENANTS`) over real gRPC:
//! the real sessions and triggers services, the real MCP gateway with server-everything (stdio)
//! behind it, the router, and the scripted LLM vendor. For a tenant that has them, the model
//! is offered the caller's tools plus the gateway's; the router runs the gateway's calls and
//! the caller gets only its own; for other tenants, and with the gateway down, the caller's
//! tools only.

mod common;

use common::{Options, RecordedExt, Suite, as_tenant, chat, collect_stream, stream_request};
use switchyard_proto::router::v1::{
    ChatMessage, ChatRequest, ChatRole, ChatStreamRequest, ClientTool, ToolCall, chat_stream_response::Event,
};
use switchyard_testkit::{
    database_url,
    llm::{Recorded, Reply, ScriptedLlm},
};

const MESSAGE: &str = "add 17 and 25, then save the sum to sum.txt";
const CALLERS_TOOLS: [&str; 2] = ["run_shell", "read_file"];

fn shell_tool() -> ClientTool {
    ClientTool {
        name: "run_shell".into(),
        description: "Runs a shell command in the user's project".into(),
        parameters_json: r#"{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}"#
            .into(),
    }
}

fn read_tool() -> ClientTool {
    ClientTool { name: "read_file".into(), description: "Reads a file".into(), parameters_json: String::new() }
}

fn with_tools(message: &str) -> ChatRequest {
    ChatRequest { tools: vec![shell_tool(), read_tool()], ..chat(message) }
}

fn sum_tool(request: &Recorded) -> Option<String> {
    request.tool_names().into_iter().find(|t| t.ends_with("get-sum"))
}

/// Calls the gateway's `get-sum` when it is offered, then the caller's `run_shell` with the
/// sum it read, then answers once the caller's result is in. Without `get-sum`, it calls
/// `run_shell` at once.
fn stepwise(request: &Recorded) -> Reply {
    let results = request.tool_results();
    if results.iter().any(|r| r.contains("saved")) {
        Reply::text("Saved: the sum is 42.")
    } else if results.iter().any(|r| r.contains("42")) {
        Reply::tool_call("run_shell", r#"{"command":"echo 42 > sum.txt"}"#)
    } else if let Some(sum) = sum_tool(request) {
        Reply::tool_call(sum, r#"{"a": 17, "b": 25}"#)
    } else {
        Reply::tool_call("run_shell", r#"{"command":"python3 -c 'print(17+25)' > sum.txt"}"#)
    }
}

/// Calls `get-sum` and `run_shell` in one answer (the gateway's first), then answers.
fn mixed(request: &Recorded) -> Reply {
    if request.tool_results().iter().any(|r| r.contains("saved")) {
        return Reply::text("Saved.");
    }
    match sum_tool(request) {
        Some(sum) => Reply::text("Adding and saving. ")
            .and_tool_call(sum, r#"{"a": 17, "b": 25}"#)
            .and_tool_call("run_shell", r#"{"command":"echo saved > sum.txt"}"#),
        None => Reply::text("no get-sum was offered"),
    }
}

fn gateway_suite_for(tenants: &'static str) -> Options {
    Options {
        gateway: true,
        configure: Box::new(move |config| {
            config.gateway_tools_tenants = tenants.split(',').map(str::to_owned).collect();
        }),
        ..Options::default()
    }
}

fn user(text: &str) -> ChatMessage {
    ChatMessage { role: ChatRole::User as i32, content: text.into(), ..Default::default() }
}

fn assistant(content: &str, calls: &[ToolCall]) -> ChatMessage {
    ChatMessage {
        role: ChatRole::Assistant as i32,
        content: content.into(),
        tool_calls: calls.to_vec(),
        ..Default::default()
    }
}

fn tool_result(id: &str, text: &str) -> ChatMessage {
    ChatMessage { role: ChatRole::Tool as i32, tool_call_id: id.into(), content: text.into(), ..Default::default() }
}

#[tokio::test]
async fn an_enabled_tenant_gets_the_gateways_tools_run_by_the_router_and_only_its_own_calls_back() {
    let suite = Suite::with(ScriptedLlm::start(stepwise).await, gateway_suite_for("acme,beta")).await;
    let mut client = suite.client().await;
    let response = client.chat(as_tenant("acme", with_tools(MESSAGE))).await.expect("chat").into_inner();

    // The caller gets its own call only.
    assert_eq!(response.finish_reason, "tool_calls");
    let message = response.message.clone().expect("message");
    assert_eq!(message.tool_calls.len(), 1, "{message:?}");
    let call = message.tool_calls[0].clone();
    assert_eq!((call.name.as_str(), call.arguments_json.as_str()), ("run_shell", r#"{"command":"echo 42 > sum.txt"}"#));
    let metadata = response.metadata.clone().expect("metadata");
    assert!(metadata.client_tools, "{metadata:?}");
    assert_eq!(metadata.client_tools_called, ["run_shell"]);
    assert_eq!(metadata.gateway_tool_calls.len(), 1, "{metadata:?}");
    let sum = metadata.gateway_tool_calls[0].clone();
    assert!(sum.ends_with("get-sum"), "{metadata:?}");
    assert_eq!(
        metadata.tools_used,
        std::slice::from_ref(&sum),
        "the MCP tools called, as the agent route reports them"
    );
    assert!(metadata.gateway_tools_offered.contains(&sum), "{metadata:?}");
    assert!(metadata.gateway_tools_offered.iter().all(|t| !CALLERS_TOOLS.contains(&t.as_str())));
    assert!(metadata.degraded.is_empty(), "{metadata:?}");

    // The vendor saw the caller's tools, then the gateway's; the gateway's tool ran for real
    // and its result reached the vendor's next request, with the same tools.
    let requests = suite.llm.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let offered = requests[0].tool_names();
    assert_eq!(offered[..2], CALLERS_TOOLS, "{offered:?}");
    assert_eq!(offered[2..], metadata.gateway_tools_offered[..], "{offered:?}");
    assert!(!offered.iter().any(|t| t.starts_with("use_")), "no routing tools: {offered:?}");
    assert_eq!(requests[1].tool_names(), offered);
    let results = requests[1].tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].contains("42"), "the real get-sum's result: {results:?}");

    // The caller runs its tool and continues the loop: the same tools, and the gateway's call
    // and result put back into the conversation it resent (it never had them).
    let continuation = ChatRequest {
        session_id: response.session_id.clone(),
        history: vec![
            user(MESSAGE),
            assistant(&message.content, std::slice::from_ref(&call)),
            tool_result(&call.id, "saved"),
        ],
        ..with_tools("")
    };
    let done = client.chat(as_tenant("acme", continuation)).await.expect("continuation").into_inner();
    assert_eq!(done.message.expect("message").content, "Saved: the sum is 42.");
    assert_eq!(done.finish_reason, "stop");
    let metadata = done.metadata.expect("metadata");
    assert!(metadata.continuation && metadata.gateway_tool_calls.is_empty(), "{metadata:?}");
    assert_eq!(metadata.gateway_tools_offered[..], offered[2..]);
    let requests = suite.llm.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[2].tool_names(), offered, "the loop's continuation sees the same tools");
    let results = requests[2].tool_results();
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].contains("42") && results[1] == "saved", "{results:?}");

    // The decision records that the gateway's tools were used (tools_used), on a client-tools turn.
    let pool =
        switchyard_kit::postgres::connect_in_schema(&database_url(), suite.schema.name(), 1).await.expect("postgres");
    let recorded = switchyard_testkit::eventually(std::time::Duration::from_secs(10), "the turn recorded", || {
        let pool = pool.clone();
        let id = response.id.clone();
        async move {
            let row: Option<(bool, Vec<String>, Vec<String>)> = sqlx::query_as(
                "SELECT client_tools, tools_used, client_tools_called FROM routing_decisions WHERE id = $1",
            )
            .bind(&id)
            .fetch_optional(&pool)
            .await
            .map_err(|err| err.to_string())?;
            row.ok_or_else(|| "not yet".to_owned())
        }
    })
    .await;
    assert_eq!(recorded, (true, vec![sum], vec!["run_shell".to_owned()]));
}

#[tokio::test]
async fn mixed_calls_run_the_gateways_first_and_stream_only_the_callers() {
    let suite = Suite::with(ScriptedLlm::start(mixed).await, gateway_suite_for("*")).await;
    let mut client = suite.client().await;
    let request = ChatStreamRequest { tools: vec![shell_tool(), read_tool()], ..stream_request(MESSAGE) };
    // `*`: every tenant, the default one of a caller that names none too.
    let events = collect_stream(&mut client, request).await;

    assert!(!events.iter().any(|e| matches!(e, Event::Tool(_))), "no gateway tool events: {events:?}");
    let deltas: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCall(delta) => Some(delta),
            _ => None,
        })
        .collect();
    assert!(!deltas.is_empty(), "{events:?}");
    assert_eq!(deltas[0].name, "run_shell", "the caller's call only: {deltas:?}");
    assert!(deltas.iter().all(|d| d.index == 0), "numbered among the caller's calls: {deltas:?}");
    assert!(deltas[1..].iter().all(|d| d.name.is_empty()), "{deltas:?}");
    let arguments: String = deltas.iter().map(|d| d.arguments_delta.as_str()).collect();
    assert_eq!(arguments, r#"{"command":"echo saved > sum.txt"}"#);
    let Some(Event::Completed(done)) = events.last() else { panic!("completion last: {events:?}") };
    assert_eq!(done.finish_reason, "tool_calls");
    assert_eq!(done.tool_calls.len(), 1, "{:?}", done.tool_calls);
    assert_eq!(done.tool_calls[0].name, "run_shell");
    let metadata = done.metadata.as_ref().expect("metadata");
    assert_eq!(metadata.client_tools_called, ["run_shell"]);
    assert_eq!(metadata.gateway_tool_calls.len(), 1, "{metadata:?}");
    assert!(metadata.gateway_tool_calls[0].ends_with("get-sum"));
    assert_eq!(suite.llm.requests().len(), 1, "the turn ends with the caller's call");

    // The continuation: the assistant message carries both calls again and get-sum's result
    // (which ran before the caller got its call) comes with the caller's.
    let call = &done.tool_calls[0];
    let session_id = match &events[0] {
        Event::Route(route) => route.session_id.clone(),
        other => panic!("route first: {other:?}"),
    };
    let continuation = ChatRequest {
        session_id,
        history: vec![
            user(MESSAGE),
            assistant("Adding and saving. ", std::slice::from_ref(call)),
            tool_result(&call.id, "saved"),
        ],
        ..with_tools("")
    };
    let answered = client.chat(continuation).await.expect("continuation").into_inner();
    assert_eq!(answered.message.expect("message").content, "Saved.");
    let requests = suite.llm.requests();
    let last = requests.last().expect("requests");
    let results = last.tool_results();
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results.iter().any(|r| r.contains("42")) && results.iter().any(|r| r == "saved"), "{results:?}");
    let calls: Vec<String> = last
        .messages()
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|c| c["function"]["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[0].ends_with("get-sum") && calls[1] == "run_shell", "{calls:?}");
}

#[tokio::test]
async fn a_tenant_not_enabled_gets_the_callers_tools_only() {
    let suite = Suite::with(ScriptedLlm::start(stepwise).await, gateway_suite_for("acme")).await;
    let mut client = suite.client().await;
    let response = client.chat(as_tenant("other", with_tools(MESSAGE))).await.expect("chat").into_inner();
    assert_eq!(response.message.expect("message").tool_calls[0].name, "run_shell");
    let metadata = response.metadata.expect("metadata");
    assert!(metadata.gateway_tools_offered.is_empty() && metadata.gateway_tool_calls.is_empty(), "{metadata:?}");
    let requests = suite.llm.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].tool_names(), CALLERS_TOOLS);
}

#[tokio::test]
async fn with_the_gateway_down_the_turn_goes_on_with_the_callers_tools() {
    // No gateway: its port is held closed, as in an outage.
    let options = Options {
        configure: Box::new(|config| config.gateway_tools_tenants = vec!["*".to_owned()]),
        ..Options::default()
    };
    let suite = Suite::with(ScriptedLlm::start(stepwise).await, options).await;
    let mut client = suite.client().await;
    for _ in 0..2 {
        let response = client.chat(as_tenant("acme", with_tools(MESSAGE))).await.expect("chat").into_inner();
        assert_eq!(response.finish_reason, "tool_calls");
        assert_eq!(response.message.expect("message").tool_calls[0].name, "run_shell");
        let metadata = response.metadata.expect("metadata");
        assert!(metadata.gateway_tools_offered.is_empty(), "{metadata:?}");
        assert_eq!(metadata.degraded.len(), 1, "{metadata:?}");
        assert!(metadata.degraded[0].starts_with("client_tools: gateway unavailable"), "{metadata:?}");
    }
    let requests = suite.llm.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r.tool_names() == CALLERS_TOOLS), "{requests:?}");
}

#[tokio::test]
async fn a_callers_tool_named_like_a_gateway_tool_wins_and_the_gateways_is_left_out() {
    const CLASH: &str = "everything__get-sum";
    let suite = Suite::with(
        ScriptedLlm::start(|_| Reply::tool_call(CLASH, r#"{"a": 17, "b": 25}"#)).await,
        gateway_suite_for("*"),
    )
    .await;
    let mut client = suite.client().await;
    let own = ClientTool {
        name: CLASH.into(),
        description: "The caller's own adder".into(),
        parameters_json: r#"{"type":"object"}"#.into(),
    };
    let request = ChatRequest { tools: vec![own, shell_tool()], ..chat(MESSAGE) };
    let response = client.chat(request).await.expect("chat").into_inner();

    // The model's call of it is the caller's to run: returned, not run by the gateway.
    assert_eq!(response.finish_reason, "tool_calls");
    assert_eq!(response.message.expect("message").tool_calls[0].name, CLASH);
    let metadata = response.metadata.expect("metadata");
    assert_eq!(metadata.client_tools_called, [CLASH]);
    assert!(metadata.gateway_tool_calls.is_empty() && metadata.tools_used.is_empty(), "{metadata:?}");
    assert!(!metadata.gateway_tools_offered.is_empty(), "the gateway's other tools are offered: {metadata:?}");
    assert!(!metadata.gateway_tools_offered.iter().any(|t| t == CLASH), "{metadata:?}");
    let requests = suite.llm.requests();
    assert_eq!(requests.len(), 1);
    let names = requests[0].tool_names();
    assert_eq!(names.iter().filter(|n| *n == CLASH).count(), 1, "offered once: {names:?}");
    assert_eq!(requests[0].body["tools"][0]["function"]["description"], "The caller's own adder");
}
