//! The MCP agent route: the turn's context goes to the gateway (`SetContext` with the message
//! and the routing reasoning), the gateway's top-k tools for it are offered to the model, and
//! the model and the tools take turns (model ↔ `CallTool`) until the model answers or the step
//! limit is reached. A gateway that cannot be reached degrades the turn to a direct answer.

use std::time::Instant;

use switchyard_kit::ServiceError;
use switchyard_llm::{Message, ToolCall, ToolChoice, ToolSpec};
use tracing::Instrument;

use super::{RouteAnswer, Scope};
use crate::{
    clients::AgentTool,
    cost::{CallKind, ModelCall},
    error::RouterError,
    events::{ToolActivity, TurnEvent},
    outcome::Metadata,
    route::Decision,
};

/// Longest tool result passed back to the model; the rest is cut with a note.
const MAX_TOOL_RESULT_CHARS: usize = 16_000;

fn agent_prompt(persona: &str, reasoning: &str) -> String {
    let mut prompt = format!(
        "{persona}\n\nYou can call tools from connected MCP servers to complete the user's request. Call a tool \
         when you need its result, read the results, and then answer the user in plain language. Never invent a \
         tool result: if a tool fails or no tool fits, say so."
    );
    if !reasoning.is_empty() {
        prompt.push_str("\n\nWhy this request was given tools: ");
        prompt.push_str(reasoning);
    }
    prompt
}

pub(super) async fn run(
    scope: &Scope<'_>,
    decision: &Decision,
    meta: &mut Metadata,
) -> Result<RouteAnswer, RouterError> {
    let Scope { router, identity, ctx, chain, events, .. } = *scope;
    let session_id = switchyard_kit::SessionId::parse(&ctx.routing.conversation_id)?;
    let top_k = if router.routes_locally(chain) { router.limits.local_agent_tools } else { router.limits.agent_tools };
    // The model's reasoning says what the tools are for; the fast router's and the cache's
    // describe how the route was chosen, which would only blur the gateway's ranking.
    let model_decided = !meta.cache_hit && !meta.fallback_used && meta.routing_model != super::FAST_ROUTER;
    let purpose = if model_decided { decision.reasoning.as_str() } else { "" };
    let tools = match router.gateway.tools_for(identity, &session_id, &ctx.message, purpose, top_k).await {
        Ok(tools) if !tools.is_empty() => tools,
        Ok(_) => {
            meta.degraded.push("mcp_agent: the gateway offers no tools; answered directly".to_owned());
            return scope.answer_directly().await;
        }
        Err(status) => {
            switchyard_kit::warn_throttled!("gateway", code = ?status.code(), error = %status.message(), "MCP gateway unavailable; answering directly");
            meta.degraded.push(format!("mcp_agent: gateway unavailable ({}); answered directly", status.message()));
            return scope.answer_directly().await;
        }
    };
    tracing::debug!(tools = ?tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), "tools offered to the agent");
    let specs: Vec<ToolSpec> = tools
        .iter()
        .map(|t| ToolSpec {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters: t.input_schema.clone(),
        })
        .collect();

    let mut messages = ctx.messages_with_user();
    let mut model_calls = Vec::new();
    let mut fallbacks = 0;
    let mut step = 0;
    loop {
        let last_step = step >= router.limits.max_tool_steps;
        step += 1;
        // The last step must answer with what the tools gave so far.
        let choice = if last_step { ToolChoice::None } else { ToolChoice::Auto };
        let call = scope.call(agent_prompt(&ctx.persona, &decision.reasoning), messages.clone(), specs.clone(), choice);
        let mut answered = router.llm.stream_answer(chain, call, events).await?;
        fallbacks += answered.fallbacks;
        model_calls.push(ModelCall::of(CallKind::AgentStep, &answered));
        if answered.completion.tool_calls.is_empty() || last_step {
            if last_step && !answered.completion.tool_calls.is_empty() {
                meta.degraded.push(format!("mcp_agent: stopped after {} tool steps", router.limits.max_tool_steps));
            }
            if step == 1 && answered.completion.tool_calls.is_empty() {
                // The route wanted tools and none was called: the answer says why (a local
                // model that could not form a valid call says so in it); the metadata too.
                meta.degraded.push("mcp_agent: the model answered without calling a tool".to_owned());
            }
            answered.completion.tool_calls.clear();
            answered.fallbacks = fallbacks;
            return Ok(RouteAnswer { answered, calls: model_calls });
        }
        let calls = answered.completion.tool_calls.clone();
        messages.push(Message::Assistant { content: answered.completion.content.clone(), tool_calls: calls.clone() });
        for call in &calls {
            let result = call_tool(scope, &session_id, &tools, call, meta, true).await?;
            messages.push(result);
        }
    }
}

