//! The caller's own agent loop over real gRPC: the real sessions and triggers services, the
//! router, and a scripted LLM vendor speaking the real OpenAI and Anthropic wire formats. A
//! request with tools is answered directly with the caller's tools only; a request whose
//! history ends in tool results continues the loop with no routing call and no role switch;
//! a conversation key keeps a stateless caller on one session.

mod common;

use std::time::Duration;

use common::{Options, RecordedExt, Suite, as_tenant, chat, collect_stream, stream_request};
use switchyard_proto::{
    router::v1::{
        ChatMessage, ChatRequest, ChatRole, ClientTool, GetRoutingStatsRequest, RouteType, ToolCall, ToolChoice,
        chat_stream_response::Event, tool_choice::Choice,
    },
    sessions::v1::{GetSessionRequest, MessageRole, session_service_client::SessionServiceClient},
};
use switchyard_testkit::{
    eventually,
    llm::{Reply, ScriptedLlm},
};

const ROUTING_TOOLS: [&str; 2] = ["use_mcp_agent", "use_multiagent_orchestration"];
const TECH_QUESTION: &str = "How do I fix a segfault in my Rust program that uses unsafe pointers?";
const FINANCE_QUESTION: &str = "Should I refinance my mortgage at a 6% interest rate?";

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

fn user(text: &str) -> ChatMessage {
    ChatMessage { role: ChatRole::User as i32, content: text.into(), ..Default::default() }
}

fn assistant_call(id: &str, name: &str, arguments: &str) -> ChatMessage {
    ChatMessage {
        role: ChatRole::Assistant as i32,
        tool_calls: vec![ToolCall { id: id.into(), name: name.into(), arguments_json: arguments.into() }],
        ..Default::default()
    }
}

fn tool_result(id: &str, text: &str) -> ChatMessage {
    ChatMessage { role: ChatRole::Tool as i32, tool_call_id: id.into(), content: text.into(), ..Default::default() }
}

