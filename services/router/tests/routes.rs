//! The three routes end to end over gRPC: the real sessions and triggers services (and the MCP
//! gateway with server-everything for the agent), the router, and a scripted LLM vendor
//! speaking the real OpenAI and Anthropic wire formats.

mod common;

use std::time::{Duration, Instant};

use common::{
    AnsweredWhileCut, Options, RecordedExt, Suite, answer_while_sessions_cut, chat, collect_stream, stream_request,
};
use switchyard_proto::{
    router::v1::{RouteType, chat_stream_response::Event},
    sessions::v1::{GetSessionRequest, MessageRole, session_service_client::SessionServiceClient},
};
use switchyard_testkit::{
    eventually,
    llm::{Recorded, Reply, ScriptedLlm},
};

const ROUTING_TOOL: &str = "use_mcp_agent";

fn is_routing_call(request: &Recorded) -> bool {
    request.tool_names().iter().any(|t| t == ROUTING_TOOL)
}

#[tokio::test]
async fn a_direct_answer_streams_as_the_routing_call_writes_it() {
    let answer = "Hello! I'm doing well, thank you for asking. How can I help you today?";
    let llm = ScriptedLlm::start(move |_| Reply::text(answer).usage(42, 17)).await;
    let suite = Suite::start(llm).await;
    let mut client = suite.client().await;

    let events = collect_stream(&mut client, stream_request("Hello, how are you today?")).await;
    let Some(Event::Route(route)) = events.first() else { panic!("the route comes first: {events:?}") };
    let metadata = route.metadata.as_ref().expect("metadata");
    assert_eq!(metadata.route_type(), RouteType::Direct);
    assert!(route.id.starts_with("chat-") && !route.session_id.is_empty(), "{route:?}");
    let deltas: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::Delta(d) => Some(d.content.as_str()),
            _ => None,
        })
        .collect();
    assert!(deltas.len() > 5, "the answer arrives in pieces as the vendor streams it: {deltas:?}");
    assert_eq!(deltas.concat(), answer);
    let Some(Event::Completed(done)) = events.last() else { panic!("completion comes last: {events:?}") };
    assert_eq!(done.finish_reason, "stop");
    let usage = done.usage.expect("usage");
    assert_eq!((usage.prompt_tokens, usage.completion_tokens, usage.total_tokens), (42, 17, 59));
    assert_eq!(done.model, "openai/gpt-4o-mini");

    // One model call: the routing call answered; it carried the spec's tools and prompt.
    let requests = suite.llm.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].is_stream());
    assert_eq!(requests[0].tool_names(), ["use_mcp_agent", "use_multiagent_orchestration"]);
    assert_eq!(requests[0].body["tool_choice"], "auto");
    let system = requests[0].system_text();
    assert!(system.starts_with("You are an intelligent assistant that can either respond directly"), "{system}");
    assert!(system.contains(&format!("- Conversation: {}", route.session_id)), "{system}");
    assert!(system.contains("general-assistant"), "the session's role persona: {system}");

    // The turn is in the session's conversation.
    let mut sessions = SessionServiceClient::new(suite.sessions_channel().await);
    let session = sessions
        .get_session(GetSessionRequest { session_id: route.session_id.clone(), include_messages: true })
        .await
        .expect("session")
        .into_inner();
    let recorded: Vec<(MessageRole, &str)> =
        session.recent_messages.iter().map(|m| (m.role(), m.content.as_str())).collect();
    assert_eq!(recorded, [(MessageRole::User, "Hello, how are you today?"), (MessageRole::Assistant, answer)]);
}

