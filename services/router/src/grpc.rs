//! `switchyard.router.v1.RouterService`: requests validated at the edge, turns run by
//! [`Router`], analytics read from the store.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use futures::Stream;
use switchyard_kit::{Identity, TenantId, proto_time::timestamp, to_status};
use switchyard_proto::router::v1::{self as pb, router_service_server::RouterService};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};
use tonic_types::StatusExt;
use tracing::Instrument;

use crate::{
    analytics::{AnalyticsStore, Correction, Feedback, RecordedTurn, Spend},
    budget::{Budget, BudgetStatus, OnLimit, Period},
    cost::{NANOS_PER_USD, nanos_to_usd},
    error::RouterError,
    events::{Events, TurnEvent},
    outcome::TurnOutcome,
    request::{RawTurn, TurnRequest},
    route::{route_from_proto, route_to_proto},
    turn::Router,
};

/// Longest feedback comment accepted, in bytes.
const MAX_COMMENT_BYTES: usize = 4 * 1024;
/// Longest response id accepted (`chat-` and a UUID is 41).
const MAX_RESPONSE_ID_BYTES: usize = 64;
/// Response metadata a turn past a budget's soft threshold carries: which budget, how much is
/// spent.
pub const BUDGET_WARNING_HEADER: &str = "x-switchyard-budget-warning";
/// Request metadata naming the API key a turn came with (set by the edge from the credential).
pub const KEY_ID_HEADER: &str = "x-switchyard-key-id";
/// Stream events buffered towards a slow client before the turn waits for it.
const STREAM_BUFFER: usize = 64;

pub struct RouterGrpc {
    router: Arc<Router>,
    store: Arc<dyn AnalyticsStore>,
}

impl RouterGrpc {
    pub fn new(router: Arc<Router>, store: Arc<dyn AnalyticsStore>) -> Self {
        Self { router, store }
    }
}

/// A spent budget's refusal carries a `google.rpc.RetryInfo` with the time to the end of its
/// period, so the edge's `Retry-After` says when it starts again rather than a rate limit's 1 s.
fn status(err: RouterError) -> Status {
    match &err {
        RouterError::BudgetSpent { message, retry_after } => Status::with_error_details(
            tonic::Code::ResourceExhausted,
            message.clone(),
            tonic_types::ErrorDetails::with_retry_info(Some(*retry_after)),
        ),
        _ => to_status(&err),
    }
}

fn stream_event(event: TurnEvent) -> pb::ChatStreamResponse {
    use pb::chat_stream_response::Event;
    let event = match event {
        TurnEvent::Route { id, session_id, metadata } => {
            Event::Route(pb::RouteDecided { id, session_id, metadata: Some(metadata.to_proto()) })
        }
        TurnEvent::Delta(content) => Event::Delta(pb::ContentDelta { content }),
        TurnEvent::Tool(activity) => Event::Tool(pb::ToolActivity {
            tool: activity.tool,
            finished: activity.finished,
            is_error: activity.is_error,
            duration_ms: activity.duration_ms,
            server: activity.server,
            error: activity.error,
        }),
        TurnEvent::ToolCall(call) => Event::ToolCall(pb::ToolCallDelta {
            index: call.index,
            id: call.id,
            name: call.name,
            arguments_delta: call.arguments_delta,
        }),
    };
    pb::ChatStreamResponse { event: Some(event) }
}

fn completed(outcome: &TurnOutcome) -> pb::ChatStreamResponse {
    pb::ChatStreamResponse { event: Some(pb::chat_stream_response::Event::Completed(outcome.to_completed())) }
}

fn time(value: Option<prost_types::Timestamp>, field: &str) -> Result<Option<DateTime<Utc>>, RouterError> {
    value
        .map(|t| {
            let nanos =
                u32::try_from(t.nanos).map_err(|_| RouterError::invalid(field, "nanos must not be negative"))?;
            DateTime::from_timestamp(t.seconds, nanos).ok_or_else(|| RouterError::invalid(field, "is out of range"))
        })
        .transpose()
}