/// Runs one tool call the model asked for and returns the tool message answering it. Every
/// failure — an unknown tool, unreadable arguments, a tool error, a timeout — goes back to the
/// model as an error result so it can correct itself or explain; none ends the turn. With
/// `report`, the call's start and end are the turn's tool events (the agent's calls; the
/// gateway's calls on a client-tools turn are not shown to the caller).
///
/// The call is an `execute_tool {tool}` span in the OpenTelemetry GenAI conventions
/// (`gen_ai.operation.name`, `gen_ai.tool.name`, `gen_ai.tool.call.id`, and `error.type` when
/// the call failed), parent of the gateway's own span of it.
pub(super) async fn call_tool(
    scope: &Scope<'_>,
    session_id: &switchyard_kit::SessionId,
    tools: &[AgentTool],
    call: &ToolCall,
    meta: &mut Metadata,
    report: bool,
) -> Result<Message, RouterError> {
    let span = tracing::info_span!(
        "execute_tool",
        otel.name = %format_args!("execute_tool {}", call.name),
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %call.name,
        gen_ai.tool.call.id = %call.id,
        gen_ai.tool.type = "function",
        error.type = tracing::field::Empty,
    );
    let result = run_tool(scope, session_id, tools, call, meta, report).instrument(span.clone()).await;
    match &result {
        Ok(ToolRun { error_type: Some(error_type), .. }) => {
            span.record("error.type", *error_type);
        }
        Ok(_) => {}
        Err(err) => {
            span.record("error.type", switchyard_kit::error::code_name(err.code().grpc()));
        }
    }
    result.map(|run| run.message)
}

/// A tool call's answer to the model, and why it failed (the span's `error.type`).
struct ToolRun {
    message: Message,
    error_type: Option<&'static str>,
}

async fn run_tool(
    scope: &Scope<'_>,
    session_id: &switchyard_kit::SessionId,
    tools: &[AgentTool],
    call: &ToolCall,
    meta: &mut Metadata,
    report: bool,
) -> Result<ToolRun, RouterError> {
    let Scope { router, identity, events, .. } = *scope;
    let reply = |content: String, error_type: Option<&'static str>| ToolRun {
        message: Message::tool_result(call.id.clone(), content, error_type.is_some()),
        error_type,
    };
    let Some(tool) = tools.iter().find(|t| t.name == call.name) else {
        let text = format!("There is no tool named `{}`; use one of the tools offered.", call.name);
        return Ok(reply(text, Some("unknown_tool")));
    };
    let arguments = match call.parsed_arguments() {
        Ok(arguments) => arguments,
        Err(problem) => {
            let text = format!("{problem}. Call the tool again with a JSON object as its arguments.");
            return Ok(reply(text, Some("invalid_arguments")));
        }
    };
    if report {
        events
            .send(TurnEvent::Tool(ToolActivity {
                tool: tool.name.clone(),
                server: tool.server.clone(),
                ..ToolActivity::default()
            }))
            .await?;
    }
    if !meta.tools_used.contains(&tool.name) {
        meta.tools_used.push(tool.name.clone());
    }
    let started = Instant::now();
    let outcome =
        router.gateway.call_tool(identity, session_id, &tool.name, &arguments, router.limits.tool_call_timeout).await;
    let duration_ms = started.elapsed().as_millis() as u64;
    router.metrics.tool_call(&tool.name, duration_ms, outcome.as_ref().map_or(true, |o| o.is_error));
    let (content, error_type, error) = match outcome {
        Ok(result) => {
            let error = if result.is_error { first_line(&result.text) } else { String::new() };
            (cut(result.text), result.is_error.then_some("tool_error"), error)
        }
        Err(status) if status.code() == tonic::Code::DeadlineExceeded => {
            let why = format!("the tool did not answer within {:?}", router.limits.tool_call_timeout);
            (why.clone(), Some("timeout"), why)
        }
        Err(status) => {
            let why = format!("the tool call failed: {}", status.message());
            (why.clone(), Some(switchyard_kit::error::code_name(status.code())), why)
        }
    };
    let is_error = error_type.is_some();
    if report {
        events
            .send(TurnEvent::Tool(ToolActivity {
                tool: tool.name.clone(),
                server: tool.server.clone(),
                finished: true,
                is_error,
                duration_ms,
                error,
            }))
            .await?;
    }
    Ok(reply(content, error_type))
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().chars().take(200).collect()
}

fn cut(text: String) -> String {
    match text.char_indices().nth(MAX_TOOL_RESULT_CHARS) {
        Some((at, _)) => format!("{}\n[… result cut at {MAX_TOOL_RESULT_CHARS} characters]", &text[..at]),
        None => text,
    }
}
