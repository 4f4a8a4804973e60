//! One chat turn (docs/requirements.md#router-endpoint), on a session:
//! context switching first (sessions' ProcessQuery), then the routing call — the LLM is the
//! router, through the two routing tools — then the chosen route, and finally the answer is
//! recorded in the session's conversation and in the routing analytics. A turn still running
//! when the shutdown grace runs out is recorded as interrupted, with the answer it had.

mod agent;
mod context;
mod experts;
mod gateway_tools;
mod routing;
mod writes;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use switchyard_kit::{ErrorCode, Identity, ServiceError, SessionId, ShutdownNotice};
use switchyard_llm::{ChatRequest, Message, ModelRef, ToolChoice, ToolSpec, Usage};
use tracing::Instrument;

pub(crate) use self::writes::SessionWrites;
use crate::{
    analytics::{DecisionRecord, Recorder},
    budget::{Allowance, Budgets, Degrade},
    cache::{Learning, RoutingCache},
    clients::{GatewayClient, SessionTurn, SessionsClient},
    config::GatewayToolsTenants,
    conversations::{ConversationKeys, LoopPersona},
    cost::{CallKind, ModelCall, Prices, price_calls},
    error::RouterError,
    events::{Events, TurnEvent},
    fast::FastPath,
    limits::Limits,
    llm_chain::{Answered, LlmChain},
    metrics::Metrics,
    outcome::{Metadata, TurnOutcome},
    request::TurnRequest,
    route::{Decision, Route},
};

pub use context::TurnContext;
pub use routing::FAST_ROUTER;

/// The provider name of models run in this process.
pub const LOCAL_PROVIDER: &str = "local";

/// Everything a turn needs, shared by all turns.
pub struct Router {
    pub(crate) llm: LlmChain,
    pub(crate) sessions: SessionsClient,
    pub(crate) gateway: GatewayClient,
    pub(crate) limits: Limits,
    /// The tenants whose client-tools turns get the gateway's tools beside the caller's.
    pub(crate) gateway_tools_tenants: GatewayToolsTenants,
    /// False after the gateway failed a client-tools turn's lookup (so the outage is logged
    /// once as a warning), true again once it answers.
    pub(crate) gateway_reachable: std::sync::atomic::AtomicBool,
    pub(crate) default_model: ModelRef,
    pub(crate) fallback_models: Vec<ModelRef>,
    /// What model calls cost (`ROUTER_MODEL_PRICES`).
    pub(crate) prices: Prices,
    /// Spend budgets: checked before a turn, charged after it.
    pub(crate) budgets: Arc<Budgets>,
    pub(crate) recorder: Option<Arc<Recorder>>,
    pub(crate) metrics: Metrics,
    /// The fast router and the embedder (loaded in the background after start).
    pub(crate) fast: Arc<FastPath>,
    /// The routing cache and learning from corrections, when `UNIFIED_CHAT_CACHE_ROUTING` is on.
    pub(crate) cache: Option<Arc<RoutingCache>>,
    pub(crate) learning: Option<Arc<Learning>>,
    /// Stateless callers' conversation keys and the sessions they name.
    pub(crate) conversations: Arc<ConversationKeys>,
    /// `UNIFIED_CHAT_ROUTING_TIMEOUT_MS`; `None` waits for the routing call.
    pub(crate) routing_timeout: Option<Duration>,
    /// Cut when the shutdown grace is about to run out: turns still running stop there.
    pub(crate) stopping: ShutdownNotice,
    /// Turns' messages on their way to sessions, awaited before the process exits: turns
    /// whose client left before the recording ended, and turns the shutdown grace cut short.
    pub(crate) session_writes: Arc<SessionWrites>,
}

/// What the parts of one turn share: the router, the caller, the turn's context, the models
/// a call tries and where the turn's events go.
#[derive(Clone, Copy)]
struct Scope<'a> {
    router: &'a Router,
    identity: &'a Identity,
    ctx: &'a TurnContext,
    chain: &'a [ModelRef],
    request: &'a TurnRequest,
    events: &'a Events,
}