type ChatEvents = Pin<Box<dyn Stream<Item = Result<pb::ChatStreamResponse, Status>> + Send>>;

type RunningTurn = Pin<Box<dyn Future<Output = Result<TurnOutcome, RouterError>> + Send>>;

/// A streamed turn as the stream of its events, ended by its completion or its error. The turn
/// runs as the stream is polled, by the connection sending its events: each event goes out
/// without a hop through another task (a wake-up each, which under load is where a first
/// token waited). A client that goes away drops the stream, which drops the turn and cancels
/// its model and tool calls in flight; a turn's recording in the session runs on regardless
/// (see [`Router::turn`]).
struct TurnStream {
    running: Option<RunningTurn>,
    events: mpsc::Receiver<TurnEvent>,
    last: Option<Result<pb::ChatStreamResponse, Status>>,
}

impl Stream for TurnStream {
    type Item = Result<pb::ChatStreamResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // Events already made go first, so the completion never overtakes them.
        if let Poll::Ready(Some(event)) = self.events.poll_recv(cx) {
            return Poll::Ready(Some(Ok(stream_event(event))));
        }
        if let Some(running) = self.running.as_mut() {
            let result = ready!(running.as_mut().poll(cx));
            self.running = None;
            self.last = Some(match result {
                Ok(outcome) => Ok(completed(&outcome)),
                Err(err) => Err(status(err)),
            });
        }
        // The turn is over (its sender dropped with it): what it sent last, then the end.
        if let Ok(event) = self.events.try_recv() {
            return Poll::Ready(Some(Ok(stream_event(event))));
        }
        Poll::Ready(self.last.take())
    }
}

#[tonic::async_trait]
impl RouterService for RouterGrpc {
    async fn chat(&self, request: Request<pb::ChatRequest>) -> Result<Response<pb::ChatResponse>, Status> {
        let identity = Identity::of(&request);
        let key_id = key_id(&request).map_err(status)?;
        let mut turn =
            TurnRequest::validate(RawTurn::from(request.into_inner()), &self.router.limits).map_err(status)?;
        turn.key_id = key_id;
        let allowance = self.router.admit(&identity, &turn).await.map_err(status)?;
        let outcome = self.router.turn(identity, turn, allowance, Events::none()).await.map_err(status)?;
        let mut response = Response::new(outcome.to_response());
        warn_budget(&mut response, outcome.budget_warning.as_deref());
        Ok(response)
    }

    type ChatStreamStream = ChatEvents;

    async fn chat_stream(
        &self,
        request: Request<pb::ChatStreamRequest>,
    ) -> Result<Response<Self::ChatStreamStream>, Status> {
        let identity = Identity::of(&request);
        let key_id = key_id(&request).map_err(status)?;
        let mut turn =
            TurnRequest::validate(RawTurn::from(request.into_inner()), &self.router.limits).map_err(status)?;
        turn.key_id = key_id;
        // Budgets are checked before the stream starts: a spent one is this call's status, a
        // warning is in the stream's initial metadata.
        let allowance = self.router.admit(&identity, &turn).await.map_err(status)?;
        let warning = allowance.warning.clone();
        let (events, event_rx) = mpsc::channel::<TurnEvent>(STREAM_BUFFER);
        // The turn's calls to sessions and the gateway carry this request's id.
        let router = self.router.clone();
        let running = switchyard_kit::failures::carry_request_id(async move {
            router.turn(identity, turn, allowance, Events::to(events)).await
        })
        .instrument(tracing::Span::current());
        let stream = TurnStream { running: Some(Box::pin(running)), events: event_rx, last: None };
        let mut response = Response::new(Box::pin(stream) as ChatEvents);
        warn_budget(&mut response, warning.as_deref());
        Ok(response)
    }

