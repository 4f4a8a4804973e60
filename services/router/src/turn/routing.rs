//! The routing decision. In order:
//! 1. the routing cache, when it is on (a user's corrections, then the tenant's decisions by
//!    exact and by similar message): a hit skips the routing call (`cache_hit`);
//! 2. with a local model first in the chain, the fast router decides (a 135M model cannot be
//!    trusted to choose a route, and the fast router is faster than its first token); until
//!    it is loaded, such turns are answered directly;
//! 3. otherwise one streamed model call with the spec's two routing tools and `tool_choice`
//!    auto. Text means the model answers directly, and it goes to the client as it arrives
//!    (spec, "Streaming Support"); a routing tool call means a handler answers. When the call
//!    has not decided within `UNIFIED_CHAT_ROUTING_TIMEOUT_MS`, or fails, the fast router
//!    decides (`fallback_used`). If it says direct, the routing call, already under way, is
//!    kept as the direct answer; otherwise it is dropped (which cancels it).

use std::time::{Duration, Instant};

use futures::StreamExt;
use switchyard_llm::{Completion, EventStream, ProviderError, StreamEvent, ToolChoice};

use super::Scope;
use crate::{
    cache::{CachedRoute, Hit},
    cost::{CallKind, ModelCall},
    error::RouterError,
    events::TurnEvent,
    llm_chain::{Answered, Opened},
    outcome::Metadata,
    route::{Decision, Route, USE_MCP_AGENT, USE_MULTIAGENT, routing_prompt, routing_tools},
};

/// The name routing metadata gives the fast router as the routing model.
pub const FAST_ROUTER: &str = "switchyard/fast-router";

pub struct Routed {
    pub decision: Decision,
    /// The routing call's own answer, when it answered directly.
    pub answer: Option<Answered>,
    /// The routing call, when a handler (or a separate direct call) answers: a direct answer
    /// of the routing call's own is that call.
    pub calls: Vec<ModelCall>,
}

impl Routed {
    fn decided(decision: Decision) -> Self {
        Self { decision, answer: None, calls: Vec::new() }
    }
}

type RouteEvent<'a> = &'a (dyn Fn(&Metadata) -> TurnEvent + Sync);

pub(super) async fn route(
    scope: &Scope<'_>,
    meta: &mut Metadata,
    started: Instant,
    route_event: RouteEvent<'_>,
) -> Result<Routed, RouterError> {
    let router = scope.router;
    // The message's embedding, computed at most once per turn (cache, then fast router).
    let mut vector: Option<Vec<f32>> = None;

    if router.cache.is_some()
        && let Some(hit) = cache_lookup(scope, &mut vector).await
    {
        meta.cache_hit = true;
        let decision = Decision { reasoning: hit.reasoning(), ..hit.cached.decision() };
        return announce(scope, meta, started, route_event, decision).await;
    }

    if router.routes_locally(scope.chain) {
        // A small local model asked to choose a routing tool would always choose one.
        let decision = fast_decision(scope, &mut vector).await.unwrap_or_else(|| Decision {
            reasoning: "the fast router is not loaded (yet): the local model answers directly".to_owned(),
            ..Decision::direct()
        });
        meta.routing_model = FAST_ROUTER.to_owned();
        return announce(scope, meta, started, route_event, decision).await;
    }

    let routed = routing_call(scope, meta, started, route_event, &mut vector).await?;
    // Decisions of the routing call are what the cache saves; a fallback's are not cached
    // (they are cheap to make again, and the model may answer next time).
    if let Some(cache) = &router.cache
        && !meta.fallback_used
    {
        let tenant = scope.identity.tenant.as_str();
        let cached = CachedRoute::of(&routed.decision);
        if let Err(err) = cache.put(tenant, &scope.ctx.message, vector.as_deref(), &cached).await {
            switchyard_kit::warn_throttled!("cache put", error = %err, "could not cache the routing decision");
        }
    }
    Ok(routed)
}

/// The cache's answer for this turn's message, if any.
async fn cache_lookup(scope: &Scope<'_>, vector: &mut Option<Vec<f32>>) -> Option<Hit> {
    let router = scope.router;
    let cache = router.cache.as_ref()?;
    let tenant = scope.identity.tenant.as_str();
    let user = scope.identity.user.as_ref().map_or("", |u| u.as_str());
    let message = &scope.ctx.message;
    // A correction outranks a cached decision, and corrections are matched by meaning.
    if cache.has_corrections(tenant, user) {
        *vector = router.fast.embed(message).await;
        if let Some(hit) = vector.as_deref().and_then(|v| cache.correction(tenant, user, v)) {
            return Some(hit);
        }
    }
    match cache.exact(tenant, message).await {
        Ok(Some(hit)) => return Some(hit),
        Ok(None) => {}
        // The cache is an optimisation: the turn goes on without it.
        Err(err) => switchyard_kit::warn_throttled!("cache lookup", error = %err, "routing cache lookup failed"),
    }
    if vector.is_none() {
        *vector = router.fast.embed(message).await;
    }
    cache.similar(tenant, vector.as_deref()?)
}