impl Scope<'_> {
    /// A model call with the turn's sampling settings.
    fn call(
        &self,
        system: String,
        messages: Vec<Message>,
        tools: Vec<ToolSpec>,
        tool_choice: ToolChoice,
    ) -> ChatRequest {
        ChatRequest {
            system: Some(system),
            messages,
            tools,
            tool_choice,
            max_tokens: self.request.max_tokens,
            temperature: self.request.temperature,
            stop: self.request.stop.clone(),
            anthropic_headers: self.request.anthropic_headers.clone(),
            ..ChatRequest::default()
        }
    }

    /// A direct answer in the session's role, without routing tools (a forced direct route, or
    /// a handler that degraded to answering directly).
    async fn answer_directly(&self) -> Result<RouteAnswer, RouterError> {
        let call = self.call(self.ctx.persona.clone(), self.ctx.messages_with_user(), Vec::new(), ToolChoice::Auto);
        let answered = self.router.llm.stream_answer(self.chain, call, self.events).await?;
        Ok(RouteAnswer { calls: vec![ModelCall::of(CallKind::Answer, &answered)], answered })
    }

    /// The caller's own agent loop: a direct answer in the session's role with the caller's
    /// tools only (never the routing tools), as the caller asked for them. The model's calls
    /// of them are the answer, for the caller to run.
    async fn answer_with_client_tools(&self) -> Result<RouteAnswer, RouterError> {
        let request = self.request;
        let mut call = self.call(
            self.ctx.persona.clone(),
            self.ctx.messages_with_user(),
            request.tools.clone(),
            if request.tools.is_empty() { ToolChoice::Auto } else { request.tool_choice.clone() },
        );
        call.parallel_tool_calls = request.parallel_tool_calls.filter(|_| !request.tools.is_empty());
        call.response_format = request.response_format.clone();
        let answered = self.router.llm.stream_client_answer(self.chain, call, self.events).await?;
        Ok(RouteAnswer { calls: vec![ModelCall::of(CallKind::Answer, &answered)], answered })
    }
}

/// Switchyard's attributes of a finished turn on its `chat_turn` span.
fn record_turn_attributes(span: &tracing::Span, meta: &Metadata) {
    span.record("switchyard.cache_hit", meta.cache_hit);
    span.record("switchyard.fallback_used", meta.fallback_used);
    span.record("switchyard.degraded", !meta.degraded.is_empty());
    span.record("switchyard.cost_usd", crate::cost::nanos_to_usd(meta.cost_nanousd));
}

/// What a turn cut short by shutdown had.
struct Interrupted<'a> {
    id: String,
    session_id: &'a SessionId,
    meta: &'a Metadata,
    /// The answer's text so far: what the client was sent.
    answer: String,
}

/// An answer a route produced.
struct RouteAnswer {
    answered: Answered,
    /// Every model call the route made, the one that answered last.
    calls: Vec<ModelCall>,
}

impl Router {
    /// The models a call tries, in order: the turn's model (or the default), then the
    /// fallbacks.
    fn chain(&self, first: Option<&ModelRef>) -> Vec<ModelRef> {
        let mut chain = vec![first.unwrap_or(&self.default_model).clone()];
        for model in std::iter::once(&self.default_model).chain(&self.fallback_models) {
            if !chain.contains(model) {
                chain.push(model.clone());
            }
        }
        chain
    }

    /// True when the turn's first model runs here: the fast router routes instead of it.
    pub(crate) fn routes_locally(&self, chain: &[ModelRef]) -> bool {
        chain.first().is_some_and(|model| model.provider == LOCAL_PROVIDER)
    }

    pub fn fast_path(&self) -> &Arc<FastPath> {
        &self.fast
    }

    /// Routing decisions dropped because the buffer was full while Postgres was away (0 when
    /// decisions are not recorded).
    pub fn decisions_dropped(&self) -> u64 {
        self.recorder.as_ref().map_or(0, |recorder| recorder.dropped())
    }