    async fn get_routing_stats(
        &self,
        request: Request<pb::GetRoutingStatsRequest>,
    ) -> Result<Response<pb::GetRoutingStatsResponse>, Status> {
        let identity = Identity::of(&request);
        let request = request.into_inner();
        let now = Utc::now();
        let until = time(request.until, "until").map_err(status)?.unwrap_or(now);
        let since = time(request.since, "since").map_err(status)?.unwrap_or(until - ChronoDuration::hours(24));
        if since >= until {
            return Err(status(RouterError::invalid("since", "must be before until")));
        }
        let stats = self
            .store
            .stats(&identity.tenant, since, until)
            .await
            .map_err(|err| status(RouterError::unavailable("reading routing analytics", err.to_string())))?;
        let routes = stats
            .routes
            .iter()
            .map(|(route, f)| pb::RouteStats {
                route_type: route_to_proto(*route) as i32,
                count: f.count,
                share: stats.share(f),
                routing_latency_p50_ms: f.routing_p50_ms,
                routing_latency_p95_ms: f.routing_p95_ms,
                execution_time_p50_ms: f.execution_p50_ms,
                satisfaction: f.satisfaction(),
                routing_latency_p99_ms: f.routing_p99_ms,
                execution_time_p95_ms: f.execution_p95_ms,
                feedback_count: f.feedback,
                false_routing_rate: f.false_routing_rate(),
                cost_usd: nanos_to_usd(f.spend.cost_nanousd),
                cost_per_turn_usd: if f.count == 0 { 0.0 } else { nanos_to_usd(f.spend.cost_nanousd) / f.count as f64 },
                prompt_tokens: f.spend.prompt_tokens,
                cached_prompt_tokens: f.spend.cached_prompt_tokens,
                completion_tokens: f.spend.completion_tokens,
            })
            .collect();
        let groups = |groups: &[(String, Spend)]| -> Vec<pb::CostFigures> {
            groups
                .iter()
                .map(|(key, spend)| pb::CostFigures {
                    key: key.clone(),
                    calls: spend.calls,
                    prompt_tokens: spend.prompt_tokens,
                    cached_prompt_tokens: spend.cached_prompt_tokens,
                    completion_tokens: spend.completion_tokens,
                    cost_usd: nanos_to_usd(spend.cost_nanousd),
                    unpriced_calls: spend.unpriced_calls,
                })
                .collect()
        };
        let overall = &stats.overall;
        Ok(Response::new(pb::GetRoutingStatsResponse {
            total: stats.total,
            routes,
            cache_hit_rate: stats.cache_hit_rate(),
            fallback_rate: stats.fallback_rate(),
            false_routing_rate: overall.false_routing_rate(),
            feedback_count: overall.feedback,
            routing_latency_p50_ms: overall.routing_p50_ms,
            routing_latency_p95_ms: overall.routing_p95_ms,
            routing_latency_p99_ms: overall.routing_p99_ms,
            execution_time_p50_ms: overall.execution_p50_ms,
            execution_time_p95_ms: overall.execution_p95_ms,
            since: Some(timestamp(since)),
            until: Some(timestamp(until)),
            degraded_rate: stats.degraded_rate(),
            client_tools_turns: stats.client_tools,
            continuation_turns: stats.continuations,
            held_switches: stats.held_switches,
            cost_usd: nanos_to_usd(overall.spend.cost_nanousd),
            prompt_tokens: overall.spend.prompt_tokens,
            cached_prompt_tokens: overall.spend.cached_prompt_tokens,
            completion_tokens: overall.spend.completion_tokens,
            models: groups(&stats.models),
            roles: groups(&stats.roles),
            call_kinds: groups(&stats.call_kinds),
            routing_calls_avoided: stats.routing_calls_avoided,
            routing_call_cost_usd: stats.routing_call_nanousd() / NANOS_PER_USD,
            routing_savings_usd: stats.routing_savings_nanousd() / NANOS_PER_USD,
            unpriced_calls: overall.spend.unpriced_calls,
            tenant_id: identity.tenant.as_str().to_owned(),
            api_keys: stats
                .keys
                .iter()
                .map(|key| pb::KeyFigures {
                    key_id: key.key_id.clone(),
                    turns: key.turns,
                    calls: key.spend.calls,
                    prompt_tokens: key.spend.prompt_tokens,
                    cached_prompt_tokens: key.spend.cached_prompt_tokens,
                    completion_tokens: key.spend.completion_tokens,
                    cost_usd: nanos_to_usd(key.spend.cost_nanousd),
                    unpriced_calls: key.spend.unpriced_calls,
                })
                .collect(),
        }))
    }

