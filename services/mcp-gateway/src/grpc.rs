//! The internal gRPC API (`switchyard.mcp.v1.McpGatewayService`), what the router's MCP agent
//! uses: the same gateway as `/mcp`, with scores and server states visible.

use std::sync::Arc;

use base64::Engine;
use rmcp::model::{CallToolResponse as McpCallResponse, ContentBlock, ResourceContents};
use switchyard_kit::{
    Identity, SessionId, TenantId,
    proto_json::{from_struct, to_struct},
    proto_time::timestamp,
    to_status,
};
use switchyard_proto::mcp::v1::{self as pb, mcp_gateway_service_server::McpGatewayService};
use tonic::{Request, Response, Status};

use crate::{
    audit::{AuditQuery, AuditRecord, Cursor, Outcome},
    domain::{SessionContext, Stats},
    error::GatewayError,
    gateway::{Gateway, ShownTool, ToolList},
    policy::{Policies, Policy, Subject},
    store::SessionKey,
    upstream::{ServerState, ServerStatus},
};

pub struct GatewayGrpc {
    gateway: Arc<Gateway>,
}

impl GatewayGrpc {
    pub fn new(gateway: Arc<Gateway>) -> Self {
        Self { gateway }
    }
}

fn status(err: GatewayError) -> Status {
    to_status(&err)
}

/// The caller as policies see it: its identity, plus `x-switchyard-role` and
/// `x-switchyard-groups` metadata.
fn subject<T>(request: &Request<T>) -> Result<Subject, Status> {
    Subject::from_metadata(&Identity::of(request), request.metadata())
        .map_err(|err| status(GatewayError::invalid(err.field, err.reason)))
}

/// The session a request is about: the caller's tenant (from the kit's identity layer) and
/// `session_id`.
fn session_key<T>(request: &Request<T>, session_id: &str) -> Result<SessionKey, Status> {
    if session_id.is_empty() {
        return Err(status(GatewayError::invalid("session_id", "is required")));
    }
    let id = SessionId::parse(session_id).map_err(|err| status(GatewayError::invalid(err.field, err.reason)))?;
    Ok(Identity::of(request).session(id))
}

/// The most tools one `SetContext` or `ListTools` answer carries.
const MAX_TOOLS_LIMIT: u32 = 1000;

/// A request's `limit` of tools: `None` (the configured top-k) for 0.
fn tools_limit(limit: u32) -> Result<Option<usize>, Status> {
    if limit > MAX_TOOLS_LIMIT {
        return Err(status(GatewayError::invalid(
            "limit",
            format!("must be at most {MAX_TOOLS_LIMIT} (0 means the configured top-k)"),
        )));
    }
    Ok((limit > 0).then_some(limit as usize))
}

fn context_message(key: &SessionKey, context: &SessionContext) -> pb::SessionContext {
    pb::SessionContext {
        session_id: key.id.to_string(),
        current_query: context.current_query.clone().unwrap_or_default(),
        current_intent: context.current_intent.clone(),
        tools_used_this_session: context.tools_used.clone(),
        last_updated: context.last_updated.map(timestamp),
    }
}

fn tool_message(shown: &ShownTool) -> pb::ScoredTool {
    let tool = &shown.tool;
    pb::ScoredTool {
        tool: Some(pb::Tool {
            name: tool.name.clone(),
            description: tool.tool.description.as_deref().unwrap_or_default().to_owned(),
            input_schema: Some(to_struct(tool.tool.input_schema.as_ref())),
            server: tool.server.clone(),
            upstream_name: tool.upstream_name.clone(),
        }),
        score: shown.score.map(|ranked| pb::ToolScore {
            score: f64::from(ranked.score),
            bm25: f64::from(ranked.bm25),
            embedding: f64::from(ranked.embedding),
            usage_prior: f64::from(ranked.usage_prior),
        }),
    }
}

fn list_message(list: ToolList) -> pb::ListToolsResponse {
    pb::ListToolsResponse {
        tools: list.tools.iter().map(tool_message).collect(),
        filtered: list.filtered,
        total_tools: u32::try_from(list.total).unwrap_or(u32::MAX),
    }
}

fn server_message(status: ServerStatus) -> pb::ServerStatus {
    let state = match status.state {
        ServerState::Connecting => pb::ServerState::Connecting,
        ServerState::Ready => pb::ServerState::Ready,
        ServerState::Restarting => pb::ServerState::Restarting,
        ServerState::Failed => pb::ServerState::Failed,
    };
    pb::ServerStatus {
        name: status.name,
        transport: status.transport.to_owned(),
        state: state.into(),
        tool_count: u32::try_from(status.tool_count).unwrap_or(u32::MAX),
        last_error: status.last_error.unwrap_or_default(),
        restarts: status.restarts,
        connected_at: status.connected_at.map(timestamp),
    }
}