    /// Refuses a turn no configured provider could answer, before any work is done.
    fn check_models(&self, request: &TurnRequest) -> Result<(), RouterError> {
        if self.llm.providers().is_empty() {
            return Err(RouterError::FailedPrecondition(
                "no LLM provider is configured: set OPENAI_API_KEY or OPENAI_BASE_URL, or ANTHROPIC_API_KEY or \
                 ANTHROPIC_BASE_URL"
                    .to_owned(),
            ));
        }
        if let Some(model) = &request.model
            && self.llm.providers().get(model).is_err()
        {
            return Err(RouterError::FailedPrecondition(format!(
                "model: no provider `{}` is configured (configured: {})",
                model.provider,
                self.llm.providers().names().collect::<Vec<_>>().join(", ")
            )));
        }
        // The local model answers text only: what it cannot do is refused, never made up.
        if self.routes_locally(&self.chain(request.model.as_ref())) {
            if request.has_client_tools() {
                return Err(RouterError::invalid(
                    "tools",
                    "the local model cannot call tools; name a model of a configured provider in `model`",
                ));
            }
            if let Some(index) = request.history.iter().position(|m| m.has_images()) {
                return Err(RouterError::invalid(
                    format!("history[{index}].parts"),
                    "the local model cannot read images; name a model of a configured provider in `model`",
                ));
            }
        }
        Ok(())
    }

    /// Before a turn: refuses it when a budget of the caller is spent, else says which budgets
    /// its cost goes to and warns past a soft threshold. Done before [`Router::turn`] so a
    /// streamed turn's warning (or refusal) goes out before its stream starts.
    pub async fn admit(&self, identity: &Identity, request: &TurnRequest) -> Result<Allowance, RouterError> {
        let user = identity.user.as_ref().map(|user| user.as_str());
        match self.budgets.check(&identity.tenant, request.key_id.as_deref(), user).await {
            Ok(allowance) => Ok(allowance),
            Err(spent @ RouterError::BudgetSpent { .. }) => Err(spent),
            // Budgets that cannot be read do not stop the service: the turn goes on uncounted.
            Err(err) => {
                switchyard_kit::warn_throttled!("budget check", error = %err, "could not check the tenant's budgets; the turn goes on");
                Ok(Allowance::default())
            }
        }
    }

