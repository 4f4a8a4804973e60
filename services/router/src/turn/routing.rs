//! The routing call: one streamed model call with the spec's two routing tools and
//! `tool_choice` auto. Text means the model answers directly, and it goes to the client as it
//! arrives (spec, "Streaming Support": stream responses while the routing decision is made); a
//! routing tool call means a handler answers.

use std::time::Instant;

use futures::StreamExt;
use switchyard_llm::{Completion, StreamEvent, ToolChoice, Usage};

use super::Scope;
use crate::{
    error::RouterError,
    events::TurnEvent,
    models::{Answered, Opened},
    outcome::Metadata,
    route::{Decision, Route, routing_prompt, routing_tools},
};

pub struct Routed {
    pub decision: Decision,
    /// The routing call's own answer, when it answered directly.
    pub answer: Option<Answered>,
    /// Tokens the routing call used when a handler answers (a direct answer carries its own).
    pub usage: Usage,
}

pub(super) async fn route(
    scope: &Scope<'_>,
    meta: &mut Metadata,
    started: Instant,
    route_event: &(dyn Fn(&Metadata) -> TurnEvent + Sync),
) -> Result<Routed, RouterError> {
    let Scope { router, ctx, chain, events, .. } = *scope;
    let prompt = routing_prompt(&ctx.routing, &ctx.persona);
    let call = scope.call(prompt, ctx.messages_with_user(), routing_tools(), ToolChoice::Auto);
    let Opened { model, events: mut stream, fallbacks } = router.models.open(chain, call).await?;
    meta.routing_model = model.to_string();
    meta.model_fallbacks = fallbacks;
    meta.attempts = fallbacks + 1;

    let mut announced_direct = false;
    let completion: Completion = loop {
        let Some(event) = stream.next().await else {
            return Err(RouterError::ModelsUnavailable(format!(
                "{}: the routing stream ended without a final message",
                model.provider
            )));
        };
        match event.map_err(|err| RouterError::ModelsUnavailable(err.to_string()))? {
            StreamEvent::Text(text) => {
                if !announced_direct {
                    // The first text decides: the model is answering directly.
                    announced_direct = true;
                    meta.route = Route::Direct;
                    meta.routing_ms = started.elapsed().as_millis() as u64;
                    events.send(route_event(meta)).await?;
                }
                events.delta(text).await?;
            }
            StreamEvent::ToolCallStarted { .. } => {}
            StreamEvent::Done(completion) => break completion,
        }
    };

    // HTTP attempts of the model that answered (retries included), and one per model that
    // failed before it.
    meta.attempts = completion.attempts.max(1) + fallbacks;
    let decision = completion.tool_calls.iter().find_map(Decision::from_tool_call);
    let Some(decision) = decision else {
        if !announced_direct {
            // An empty direct answer (or a call of a tool we did not offer): still direct.
            meta.route = Route::Direct;
            meta.routing_ms = started.elapsed().as_millis() as u64;
            events.send(route_event(meta)).await?;
        }
        // Its fallbacks are already counted in the metadata.
        let answer = Answered { model, completion, fallbacks: 0 };
        return Ok(Routed { decision: Decision::direct(), answer: Some(answer), usage: Usage::default() });
    };

    meta.route = decision.route;
    meta.reasoning = decision.reasoning.clone();
    meta.domains = decision.domains.clone();
    meta.routing_ms = started.elapsed().as_millis() as u64;
    if let Some(problem) = &decision.malformed_arguments {
        meta.degraded.push(format!("routing: {} arguments unreadable ({problem})", decision.route.as_str()));
    }
    // Sent even after a direct preamble: the route changed (see RouteDecided in the proto).
    events.send(route_event(meta)).await?;
    Ok(Routed { decision, answer: None, usage: completion.usage })
}
