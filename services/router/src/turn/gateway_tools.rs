//! The gateway's tools beside the caller's (`ROUTER_GATEWAY_TOOLS_TENANTS`, off by default).
//! For a tenant that has them, a client-tools turn sets the gateway's context from the user's
//! message (as the MCP agent route does) and offers the model the caller's tools plus the
//! gateway's top-k. The router runs the gateway's calls itself (model ↔ `CallTool`, at most
//! `ROUTER_MAX_TOOL_STEPS`) and the turn ends with the model's answer or its calls of the
//! caller's tools — the only calls the caller ever sees. The loop's continuations see the
//! same tools, and the gateway traffic of its earlier turns is put back into the conversation
//! the caller resends (it never had it), so the model reads what its gateway calls returned.
//!
//! A name clash between a caller's tool and a gateway tool: the caller's wins, the gateway's
//! is left out. The gateway unreachable: the caller's tools only (a warning, a metric and a
//! `degraded` note), never a failed turn.

use std::{collections::HashSet, sync::atomic::Ordering};

use switchyard_kit::{Identity, SessionId};
use switchyard_llm::{FinishReason, Message, ToolCall, ToolChoice, ToolSpec};

use super::{RouteAnswer, Router, Scope, TurnContext, agent};
use crate::{
    clients::{AgentTool, SessionTurn},
    conversations::{HiddenSteps, LoopTools, StoredCall, StoredMessage, StoredTool},
    cost::{CallKind, ModelCall},
    error::RouterError,
    outcome::Metadata,
    request::TurnRequest,
};

/// The gateway traffic of a loop kept for its continuations, at most (the oldest goes first).
const MAX_KEPT_STEPS: usize = 32;

/// The gateway's side of one client-tools turn.
pub(super) struct GatewayTools {
    /// The loop's gateway tools (none when the gateway could not be reached).
    pub tools: Vec<AgentTool>,
    /// False when the caller's `tool_choice` leaves no room for them (`none`, or one named
    /// tool): the loop keeps them, this turn does not offer them.
    pub offered: bool,
    /// The gateway traffic of the conversation's earlier turns.
    pub earlier: Vec<HiddenSteps>,
}

impl GatewayTools {
    /// What the loop keeps for its continuations after this turn.
    pub fn kept(&self, new: Option<HiddenSteps>) -> LoopTools {
        let mut steps = self.earlier.clone();
        steps.extend(new);
        let excess = steps.len().saturating_sub(MAX_KEPT_STEPS);
        steps.drain(..excess);
        LoopTools {
            tools: self
                .tools
                .iter()
                .map(|t| StoredTool {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    input_schema: t.input_schema.clone(),
                    server: t.server.clone(),
                })
                .collect(),
            steps,
        }
    }
}

impl Router {
    /// The gateway's tools for a client-tools turn (or a continuation of its loop) of a tenant
    /// that has them: the loop's own on a continuation, the gateway's top-k for the user's
    /// message otherwise. `None` when the tenant does not have them.
    pub(super) async fn gateway_tools(
        &self,
        identity: &Identity,
        request: &TurnRequest,
        session: &SessionTurn,
        ctx: &TurnContext,
        meta: &mut Metadata,
    ) -> Option<GatewayTools> {
        let tenant = identity.tenant.as_str();
        if !self.gateway_tools_tenants.includes(tenant) {
            return None;
        }
        let continuation = request.is_continuation();
        if !request.has_client_tools() && !continuation {
            return None;
        }
        let kept = match self.conversations.loop_tools(tenant, &session.session_id).await {
            Ok(kept) => kept.unwrap_or_default(),
            Err(err) => {
                switchyard_kit::warn_throttled!("loop tools", error = %err, "could not read the tool loop's gateway tools");
                LoopTools::default()
            }
        };
        let tools = if continuation {
            kept.tools
                .into_iter()
                .map(|t| AgentTool {
                    name: t.name,
                    description: t.description,
                    input_schema: t.input_schema,
                    server: t.server,
                })
                .collect()
        } else {
            let top_k = self.limits.agent_tools;
            match self.gateway.tools_for(identity, &session.session_id, &ctx.message, "", top_k).await {
                Ok(tools) => {
                    self.gateway_reachable.store(true, Ordering::Relaxed);
                    tools
                }
                Err(status) => {
                    // Once per outage at warning level; every turn it costs is counted.
                    if self.gateway_reachable.swap(false, Ordering::Relaxed) {
                        tracing::warn!(code = ?status.code(), error = %status.message(),
                            "MCP gateway unavailable: client-tools turns go on with the caller's tools only");
                    } else {
                        tracing::debug!(error = %status.message(), "MCP gateway still unavailable");
                    }
                    self.metrics.gateway_tools_unavailable();
                    meta.degraded.push(format!(
                        "client_tools: gateway unavailable ({}); the caller's tools only",
                        status.message()
                    ));
                    Vec::new()
                }
            }
        };
        let tools = without_clashes(tools, request);
        let offered = matches!(request.tool_choice, ToolChoice::Auto | ToolChoice::Required);
        if offered {
            meta.gateway_tools_offered = tools.iter().map(|t| t.name.clone()).collect();
        }
        Some(GatewayTools { tools, offered, earlier: kept.steps })
    }
}