    /// A turn [`Router::admit`] let through with `allowance`.
    ///
    /// Its `chat_turn` span carries Switchyard's own attributes as they become known: the
    /// tenant at once, the role after context switching, the route once decided, and cache,
    /// fallback, degradation and cost at the end.
    #[tracing::instrument(
        name = "chat_turn",
        skip_all,
        fields(
            session_id,
            route,
            role_id,
            switchyard.tenant = identity.tenant.as_str(),
            switchyard.route = tracing::field::Empty,
            switchyard.role_id = tracing::field::Empty,
            switchyard.role_switched = tracing::field::Empty,
            switchyard.cache_hit = tracing::field::Empty,
            switchyard.fallback_used = tracing::field::Empty,
            switchyard.degraded = tracing::field::Empty,
            switchyard.cost_usd = tracing::field::Empty,
        )
    )]
    pub async fn turn(
        &self,
        identity: Identity,
        mut request: TurnRequest,
        allowance: Allowance,
        events: Events,
    ) -> Result<TurnOutcome, RouterError> {
        let started = Instant::now();
        if let Some(degrade) = &allowance.degrade {
            self.degrade(&mut request, degrade);
        }
        self.check_models(&request)?;
        let id = format!("chat-{}", uuid::Uuid::new_v4());
        let continuation = request.is_continuation();
        let mut session = self.open_session(&identity, &request).await?;
        if continuation {
            self.keep_loop_persona(&identity, &mut session).await;
        }
        let span = tracing::Span::current();
        span.record("session_id", session.session_id.as_str());
        span.record("role_id", session.role_id.as_str());
        span.record("switchyard.role_id", session.role_id.as_str());
        span.record("switchyard.role_switched", session.switched);
        let mut ctx = TurnContext::new(&identity, &request, &session, &self.limits);
        let chain = self.chain(request.model.as_ref());

        let mut meta = Metadata {
            role_id: session.role_id.clone(),
            role_switched: session.switched,
            previous_role_id: session.previous_role_id.clone(),
            client_tools: request.has_client_tools(),
            continuation,
            held_switch_role_id: session.held_role_id.clone(),
            degraded: allowance.degrade.iter().map(|degrade| degrade.reason.clone()).collect(),
            ..Metadata::default()
        };
        // The caller's own agent loop (its tools, or a continuation of it), or an answer of a
        // shape the caller fixed, is answered directly in the session's role: no routing call,
        // so the routing tools never sit beside the caller's and never reach it.
        let callers_turn = request.has_client_tools() || continuation || request.response_format.is_some();
        // For a tenant that has them, the gateway's tools beside the caller's; the loop's
        // earlier gateway traffic goes back into the conversation the caller resent.
        let gateway = if callers_turn && request.force_route.is_none() {
            self.gateway_tools(&identity, &request, &session, &ctx, &mut meta).await
        } else {
            None
        };
        if let Some(gateway) = &gateway {
            ctx.conversation = gateway_tools::put_back(std::mem::take(&mut ctx.conversation), &gateway.earlier);
        }
        let ctx = ctx;
        let scope =
            Scope { router: self, identity: &identity, ctx: &ctx, chain: &chain, request: &request, events: &events };
        let route_event = |meta: &Metadata| TurnEvent::Route {
            id: id.clone(),
            session_id: session.session_id.to_string(),
            metadata: Box::new(meta.clone()),
        };

        // From the routing decision to the answer, the turn races the end of the shutdown grace:
        // one still running then stops, is recorded with what it had, and its caller is told the
        // server is shutting down (UNAVAILABLE) while the stream can still carry it.
        let answering = async {
            // The routing decision: forced, or the routing call (which may answer itself).
            let (decision, direct_answer, mut calls) = match request.force_route {
                Some(route) => {
                    let reasoning = match &allowance.degrade {
                        Some(degrade) => format!("budget {} is spent: degraded to the direct route", degrade.budget),
                        None => "route forced by the caller".to_owned(),
                    };
                    let decision = Decision { route, reasoning, ..Decision::direct() };
                    meta.route = route;
                    meta.reasoning = decision.reasoning.clone();
                    events.send(route_event(&meta)).await?;
                    (decision, None, Vec::new())
                }
                None if callers_turn => {
                    let reasoning = if continuation {
                        "a tool loop continues: the role and model that started it finish it"
                    } else if request.has_client_tools() {
                        "the caller's own tools: answered directly in the session's role"
                    } else {
                        "the caller fixed the answer's format: answered directly in the session's role"
                    };
                    let decision = Decision { reasoning: reasoning.to_owned(), ..Decision::direct() };
                    meta.route = Route::Direct;
                    meta.reasoning = decision.reasoning.clone();
                    events.send(route_event(&meta)).await?;
                    (decision, None, Vec::new())
                }
                None => {
                    let routed = routing::route(&scope, &mut meta, started, &route_event).await?;
                    (routed.decision, routed.answer, routed.calls)
                }
            };
            span.record("route", decision.route.as_str());
            span.record("switchyard.route", decision.route.as_str());

            let mut hidden_steps = None;
            let mut answer = match (decision.route, direct_answer) {
                (Route::Direct, Some(answered)) => {
                    RouteAnswer { calls: vec![ModelCall::of(CallKind::Routing, &answered)], answered }
                }
                (Route::Direct, None) if callers_turn => match &gateway {
                    Some(tools) if tools.offered && !tools.tools.is_empty() => {
                        let (answer, steps) = gateway_tools::run(&scope, tools, &mut meta).await?;
                        hidden_steps = steps;
                        answer
                    }
                    _ => scope.answer_with_client_tools().await?,
                },
                (Route::Direct, None) => scope.answer_directly().await?,
                (Route::McpAgent, _) => agent::run(&scope, &decision, &mut meta).await?,
                (Route::Multiagent, _) => experts::run(&scope, &decision, &mut meta).await?,
            };
            calls.append(&mut answer.calls);
            Ok::<_, RouterError>((answer, calls, hidden_steps))
        };
        let (answer, calls, hidden_steps) = tokio::select! {
            biased;
            answered = answering => answered?,
            () = self.stopping.cut() => {
                let partial = Interrupted { id, session_id: &session.session_id, meta: &meta, answer: events.answered() };
                return Err(self.interrupted(&identity, &request, &chain, partial, started));
            }
        };
        meta.model_fallbacks += answer.answered.fallbacks;
        meta.execution_ms = started.elapsed().as_millis() as u64;
        // Only the caller's own tools' calls go back to it (the agent's ran here).
        let tool_calls = if callers_turn && meta.route == Route::Direct {
            answer.answered.completion.tool_calls.clone()
        } else {
            Vec::new()
        };
        meta.client_tools_called = tool_calls.iter().map(|c| c.name.clone()).collect();
        meta.client_tools_called.dedup();
        let usage = calls.iter().fold(Usage::default(), |mut total, call| {
            total.add(call.usage);
            total
        });
        meta.cost_parts = price_calls(&self.prices, &calls, &meta.role_id);
        meta.cost_nanousd = meta.cost_parts.iter().map(|part| part.cost_nanousd).sum();
        self.budgets.charge(&identity.tenant, &allowance, meta.cost_nanousd).await;

        let outcome = TurnOutcome {
            id,
            session_id: session.session_id.to_string(),
            created: chrono::Utc::now(),
            model: answer.answered.model.to_string(),
            content: answer.answered.completion.content,
            finish_reason: answer.answered.completion.finish_reason.as_str(),
            tool_calls,
            usage,
            metadata: meta,
            budget_warning: allowance.warning.clone(),
        };
        // The recording runs as a task of its own, awaited here: a client that leaves once it
        // has the answer (a stream read to its last token, then dropped) drops this turn, and
        // must not take the turn's place in the conversation with it. A call to sessions cut
        // mid-way would also reset its HTTP/2 stream, and enough resets make sessions' server
        // close the connection every other turn shares (its guard against reset floods). The
        // process waits for it before exiting, as for a turn the grace cut short.
        let recording = {
            let (sessions, identity) = (self.sessions.clone(), identity.clone());
            let (session_id, turn_id) = (session.session_id.clone(), outcome.id.clone());
            let (role_id, message, answer) =
                (outcome.metadata.role_id.clone(), request.message.clone(), outcome.content.clone());
            let record =
                async move { sessions.end_turn(&identity, &session_id, &turn_id, &role_id, &message, &answer).await };
            self.session_writes
                .spawn(switchyard_kit::failures::carry_request_id(record.instrument(tracing::Span::current())))
        };
        match recording.await {
            Ok(Ok(())) => {}
            // The answer stands; only the conversation memory missed this turn.
            Ok(Err(status)) => {
                switchyard_kit::warn_throttled!("append", session_id = %outcome.session_id, error = %status.message(), "could not append the turn to the session");
            }
            // It panicked, or the runtime is shutting down.
            Err(failed) => {
                tracing::error!(session_id = %outcome.session_id, error = %failed, "the task appending the turn to the session failed");
            }
        }
        // A loop the caller goes on with: its next turns are asked in the same words.
        if callers_turn && !continuation && !outcome.tool_calls.is_empty() {
            let persona =
                LoopPersona { role_id: session.role_id.clone(), system_prompt: session.system_prompt.clone() };
            if let Err(err) =
                self.conversations.remember_loop(identity.tenant.as_str(), &session.session_id, &persona).await
            {
                switchyard_kit::warn_throttled!("persona", error = %err, "could not keep the tool loop's persona");
            }
        }
        // A loop with the gateway's tools: its continuations get the same tools and the gateway
        // traffic the caller never saw.
        if let Some(gateway) = &gateway
            && !outcome.tool_calls.is_empty()
            && !(gateway.tools.is_empty() && gateway.earlier.is_empty() && hidden_steps.is_none())
            && let Err(err) = self
                .conversations
                .remember_loop_tools(identity.tenant.as_str(), &session.session_id, &gateway.kept(hidden_steps))
                .await
        {
            switchyard_kit::warn_throttled!("loop tools", error = %err, "could not keep the tool loop's gateway tools");
        }
        self.metrics.turn(&outcome.metadata, &answer.answered.model);
        record_turn_attributes(&span, &outcome.metadata);
        if let Some(recorder) = &self.recorder {
            // The message is kept only for learning from corrections (the routing cache).
            let message = self.learning.is_some().then_some(request.message.as_str());
            let mut record = DecisionRecord::of(&identity, &outcome, &answer.answered.model, message);
            record.key_id = request.key_id.clone();
            recorder.push(record);
        }
        Ok(outcome)
    }

    /// A turn past a degrading budget's hard limit: the direct route (no agent, no experts) and
    /// the budget's cheaper model, when it names one of a provider still configured.
    fn degrade(&self, request: &mut TurnRequest, degrade: &Degrade) {
        request.force_route = Some(Route::Direct);
        if let Some(model) = &degrade.model {
            if self.llm.providers().get(model).is_ok() {
                request.model = Some(model.clone());
            } else {
                tracing::warn!(budget = %degrade.budget, model = %model, "a budget's degrade model has no configured provider; the turn keeps its model");
            }
        }
    }

    /// A continuation is asked in the persona its loop started with (the role's prompt with
    /// the transition into it), when that was kept and the role is still the session's.
    async fn keep_loop_persona(&self, identity: &Identity, session: &mut SessionTurn) {
        match self.conversations.loop_persona(identity.tenant.as_str(), &session.session_id).await {
            Ok(Some(persona)) if persona.role_id == session.role_id => session.system_prompt = persona.system_prompt,
            Ok(_) => {}
            // The role's own prompt stands in.
            Err(err) => {
                switchyard_kit::warn_throttled!("persona", error = %err, "could not read the tool loop's persona")
            }
        }
    }

    /// The session the turn runs on: the one the caller names, or the one its conversation key
    /// maps to (a new one, recorded under the key, when it maps to none or to one that is
    /// gone), or a new one.
    async fn open_session(&self, identity: &Identity, request: &TurnRequest) -> Result<SessionTurn, RouterError> {
        let Some(key) = request.conversation_key.as_deref().filter(|_| request.session_id.is_none()) else {
            return self.open_named_session(identity, request, request.session_id.as_ref(), false).await;
        };
        let tenant = identity.tenant.as_str();
        // The key's store is an aid: a turn goes on without it, as a new conversation.
        let known = self.conversations.session(tenant, key).await.unwrap_or_else(|err| {
            switchyard_kit::warn_throttled!("conversation key", error = %err, "conversation key lookup failed; starting a new session");
            None
        });
        let stale = known.is_some();
        if let Some(session_id) = known {
            match self.open_named_session(identity, request, Some(&session_id), false).await {
                // Closed, or gone past its retention: the key starts a new session below. (A
                // role the request names that does not exist is the caller's error, as is.)
                Err(err)
                    if matches!(err.code(), ErrorCode::NotFound | ErrorCode::FailedPrecondition)
                        && self.sessions.is_gone(identity, &session_id).await => {}
                opened => return opened,
            }
        }
        let mut session_id = self.sessions.create_session(identity).await?;
        let recorded = if stale {
            self.conversations.replace(tenant, key, &session_id).await
        } else {
            // Another first request of this conversation may have claimed the key first: the
            // two join its session.
            self.conversations.claim(tenant, key, &session_id).await.map(|claimed| session_id = claimed)
        };
        if let Err(err) = recorded {
            switchyard_kit::warn_throttled!("conversation key", error = %err, "could not record the conversation key");
        }
        self.open_named_session(identity, request, Some(&session_id), true).await
    }

    /// A turn that continues a tool loop on a session that has run reopens it as it stands (no
    /// context switching: the role that started the loop finishes it); every other turn goes
    /// through context switching on its message (a new session is created when `session_id`
    /// is `None`). A continuation on a new session is switched on the user message that
    /// started its loop.
    async fn open_named_session(
        &self,
        identity: &Identity,
        request: &TurnRequest,
        session_id: Option<&SessionId>,
        fresh: bool,
    ) -> Result<SessionTurn, RouterError> {
        let force_role_id = request.force_role_id.as_deref();
        let instructions = request.custom_instructions.as_deref();
        if !request.is_continuation() {
            return self.sessions.begin_turn(identity, session_id, &request.message, force_role_id, instructions).await;
        }
        if let Some(session_id) = session_id.filter(|_| !fresh) {
            return self.sessions.resume_turn(identity, session_id, instructions, &request.continuation_text()).await;
        }
        let opening =
            request.loop_user_text().filter(|text| !text.trim().is_empty()).unwrap_or(request.message.as_str());
        if opening.trim().is_empty() {
            let session_id = match session_id {
                Some(id) => id.clone(),
                None => self.sessions.create_session(identity).await?,
            };
            return self.sessions.resume_turn(identity, &session_id, instructions, "").await;
        }
        self.sessions.begin_turn(identity, session_id, opening, force_role_id, instructions).await
    }

    /// Records a turn the shutdown grace cut short, and returns the error its caller gets. The
    /// decision goes to the analytics as interrupted (the buffer is drained at exit); the
    /// user's message and the answer so far go to the session after the caller is told, so the
    /// turn the session counted has its messages (see [`Router::finish_session_writes`]).
    fn interrupted(
        &self,
        identity: &Identity,
        request: &TurnRequest,
        chain: &[ModelRef],
        turn: Interrupted<'_>,
        started: Instant,
    ) -> RouterError {
        let Interrupted { id, session_id, meta, answer } = turn;
        // The UNAVAILABLE the caller gets is the error line (the kit's failure log, with the
        // request id); this one says what the turn had.
        tracing::info!(
            response_id = %id,
            session_id = %session_id,
            route = meta.route.as_str(),
            answered_bytes = answer.len(),
            "turn interrupted: the server is shutting down"
        );
        let mut metadata = meta.clone();
        metadata.execution_ms = started.elapsed().as_millis() as u64;
        // The model that was answering is not known once its call is dropped: the turn's first.
        let model = chain.first().unwrap_or(&self.default_model);
        let outcome = TurnOutcome {
            id,
            session_id: session_id.to_string(),
            created: chrono::Utc::now(),
            model: model.to_string(),
            content: answer,
            finish_reason: "interrupted",
            tool_calls: Vec::new(),
            usage: Usage::default(),
            metadata,
            budget_warning: None,
        };
        if let Some(recorder) = &self.recorder {
            let message = self.learning.is_some().then_some(request.message.as_str());
            let mut record = DecisionRecord::of(identity, &outcome, model, message);
            record.interrupted = true;
            record.key_id = request.key_id.clone();
            recorder.push(record);
        }
        let sessions = self.sessions.clone();
        let identity = identity.clone();
        let session_id = session_id.clone();
        let message = request.message.clone();
        let write = async move {
            let TurnOutcome { id, metadata, content, .. } = outcome;
            if let Err(status) =
                sessions.end_turn(&identity, &session_id, &id, &metadata.role_id, &message, &content).await
            {
                tracing::warn!(%session_id, error = %status.message(), "could not append the interrupted turn to the session");
            }
        };
        self.session_writes.spawn(write.instrument(tracing::Span::current()));
        RouterError::ShuttingDown
    }

    /// Waits, at most `timeout`, for turns' messages still on their way to sessions: those of
    /// turns whose client left before the recording ended, and of turns the grace cut short.
    pub async fn finish_session_writes(&self, timeout: Duration) {
        let pending = self.session_writes.running();
        if pending > 0 && !self.session_writes.finish(timeout).await {
            let pending = self.session_writes.running();
            tracing::warn!(pending, "turns' messages not all written to sessions before exit");
        }
    }
}