/// A vendor that calls `run_shell` when it is offered and answers with text once a tool
/// result is in the conversation (or when it is a routing call).
async fn agent_vendor() -> ScriptedLlm {
    ScriptedLlm::start(|request| {
        let has_result = request.messages().iter().any(|m| m["role"] == "tool");
        if request.tool_names().iter().any(|t| t == "run_shell") && !has_result {
            Reply::tool_call("run_shell", r#"{"command":"cargo build 2>&1 | tail -20"}"#).usage(50, 12)
        } else if has_result {
            Reply::text("The build fails in src/ptr.rs: dereference the pointer inside an unsafe block.")
        } else {
            Reply::text(format!("answer {}", request.messages_len()))
        }
    })
    .await
}

#[tokio::test]
async fn a_client_tools_turn_shows_the_model_exactly_the_callers_tools_and_returns_its_calls() {
    let suite = Suite::start(agent_vendor().await).await;
    let mut client = suite.client().await;
    let mut request = with_tools(TECH_QUESTION);
    request.tool_choice = Some(ToolChoice { choice: Some(Choice::Function("run_shell".into())) });
    request.parallel_tool_calls = Some(false);
    request.stop = vec!["END".into()];
    request.max_tokens = Some(512);
    request.temperature = Some(0.2);
    let response = client.chat(request).await.expect("chat").into_inner();

    assert_eq!(response.finish_reason, "tool_calls");
    let message = response.message.expect("message");
    assert_eq!(message.tool_calls.len(), 1, "{message:?}");
    let call = &message.tool_calls[0];
    assert_eq!(
        (call.name.as_str(), call.arguments_json.as_str()),
        ("run_shell", r#"{"command":"cargo build 2>&1 | tail -20"}"#)
    );
    assert!(!call.id.is_empty());
    let metadata = response.metadata.expect("metadata");
    assert_eq!(metadata.route_type(), RouteType::Direct);
    assert!(metadata.client_tools && !metadata.continuation, "{metadata:?}");
    assert_eq!(metadata.client_tools_called, ["run_shell"]);
    assert_eq!(metadata.role_id, "tech-expert", "the session's role still answers: {metadata:?}");

    // One model call, no routing call: the vendor saw the caller's tools and nothing else, with
    // the caller's settings, in the role's persona.
    let requests = suite.llm.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let sent = &requests[0];
    assert_eq!(sent.tool_names(), ["run_shell", "read_file"]);
    assert!(ROUTING_TOOLS.iter().all(|t| !sent.tool_names().iter().any(|n| n == t)));
    let tools = sent.body["tools"].as_array().expect("tools");
    assert_eq!(tools[0]["function"]["parameters"]["required"][0], "command");
    assert_eq!(tools[0]["function"]["description"], "Runs a shell command in the user's project");
    assert_eq!(tools[1]["function"]["parameters"], serde_json::json!({"type": "object"}));
    assert_eq!(sent.body["tool_choice"]["function"]["name"], "run_shell");
    assert_eq!(sent.body["parallel_tool_calls"], false);
    assert_eq!(sent.body["stop"][0], "END");
    assert_eq!(sent.body["temperature"], 0.2);
    let system = sent.system_text();
    assert!(!system.contains("use_mcp_agent"), "no routing prompt: {system}");
    assert!(system.contains("senior software engineer"), "the tech-expert persona: {system}");
    assert_eq!(sent.user_text(), TECH_QUESTION);
}

#[tokio::test]
async fn over_the_anthropic_wire_the_callers_tools_and_choice_reach_the_model() {
    let suite = Suite::with(
        agent_vendor().await,
        Options { default_model: "anthropic/claude-3-5-sonnet-20241022", ..Options::default() },
    )
    .await;
    let mut client = suite.client().await;
    let mut request = with_tools(TECH_QUESTION);
    request.tool_choice = Some(ToolChoice { choice: Some(Choice::Function("run_shell".into())) });
    let response = client.chat(request).await.expect("chat").into_inner();
    assert_eq!(response.finish_reason, "tool_calls");
    assert_eq!(response.message.expect("message").tool_calls[0].name, "run_shell");
    let sent = &suite.llm.requests()[0];
    assert_eq!(sent.tool_names(), ["run_shell", "read_file"]);
    assert_eq!(sent.body["tool_choice"], serde_json::json!({"type": "tool", "name": "run_shell"}));
    assert_eq!(sent.body["tools"][0]["input_schema"]["required"][0], "command");
}

#[tokio::test]
async fn a_streamed_client_tools_turn_sends_tool_call_deltas_then_the_calls() {
    let suite = Suite::start(agent_vendor().await).await;
    let mut client = suite.client().await;
    let request = stream_request(TECH_QUESTION);
    let request = switchyard_proto::router::v1::ChatStreamRequest { tools: vec![shell_tool()], ..request };
    let events = collect_stream(&mut client, request).await;

    let Some(Event::Route(route)) = events.first() else { panic!("the route comes first: {events:?}") };
    let metadata = route.metadata.as_ref().expect("metadata");
    assert!(metadata.client_tools && metadata.route_type() == RouteType::Direct, "{metadata:?}");
    let deltas: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCall(delta) => Some(delta),
            _ => None,
        })
        .collect();
    assert!(deltas.len() > 1, "the arguments arrive in pieces as the vendor streams them: {events:?}");
    assert_eq!(deltas[0].name, "run_shell");
    assert!(!deltas[0].id.is_empty());
    assert!(deltas.iter().all(|d| d.index == 0));
    assert!(deltas[1..].iter().all(|d| d.name.is_empty() && d.id.is_empty()), "{deltas:?}");
    let arguments: String = deltas.iter().map(|d| d.arguments_delta.as_str()).collect();
    assert_eq!(arguments, r#"{"command":"cargo build 2>&1 | tail -20"}"#);
    let Some(Event::Completed(done)) = events.last() else { panic!("completion comes last: {events:?}") };
    assert_eq!(done.finish_reason, "tool_calls");
    assert_eq!(done.tool_calls.len(), 1);
    assert_eq!(
        (done.tool_calls[0].id.as_str(), done.tool_calls[0].arguments_json.as_str()),
        (deltas[0].id.as_str(), arguments.as_str())
    );
    assert_eq!(done.metadata.as_ref().expect("metadata").client_tools_called, ["run_shell"]);
}

#[tokio::test]
async fn a_tool_loop_keeps_its_role_and_model_until_the_next_user_message() {
    let suite = Suite::start(agent_vendor().await).await;
    let mut client = suite.client().await;
    let first = client.chat(with_tools(TECH_QUESTION)).await.expect("first turn").into_inner();
    let first_meta = first.metadata.clone().expect("metadata");
    assert_eq!(first_meta.role_id, "tech-expert");
    assert!(first_meta.role_switched, "the loop starts with a switch into the tech role: {first_meta:?}");
    let call = first.message.expect("message").tool_calls.remove(0);
    let first_system = suite.llm.take_requests()[0].system_text();

    // The tool's output is about money: the triggers would switch to the finance expert on
    // it, but a tool result is not the user changing the subject.
    let history = vec![
        user(TECH_QUESTION),
        assistant_call(&call.id, &call.name, &call.arguments_json),
        tool_result(&call.id, &format!("{FINANCE_QUESTION} mortgage refinance interest rate loan budget")),
    ];
    let continuation = ChatRequest { session_id: first.session_id.clone(), history: history.clone(), ..with_tools("") };
    let answered = client.chat(continuation).await.expect("continuation").into_inner();
    assert_eq!(answered.session_id, first.session_id);
    assert_eq!(answered.finish_reason, "stop");
    assert!(answered.message.as_ref().expect("message").content.contains("src/ptr.rs"));
    let meta = answered.metadata.expect("metadata");
    assert!(meta.continuation && meta.client_tools, "{meta:?}");
    assert_eq!((meta.role_id.as_str(), meta.role_switched), ("tech-expert", false), "{meta:?}");
    assert_eq!(meta.held_switch_role_id, "finance-expert", "the switch the triggers asked for is held back");
    assert_eq!(answered.model, first.model);
    assert!(meta.client_tools_called.is_empty());

    // Exactly one model call, no routing call: the loop's conversation, its call and result
    // paired, in the same persona.
    let requests = suite.llm.take_requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let sent = &requests[0];
    assert_eq!(sent.tool_names(), ["run_shell", "read_file"]);
    let messages = sent.messages();
    let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"], "{messages:?}");
    assert_eq!(messages[2]["tool_calls"][0]["id"], call.id.as_str());
    assert_eq!(messages[3]["tool_call_id"], call.id.as_str());
    assert!(sent.tool_results()[0].contains("mortgage"));
    assert!(sent.system_text().contains("senior software engineer"), "{}", sent.system_text());
    assert_eq!(sent.system_text(), first_system, "the loop goes on in the words it started with (transition included)");

    // The session kept the loop's question and its final answer, nothing of the tool output.
    let mut sessions = SessionServiceClient::new(suite.sessions_channel().await);
    let session = sessions
        .get_session(GetSessionRequest { session_id: first.session_id.clone(), include_messages: true })
        .await
        .expect("session")
        .into_inner();
    let recorded: Vec<(MessageRole, &str)> =
        session.recent_messages.iter().map(|m| (m.role(), m.content.as_str())).collect();
    assert_eq!(recorded.len(), 2, "{recorded:?}");
    assert_eq!(recorded[0], (MessageRole::User, TECH_QUESTION));
    assert!(recorded[1].0 == MessageRole::Assistant && recorded[1].1.contains("src/ptr.rs"), "{recorded:?}");
    assert_eq!(session.session.expect("session").role_id, "tech-expert");

    // The next user message is routed and switches as it would have.
    let next = ChatRequest { session_id: first.session_id.clone(), ..chat(FINANCE_QUESTION) };
    let next = client.chat(next).await.expect("next turn").into_inner();
    let meta = next.metadata.expect("metadata");
    assert_eq!((meta.role_id.as_str(), meta.previous_role_id.as_str()), ("finance-expert", "tech-expert"));
    assert!(meta.role_switched && !meta.continuation);
    let requests = suite.llm.take_requests();
    assert_eq!(requests[0].tool_names(), ROUTING_TOOLS, "a new user message gets its routing call");

    // The analytics count the loop's turns: two with the caller's tools, one continuation.
    let stats = eventually(Duration::from_secs(10), "the three turns recorded", || {
        let mut client = client.clone();
        async move {
            let stats = client
                .get_routing_stats(GetRoutingStatsRequest::default())
                .await
                .map_err(|s| s.to_string())?
                .into_inner();
            if stats.total == 3 { Ok(stats) } else { Err(format!("{stats:?}")) }
        }
    })
    .await;
    assert_eq!((stats.client_tools_turns, stats.continuation_turns, stats.held_switches), (2, 1, 1), "{stats:?}");
}

#[tokio::test]
async fn a_streamed_continuation_answers_with_text_and_no_routing_call() {
    let suite = Suite::start(agent_vendor().await).await;
    let mut client = suite.client().await;
    let first = client.chat(with_tools(TECH_QUESTION)).await.expect("first turn").into_inner();
    let call = first.message.expect("message").tool_calls.remove(0);
    suite.llm.take_requests();
    let request = switchyard_proto::router::v1::ChatStreamRequest {
        session_id: first.session_id.clone(),
        tools: vec![shell_tool(), read_tool()],
        history: vec![
            user(TECH_QUESTION),
            assistant_call(&call.id, &call.name, &call.arguments_json),
            tool_result(&call.id, "error[E0133]: dereference of raw pointer is unsafe"),
        ],
        ..stream_request("")
    };
    let events = collect_stream(&mut client, request).await;
    let Some(Event::Route(route)) = events.first() else { panic!("the route comes first: {events:?}") };
    let meta = route.metadata.as_ref().expect("metadata");
    assert!(meta.continuation && meta.route_type() == RouteType::Direct && meta.role_id == "tech-expert", "{meta:?}");
    assert!(meta.held_switch_role_id.is_empty(), "a result in the loop's own domain holds nothing back: {meta:?}");
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            Event::Delta(d) => Some(d.content.as_str()),
            _ => None,
        })
        .collect();
    assert!(text.contains("src/ptr.rs"), "{text}");
    let Some(Event::Completed(done)) = events.last() else { panic!("completion comes last: {events:?}") };
    assert_eq!(done.finish_reason, "stop");
    assert!(done.tool_calls.is_empty());
    assert_eq!(suite.llm.requests().len(), 1);
}