    async fn set_budget(
        &self,
        request: Request<pb::SetBudgetRequest>,
    ) -> Result<Response<pb::SetBudgetResponse>, Status> {
        let identity = Identity::of(&request);
        self.set_budget_for(&identity, request.into_inner()).await.map(Response::new).map_err(status)
    }

    async fn list_budgets(
        &self,
        request: Request<pb::ListBudgetsRequest>,
    ) -> Result<Response<pb::ListBudgetsResponse>, Status> {
        let identity = Identity::of(&request);
        self.list_budgets_for(&identity, request.into_inner()).await.map(Response::new).map_err(status)
    }

    async fn delete_budget(
        &self,
        request: Request<pb::DeleteBudgetRequest>,
    ) -> Result<Response<pb::DeleteBudgetResponse>, Status> {
        let identity = Identity::of(&request);
        self.delete_budget_for(&identity, request.into_inner()).await.map(Response::new).map_err(status)
    }

    async fn submit_feedback(
        &self,
        request: Request<pb::SubmitFeedbackRequest>,
    ) -> Result<Response<pb::SubmitFeedbackResponse>, Status> {
        let identity = Identity::of(&request);
        let request = request.into_inner();
        let id = request.response_id.trim();
        if id.is_empty() {
            return Err(status(RouterError::invalid("response_id", "is required (the `id` of a ChatResponse)")));
        }
        if !id.starts_with("chat-") || id.len() > MAX_RESPONSE_ID_BYTES {
            return Err(status(RouterError::invalid("response_id", "must be the `id` of a ChatResponse (`chat-…`)")));
        }
        switchyard_kit::text::reject_nul("response_id", id).map_err(|err| status(err.into()))?;
        let expected_route = match pb::RouteType::try_from(request.expected_route) {
            Ok(route) => route_from_proto(route),
            Err(_) => {
                return Err(status(RouterError::invalid(
                    "expected_route",
                    format!("unknown route {}", request.expected_route),
                )));
            }
        };
        if request.comment.len() > MAX_COMMENT_BYTES {
            return Err(status(RouterError::invalid("comment", format!("is longer than {MAX_COMMENT_BYTES} bytes"))));
        }
        let recorded = self.recorded_turn(&identity, id).await.map_err(status)?;
        let Some(recorded) = recorded else {
            return Err(status(RouterError::NotFound(format!(
                "response_id: no answer `{id}` is recorded for this tenant"
            ))));
        };
        let feedback = Feedback {
            response_id: id.to_owned(),
            tenant: identity.tenant.clone(),
            helpful: request.helpful,
            expected_route,
            comment: request.comment,
            submitted_at: Utc::now(),
        };
        self.store.put_feedback(&feedback).await.map_err(|err| {
            // Refused for what it holds: the caller's to fix, not the store being away.
            status(if err.is_refused_content() {
                RouterError::invalid("comment", "holds a value the store cannot keep")
            } else {
                RouterError::unavailable("recording feedback", err.to_string())
            })
        })?;
        let route = recorded.route;
        self.router.metrics.feedback(route.as_str(), feedback.helpful, expected_route.is_some_and(|r| r != route));
        // A correction teaches the router this user's preference
        // (docs/requirements.md#router-future-enhancements).
        if let (Some(learning), Some(expected), Some(message)) =
            (&self.router.learning, expected_route, recorded.message)
            && expected != route
        {
            let correction = Correction {
                tenant: identity.tenant.as_str().to_owned(),
                user: recorded.user.unwrap_or_default(),
                message,
                route: expected,
                response_id: id.to_owned(),
                created_at: feedback.submitted_at,
            };
            learning
                .correct(correction)
                .await
                .map_err(|err| status(RouterError::unavailable("recording the correction", err.to_string())))?;
        }
        Ok(Response::new(pb::SubmitFeedbackResponse {}))
    }
}

