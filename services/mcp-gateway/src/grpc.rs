//! The internal gRPC API (`switchyard.mcp.v1.McpGatewayService`), what the router's MCP agent
//! uses: the same gateway as `/mcp`, with scores and server states visible.

use std::sync::Arc;

use base64::Engine;
use rmcp::model::{CallToolResponse as McpCallResponse, ContentBlock, ResourceContents};
use switchyard_kit::{
    Identity, SessionId,
    proto_json::{from_struct, to_struct},
    proto_time::timestamp,
    to_status,
};
use switchyard_proto::mcp::v1::{self as pb, mcp_gateway_service_server::McpGatewayService};
use tonic::{Request, Response, Status};

use crate::{
    domain::{SessionContext, Stats},
    error::GatewayError,
    gateway::{Gateway, ShownTool, ToolList},
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

/// The session a request is about: the caller's tenant (from the kit's identity layer) and
/// `session_id`.
fn session_key<T>(request: &Request<T>, session_id: &str) -> Result<SessionKey, Status> {
    if session_id.is_empty() {
        return Err(status(GatewayError::invalid("session_id", "is required")));
    }
    let id = SessionId::parse(session_id).map_err(|err| status(GatewayError::invalid(err.field, err.reason)))?;
    Ok(Identity::of(request).session(id))
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
        let request = request.into_inner();
        let (context, list) =
            self.gateway.set_context(&key, &request.query, request.intent.as_deref()).await.map_err(status)?;
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
        let limit = request.get_ref().limit;
        if limit > 1000 {
            return Err(status(GatewayError::invalid("limit", "must be at most 1000 (0 means the configured top-k)")));
        }
        let limit = (limit > 0).then_some(limit as usize);
        let list = self.gateway.list_tools(Some(&key), limit).await.map_err(status)?;
        Ok(Response::new(list_message(list)))
    }

    async fn call_tool(&self, request: Request<pb::CallToolRequest>) -> Result<Response<pb::CallToolResponse>, Status> {
        let key = session_key(&request, &request.get_ref().session_id)?;
        let request = request.into_inner();
        if request.name.is_empty() {
            return Err(status(GatewayError::invalid("name", "is required")));
        }
        let arguments = request.arguments.as_ref().map(from_struct);
        let outcome = self.gateway.call_tool(Some(&key), &request.name, arguments).await.map_err(status)?;
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
