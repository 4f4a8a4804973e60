//! Calling a tool: find it, bound its arguments, send it to its server with a deadline (and
//! tell the server to stop when the deadline passes), relay what the server sends meanwhile to
//! the caller (progress, logs, sampling, elicitation, roots), and note the call against the
//! session's context.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::Utc;
use rmcp::{
    model::{
        CallToolRequest, CallToolRequestParams, CallToolResponse, CancelledNotificationParam, ClientRequest,
        JsonObject, ResultType, ServerResult,
    },
    service::PeerRequestOptions,
};
use uuid::Uuid;

use super::Gateway;
use crate::{
    audit::{self, AuditRecord, Outcome},
    catalog::CatalogTool,
    domain::{SessionContext, ShownMatch, UsageRecord},
    error::GatewayError,
    policy::{Policies, Refusal, Subject},
    store::SessionKey,
    upstream::Caller,
};

/// Longest a result waits for the server's earlier messages to reach the client: they are
/// already on their way, so only a client that stopped reading takes this long.
const RELAY_DRAIN: Duration = Duration::from_secs(2);

#[derive(Debug)]
pub struct CallOutcome {
    pub response: CallToolResponse,
    pub server: String,
    pub duration: Duration,
}

impl Gateway {
    /// Calls a tool by its gateway name — listed or not (clients call tools by name) — and
    /// records the call with the session's current context.
    pub async fn call_tool(
        &self,
        key: Option<&SessionKey>,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallOutcome, GatewayError> {
        self.call_tool_for(key, name, arguments, None).await
    }

    /// [`Self::call_tool`] for a client that can hear what the server sends during the call
    /// (the front that made the call knows how to reach it): progress, log messages, and the
    /// server's requests to the client. Its span is the MCP server call in the caller's trace.
    pub async fn call_tool_for(
        &self,
        key: Option<&SessionKey>,
        name: &str,
        arguments: Option<JsonObject>,
        caller: Option<Arc<dyn Caller>>,
    ) -> Result<CallOutcome, GatewayError> {
        self.call_tool_as(&Subject::tenant_of(key), key, name, arguments, caller).await
    }

    /// [`Self::call_tool_for`] for `subject`: a tool its policies do not let it call is
    /// refused here and never reaches its server.
    /// Its span carries the OpenTelemetry MCP and GenAI attributes of a tool execution
    /// (`mcp.method.name`, `gen_ai.operation.name` = `execute_tool`, `gen_ai.tool.name`,
    /// `mcp.session.id`, and `error.type` when it fails), so a GenAI-aware trace viewer shows it.
    #[tracing::instrument(
        name = "mcp tools/call",
        skip_all,
        fields(
            tool = name,
            server,
            mcp.method.name = "tools/call",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = name,
            mcp.session.id = key.map(|k| k.id.as_str()),
            error.type = tracing::field::Empty,
        )
    )]
    pub async fn call_tool_as(
        &self,
        subject: &Subject,
        key: Option<&SessionKey>,
        name: &str,
        arguments: Option<JsonObject>,
        caller: Option<Arc<dyn Caller>>,
    ) -> Result<CallOutcome, GatewayError> {
        let started = Instant::now();
        let (arguments_sha256, arguments_bytes) = audit::digest(arguments.as_ref());
        let kept = self.settings.audit.kept(arguments.as_ref());
        let result = self.call_checked(subject, key, name, arguments, arguments_bytes, caller).await;
        if let Err(err) = &result {
            tracing::Span::current().record("error.type", error_type(err));
        }
        self.audit_call(subject, key, name, (arguments_sha256, arguments_bytes, kept), &result, started.elapsed());
        result
    }

    /// Records a call in the audit trail, off the request path.
    fn audit_call(
        &self,
        subject: &Subject,
        key: Option<&SessionKey>,
        name: &str,
        (arguments_sha256, arguments_bytes, arguments): (String, u64, Option<serde_json::Value>),
        result: &Result<CallOutcome, GatewayError>,
        elapsed: Duration,
    ) {
        let (outcome, error, policy) = match result {
            Ok(CallOutcome { response: CallToolResponse::Complete(r), .. }) if r.is_error == Some(true) => {
                (Outcome::ToolError, None, None)
            }
            Ok(_) => (Outcome::Ok, None, None),
            Err(err) => {
                let (outcome, policy) = match err {
                    GatewayError::UnknownTool(_) => (Outcome::UnknownTool, None),
                    GatewayError::Denied { refusal: Refusal::Denied { policy }, .. } => {
                        (Outcome::Denied, Some(policy.clone()))
                    }
                    GatewayError::Denied { .. } => (Outcome::Denied, None),
                    GatewayError::InvalidArgument { .. } => (Outcome::Invalid, None),
                    GatewayError::Timeout { .. } => (Outcome::Timeout, None),
                    GatewayError::ServerUnavailable(_) => (Outcome::Unavailable, None),
                    GatewayError::Downstream(_) | GatewayError::Store(_) | GatewayError::Internal(_) => {
                        (Outcome::Error, None)
                    }
                };
                (outcome, Some(err.to_string()), policy)
            }
        };
        let server = match result {
            Ok(outcome) => outcome.server.clone(),
            Err(_) => self.catalog().get(name).map(|t| t.server.clone()).unwrap_or_default(),
        };
        self.record(UsageRecord::Audit(Box::new(AuditRecord {
            id: uuid::Uuid::new_v4(),
            at: audit::now(),
            tenant: subject.tenant.as_str().to_owned(),
            user: subject.user.as_ref().map(|u| u.as_str().to_owned()),
            role: subject.role.as_ref().map(|r| r.as_str().to_owned()),
            groups: subject.groups.clone(),
            session_id: key.map(|k| k.id.as_str().to_owned()),
            server,
            tool: name.to_owned(),
            arguments_sha256,
            arguments_bytes,
            arguments,
            outcome,
            error,
            duration_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            policy,
        })));
    }

    /// The call itself: checked against the policies and the limits, then sent.
    async fn call_checked(
        &self,
        subject: &Subject,
        key: Option<&SessionKey>,
        name: &str,
        arguments: Option<JsonObject>,
        arguments_bytes: u64,
        caller: Option<Arc<dyn Caller>>,
    ) -> Result<CallOutcome, GatewayError> {
        let catalog = self.catalog();
        let tool = catalog.get(name).cloned().ok_or_else(|| GatewayError::UnknownTool(name.to_owned()))?;
        let policies = self.policies();
        if !policies.is_empty()
            && let Err(refusal) = Policies::decide(&policies.applying(subject), &tool.server, &tool.name)
        {
            tracing::info!(tool = name, server = %tool.server, tenant = %subject.tenant.as_str(), %refusal, "tool call refused by policy");
            self.metrics.tool_call_denied(&tool.server);
            return Err(GatewayError::Denied { tool: name.to_owned(), refusal });
        }
        if arguments.is_some() {
            let size = usize::try_from(arguments_bytes).unwrap_or(usize::MAX);
            let max = self.settings.max_argument_bytes;
            if size > max {
                return Err(GatewayError::invalid(
                    "arguments",
                    format!("are {size} bytes of JSON, over the limit of {max}"),
                ));
            }
        }
        let upstream = self
            .upstreams
            .get(&tool.server)
            .ok_or_else(|| GatewayError::ServerUnavailable(format!("server `{}` is not configured", tool.server)))?;
        tracing::Span::current().record("server", tool.server.as_str());
        let peer = upstream.peer().map_err(GatewayError::ServerUnavailable)?;
        let mut params = CallToolRequestParams::new(tool.upstream_name.clone());
        params.arguments = arguments;

        // Registered before the request goes out, so nothing the server sends at once is lost;
        // the mark lets the connection note the progress token it numbers as it sends.
        let relayed = caller.map(|caller| self.upstreams.relay().register(&tool.server, caller));
        let mut request = CallToolRequest::new(params);
        if let Some(relayed) = &relayed {
            request.extensions.insert(relayed.mark());
        }
        let started = Instant::now();
        let sent = peer
            .send_request_with_option(ClientRequest::CallToolRequest(request), PeerRequestOptions::no_options())
            .await;
        let outcome = match sent {
            Err(err) => Ok(Err(err)),
            Ok(handle) => {
                let (id, upstream) = (handle.id.clone(), handle.peer.clone());
                let outcome = tokio::time::timeout(self.settings.call_timeout, handle.await_response()).await;
                if outcome.is_err() {
                    // Nobody waits for this call any more: tell the server to stop.
                    let _ = upstream.notify_cancelled(CancelledNotificationParam::new(Some(id), None)).await;
                }
                outcome.map(|response| {
                    response.and_then(|result| match result {
                        ServerResult::CallToolResult(mut result) => {
                            // A server on an older revision sends no `resultType`; a 2026-07-28
                            // client needs it (the transport drops it again for older clients).
                            result.result_type.get_or_insert(ResultType::COMPLETE);
                            Ok(CallToolResponse::Complete(result))
                        }
                        ServerResult::InputRequiredResult(result) => Ok(CallToolResponse::InputRequired(result)),
                        _ => Err(rmcp::ServiceError::UnexpectedResponse),
                    })
                })
            }
        };
        // What the server sent before its result reaches the client before the result does.
        if let Some(relayed) = relayed
            && !relayed.delivered(RELAY_DRAIN).await
        {
            tracing::warn!(server = %tool.server, "the client did not take the call's messages within {RELAY_DRAIN:?}");
        }
        let duration = started.elapsed();
        let (result, is_error) = match outcome {
            Err(_) => (
                Err(GatewayError::Timeout {
                    tool: name.to_owned(),
                    server: tool.server.clone(),
                    after: self.settings.call_timeout,
                }),
                true,
            ),
            Ok(Err(rmcp::ServiceError::McpError(err))) => (Err(GatewayError::Downstream(err)), true),
            Ok(Err(err)) => {
                (Err(GatewayError::ServerUnavailable(format!("server `{}` failed the call: {err}", tool.server))), true)
            }
            Ok(Ok(response)) => {
                let is_error = matches!(&response, CallToolResponse::Complete(r) if r.is_error == Some(true));
                (Ok(response), is_error)
            }
        };

        self.metrics.tool_call(&tool.server, duration.as_secs_f64() * 1000.0, is_error);
        if let Some(key) = key {
            self.note_call(key, &tool, is_error, duration).await;
        }
        result.map(|response| CallOutcome { response, server: tool.server.clone(), duration })
    }

    /// Counts and records a call. The call already happened: a store failure here is logged,
    /// never returned in place of the tool's result.
    async fn note_call(&self, key: &SessionKey, tool: &CatalogTool, is_error: bool, duration: Duration) {
        let (shown, context) = match self.contexts.record_call(key, &tool.name).await {
            Ok(recorded) => recorded,
            Err(err) => {
                switchyard_kit::warn_throttled!("call count", error = %err, "counting a tool call");
                (ShownMatch::NoList, SessionContext::default())
            }
        };
        self.record(UsageRecord::ToolCall {
            id: Uuid::new_v4(),
            key: key.clone(),
            tool: tool.name.clone(),
            server: tool.server.clone(),
            upstream_tool: tool.upstream_name.clone(),
            context_query: context.current_query,
            context_intent: context.current_intent,
            context_embedding: context.embedding,
            shown,
            is_error,
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            at: Utc::now(),
        });
    }
}

/// A failed call's `error.type`: a low-cardinality name of what went wrong.
fn error_type(err: &GatewayError) -> &'static str {
    match err {
        GatewayError::InvalidArgument { .. } => "invalid_argument",
        GatewayError::UnknownTool(_) => "unknown_tool",
        GatewayError::Denied { .. } => "denied",
        GatewayError::ServerUnavailable(_) => "server_unavailable",
        GatewayError::Timeout { .. } => "timeout",
        GatewayError::Downstream(_) => "downstream_error",
        GatewayError::Store(_) => "store",
        GatewayError::Internal(_) => "internal",
    }
}