#[tokio::test]
async fn chat_answers_with_the_specs_response_shape_over_the_anthropic_wire() {
    let llm = ScriptedLlm::start(|_| Reply::text("Paris is the capital of France.").usage(30, 8)).await;
    let suite =
        Suite::with(llm, Options { default_model: "anthropic/claude-3-5-sonnet-20241022", ..Options::default() }).await;
    let mut client = suite.client().await;
    let response = client.chat(chat("What is the capital of France?")).await.expect("chat").into_inner();
    assert!(response.id.starts_with("chat-"));
    assert_eq!(response.model, "anthropic/claude-3-5-sonnet-20241022");
    assert_eq!(response.message.as_ref().expect("message").content, "Paris is the capital of France.");
    assert_eq!(response.finish_reason, "stop");
    assert_eq!(response.usage.expect("usage").total_tokens, 38);
    let metadata = response.metadata.expect("metadata");
    assert_eq!(metadata.route_type(), RouteType::Direct);
    assert_eq!(metadata.routing_model, "anthropic/claude-3-5-sonnet-20241022");
    assert!(!metadata.role_id.is_empty());
    assert!(response.created.is_some() && !response.session_id.is_empty());

    let request = &suite.llm.requests()[0];
    assert_eq!(request.headers.get("x-api-key").and_then(|v| v.to_str().ok()), Some(common::ANTHROPIC_KEY));
    assert_eq!(request.body["tool_choice"]["type"], "auto");
    assert_eq!(request.body["model"], "claude-3-5-sonnet-20241022");
}

#[tokio::test]
async fn a_session_carries_the_conversation_and_switches_roles() {
    let llm = ScriptedLlm::start(|request| Reply::text(format!("answer {}", request.messages_len()))).await;
    let suite = Suite::start(llm).await;
    let mut client = suite.client().await;
    let first = client
        .chat(chat("How do I fix a segfault in my Rust program that uses unsafe pointers?"))
        .await
        .expect("first turn")
        .into_inner();
    let metadata = first.metadata.expect("metadata");
    assert_eq!(metadata.role_id, "tech-expert", "{metadata:?}");
    assert!(metadata.role_switched);

    let mut second = chat("Should I refinance my mortgage at a 6% interest rate?");
    second.session_id = first.session_id.clone();
    let second = client.chat(second).await.expect("second turn").into_inner();
    assert_eq!(second.session_id, first.session_id);
    let metadata = second.metadata.expect("metadata");
    assert_eq!((metadata.role_id.as_str(), metadata.previous_role_id.as_str()), ("finance-expert", "tech-expert"));
    assert!(metadata.role_switched);

    // The second routing call saw the first turn as conversation, and the finance persona with
    // the transition.
    let requests = suite.llm.requests();
    let routing = &requests[1];
    let texts = routing.message_texts();
    let first_answer = first.message.expect("message").content;
    assert!(texts.iter().any(|t| t.contains("segfault")), "{texts:?}");
    assert!(texts.contains(&first_answer), "{texts:?}");
    assert!(routing.system_text().contains("finance-expert"), "{}", routing.system_text());
}

#[tokio::test]
async fn a_forced_route_skips_the_routing_call() {
    let llm = ScriptedLlm::start(|_| Reply::text("forced direct answer")).await;
    let suite = Suite::start(llm).await;
    let mut client = suite.client().await;
    let mut request = chat("Hello");
    request.force_route = RouteType::Direct as i32;
    let response = client.chat(request).await.expect("chat").into_inner();
    assert_eq!(response.message.expect("message").content, "forced direct answer");
    assert_eq!(response.metadata.expect("metadata").reasoning, "route forced by the caller");
    let requests = suite.llm.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].tool_names().is_empty(), "no routing tools when the route is forced");
}