fn stats_message(stats: Stats) -> pb::GatewayStats {
    pb::GatewayStats {
        mcp_sessions: stats.counters.sessions,
        set_context_session_share: stats.set_context_session_share(),
        tool_calls: stats.counters.tool_calls,
        filtered_hit_rate: stats.filtered_hit_rate(),
    }
}

#[tonic::async_trait]
impl McpGatewayService for GatewayGrpc {
    async fn set_context(
        &self,
        request: Request<pb::SetContextRequest>,
    ) -> Result<Response<pb::SetContextResponse>, Status> {
        let key = session_key(&request, &request.get_ref().session_id)?;
        let limit = tools_limit(request.get_ref().limit)?;
        let subject = subject(&request)?;
        let request = request.into_inner();
        let (context, list) = self
            .gateway
            .set_context_limited(&subject, &key, &request.query, request.intent.as_deref(), limit)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::SetContextResponse {
            context: Some(context_message(&key, &context)),
            tools: list.tools.iter().map(tool_message).collect(),
        }))
    }

    async fn list_tools(
        &self,
        request: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let key = session_key(&request, &request.get_ref().session_id)?;
        let limit = tools_limit(request.get_ref().limit)?;
        let subject = subject(&request)?;
        let list = self.gateway.list_tools_as(&subject, Some(&key), limit).await.map_err(status)?;
        Ok(Response::new(list_message(list)))
    }

    async fn call_tool(&self, request: Request<pb::CallToolRequest>) -> Result<Response<pb::CallToolResponse>, Status> {
        let key = session_key(&request, &request.get_ref().session_id)?;
        let subject = subject(&request)?;
        let request = request.into_inner();
        if request.name.is_empty() {
            return Err(status(GatewayError::invalid("name", "is required")));
        }
        let arguments = request.arguments.as_ref().map(from_struct);
        let outcome =
            self.gateway.call_tool_as(&subject, Some(&key), &request.name, arguments, None).await.map_err(status)?;
        let result = match outcome.response {
            McpCallResponse::Complete(result) => result,
            _ => {
                return Err(Status::failed_precondition(format!(
                    "tool `{}` asked for client input or a task, which this API does not carry; use /mcp",
                    request.name
                )));
            }
        };
        Ok(Response::new(pb::CallToolResponse {
            content: result.content.iter().filter_map(content_message).collect(),
            is_error: result.is_error.unwrap_or(false),
            structured_content: result.structured_content.as_ref().and_then(|v| v.as_object()).map(to_struct),
            server: outcome.server,
            duration_ms: u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX),
        }))
    }

    async fn list_servers(
        &self,
        _request: Request<pb::ListServersRequest>,
    ) -> Result<Response<pb::ListServersResponse>, Status> {
        let stats = self.gateway.stats().await.map_err(status)?;
        Ok(Response::new(pb::ListServersResponse {
            servers: self.gateway.servers().into_iter().map(server_message).collect(),
            stats: Some(stats_message(stats)),
        }))
    }

    async fn list_policies(
        &self,
        request: Request<pb::ListPoliciesRequest>,
    ) -> Result<Response<pb::ListPoliciesResponse>, Status> {
        let identity = Identity::of(&request);
        let policies = self.gateway.policies();
        let mut response = pb::ListPoliciesResponse {
            policies: policies.policies.iter().map(policy_message).collect(),
            ..Default::default()
        };
        if let Some(asked) = request.into_inner().subject {
            let subject = policy_subject(&identity, asked)?;
            let applying = policies.applying(&subject);
            response.applying = applying.iter().map(|p| p.name.clone()).collect();
            response.tools = self
                .gateway
                .catalog()
                .tools()
                .iter()
                .map(|tool| {
                    let access = Policies::access(&applying, &tool.server, &tool.name);
                    pb::ToolAccess {
                        name: tool.name.clone(),
                        server: tool.server.clone(),
                        callable: access.callable,
                        listed: access.listed,
                        pinned: access.pinned,
                        refusal: Policies::decide(&applying, &tool.server, &tool.name)
                            .err()
                            .map(|r| r.to_string())
                            .unwrap_or_default(),
                    }
                })
                .collect();
        }
        Ok(Response::new(response))
    }

    async fn list_tool_calls(
        &self,
        request: Request<pb::ListToolCallsRequest>,
    ) -> Result<Response<pb::ListToolCallsResponse>, Status> {
        let identity = Identity::of(&request);
        let query = audit_query(&identity, request.into_inner())?;
        let limit = query.limit;
        // One more than the page: whether another page follows.
        let mut records = self.gateway.audit(AuditQuery { limit: limit + 1, ..query }).await.map_err(status)?;
        let next_page_token = if records.len() > limit {
            records.truncate(limit);
            records.last().map(|r| Cursor::of(r).token()).unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Response::new(pb::ListToolCallsResponse {
            records: records.iter().map(audit_message).collect(),
            next_page_token,
        }))
    }
}