/// The fast router's decision, as a routing decision.
async fn fast_decision(scope: &Scope<'_>, vector: &mut Option<Vec<f32>>) -> Option<Decision> {
    let fast = &scope.router.fast;
    if !fast.is_ready() {
        return None;
    }
    // Embedded once per turn: the cache may have done it, and a decision here is cached too.
    if vector.is_none() {
        *vector = fast.embed(&scope.ctx.message).await;
    }
    let last_turn = scope.ctx.last_user_turn().map(str::to_owned);
    let decided = fast.decide(&scope.ctx.message, vector.clone()?, last_turn).await?;
    let nearest = &decided.nearest;
    let reasoning = format!(
        "fast router: {} with confidence {:.2}{}; nearest example \"{}\" ({:.2} similar)",
        decided.route,
        decided.confidence,
        if decided.from_last_turn { ", following the last turn" } else { "" },
        nearest.message,
        nearest.similarity,
    );
    Some(Decision { route: decided.route, reasoning, domains: Vec::new(), malformed_arguments: None })
}

/// Sends the route event for a decision made without the routing call.
async fn announce(
    scope: &Scope<'_>,
    meta: &mut Metadata,
    started: Instant,
    route_event: RouteEvent<'_>,
    decision: Decision,
) -> Result<Routed, RouterError> {
    meta.route = decision.route;
    meta.reasoning = decision.reasoning.clone();
    meta.domains = decision.domains.clone();
    meta.routing_ms = started.elapsed().as_millis() as u64;
    scope.events.send(route_event(meta)).await?;
    Ok(Routed::decided(decision))
}

/// Waits for the next event until `deadline` (none: as long as it takes).
async fn next_before(stream: &mut EventStream, deadline: Option<tokio::time::Instant>) -> Next {
    let next = stream.next();
    let event = match deadline {
        None => next.await,
        Some(deadline) => match tokio::time::timeout_at(deadline, next).await {
            Ok(event) => event,
            Err(_) => return Next::TimedOut,
        },
    };
    match event {
        Some(event) => Next::Event(event),
        None => Next::Ended,
    }
}

enum Next {
    Event(Result<StreamEvent, ProviderError>),
    Ended,
    TimedOut,
}

/// What the fast router does for a routing call that is late or failed.
enum Fallback {
    /// Not available (not loaded, or off): keep waiting, or report the failure.
    Unavailable,
    /// It said direct: keep the routing call's stream as the answer.
    Direct,
    /// It chose a handler.
    Handler(Box<Routed>),
}

async fn fall_back(
    scope: &Scope<'_>,
    meta: &mut Metadata,
    started: Instant,
    route_event: RouteEvent<'_>,
    vector: &mut Option<Vec<f32>>,
    why: String,
) -> Result<Fallback, RouterError> {
    let Some(decision) = fast_decision(scope, vector).await else {
        return Ok(Fallback::Unavailable);
    };
    tracing::info!(route = decision.route.as_str(), reason = %why, "the fast router decided the route");
    meta.fallback_used = true;
    meta.degraded.push(format!("routing: {why}; the fast router chose {}", decision.route));
    let direct = decision.route == Route::Direct;
    let routed = announce(scope, meta, started, route_event, decision).await?;
    Ok(if direct { Fallback::Direct } else { Fallback::Handler(Box::new(routed)) })
}

/// A routing call that failed before deciding: the fast router decides, or the failure stands.
async fn after_failure(
    scope: &Scope<'_>,
    meta: &mut Metadata,
    started: Instant,
    route_event: RouteEvent<'_>,
    vector: &mut Option<Vec<f32>>,
    err: RouterError,
) -> Result<Routed, RouterError> {
    let why = format!("routing call failed ({err})");
    match fall_back(scope, meta, started, route_event, vector, why).await? {
        // The call failed: there is no answer to keep, so a direct call answers.
        Fallback::Direct => Ok(Routed::decided(Decision::direct())),
        Fallback::Handler(routed) => Ok(*routed),
        Fallback::Unavailable => Err(err),
    }
}