/// The scripted model for the agent: routes to the MCP agent, first calls `get-sum` with
/// arguments that are not JSON, corrects itself when told, then answers from the tool result.
fn agent_script(request: &Recorded) -> Reply {
    if is_routing_call(request) {
        return Reply::tool_call("use_mcp_agent", r#"{"reasoning": "the user asks for a calculation"}"#);
    }
    let Some(sum_tool) = request.tool_names().into_iter().find(|t| t.ends_with("get-sum")) else {
        return Reply::text("no get-sum tool was offered");
    };
    let results = request.tool_results();
    match results.last() {
        None => Reply::tool_call(&sum_tool, r#"{"a": 17, "b": "#),
        Some(result) if result.contains("not valid JSON") => Reply::tool_call(&sum_tool, r#"{"a": 17, "b": 25}"#),
        Some(result) => Reply::text(format!("The tool says: {result}")),
    }
}

#[tokio::test]
async fn add_17_and_25_goes_to_the_mcp_agent_which_calls_get_sum() {
    let llm = ScriptedLlm::start(agent_script).await;
    let suite = Suite::with(llm, Options { gateway: true, count_gateway_calls: true, ..Options::default() }).await;
    let mut client = suite.client().await;

    let events = collect_stream(&mut client, stream_request("add 17 and 25")).await;
    let Some(Event::Route(route)) = events.first() else { panic!("route first: {events:?}") };
    let metadata = route.metadata.as_ref().expect("metadata");
    assert_eq!(metadata.route_type(), RouteType::McpAgent);
    assert_eq!(metadata.reasoning, "the user asks for a calculation");
    let tools: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Tool(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(tools.len(), 2, "one call started and finished (the malformed one never reached the tool): {tools:?}");
    assert!(tools[0].tool.ends_with("get-sum") && !tools[0].finished);
    assert!(tools[1].finished && !tools[1].is_error, "{:?}", tools[1]);
    assert_eq!(tools[1].server, "everything");
    let Some(Event::Completed(done)) = events.last() else { panic!("completion last: {events:?}") };
    let metadata = done.metadata.as_ref().expect("metadata");
    assert_eq!(metadata.tools_used.len(), 1);
    assert!(metadata.tools_used[0].ends_with("get-sum"), "{:?}", metadata.tools_used);
    let content: String = events
        .iter()
        .filter_map(|e| match e {
            Event::Delta(d) => Some(d.content.as_str()),
            _ => None,
        })
        .collect();
    assert!(content.contains("42"), "the answer comes from the real tool: {content}");

    // The model was told its first arguments were not JSON, then got the tool's result.
    let requests = suite.llm.requests();
    let last = requests.last().expect("requests");
    let results = last.tool_results();
    assert!(results[0].contains("not valid JSON"), "{results:?}");
    assert!(results[1].contains("42"), "{results:?}");

    // One gateway call opens the turn: SetContext answers with the ranked tools (no ListTools
    // after it); then the one well-formed tool call.
    let calls = suite.gateway_calls.as_ref().expect("counted").methods();
    assert_eq!(calls, ["SetContext", "CallTool"], "the gateway calls of one agent turn");
}

#[tokio::test]
async fn the_agent_degrades_to_a_direct_answer_when_the_gateway_is_down() {
    let llm = ScriptedLlm::start(|request| {
        if is_routing_call(request) {
            Reply::tool_call("use_mcp_agent", r#"{"reasoning": "needs files"}"#)
        } else {
            Reply::text("I can't reach your files right now.")
        }
    })
    .await;
    let suite = Suite::start(llm).await;
    let mut client = suite.client().await;
    let response = client.chat(chat("What's in my README.md file?")).await.expect("chat").into_inner();
    assert_eq!(response.message.expect("message").content, "I can't reach your files right now.");
    let metadata = response.metadata.expect("metadata");
    assert_eq!(metadata.route_type(), RouteType::McpAgent);
    assert!(metadata.tools_used.is_empty());
    assert_eq!(metadata.degraded.len(), 1, "{:?}", metadata.degraded);
    assert!(metadata.degraded[0].starts_with("mcp_agent: gateway unavailable"), "{:?}", metadata.degraded);
}

const EXPERT_DELAY: Duration = Duration::from_millis(1500);

fn expert_script(request: &Recorded) -> Reply {
    let system = request.system_text();
    if is_routing_call(request) {
        Reply::tool_call(
            "use_multiagent_orchestration",
            r#"{"domains": ["technical", "finance"], "reasoning": "architecture and cost"}"#,
        )
    } else if system.contains("one of several experts") && system.contains("Technology Expert") {
        Reply::text("TECH: split the monolith along its data boundaries.").delay(EXPERT_DELAY)
    } else if system.contains("one of several experts") && system.contains("Finance Expert") {
        Reply::text("FINANCE: budget for two years of parallel running costs.").delay(EXPERT_DELAY)
    } else {
        Reply::text("Synthesis of both views.")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_domain_question_runs_two_experts_in_parallel_then_a_synthesis() {
    let llm = ScriptedLlm::start(expert_script).await;
    let suite = Suite::start(llm).await;
    let mut client = suite.client().await;
    let started = Instant::now();
    let response = client
        .chat(chat("Analyze the technical architecture and business implications of migrating to microservices"))
        .await
        .expect("chat")
        .into_inner();
    let elapsed = started.elapsed();
    assert_eq!(response.message.expect("message").content, "Synthesis of both views.");
    let metadata = response.metadata.expect("metadata");
    assert_eq!(metadata.route_type(), RouteType::Multiagent);
    assert_eq!(metadata.domains, ["technical", "finance"]);
    assert_eq!(metadata.expert_role_ids, ["tech-expert", "finance-expert"]);
    assert!(metadata.degraded.is_empty(), "{:?}", metadata.degraded);
    // Two experts of 1.5 s each: in parallel the turn takes one expert's time plus the
    // routing and synthesis calls, well under the 3 s they would take one after the other.
    assert!(elapsed >= EXPERT_DELAY, "{elapsed:?}");
    assert!(
        elapsed < EXPERT_DELAY * 2 - Duration::from_millis(300),
        "the experts ran one after the other: {elapsed:?}"
    );

    let requests = suite.llm.requests();
    assert_eq!(requests.len(), 4, "routing, two experts, synthesis");
    let synthesis = requests.last().expect("synthesis");
    let asked = synthesis.user_text();
    assert!(asked.contains("TECH: split the monolith") && asked.contains("FINANCE: budget"), "{asked}");
}

#[tokio::test]
async fn a_slow_expert_is_left_out_of_the_synthesis() {
    let llm = ScriptedLlm::start(|request| {
        let system = request.system_text();
        if is_routing_call(request) {
            Reply::tool_call("use_multiagent_orchestration", r#"{"domains": ["legal", "finance"], "reasoning": "x"}"#)
        } else if system.contains("one of several experts") && system.contains("Legal Expert") {
            Reply::text("LEGAL: too late.").delay(Duration::from_secs(5))
        } else if system.contains("one of several experts") {
            Reply::text("FINANCE: on time.")
        } else {
            Reply::text("Synthesis without the legal view.")
        }
    })
    .await;
    let options = Options {
        configure: Box::new(|config| config.expert_timeout = Duration::from_millis(800)),
        ..Options::default()
    };
    let suite = Suite::with(llm, options).await;
    let mut client = suite.client().await;
    let response = client.chat(chat("Contract and tax risks of hiring abroad?")).await.expect("chat").into_inner();
    let metadata = response.metadata.expect("metadata");
    assert_eq!(metadata.expert_role_ids, ["legal-expert", "finance-expert"]);
    assert_eq!(metadata.degraded.len(), 1, "{:?}", metadata.degraded);
    assert!(metadata.degraded[0].starts_with("expert legal-expert: timed out"), "{:?}", metadata.degraded);
    let synthesis = suite.llm.requests().into_iter().last().expect("synthesis");
    let asked = synthesis.user_text();
    assert!(asked.contains("FINANCE: on time.") && !asked.contains("LEGAL"), "{asked}");
}

#[tokio::test]
async fn a_client_that_leaves_cancels_the_turn() {
    let llm = ScriptedLlm::start(|request| {
        if is_routing_call(request) {
            Reply::tool_call("use_multiagent_orchestration", r#"{"domains": ["legal", "finance"], "reasoning": "x"}"#)
        } else if request.system_text().contains("one of several experts") {
            Reply::text("an expert's view").delay(Duration::from_millis(1500))
        } else {
            Reply::text("the synthesis")
        }
    })
    .await;
    let suite = Suite::start(llm).await;
    let mut client = suite.client().await;
    let mut stream =
        client.chat_stream(stream_request("Contract and tax risks of hiring abroad?")).await.expect("opens");
    let first = stream.get_mut().message().await.expect("an event").expect("not the end");
    let Some(Event::Route(route)) = first.event else { panic!("the route first: {first:?}") };
    drop(stream);

    // Long after the experts would have answered: the turn stopped when the client left (the
    // experts' calls were dropped, some before they were even sent), so there was no
    // synthesis, and the turn is not appended to the session.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let systems: Vec<String> = suite.llm.requests().iter().map(|r| r.system_text()).collect();
    assert!(systems[0].starts_with("You are an intelligent assistant"), "the routing call came first");
    assert!(systems.len() <= 3, "routing and at most the two experts: {systems:?}");
    assert!(!systems.iter().any(|s| s.contains("Several experts have answered")), "no synthesis: {systems:?}");
    let mut sessions = SessionServiceClient::new(suite.sessions_channel().await);
    let session = sessions
        .get_session(GetSessionRequest { session_id: route.session_id, include_messages: true })
        .await
        .expect("session")
        .into_inner();
    assert!(session.recent_messages.is_empty(), "{:?}", session.recent_messages);
}

/// A client that leaves once it has the whole answer does not take the turn out of the
/// conversation: its recording goes on without it. Sessions is out of reach (a cut proxy)
/// when the answer ends, so the recording is still retrying when the client leaves, and lands
/// once sessions is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_answered_in_full_is_recorded_after_its_client_leaves() {
    let answer = "Compare the APRs first, then the fees.";
    let AnsweredWhileCut { suite, proxy, router: _router, session_id, stream } =
        answer_while_sessions_cut("Should I refinance?", answer).await;
    // The vendor's last event (finish and usage) comes a chunk later; then the router records
    // the turn, retrying while sessions is out of reach, and the client leaves meanwhile.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(stream);
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.restore();

    let sessions = SessionServiceClient::new(suite.sessions_channel().await);
    eventually(Duration::from_secs(10), "the turn in the session's conversation", || {
        let (mut sessions, session_id) = (sessions.clone(), session_id.clone());
        async move {
            let session = sessions
                .get_session(GetSessionRequest { session_id, include_messages: true })
                .await
                .map_err(|status| status.to_string())?
                .into_inner();
            let recorded: Vec<(MessageRole, String)> =
                session.recent_messages.iter().map(|m| (m.role(), m.content.clone())).collect();
            let expected =
                [(MessageRole::User, "Should I refinance?".to_owned()), (MessageRole::Assistant, answer.to_owned())];
            if recorded == expected { Ok(()) } else { Err(format!("recorded so far: {recorded:?}")) }
        }
    })
    .await;
}

fn tenant_expert_script(request: &Recorded) -> Reply {
    if is_routing_call(request) {
        Reply::tool_call("use_multiagent_orchestration", r#"{"domains": ["finance", "technical"], "reasoning": "x"}"#)
    } else if request.system_text().contains("one of several experts") {
        Reply::text("An expert's view.")
    } else {
        Reply::text("Synthesis.")
    }
}

#[tokio::test]
async fn experts_are_the_callers_tenants_roles_never_another_tenants() {
    use switchyard_proto::sessions::v1::{Role, UpdateRoleRequest, role_service_client::RoleServiceClient};
    let llm = ScriptedLlm::start(tenant_expert_script).await;
    let suite = Suite::start(llm).await;
    // Acme makes the built-in finance expert its own, with a prompt no other tenant may see.
    let mut roles = RoleServiceClient::new(suite.sessions_channel().await);
    let own =
        Role { id: "finance-expert".into(), system_prompt: "ACME-SECRET: our loan book.".into(), ..Role::default() };
    let mask = prost_types::FieldMask { paths: vec!["system_prompt".into()] };
    let update = UpdateRoleRequest { role: Some(own), update_mask: Some(mask) };
    roles.update_role(common::as_tenant("acme", update)).await.expect("acme's own copy");

    let mut client = suite.client().await;
    let question = "Analyze the technical architecture and business implications of migrating to microservices";
    let experts_asked = |requests: Vec<Recorded>| -> Vec<String> {
        requests
            .iter()
            .map(|request| request.system_text())
            .filter(|system| system.contains("one of several experts"))
            .collect()
    };
    client.chat(common::as_tenant("acme", chat(question))).await.expect("acme's chat");
    let acme = experts_asked(suite.llm.take_requests());
    assert!(acme.iter().any(|system| system.contains("ACME-SECRET")), "acme's expert is its own copy: {acme:?}");

    // Within the role list's cache time, another tenant's experts are the built-ins.
    client.chat(common::as_tenant("globex", chat(question))).await.expect("globex's chat");
    let globex = experts_asked(suite.llm.take_requests());
    assert_eq!(globex.len(), 2, "{globex:?}");
    assert!(globex.iter().all(|system| !system.contains("ACME-SECRET")), "{globex:?}");
}