/// Most audit records one page holds.
const MAX_AUDIT_PAGE: u32 = 1000;

/// A `ListToolCalls` request as a query: its filters checked, and held to the caller's tenant
/// unless it is the operator (an administrator of the default tenant), and to its own calls for
/// a caller with a user unless it is an administrator of its tenant.
fn audit_query(identity: &Identity, request: pb::ListToolCallsRequest) -> Result<AuditQuery, Status> {
    let invalid = |field: &str, why: String| status(GatewayError::invalid(field, why));
    let time = |field: &str, value: Option<prost_types::Timestamp>| {
        value
            .map(|t| {
                u32::try_from(t.nanos)
                    .ok()
                    .and_then(|nanos| chrono::DateTime::from_timestamp(t.seconds, nanos))
                    .ok_or_else(|| invalid(field, "is not a valid time".into()))
            })
            .transpose()
    };
    let from = time("start_time", request.start_time)?;
    let to = time("end_time", request.end_time)?;
    if let (Some(from), Some(to)) = (from, to)
        && to <= from
    {
        return Err(invalid("end_time", "must be after start_time".into()));
    }
    let limit = match request.page_size {
        0 => 100,
        n if n <= MAX_AUDIT_PAGE => n as usize,
        _ => return Err(invalid("page_size", format!("must be at most {MAX_AUDIT_PAGE} (0 means 100)"))),
    };
    let outcome = match request.outcome.as_str() {
        "" => None,
        text => Some(Outcome::parse(text).ok_or_else(|| {
            let known: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
            invalid("outcome", format!("`{text}` is not one of {}", known.join(", ")))
        })?),
    };
    let after = match request.page_token.as_str() {
        "" => None,
        token => Some(
            Cursor::parse(token)
                .ok_or_else(|| invalid("page_token", "is not a token this API returned in next_page_token".into()))?,
        ),
    };
    let tenant = match (request.tenant.as_str(), identity.is_operator()) {
        ("", true) => None,
        ("", false) => Some(identity.tenant.as_str().to_owned()),
        (tenant, operator) => {
            let tenant = TenantId::parse(tenant).map_err(|err| invalid("tenant", err.reason))?;
            if !operator && tenant != identity.tenant {
                return Err(Status::permission_denied(
                    "tenant: another tenant's audit records are the operator's (an administrator of the default \
                     tenant)",
                ));
            }
            Some(tenant.as_str().to_owned())
        }
    };
    let user = match (&identity.user, identity.admin, request.user_id.as_str()) {
        (Some(own), false, asked) if !asked.is_empty() && asked != own.as_str() => {
            return Err(Status::permission_denied(
                "user_id: another user's audit records need an administrator (x-switchyard-admin: true)",
            ));
        }
        (Some(own), false, _) => Some(own.as_str().to_owned()),
        (_, _, "") => None,
        (_, _, asked) => Some(asked.to_owned()),
    };
    let text = |value: String| (!value.is_empty()).then_some(value);
    Ok(AuditQuery {
        from,
        to,
        tenant,
        user,
        session_id: text(request.session_id),
        server: text(request.server),
        tool: text(request.tool),
        outcome,
        limit,
        after,
    })
}

fn audit_message(record: &AuditRecord) -> pb::ToolCallRecord {
    pb::ToolCallRecord {
        id: record.id.to_string(),
        time: Some(timestamp(record.at)),
        tenant: record.tenant.clone(),
        user_id: record.user.clone().unwrap_or_default(),
        role: record.role.clone().unwrap_or_default(),
        groups: record.groups.clone(),
        session_id: record.session_id.clone().unwrap_or_default(),
        server: record.server.clone(),
        tool: record.tool.clone(),
        arguments_sha256: record.arguments_sha256.clone(),
        arguments_bytes: record.arguments_bytes,
        arguments: record.arguments.as_ref().and_then(|v| v.as_object()).map(to_struct),
        outcome: record.outcome.as_str().to_owned(),
        error: record.error.clone().unwrap_or_default(),
        duration_ms: record.duration_ms,
        policy: record.policy.clone().unwrap_or_default(),
    }
}