#[tokio::test]
async fn a_conversation_key_keeps_a_stateless_callers_role_and_parallel_keys_keep_their_own() {
    let llm = ScriptedLlm::start(|request| Reply::text(format!("answer {}", request.messages_len()))).await;
    let suite = Suite::start(llm).await;
    let client = suite.client().await;
    let keyed = |message: &str, key: &str| ChatRequest { conversation_key: key.into(), ..chat(message) };

    // Two conversations at once, no session ids.
    let (mut a, mut b) = (client.clone(), client.clone());
    let (tech, finance) = tokio::join!(
        a.chat(keyed(TECH_QUESTION, "conversation-a")),
        b.chat(keyed(FINANCE_QUESTION, "conversation-b")),
    );
    let (tech, finance) = (tech.expect("a").into_inner(), finance.expect("b").into_inner());
    assert_ne!(tech.session_id, finance.session_id);
    assert_eq!(tech.metadata.as_ref().expect("metadata").role_id, "tech-expert");
    assert_eq!(finance.metadata.as_ref().expect("metadata").role_id, "finance-expert");

    // Follow-ups with no domain words of their own stay on their conversations' sessions and roles.
    let follow_up = "Thanks. Can you say more about the second option?";
    let (again_a, again_b) =
        tokio::join!(a.chat(keyed(follow_up, "conversation-a")), b.chat(keyed(follow_up, "conversation-b")));
    let (again_a, again_b) = (again_a.expect("a").into_inner(), again_b.expect("b").into_inner());
    assert_eq!(again_a.session_id, tech.session_id);
    assert_eq!(again_b.session_id, finance.session_id);
    let meta_a = again_a.metadata.expect("metadata");
    let meta_b = again_b.metadata.expect("metadata");
    assert_eq!((meta_a.role_id.as_str(), meta_a.role_switched), ("tech-expert", false));
    assert_eq!((meta_b.role_id.as_str(), meta_b.role_switched), ("finance-expert", false));

    // The key is the tenant's: another tenant's same key is another conversation.
    let other =
        a.chat(as_tenant("tenant-two", keyed(follow_up, "conversation-a"))).await.expect("other tenant").into_inner();
    assert_ne!(other.session_id, tech.session_id);
}