/// Puts a budget warning in a response's (initial) metadata.
fn warn_budget<T>(response: &mut Response<T>, warning: Option<&str>) {
    if let Some(value) = warning.and_then(|warning| tonic::metadata::MetadataValue::try_from(warning).ok()) {
        response.metadata_mut().insert(BUDGET_WARNING_HEADER, value);
    }
}

/// The API key a turn came with, as the edge names it (`x-switchyard-key-id`).
fn key_id<T>(request: &Request<T>) -> Result<Option<String>, RouterError> {
    let Some(value) = request.metadata().get(KEY_ID_HEADER) else { return Ok(None) };
    let text = value.to_str().unwrap_or_default();
    if text.is_empty()
        || text.len() > 128
        || !text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(RouterError::invalid(KEY_ID_HEADER, "must be 1 to 128 characters of [A-Za-z0-9._-]"));
    }
    Ok(Some(text.to_owned()))
}

/// Budgets are set by the operator: an administrator of the default tenant.
fn operator(identity: &Identity) -> Result<(), RouterError> {
    if identity.is_operator() {
        Ok(())
    } else {
        Err(RouterError::PermissionDenied(
            "budgets are set by the operator: an administrator of the default tenant".to_owned(),
        ))
    }
}

fn budget_period(period: i32) -> Option<Period> {
    match pb::BudgetPeriod::try_from(period).ok()? {
        pb::BudgetPeriod::Day => Some(Period::Day),
        pb::BudgetPeriod::Month => Some(Period::Month),
        pb::BudgetPeriod::Unspecified => None,
    }
}

fn budget_proto(status: &BudgetStatus) -> pb::Budget {
    let budget = &status.budget;
    pb::Budget {
        tenant_id: budget.tenant.as_str().to_owned(),
        key_id: budget.key_id.clone(),
        limit_usd: nanos_to_usd(budget.limit_nanousd),
        soft_usd: nanos_to_usd(budget.soft_nanousd),
        period: match budget.period {
            Period::Day => pb::BudgetPeriod::Day,
            Period::Month => pb::BudgetPeriod::Month,
        } as i32,
        spent_usd: nanos_to_usd(status.spent_nanousd),
        period_start: Some(timestamp(status.period_start)),
        on_limit: match budget.on_limit {
            OnLimit::Refuse => pb::BudgetAction::Refuse,
            OnLimit::Degrade { .. } => pb::BudgetAction::Degrade,
        } as i32,
        degrade_model: budget.on_limit.degrade_model().map(ToString::to_string).unwrap_or_default(),
        user_id: budget.user_id.clone(),
    }
}

fn budget_tenant(text: &str) -> Result<TenantId, RouterError> {
    TenantId::parse(text).map_err(|_| {
        RouterError::invalid("tenant_id", format!("`{text}` must be 1 to 64 characters of [A-Za-z0-9._-]"))
    })
}

impl RouterGrpc {
    pub(crate) async fn set_budget_for(
        &self,
        identity: &Identity,
        request: pb::SetBudgetRequest,
    ) -> Result<pb::SetBudgetResponse, RouterError> {
        operator(identity)?;
        let sent = request.budget.ok_or_else(|| RouterError::invalid("budget", "is required"))?;
        let tenant = if sent.tenant_id.is_empty() { identity.tenant.as_str() } else { sent.tenant_id.as_str() };
        let budget = Budget::new(tenant, &sent.key_id, sent.limit_usd, sent.soft_usd, budget_period(sent.period))?
            .on_limit(self.on_limit(sent.on_limit, &sent.degrade_model)?)
            .for_user(&sent.user_id)?;
        let status = self.router.budgets.set(&budget).await?;
        tracing::info!(tenant = %budget.tenant.as_str(), key_id = %budget.key_id, user_id = %budget.user_id, limit_usd = sent.limit_usd, soft_usd = sent.soft_usd, period = budget.period.as_str(), on_limit = budget.on_limit.as_str(), degrade_model = %sent.degrade_model, "budget set");
        Ok(pb::SetBudgetResponse { budget: Some(budget_proto(&status)) })
    }