/// The subject a `ListPolicies` request names, checked like the headers it stands for.
fn policy_subject(identity: &Identity, asked: pb::PolicySubject) -> Result<Subject, Status> {
    let invalid = |field: &str, why: String| status(GatewayError::invalid(format!("subject.{field}"), why));
    let tenant = if asked.tenant.is_empty() {
        identity.tenant.clone()
    } else {
        TenantId::parse(&asked.tenant).map_err(|err| invalid("tenant", err.reason))?
    };
    let mut headers = http::HeaderMap::new();
    let mut put = |name: &'static str, value: String, field: &str| -> Result<(), Status> {
        let value = http::HeaderValue::try_from(value).map_err(|_| invalid(field, "must be visible ASCII".into()))?;
        headers.insert(name, value);
        Ok(())
    };
    put(crate::policy::ROLE_HEADER, asked.role, "role")?;
    put(crate::policy::GROUPS_HEADER, asked.groups.join(","), "groups")?;
    let who = Identity { tenant, user: None, admin: false };
    let mut subject = Subject::from_headers(&who, &headers).map_err(|err| {
        let field = if err.field == crate::policy::ROLE_HEADER { "role" } else { "groups" };
        invalid(field, err.reason)
    })?;
    for (i, scope) in asked.scopes.iter().enumerate() {
        if scope.is_empty() || !scope.chars().all(|c| c.is_ascii_graphic()) {
            return Err(invalid(&format!("scopes[{i}]"), format!("`{scope}` is not an OAuth scope token")));
        }
    }
    subject.scopes = asked.scopes;
    subject.scopes.sort();
    subject.scopes.dedup();
    Ok(subject)
}

fn policy_message(policy: &Policy) -> pb::Policy {
    let strings = |globs: &[crate::policy::Glob]| globs.iter().map(|g| g.as_str().to_owned()).collect::<Vec<_>>();
    pb::Policy {
        name: policy.name.clone(),
        tenants: policy.tenants.clone(),
        roles: policy.roles.clone(),
        groups: policy.groups.clone(),
        scopes: policy.scopes.clone(),
        allow_servers: policy.allow_servers.as_deref().map(|l| pb::PatternList { patterns: strings(l) }),
        deny_servers: strings(&policy.deny_servers),
        allow_tools: policy.allow_tools.as_deref().map(|l| pb::PatternList { patterns: strings(l) }),
        deny_tools: strings(&policy.deny_tools),
        pin: strings(&policy.pin),
        hide: strings(&policy.hide),
    }
}

fn decode(data: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(data).unwrap_or_else(|_| data.as_bytes().to_vec())
}

/// MCP content as proto content; resource links become text naming the URI.
fn content_message(block: &ContentBlock) -> Option<pb::Content> {
    use pb::content::Kind as C;
    let kind = match block {
        ContentBlock::Text(text) => C::Text(text.text.clone()),
        ContentBlock::Image(image) => {
            C::Image(pb::Blob { data: decode(&image.data), mime_type: image.mime_type.clone() })
        }
        ContentBlock::Audio(audio) => {
            C::Audio(pb::Blob { data: decode(&audio.data), mime_type: audio.mime_type.clone() })
        }
        ContentBlock::Resource(embedded) => C::Resource(match &embedded.resource {
            ResourceContents::TextResourceContents { uri, mime_type, text, .. } => pb::EmbeddedResource {
                uri: uri.clone(),
                mime_type: mime_type.clone().unwrap_or_default(),
                contents: Some(pb::embedded_resource::Contents::Text(text.clone())),
            },
            ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => pb::EmbeddedResource {
                uri: uri.clone(),
                mime_type: mime_type.clone().unwrap_or_default(),
                contents: Some(pb::embedded_resource::Contents::Blob(decode(blob))),
            },
            #[allow(unreachable_patterns)]
            _ => return None,
        }),
        ContentBlock::ResourceLink(link) => C::Text(format!("resource: {}", link.uri)),
        #[allow(unreachable_patterns)]
        _ => return None,
    };
    Some(pb::Content { kind: Some(kind) })
}