#[tokio::test]
async fn a_stateless_tool_loop_continues_on_its_conversation_keys_session() {
    let suite = Suite::start(agent_vendor().await).await;
    let mut client = suite.client().await;
    let key = "stateless-agent";
    let first = client
        .chat(ChatRequest { conversation_key: key.into(), ..with_tools(TECH_QUESTION) })
        .await
        .expect("first")
        .into_inner();
    let call = first.message.expect("message").tool_calls.remove(0);
    let continuation = ChatRequest {
        conversation_key: key.into(),
        history: vec![
            user(TECH_QUESTION),
            assistant_call(&call.id, &call.name, &call.arguments_json),
            tool_result(&call.id, &format!("{FINANCE_QUESTION} mortgage refinance interest rate")),
        ],
        ..with_tools("")
    };
    let answered = client.chat(continuation).await.expect("continuation").into_inner();
    assert_eq!(answered.session_id, first.session_id);
    let meta = answered.metadata.expect("metadata");
    assert!(meta.continuation && meta.role_id == "tech-expert" && !meta.role_switched, "{meta:?}");
}

#[tokio::test]
async fn bad_tool_input_is_invalid_argument_naming_the_field() {
    let llm = ScriptedLlm::start(|_| Reply::text("never")).await;
    let suite = Suite::start(llm).await;
    let mut client = suite.client().await;
    let cases: Vec<(ChatRequest, &str)> = vec![
        (
            ChatRequest { tools: vec![ClientTool { name: "no spaces".into(), ..shell_tool() }], ..chat("hi") },
            "tools[0].name",
        ),
        (ChatRequest { tools: vec![shell_tool(), shell_tool()], ..chat("hi") }, "tools[1].name"),
        (
            ChatRequest { tools: vec![ClientTool { parameters_json: "[]".into(), ..shell_tool() }], ..chat("hi") },
            "tools[0].parameters_json",
        ),
        (
            ChatRequest {
                tool_choice: Some(ToolChoice { choice: Some(Choice::Function("delete_everything".into())) }),
                ..with_tools("hi")
            },
            "tool_choice.function",
        ),
        (
            ChatRequest { history: vec![user("q"), tool_result("call_unknown", "x")], ..with_tools("") },
            "history[1].tool_call_id",
        ),
        (
            ChatRequest { history: vec![user("q"), assistant_call("c1", "run_shell", "{}")], ..with_tools("") },
            "message",
        ),
        (
            ChatRequest {
                history: vec![ChatMessage {
                    tool_calls: assistant_call("c", "run_shell", "{}").tool_calls,
                    ..user("q")
                }],
                ..chat("hi")
            },
            "history[0].tool_calls",
        ),
        (ChatRequest { conversation_key: "a\0b".into(), ..chat("hi") }, "conversation_key"),
    ];
    for (request, field) in cases {
        let status = client.chat(request).await.expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{field}: {status:?}");
        let (named, _) = switchyard_kit::error::field_violation(&status);
        assert_eq!(named.as_deref(), Some(field), "{status:?}");
    }
    assert!(suite.llm.requests().is_empty(), "nothing reached the vendor");
}