/// The gateway's tools less those named like one of the caller's: the caller's tool wins.
fn without_clashes(tools: Vec<AgentTool>, request: &TurnRequest) -> Vec<AgentTool> {
    let callers: HashSet<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    tools
        .into_iter()
        .filter(|tool| {
            let clash = callers.contains(tool.name.as_str());
            if clash {
                tracing::debug!(tool = %tool.name, server = %tool.server,
                    "a gateway tool is named like one of the caller's: the caller's is offered, the gateway's left out");
            }
            !clash
        })
        .collect()
}

/// Runs a client-tools turn with the gateway's tools beside the caller's. Returns the answer
/// (its tool calls only the caller's) and, when it ends with calls of the caller's tools after
/// gateway calls, that gateway traffic for the loop's continuations.
pub(super) async fn run(
    scope: &Scope<'_>,
    gateway: &GatewayTools,
    meta: &mut Metadata,
) -> Result<(RouteAnswer, Option<HiddenSteps>), RouterError> {
    let Scope { router, ctx, chain, request, events, .. } = *scope;
    let session_id = SessionId::parse(&ctx.routing.conversation_id)?;
    let hidden: HashSet<String> = gateway.tools.iter().map(|t| t.name.clone()).collect();
    let mut offered = request.tools.clone();
    offered.extend(gateway.tools.iter().map(|t| ToolSpec {
        name: t.name.clone(),
        description: t.description.clone(),
        parameters: t.input_schema.clone(),
    }));

    let mut messages = ctx.messages_with_user();
    // This turn's gateway calls and results so far.
    let mut before: Vec<Message> = Vec::new();
    let mut model_calls = Vec::new();
    let mut fallbacks = 0;
    let mut step = 0;
    loop {
        let last_step = step >= router.limits.max_tool_steps;
        step += 1;
        // The last step offers the caller's tools only: the model answers or calls them.
        let tools = if last_step { request.tools.clone() } else { offered.clone() };
        let choice = if tools.is_empty() { ToolChoice::Auto } else { request.tool_choice.clone() };
        let mut call = scope.call(ctx.persona.clone(), messages.clone(), tools, choice);
        call.parallel_tool_calls = request.parallel_tool_calls;
        call.response_format = request.response_format.clone();
        let mut answered = router.llm.stream_client_answer_hiding(chain, call, events, &hidden).await?;
        fallbacks += answered.fallbacks;
        model_calls.push(ModelCall::of(CallKind::Answer, &answered));
        let all_calls = answered.completion.tool_calls.clone();
        let (gateway_calls, callers_calls): (Vec<ToolCall>, Vec<ToolCall>) =
            all_calls.iter().cloned().partition(|c| hidden.contains(&c.name));

        if gateway_calls.is_empty() || last_step {
            if !gateway_calls.is_empty() {
                meta.degraded.push(format!(
                    "client_tools: gateway tools not run after {} tool steps",
                    router.limits.max_tool_steps
                ));
            }
            let steps = callers_calls.first().filter(|_| !before.is_empty()).map(|anchor| HiddenSteps {
                anchor: anchor.id.clone(),
                before: before.iter().filter_map(stored_message).collect(),
                calls: callers_calls.iter().map(stored_call).collect(),
                results: Vec::new(),
            });
            answered.completion.tool_calls = callers_calls;
            if answered.completion.tool_calls.is_empty() && answered.completion.finish_reason == FinishReason::ToolCalls
            {
                answered.completion.finish_reason = FinishReason::Stop;
            }
            answered.fallbacks = fallbacks;
            return Ok((RouteAnswer { answered, calls: model_calls }, steps));
        }

        // The gateway's calls run first (their results go back to the model now, or — when
        // the caller's calls end the turn — on the loop's continuation).
        let mut results = Vec::new();
        for call in &gateway_calls {
            results.push(agent::call_tool(scope, &session_id, &gateway.tools, call, meta, false).await?);
            if !meta.gateway_tool_calls.contains(&call.name) {
                meta.gateway_tool_calls.push(call.name.clone());
            }
        }
        if let Some(anchor) = callers_calls.first() {
            let steps = HiddenSteps {
                anchor: anchor.id.clone(),
                before: before.iter().filter_map(stored_message).collect(),
                calls: all_calls.iter().map(stored_call).collect(),
                results: results.iter().filter_map(stored_message).collect(),
            };
            answered.completion.tool_calls = callers_calls;
            answered.fallbacks = fallbacks;
            return Ok((RouteAnswer { answered, calls: model_calls }, Some(steps)));
        }
        let assistant = Message::Assistant { content: answered.completion.content.clone(), tool_calls: gateway_calls };
        messages.push(assistant.clone());
        before.push(assistant);
        messages.extend(results.iter().cloned());
        before.extend(results);
    }
}