async fn routing_call(
    scope: &Scope<'_>,
    meta: &mut Metadata,
    started: Instant,
    route_event: RouteEvent<'_>,
    vector: &mut Option<Vec<f32>>,
) -> Result<Routed, RouterError> {
    let Scope { router, ctx, chain, events, .. } = *scope;
    // Without a fast router there is nothing to fall back on in time: wait for the model.
    let timeout = router.routing_timeout.filter(|_| router.fast.is_ready());
    let mut deadline = timeout.map(|limit| tokio::time::Instant::now() + limit);
    let late = |limit: Option<Duration>| format!("no decision within {} ms", limit.unwrap_or_default().as_millis());

    let prompt = routing_prompt(&ctx.routing, &ctx.persona);
    let call = scope.call(prompt, ctx.messages_with_user(), routing_tools(), ToolChoice::Auto);
    // Kept even when the fast router overtakes it: if that says direct, this call (already
    // on its way) still gives the answer.
    let mut opening = std::pin::pin!(router.llm.open(chain, call));
    let mut overtaken = false;
    let opened = match deadline {
        None => opening.await,
        Some(at) => match tokio::time::timeout_at(at, &mut opening).await {
            Ok(opened) => opened,
            Err(_) => match fall_back(scope, meta, started, route_event, vector, late(timeout)).await? {
                Fallback::Direct => {
                    overtaken = true;
                    opening.await
                }
                Fallback::Handler(routed) => return Ok(*routed),
                Fallback::Unavailable => opening.await,
            },
        },
    };
    let opened = match opened {
        Ok(opened) => opened,
        // Direct was announced: the direct answer reports the models' failure.
        Err(_) if overtaken => return Ok(Routed::decided(Decision::direct())),
        Err(err) => return after_failure(scope, meta, started, route_event, vector, err).await,
    };
    let Opened { model, events: mut stream, fallbacks } = opened;
    meta.routing_model = model.to_string();
    meta.model_fallbacks = fallbacks;
    meta.attempts = fallbacks + 1;

    // Set once the route is known: the model wrote text, or started a routing tool call, or
    // the fast router said direct.
    let mut announced_direct = overtaken;
    let mut decided = false;
    let completion: Completion = loop {
        let wait = if decided || announced_direct { None } else { deadline };
        let event = match next_before(&mut stream, wait).await {
            Next::Event(Ok(event)) => event,
            Next::TimedOut => {
                match fall_back(scope, meta, started, route_event, vector, late(timeout)).await? {
                    Fallback::Direct => announced_direct = true,
                    Fallback::Handler(routed) => return Ok(*routed),
                    Fallback::Unavailable => deadline = None,
                }
                continue;
            }
            Next::Event(Err(err)) if !announced_direct && !decided => {
                let err = RouterError::ModelsUnavailable(err.to_string());
                return after_failure(scope, meta, started, route_event, vector, err).await;
            }
            Next::Event(Err(err)) => return Err(RouterError::ModelsUnavailable(err.to_string())),
            Next::Ended => {
                return Err(RouterError::ModelsUnavailable(format!(
                    "{}: the routing stream ended without a final message",
                    model.provider
                )));
            }
        };
        match event {
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
            StreamEvent::ToolCallStarted { name, .. } => {
                // The model chose a handler; its arguments follow without a deadline.
                decided |= name == USE_MCP_AGENT || name == USE_MULTIAGENT;
            }
            StreamEvent::ToolCallDelta { .. } => {}
            StreamEvent::Done(completion) => break completion,
        }
    };

    // HTTP attempts of the model that answered (retries included), and one per model that
    // failed before it.
    meta.attempts = completion.attempts.max(1) + fallbacks;
    let decision = completion.tool_calls.iter().find_map(Decision::from_tool_call);
    if meta.fallback_used {
        // The fast router said direct and the route was announced: the routing call's answer
        // is the answer, unless it called a routing tool, when a direct call answers instead.
        let answered = Answered { model, completion, fallbacks: 0 };
        if decision.is_none() {
            return Ok(Routed { decision: Decision::direct(), answer: Some(answered), calls: Vec::new() });
        }
        let calls = vec![ModelCall::of(CallKind::Routing, &answered)];
        return Ok(Routed { decision: Decision::direct(), answer: None, calls });
    }
    let Some(decision) = decision else {
        if !announced_direct {
            // An empty direct answer (or a call of a tool we did not offer): still direct.
            meta.route = Route::Direct;
            meta.routing_ms = started.elapsed().as_millis() as u64;
            events.send(route_event(meta)).await?;
        }
        // Its fallbacks are already counted in the metadata.
        let answer = Answered { model, completion, fallbacks: 0 };
        return Ok(Routed { decision: Decision::direct(), answer: Some(answer), calls: Vec::new() });
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
    let calls = vec![ModelCall::of(CallKind::Routing, &Answered { model, completion, fallbacks: 0 })];
    Ok(Routed { decision, answer: None, calls })
}