fn image_message(url: &str) -> ChatMessage {
    use switchyard_proto::router::v1::{ContentPart, ImagePart, content_part::Part};
    ChatMessage {
        role: ChatRole::User as i32,
        parts: vec![
            ContentPart { part: Some(Part::Text("Here is the screenshot of the error.".into())) },
            ContentPart { part: Some(Part::Image(ImagePart { url: url.into(), detail: "low".into() })) },
        ],
        ..Default::default()
    }
}

#[tokio::test]
async fn image_parts_reach_a_model_that_reads_them() {
    let suite = Suite::start(agent_vendor().await).await;
    let mut client = suite.client().await;
    let request = ChatRequest {
        history: vec![image_message("data:image/png;base64,iVBORw0KGgo=")],
        ..with_tools("What does the error in the screenshot say?")
    };
    client.chat(request).await.expect("chat");
    let sent = &suite.llm.requests()[0];
    let parts: Vec<&serde_json::Value> = sent
        .messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .collect();
    let image = parts.iter().find(|p| p["type"] == "image_url").unwrap_or_else(|| panic!("{parts:?}"));
    assert_eq!(image["image_url"]["url"], "data:image/png;base64,iVBORw0KGgo=");
    assert_eq!(image["image_url"]["detail"], "low");
    assert!(parts.iter().any(|p| p["text"] == "Here is the screenshot of the error."), "{parts:?}");
}