fn stored_call(call: &ToolCall) -> StoredCall {
    StoredCall { id: call.id.clone(), name: call.name.clone(), arguments: call.arguments.clone() }
}

fn stored_message(message: &Message) -> Option<StoredMessage> {
    match message {
        Message::Assistant { content, tool_calls } => Some(StoredMessage::Assistant {
            content: content.clone(),
            calls: tool_calls.iter().map(stored_call).collect(),
        }),
        Message::Tool { call_id, content, is_error, .. } => {
            Some(StoredMessage::Tool { call_id: call_id.clone(), content: content.clone(), is_error: *is_error })
        }
        Message::User { .. } => None,
    }
}

fn message(stored: &StoredMessage) -> Message {
    match stored {
        StoredMessage::Assistant { content, calls } => {
            Message::Assistant { content: content.clone(), tool_calls: calls.iter().map(call).collect() }
        }
        StoredMessage::Tool { call_id, content, is_error } => {
            Message::tool_result(call_id.clone(), content.clone(), *is_error)
        }
    }
}

fn call(stored: &StoredCall) -> ToolCall {
    ToolCall { id: stored.id.clone(), name: stored.name.clone(), arguments: stored.arguments.clone() }
}

/// The conversation the caller resent with the gateway traffic of its earlier turns put back:
/// before each assistant message that carries a step's anchor call, the step's earlier gateway
/// calls and results; the message's calls completed with the gateway calls made beside the
/// caller's, whose results follow it.
pub(super) fn put_back(conversation: Vec<Message>, steps: &[HiddenSteps]) -> Vec<Message> {
    if steps.is_empty() {
        return conversation;
    }
    let mut out = Vec::with_capacity(conversation.len());
    for m in conversation {
        let step = match &m {
            Message::Assistant { tool_calls, .. } => {
                steps.iter().rev().find(|s| tool_calls.iter().any(|c| c.id == s.anchor))
            }
            _ => None,
        };
        let (Some(step), Message::Assistant { content, tool_calls }) = (step, &m) else {
            out.push(m);
            continue;
        };
        out.extend(step.before.iter().map(message));
        let answered: HashSet<&str> = step
            .results
            .iter()
            .filter_map(|r| match r {
                StoredMessage::Tool { call_id, .. } => Some(call_id.as_str()),
                StoredMessage::Assistant { .. } => None,
            })
            .collect();
        let known: HashSet<&str> = step.calls.iter().map(|c| c.id.as_str()).collect();
        let calls = if tool_calls.iter().all(|c| known.contains(c.id.as_str())) {
            // As the model made them, in its order.
            step.calls
                .iter()
                .filter(|c| answered.contains(c.id.as_str()) || tool_calls.iter().any(|t| t.id == c.id))
                .map(call)
                .collect()
        } else {
            let mut calls = tool_calls.clone();
            calls.extend(step.calls.iter().filter(|c| answered.contains(c.id.as_str())).map(call));
            calls
        };
        out.push(Message::Assistant { content: content.clone(), tool_calls: calls });
        out.extend(step.results.iter().map(message));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool_call(id: &str, name: &str) -> ToolCall {
        ToolCall { id: id.into(), name: name.into(), arguments: "{}".into() }
    }

    #[test]
    fn the_gateway_traffic_goes_back_where_the_caller_resends_its_calls() {
        let steps = vec![HiddenSteps {
            anchor: "c1".into(),
            before: vec![
                StoredMessage::Assistant { content: String::new(), calls: vec![stored_call(&tool_call("g0", "sum"))] },
                StoredMessage::Tool { call_id: "g0".into(), content: "42".into(), is_error: false },
            ],
            calls: vec![stored_call(&tool_call("g1", "echo")), stored_call(&tool_call("c1", "run_shell"))],
            results: vec![StoredMessage::Tool { call_id: "g1".into(), content: "echoed".into(), is_error: false }],
        }];
        let resent = vec![
            Message::user("add and run"),
            Message::Assistant { content: "running".into(), tool_calls: vec![tool_call("c1", "run_shell")] },
            Message::tool_result("c1", "done", false),
        ];
        let put = put_back(resent, &steps);
        assert_eq!(
            put,
            vec![
                Message::user("add and run"),
                Message::Assistant { content: String::new(), tool_calls: vec![tool_call("g0", "sum")] },
                Message::tool_result("g0", "42", false),
                Message::Assistant {
                    content: "running".into(),
                    tool_calls: vec![tool_call("g1", "echo"), tool_call("c1", "run_shell")]
                },
                Message::tool_result("g1", "echoed", false),
                Message::tool_result("c1", "done", false),
            ]
        );
        // A conversation without the anchor is left as it is.
        let other = vec![Message::user("hi"), Message::assistant("hello")];
        assert_eq!(put_back(other.clone(), &steps), other);
    }
}