    /// What a budget sent does at its hard limit; a degrade model must be of a configured
    /// provider.
    fn on_limit(&self, action: i32, degrade_model: &str) -> Result<OnLimit, RouterError> {
        let action = pb::BudgetAction::try_from(action)
            .map_err(|_| RouterError::invalid("on_limit", format!("unknown action {action}")))?;
        match action {
            pb::BudgetAction::Unspecified | pb::BudgetAction::Refuse if degrade_model.is_empty() => Ok(OnLimit::Refuse),
            pb::BudgetAction::Unspecified | pb::BudgetAction::Refuse => {
                Err(RouterError::invalid("degrade_model", "is only used with on_limit BUDGET_ACTION_DEGRADE"))
            }
            pb::BudgetAction::Degrade if degrade_model.is_empty() => Ok(OnLimit::Degrade { model: None }),
            pb::BudgetAction::Degrade => {
                let model: switchyard_llm::ModelRef =
                    degrade_model.parse().map_err(|reason: String| RouterError::invalid("degrade_model", reason))?;
                if self.router.llm.providers().get(&model).is_err() {
                    return Err(RouterError::invalid(
                        "degrade_model",
                        format!(
                            "no provider `{}` is configured (configured: {})",
                            model.provider,
                            self.router.llm.providers().names().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
                Ok(OnLimit::Degrade { model: Some(model) })
            }
        }
    }

    pub(crate) async fn list_budgets_for(
        &self,
        identity: &Identity,
        request: pb::ListBudgetsRequest,
    ) -> Result<pb::ListBudgetsResponse, RouterError> {
        if !identity.admin {
            return Err(RouterError::PermissionDenied("budgets are read by an administrator".to_owned()));
        }
        let is_operator = operator(identity).is_ok();
        let tenant = match (request.tenant_id.as_str(), is_operator) {
            ("", true) => None,
            ("", false) => Some(identity.tenant.clone()),
            (named, _) => {
                let named = budget_tenant(named)?;
                if !is_operator && named != identity.tenant {
                    return Err(RouterError::PermissionDenied(
                        "another tenant's budgets are the operator's".to_owned(),
                    ));
                }
                Some(named)
            }
        };
        let statuses = self.router.budgets.list(tenant.as_ref()).await?;
        Ok(pb::ListBudgetsResponse { budgets: statuses.iter().map(budget_proto).collect() })
    }

    pub(crate) async fn delete_budget_for(
        &self,
        identity: &Identity,
        request: pb::DeleteBudgetRequest,
    ) -> Result<pb::DeleteBudgetResponse, RouterError> {
        operator(identity)?;
        let tenant = budget_tenant(&request.tenant_id)?;
        let deleted = self.router.budgets.delete(&tenant, &request.key_id, &request.user_id).await?;
        Ok(pb::DeleteBudgetResponse { deleted })
    }

    /// What an answer recorded. Decisions are written in batches, so feedback that follows
    /// its answer closely may find it still buffered: flush once and look again.
    async fn recorded_turn(&self, identity: &Identity, id: &str) -> Result<Option<RecordedTurn>, RouterError> {
        let lookup = || async {
            self.store
                .recorded_turn(&identity.tenant, id)
                .await
                .map_err(|err| RouterError::unavailable("reading routing analytics", err.to_string()))
        };
        if let Some(recorded) = lookup().await? {
            return Ok(Some(recorded));
        }
        if let Some(recorder) = &self.router.recorder
            && recorder.backlog() > 0
        {
            let _ = recorder.flush().await;
            return lookup().await;
        }
        Ok(None)
    }
}