#[tokio::test]
async fn the_local_model_refuses_tools_and_images_naming_the_field() {
    let suite = Suite::with(
        agent_vendor().await,
        Options { default_model: "local/smollm2-135m-instruct", ..Options::default() },
    )
    .await;
    let mut client = suite.client().await;
    let status = client.chat(with_tools(TECH_QUESTION)).await.expect_err("no tools for the local model");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert_eq!(switchyard_kit::error::field_violation(&status).0.as_deref(), Some("tools"), "{status:?}");
    let request = ChatRequest { history: vec![image_message("https://example.com/error.png")], ..chat("what is it?") };
    let status = client.chat(request).await.expect_err("no images for the local model");
    assert_eq!(switchyard_kit::error::field_violation(&status).0.as_deref(), Some("history[0].parts"), "{status:?}");
    assert!(suite.llm.requests().is_empty());
    // Naming a model that can call tools serves the same request.
    let request = ChatRequest { model: Some("openai/gpt-4o-mini".into()), ..with_tools(TECH_QUESTION) };
    let response = client.chat(request).await.expect("a vendor model calls tools").into_inner();
    assert_eq!(response.finish_reason, "tool_calls");
}

#[tokio::test]
async fn a_conversation_key_whose_session_was_closed_starts_a_new_one() {
    use switchyard_proto::sessions::v1::CloseSessionRequest;
    let llm = ScriptedLlm::start(|request| Reply::text(format!("answer {}", request.messages_len()))).await;
    let suite = Suite::start(llm).await;
    let mut client = suite.client().await;
    let keyed = |message: &str| ChatRequest { conversation_key: "closing".into(), ..chat(message) };
    let first = client.chat(keyed(TECH_QUESTION)).await.expect("first").into_inner();
    let mut sessions = SessionServiceClient::new(suite.sessions_channel().await);
    sessions.close_session(CloseSessionRequest { session_id: first.session_id.clone() }).await.expect("closed");

    let next = client.chat(keyed(FINANCE_QUESTION)).await.expect("a new session for the key").into_inner();
    assert_ne!(next.session_id, first.session_id);
    let again = client.chat(keyed("And over fifteen years?")).await.expect("the key's new session").into_inner();
    assert_eq!(again.session_id, next.session_id);

    // A mistake of the request on a live keyed session is the caller's, and keeps the key.
    let mut bad = keyed("hi");
    bad.force_role_id = Some("ghost-expert".into());
    let status = client.chat(bad).await.expect_err("unknown role");
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    let after = client.chat(keyed("thanks")).await.expect("still the key's session").into_inner();
    assert_eq!(after.session_id, next.session_id);
}
