//! `switchyard.router.v1.RouterService`: requests validated at the edge, turns run by
//! [`Router`], analytics read from the store.

use std::{pin::Pin, sync::Arc};

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use futures::Stream;
use switchyard_kit::{Identity, proto_time::timestamp, to_status};
use switchyard_proto::router::v1::{self as pb, router_service_server::RouterService};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::{
    analytics::{AnalyticsStore, Correction, Feedback, RecordedTurn, Spend},
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

fn status(err: RouterError) -> Status {
    to_status(&err)
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

#[tonic::async_trait]
impl RouterService for RouterGrpc {
    async fn chat(&self, request: Request<pb::ChatRequest>) -> Result<Response<pb::ChatResponse>, Status> {
        let identity = Identity::of(&request);
        let turn = TurnRequest::validate(RawTurn::from(request.into_inner()), &self.router.limits).map_err(status)?;
        let outcome = self.router.turn(identity, turn, Events::none()).await.map_err(status)?;
        Ok(Response::new(outcome.to_response()))
    }

    type ChatStreamStream = ChatEvents;

    async fn chat_stream(
        &self,
        request: Request<pb::ChatStreamRequest>,
    ) -> Result<Response<Self::ChatStreamStream>, Status> {
        let identity = Identity::of(&request);
        let turn = TurnRequest::validate(RawTurn::from(request.into_inner()), &self.router.limits).map_err(status)?;
        let (out, out_rx) = mpsc::channel::<Result<pb::ChatStreamResponse, Status>>(STREAM_BUFFER);
        let (events, mut event_rx) = mpsc::channel::<TurnEvent>(STREAM_BUFFER);
        let router = self.router.clone();
        let task = async move {
            let running = router.turn(identity, turn, Events::to(events));
            tokio::pin!(running);
            let result = loop {
                tokio::select! {
                    biased;
                    Some(event) = event_rx.recv() => {
                        // A client that has gone away drops `running` here, which cancels the
                        // turn's in-flight model and tool calls.
                        if out.send(Ok(stream_event(event))).await.is_err() {
                            return;
                        }
                    }
                    result = &mut running => break result,
                    // The client went away while nothing was being sent (experts thinking, a
                    // tool running): stop the turn now rather than at its next event.
                    () = out.closed() => return,
                }
            };
            while let Ok(event) = event_rx.try_recv() {
                if out.send(Ok(stream_event(event))).await.is_err() {
                    return;
                }
            }
            let last = match result {
                Ok(outcome) => Ok(completed(&outcome)),
                Err(err) => Err(status(err)),
            };
            let _ = out.send(last).await;
        };
        // The turn's calls to sessions and the gateway carry this request's id.
        tokio::spawn(switchyard_kit::failures::carry_request_id(task.instrument(tracing::Span::current())));
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(out_rx))))
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
        }))
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

impl RouterGrpc {
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
